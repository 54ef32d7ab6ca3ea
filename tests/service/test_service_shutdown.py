"""A graceful shutdown ends within a bound whatever Redis does: paused (SIGSTOP), with the head watch's
``PING`` outstanding, or with a cancel lost in redis-py (Python 3.11); and the head watch's fast check
never fails a request."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import kons_service.core.service as service_module
from kons_service.http.parsers import ParserPool
from kons_service.shutdown import LAST_STEP_SECONDS
from kons_service.store import LearnerRef
from kons_service.store.connection import connect_client
from kons_service.store.tracking import HeadWatch
from testkit.processes import (
    SPEC,
    AppFactory,
    RedisServer,
    eventually,
    free_port,
    service_env,
    start_service,
)

pytestmark = [pytest.mark.redis]

#: What the tests hold a SIGTERMed service to: its shutdown with Redis paused is about one socket timeout
#: and its re-sends (here 1 s each), and the snapshots of every learner would take that each.
_EXIT_SECONDS = 15.0
_LEARNERS = 8
#: What the head watch's close may take: a second for its task, one for its connection, and the slack of a
#: loaded machine (without its bounds it waits for ever: the tests wait for it 5 s).
_CLOSE_BOUND = 4.0


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of this test alone (it is paused)."""
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


def _service(redis: RedisServer, tmp_path: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = free_port()
    log = tmp_path / "service.log"
    env = service_env(KONS_REDIS_URL=redis.url, KONS_PORT=str(port), KONS_REDIS_TIMEOUT_SECONDS="1")
    return start_service(port, env, log), f"http://127.0.0.1:{port}", log


def _sigterm_and_time(proc: subprocess.Popen[bytes], log: Path) -> float:
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(_EXIT_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        pytest.fail(f"still running {_EXIT_SECONDS} s after SIGTERM: {log.read_text()[-3000:]}")
    # (python -m kons_service exits 128 + the signal after uvicorn's graceful shutdown)
    assert proc.returncode == 128 + signal.SIGTERM, log.read_text()[-3000:]
    return time.monotonic() - started


def test_a_service_sigtermed_while_redis_is_paused_exits_in_time(own_redis: RedisServer,
                                                                  tmp_path: Path) -> None:
    """Learners with unsnapshotted rounds, then Redis frozen: the shutdown gives up on the snapshots at the
    first that Redis does not answer (the rounds are in the log), instead of waiting for each in turn."""
    proc, base, log = _service(own_redis, tmp_path)
    try:
        with httpx.Client(base_url=base, timeout=10) as http:
            for i in range(_LEARNERS):
                assert http.put(f"/v1/learners/m{i}", json=SPEC).status_code == 201
                answer = http.post(f"/v1/learners/m{i}/feedback", json={"x": [0.1, 0.2, i], "y": 1.0})
                assert answer.status_code == 200, answer.text
        own_redis.pause()
        took = _sigterm_and_time(proc, log)
    finally:
        own_redis.resume()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert "learners left unsnapshotted" in log.read_text()
    own_redis.client().ping()
    assert took < _EXIT_SECONDS


def test_a_service_sigtermed_while_the_watchs_ping_is_outstanding_exits_in_time(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    """A held learner, so that the head watch tracks and pings; Redis frozen past a PING, then SIGTERM."""
    proc, base, log = _service(own_redis, tmp_path)
    try:
        with httpx.Client(base_url=base, timeout=10) as http:
            assert http.put("/v1/learners/m", json=SPEC).status_code == 201
            for _ in range(2):
                assert http.post("/v1/learners/m/predict", json={"x": [0.1, 0.2, 0.3]}).status_code == 200
        assert any("t" in c.get("flags", "") for c in own_redis.client().client_list())  # (tracking on)
        own_redis.pause()
        time.sleep(0.6)  # (a PING every quarter second: one is unanswered since)
        took = _sigterm_and_time(proc, log)
    finally:
        own_redis.resume()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert took < _EXIT_SECONDS


async def _tracking(url: str) -> tuple[HeadWatch, Any]:
    client, _ = connect_client(url, 1.0)
    watch = HeadWatch(client)
    mark = await watch.mark(LearnerRef("t", "m"))
    assert mark is not None
    # (trusted once its connection is not busy with a PING: a loaded machine may take a while)
    await eventually(lambda: watch.unchanged(mark), 10, "the watch's trust")
    return watch, mark


@pytest.mark.anyio
async def test_the_watch_closes_even_if_the_cancel_of_its_ping_is_lost(redis_url: str) -> None:
    """Python 3.11's ``asyncio.wait_for``, through which redis-py sends every command, swallows a cancel that
    comes as the send completes (CPython gh-86296): the PING task then went on pinging for ever and the close
    waited for it (a SIGTERMed service that never exited). Here the close comes exactly then."""
    watch, _ = await _tracking(redis_url)
    connection = watch._connection
    prover = watch._prover
    assert connection is not None and prover is not None
    sends = connection._send_packed_command
    closing: list[asyncio.Task[None]] = []

    async def send_then_close(command: Any) -> None:
        await sends(command)
        if b"PING" in b"".join(command) and not closing:
            # (its cancel lands while wait_for waits for this send, which has completed)
            closing.append(asyncio.get_running_loop().create_task(watch.close()))

    connection._send_packed_command = send_then_close  # type: ignore[method-assign]
    deadline = time.monotonic() + 2
    while not closing and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert closing
    started = time.monotonic()
    await asyncio.wait_for(closing[0], 5)  # (06077fc's close: still waiting at 5 s, the task pinging on)
    assert time.monotonic() - started < _CLOSE_BOUND
    await eventually(prover.done, 5, "the end of the PING task")


@pytest.mark.anyio
async def test_the_watch_abandons_a_task_that_does_not_stop(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever keeps the PING task from stopping, the close waits for it a second, says so once, and goes
    on to close the connection."""
    watch, _ = await _tracking(redis_url)
    assert watch._prover is not None
    watch._prover.cancel()
    released = asyncio.Event()

    async def stubborn() -> None:
        while not released.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await released.wait()

    watch._prover = asyncio.get_running_loop().create_task(stubborn())
    connection = watch._connection
    assert connection is not None
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, "kons_service"):
        closing = asyncio.ensure_future(watch.close())
        try:
            await asyncio.wait({closing}, timeout=5)
            took = time.monotonic() - started
        finally:
            released.set()  # (a close still waiting for it ends too)
    assert closing.done() and took >= 0.9
    assert [r.getMessage() for r in caplog.records] == [
        "shutdown: abandoned the head watch's PING task after 1.0 s"]
    assert not connection.is_connected


@pytest.mark.anyio
async def test_the_watch_closes_in_time_while_redis_is_paused(own_redis: RedisServer) -> None:
    watch, _ = await _tracking(own_redis.url)
    own_redis.pause()
    try:
        await asyncio.sleep(0.4)  # (its PING unanswered)
        started = time.monotonic()
        await asyncio.wait_for(watch.close(), 5)
        assert time.monotonic() - started < _CLOSE_BOUND
    finally:
        own_redis.resume()


@pytest.mark.anyio
async def test_a_failure_inside_the_watch_reads_the_head(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever redis-py's internals raise in the fast check, the caller reads the head (False), and the
    marks taken before stay stale."""
    watch, mark = await _tracking(redis_url)

    async def broken(connection: Any) -> bool:
        raise AttributeError("'NoneType' object has no attribute 'at_eof'")

    monkeypatch.setattr(watch, "_drained", broken)
    assert await watch.unchanged(mark) is False
    monkeypatch.undo()
    assert await watch.unchanged(mark) is False
    fresh = await watch.mark(LearnerRef("t", "m"))  # (on a connection opened again)
    await eventually(lambda: watch.unchanged(fresh), 10, "the trust of the watch opened again")
    await watch.close()


@pytest.mark.anyio
async def test_a_failing_watch_answers_predicts_by_reading_the_head(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await make_client()
    assert (await client.put("/v1/learners/m", json=SPEC)).status_code == 201
    answer = await client.post("/v1/learners/m/feedback", json={"x": [0.1, 0.2, 0.3], "y": 1.0})
    assert answer.status_code == 200

    async def broken(self: HeadWatch, connection: Any) -> bool:
        raise RuntimeError("redis-py internals changed")

    monkeypatch.setattr(HeadWatch, "_drained", broken)
    for _ in range(3):
        await asyncio.sleep(0.3)  # (the watch proven alive again)
        predicted = await client.post("/v1/learners/m/predict", json={"x": [0.1, 0.2, 0.3]})
        assert predicted.status_code == 200, predicted.text
        assert predicted.json()["version"] == 1


@pytest.mark.anyio
async def test_a_step_of_the_shutdown_that_hangs_is_abandoned_and_said_once(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A background task that never stops (a cancel lost, a lock never released) costs the shutdown its
    share of the time, once, and the rest of the shutdown still runs: the learners are snapshotted."""
    client = await make_client()
    service = client.app.state.service
    assert (await client.put("/v1/learners/m", json=SPEC)).status_code == 201
    answer = await client.post("/v1/learners/m/feedback", json={"x": [0.1, 0.2, 0.3], "y": 1.0})
    assert answer.status_code == 200

    async def never() -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(service_module, "_STOP_SECONDS", 0.2)
    monkeypatch.setattr(service.shadows, "close", never)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, "kons_service"):
        await asyncio.wait_for(service.close(timeout=5.0), 10)  # (06077fc's: still waiting at 10 s)
    assert time.monotonic() - started < 5.0 + 2 * LAST_STEP_SECONDS
    abandoned = [r.getMessage() for r in caplog.records if "abandoned" in r.getMessage()]
    assert abandoned == ["shutdown: abandoned the shadows' catch-up after 0.2 s"]
    entry = next(iter(service.cache.entries()))
    assert entry.snap_version == entry.version == 1


@pytest.mark.anyio
async def test_the_parser_pool_closes_at_once_with_a_worker_busy() -> None:
    """At shutdown no request waits for a parse any more: a worker still in one (starved, stopped, or a
    slow body) is ended, not waited for (06077fc's close waited the 20 s of this one)."""
    pool = ParserPool(1)
    await pool.parse(dict, b"{}")  # (the pool started)
    executor = pool._executor
    assert executor is not None
    busy = executor.submit(time.sleep, 20.0)
    await eventually(busy.running, 10, "the busy worker")
    started = time.monotonic()
    await asyncio.to_thread(pool.close)
    assert time.monotonic() - started < 10
    assert busy.done()
