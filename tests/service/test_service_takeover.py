"""Fast takeover of a dead writer's lease, against a real Redis.

Every test here runs with a lease TTL far longer than the time a write may wait for the lease, so a write
that succeeds while the holder's lease is still live can only have taken it over: the old behaviour
(wait for the TTL) answers 503 ``learner_busy`` instead. Whether a holder is gone is told by Redis itself:
a process's connections are named after it, and a killed process has none left.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import redis

import kons
from kons_service.store import LearnerRef, LeaseBusy, StoreUnavailableError, process_of
from kons_service.store.keys import learner_key
from testkit.processes import SPEC, AppClient, AppFactory, RedisServer, services_on_redis, wait_until
from testkit.scrape import value

pytestmark = pytest.mark.anyio

URL = "/v1/learners/m"
REF = LearnerRef("default", "m")
LEASE = learner_key(REF, "lease")
LONG_LEASE: dict[str, Any] = {"lease_ttl_ms": 60_000, "lease_wait_seconds": 3.0}
ROWS = [([0.1, 0.2, 0.3], 0.5), ([-0.4, 0.1, 0.0], -0.2)]


def _body(row: tuple[list[float], float]) -> dict[str, Any]:
    return {"x": row[0], "y": row[1]}


async def _held_by_stuck_writer(client: AppClient, monkeypatch: pytest.MonkeyPatch,
                                server: RedisServer) -> tuple[asyncio.Task[httpx.Response], asyncio.Event]:
    """Start a feedback on ``client`` whose writer takes the lease and then waits for the returned event
    before playing its round; returns once the writer waits there (so that it sends Redis nothing more
    until the event: a command after the lease, a budget check say, would reconnect a process the test
    disconnected, and a connected holder is rightly not taken over)."""
    writer = client.app.state.service.writer
    play, proceed, waiting = writer._play, asyncio.Event(), asyncio.Event()

    async def stuck_play(learner: Any, played: Any, entry: Any) -> Any:
        waiting.set()
        await proceed.wait()
        return await play(learner, played, entry)

    monkeypatch.setattr(writer, "_play", stuck_play)
    task = asyncio.create_task(client.post(f"{URL}/feedback", json=_body(ROWS[0])))
    await asyncio.wait_for(waiting.wait(), 5.0)
    assert server.client().get(LEASE) is not None
    return task, proceed


def _takeovers(client: AppClient) -> float:
    return float(client.app.state.metrics.takeovers._value.get())


async def test_the_lease_of_a_writer_without_connections_is_taken_over_and_the_zombie_is_fenced(
    make_client: AppFactory, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = await make_client(**LONG_LEASE), await make_client(**LONG_LEASE)
    assert (await a.put(URL, json=SPEC)).status_code == 201
    stuck, proceed = await _held_by_stuck_writer(a, monkeypatch, redis_server)
    lease = redis_server.client().get(LEASE)
    assert isinstance(lease, bytes)
    holder = lease.decode()
    store_a = a.app.state.service.store
    assert process_of(holder) == store_a.process_name
    # a looks dead to Redis: its connections are closed (a SIGKILL closes them the same way)
    await store_a.client.connection_pool.disconnect()

    taken = await b.post(f"{URL}/feedback", json=_body(ROWS[1]))
    assert taken.status_code == 200, taken.text
    assert taken.json()["version"] == 1 and _takeovers(b) == 1
    # a was not dead after all (a zombie): its round was played on version 0, which is no longer the head,
    # so its append is refused and it plays the round again on the log's history
    proceed.set()
    late = await stuck
    assert late.status_code == 200 and late.json()["version"] == 2
    reference = kons.learner_from_params(SPEC["algorithm"], {**SPEC["params"], "dim": SPEC["dim"]})
    expected = [reference.learn_one(*ROWS[1]), reference.learn_one(*ROWS[0])]
    assert [taken.json()["prediction"], late.json()["prediction"]] == expected
    metrics = (await b.get("/metrics")).text
    assert value(metrics, "kons_lease_takeovers_total") == 1


async def test_a_live_holders_lease_is_not_taken_over(
    make_client: AppFactory, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = await make_client(**LONG_LEASE), await make_client(**{**LONG_LEASE, "lease_wait_seconds": 0.3})
    assert (await a.put(URL, json=SPEC)).status_code == 201
    stuck, proceed = await _held_by_stuck_writer(a, monkeypatch, redis_server)
    busy = await b.post(f"{URL}/feedback", json=_body(ROWS[1]))
    assert busy.status_code == 503 and busy.json()["error"]["code"] == "learner_busy"
    assert _takeovers(b) == 0
    proceed.set()
    assert (await stuck).json()["version"] == 1


async def test_a_lease_left_by_this_very_process_is_taken_over(
    make_client: AppFactory, redis_server: RedisServer
) -> None:
    """A write whose lease release failed (Redis restarting) leaves a lease of a live process; that
    process knows none of its writers holds it."""
    client = await make_client(**LONG_LEASE)
    assert (await client.put(URL, json=SPEC)).status_code == 201
    store = client.app.state.service.store
    redis_server.client().set(LEASE, store.leases.writer_token(10**6), px=60_000)
    response = await client.post(f"{URL}/feedback", json=_body(ROWS[0]))
    assert response.status_code == 200 and _takeovers(client) == 1


async def test_a_lease_whose_release_failed_in_a_redis_restart_is_given_back_when_redis_is_back(
    make_client: AppFactory, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A's write fails while Redis restarts, and so does its release: the lease survives the restart (the
    append-only file has it). A is alive and connected again, so B cannot take it over; A gives it back."""
    a, b = await make_client(**LONG_LEASE), await make_client(**LONG_LEASE)
    assert (await a.put(URL, json=SPEC)).status_code == 201
    stuck, proceed = await _held_by_stuck_writer(a, monkeypatch, redis_server)
    redis_server.stop()
    proceed.set()
    failed = await stuck
    assert failed.status_code == 503 and failed.json()["error"]["code"] == "store_unavailable"
    redis_server.start()
    assert (await a.get(URL)).status_code == 200  # a serves again: its connections are back
    response = await b.post(f"{URL}/feedback", json=_body(ROWS[1]))
    assert response.status_code == 200 and response.json()["version"] == 1
    assert _takeovers(b) == 0


async def test_an_acquire_sent_again_after_its_reply_was_lost_gets_the_lease(
    make_client: AppFactory, redis_server: RedisServer
) -> None:
    """redis-py re-sends a script whose reply a broken connection lost (Redis restarting): the second
    acquire of one token finds the lease held by that very token and must get it, not wait for it."""
    client = await make_client(**LONG_LEASE)
    assert (await client.put(URL, json=SPEC)).status_code == 201
    store = client.app.state.service.store
    first = await store.leases.acquire(REF, "w1", 60_000)
    assert await store.leases.acquire(REF, "w1", 60_000) == first
    assert isinstance(await store.leases.acquire(REF, "w2", 60_000), LeaseBusy)


async def test_a_lease_acquired_by_a_call_that_then_failed_is_given_back(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis applied A's acquire, but its reply was lost and redis-py's re-sends failed too (Redis still
    restarting): A answers 503 without knowing it holds the lease. It gives it back anyway; B, seeing A
    alive and connected, could not take it over."""
    a, b = await make_client(**LONG_LEASE), await make_client(**LONG_LEASE)
    assert (await a.put(URL, json=SPEC)).status_code == 201
    store_a = a.app.state.service.store
    acquire = store_a.leases.acquire

    async def applied_but_unanswered(*args: Any, **kwargs: Any) -> Any:
        await acquire(*args, **kwargs)
        raise StoreUnavailableError("ConnectionError")

    monkeypatch.setattr(store_a.leases, "acquire", applied_but_unanswered)
    failed = await a.post(f"{URL}/feedback", json=_body(ROWS[0]))
    assert failed.status_code == 503 and failed.json()["error"]["code"] == "store_unavailable"
    response = await b.post(f"{URL}/feedback", json=_body(ROWS[1]))
    assert response.status_code == 200 and response.json()["version"] == 1
    assert _takeovers(b) == 0


async def test_without_client_list_the_ttl_decides(
    make_client: AppFactory, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A managed Redis may refuse CLIENT LIST (here: an ACL user without it): no takeover, no error."""
    admin = redis_server.client()
    admin.acl_setuser("nolist", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                      commands=["+@all", "-client|list"])
    try:
        url = f"redis://nolist:pw@127.0.0.1:{redis_server.port}/0"
        with pytest.raises(redis.exceptions.NoPermissionError):
            redis.Redis.from_url(url).client_list()
        a = await make_client(redis_url=url, **LONG_LEASE)
        b = await make_client(redis_url=url, **{**LONG_LEASE, "lease_wait_seconds": 0.3})
        assert (await a.put(URL, json=SPEC)).status_code == 201
        stuck, proceed = await _held_by_stuck_writer(a, monkeypatch, redis_server)
        await a.app.state.service.store.client.connection_pool.disconnect()
        busy = await b.post(f"{URL}/feedback", json=_body(ROWS[1]))
        assert busy.status_code == 503 and busy.json()["error"]["code"] == "learner_busy"
        assert _takeovers(b) == 0
        proceed.set()
        assert (await stuck).json()["version"] == 1
    finally:
        admin.acl_deluser("nolist")


@pytest.mark.redis
@pytest.mark.slow
def test_sigkill_of_the_lease_holder_stalls_its_learner_well_under_the_ttl(tmp_path: Path) -> None:
    """Real processes: B is SIGKILLed in the middle of a large batch, holding the lease (TTL 60 s); A's
    next write is acknowledged although A waits at most 10 s for a lease."""
    settings: dict[str, Any] = {**LONG_LEASE, "lease_wait_seconds": 10, "max_batch": 20_000}
    with services_on_redis(tmp_path, replicas=2, **settings) as (server, (survivor, victim)):
        assert httpx.put(survivor.url + URL, json=SPEC).status_code == 201
        rng = np.random.default_rng(0)
        X = rng.normal(size=(20_000, 3))
        batch = {"items": [{"x": x.tolist(), "y": float(np.sin(x[0]))} for x in X]}
        sender = threading.Thread(target=_post_ignoring_errors, args=(victim.url, batch), daemon=True)
        sender.start()
        wait_until(lambda: server.client().get(LEASE) is not None, 60, "the victim's lease")
        victim.kill()
        killed = time.monotonic()
        response = httpx.post(f"{survivor.url}{URL}/feedback", json=_body(ROWS[0]), timeout=30)
        assert response.status_code == 200, response.text
        # generous for a shared machine, yet far below the 60 s the lease still had
        assert time.monotonic() - killed < 10
        assert server.client().pttl(LEASE) == -2  # the survivor's append released the lease it took


def _post_ignoring_errors(base: str, body: dict[str, Any]) -> None:
    with contextlib.suppress(httpx.HTTPError):  # the process is killed under it
        httpx.post(f"{base}{URL}/feedback", json=body, timeout=120)
