"""A predict on a learner the process holds at the head asks Redis nothing (the store's head watch,
``kons_service/store/tracking.py``), and still serves whatever another replica wrote before it."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
from redis._parsers import _AsyncRESP3Parser

from kons_service.store import tracking
from kons_service.store.tracking import HeadMark
from testkit.processes import AppClient, AppFactory, RedisServer
from tests.service.redis_counts import commands, used_between

pytestmark = pytest.mark.anyio

URL = "/v1/learners/watched"
SPEC = {"algorithm": "ons", "dim": 2}
OCTETS = {"content-type": "application/octet-stream"}


async def _feed(client: AppClient, rounds: int, start: int = 0) -> int:
    version = 0
    for i in range(start, start + rounds):
        answer = await client.post(f"{URL}/feedback", json={"x": [i % 5, 1.0], "y": float(i % 3)})
        assert answer.status_code == 200, answer.text
        version = answer.json()["version"]
    return version


async def _version(client: AppClient) -> int:
    answer = await client.post(f"{URL}/predict", json={"x": [0.5, 1.0]})
    assert answer.status_code == 200, answer.text
    return int(answer.json()["version"])


async def test_a_predict_on_a_held_learner_runs_no_redis_command(
    make_client: AppFactory, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the watch is trusted, a predict on a held learner asks Redis nothing. The watch is rightly
    not trusted (the head is read) when its connection is busy with its ``PING``, or when its last answered
    ``PING`` is older than a second, which a process stalled for 3/4 s on a loaded machine reaches: each
    such predict may read the head once, and the predicts are run again until none was such."""
    client = await make_client()
    server = redis.Redis.from_url(redis_url)
    assert (await client.put(URL, json=SPEC)).status_code == 201
    await _feed(client, 5)
    assert await _version(client) == 5  # (reads the head: the feedback's own write made the mark stale)
    watch = client.app.state.service.store.heads
    unchanged, untrusted = watch.unchanged, []

    async def asked(mark: HeadMark | None) -> bool:
        # (a tenth of a second short of the trust's end counts as past it: the watch looks at the clock
        # again just after this)
        untrusted.append(watch._lock.locked()
                         or time.monotonic() - watch._proven_at > tracking._TRUST_SECONDS - 0.1)
        trusted: bool = await unchanged(mark)
        return trusted

    monkeypatch.setattr(watch, "unchanged", asked)
    for _ in range(20):
        untrusted.clear()
        before = commands(server)
        for _ in range(5):
            assert await _version(client) == 5
        used = used_between(before, commands(server))
        if not any(untrusted):
            assert used == {}
            return
        assert set(used) <= {"hmget"} and used.get("hmget", 0) <= sum(untrusted), (used, untrusted)
    raise AssertionError("the watch was not trusted through 5 predicts in 20 tries: its PING runs late")


async def test_the_next_predict_on_b_serves_what_a_acknowledged(make_client: AppFactory) -> None:
    """Every round a acknowledges is in b's very next predict: b's cached learner is never served past a
    write it has been told of (its push is parsed, or awaited, first)."""
    a, b = await make_client(), await make_client()
    assert (await a.put(URL, json=SPEC)).status_code == 201
    assert await _version(b) == 0
    for i in range(30):
        assert await _version(b) == i  # (held, unchanged: from b's cache)
        assert await _feed(a, 1, start=i) == i + 1
        assert await _version(b) == i + 1


async def test_a_rollback_an_import_and_a_delete_by_another_replica_are_seen(make_client: AppFactory) -> None:
    a, b = await make_client(keep_versions=4), await make_client(keep_versions=4)
    assert (await a.put(URL, json=SPEC)).status_code == 201
    await _feed(a, 6)
    state_at_6 = (await a.get(f"{URL}/state")).content
    await _feed(a, 4, start=6)
    assert await _version(b) == 10
    assert (await a.post(f"{URL}/rollback", json={"version": 6})).status_code == 200
    assert await _version(b) == 11  # the rollback is version 11 ...
    assert (await b.get(f"{URL}/state")).content == state_at_6  # ... of the state after round 6
    await _feed(a, 3, start=20)
    assert await _version(b) == 14
    assert (await a.put(f"{URL}/state", content=state_at_6, headers=OCTETS)).status_code in (200, 201)
    assert (await b.get(f"{URL}/state")).content == state_at_6
    assert (await a.delete(URL)).status_code in (200, 204)
    assert (await b.post(f"{URL}/predict", json={"x": [0.5, 1.0]})).status_code == 404


async def test_a_flush_is_seen(make_client: AppFactory, redis_server: RedisServer) -> None:
    client = await make_client()
    assert (await client.put(URL, json=SPEC)).status_code == 201
    await _feed(client, 3)
    assert await _version(client) == 3
    redis_server.client().flushall()
    assert (await client.post(f"{URL}/predict", json={"x": [0.5, 1.0]})).status_code == 404


async def test_a_killed_tracking_connection_makes_every_cached_head_stale(
    make_client: AppFactory, redis_server: RedisServer
) -> None:
    """Redis forgets a killed connection's tracking, so no push tells b of a's next write: b must notice
    the loss itself and read the head again (and track anew)."""
    a, b = await make_client(), await make_client()
    assert (await a.put(URL, json=SPEC)).status_code == 201
    await _feed(a, 2)
    assert await _version(b) == 2
    for round_ in range(2):
        admin = redis_server.client()
        tracking = [c for c in admin.client_list() if "t" in c.get("flags", "")]  # (flag t: tracking on)
        assert tracking, admin.client_list()
        for connection in tracking:
            admin.client_kill_filter(_id=connection["id"])
        assert await _feed(a, 1, start=10 + round_) == 3 + round_
        assert await _version(b) == 3 + round_
        await asyncio.sleep(0.05)


async def test_a_tracking_connection_that_does_not_answer_is_not_trusted(
    make_client: AppFactory, redis_server: RedisServer
) -> None:
    """A connection that stops delivering without closing (here every client paused) may be missing pushes:
    while its ``PING`` is unanswered, and past a second without an answered one, the head is read again."""
    client = await make_client()
    assert (await client.put(URL, json=SPEC)).status_code == 201
    await _feed(client, 2)
    assert await _version(client) == 2
    admin = redis_server.client()
    before = commands(admin)
    admin.client_pause(3000, all=True)
    await asyncio.sleep(1.2)  # (the watch's PING is unanswered since)
    assert await _version(client) == 2  # waits for the pause to end: the head is read
    assert used_between(before, commands(admin)).get("hmget") == 1


async def test_a_watch_reopened_past_its_prefixes_still_sees_every_write(make_client: AppFactory) -> None:
    """A process holding one learner at a time tracks at most 4 prefixes on a connection, then opens another:
    the learners it cycles through (more than that) still serve every write of another replica."""
    a, b = await make_client(), await make_client(cache_size=1)
    names = [f"{URL}-{i}" for i in range(6)]
    for name in names:
        assert (await a.put(name, json=SPEC)).status_code == 201
    for turn in range(3):
        for i, name in enumerate(names):
            answer = await a.post(f"{name}/feedback", json={"x": [i, 1.0], "y": 1.0})
            assert answer.status_code == 200
            for _ in range(2):  # (the second from the cache while it holds the learner)
                predicted = await b.post(f"{name}/predict", json={"x": [0.5, 1.0]})
                assert predicted.status_code == 200 and predicted.json()["version"] == turn + 1


async def test_a_redis_py_that_hides_the_pushes_is_not_watched(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py 5.0 (pyproject allows ``redis>=5.0``) has no invalidation handler on its async RESP3 parser:
    its parser takes the pushes in (with any reply after them) and drops them. Its watch would miss every
    write: it must not run, and every predict read the head (one handler-less connection from a first failed
    start must not be reused a second later either)."""
    owner = next(c for c in _AsyncRESP3Parser.__mro__ if "set_invalidation_push_handler" in vars(c))
    monkeypatch.delattr(owner, "set_invalidation_push_handler")
    a, b = await make_client(), await make_client()
    assert (await a.put(URL, json=SPEC)).status_code == 201
    assert await _version(b) == 0
    await asyncio.sleep(1.1)  # (past the pause after a failed start of the tracking connection)
    assert await _version(b) == 0
    for i in range(2):
        assert await _feed(a, 1, start=i) == i + 1
        await asyncio.sleep(0.3)  # (a PING of the watch, if it ran, takes the push in meanwhile)
        assert await _version(b) == i + 1


async def test_a_redis_refusing_tracking_leaves_no_watch_running(
    make_client: AppFactory, redis_server: RedisServer
) -> None:
    """A Redis whose ACL refuses ``CLIENT TRACKING``: every predict reads the head, and the watch's connection
    is closed (not kept open, pinged four times a second, for nothing)."""
    admin = redis_server.client()
    admin.acl_setuser("untracked", enabled=True, passwords=["+secret"], keys=["~*"], channels=["*"],
                      commands=["+@all", "-client|tracking"])
    try:
        client = await make_client(redis_url=f"redis://untracked:secret@127.0.0.1:{redis_server.port}/0")
        assert (await client.put(URL, json=SPEC)).status_code == 201
        for _ in range(2):
            assert await _version(client) == 0
        before = commands(admin)
        await asyncio.sleep(0.6)
        assert commands(admin).get("ping", 0) == before.get("ping", 0)
        assert not [c for c in admin.client_list() if c.get("user") == "untracked" and c.get("cmd") == "ping"]
    finally:
        admin.acl_deluser("untracked")
