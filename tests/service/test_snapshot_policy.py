"""Snapshots by what they save (issues 18, item 6, and 40, item 4): the policy as a pure function, and a
rebuild after a SIGKILL."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, cast

import httpx
import numpy as np
import pytest

import kons
from kons_service.core.cache import CachedLearner
from kons_service.core.metrics import Metrics
from kons_service.core.snapshots import LogCost, SnapshotPolicy, Snapshotter
from kons_service.settings import Settings
from kons_service.store import Head, LearnerRef
from kons_service.store.keys import learner_key
from testkit.processes import SPEC, AppFactory, RedisServer, ServiceProcess, wait_until
from testkit.scrape import value

# 100 rounds of 0.4 ms and 100 bytes behind a 1 MB snapshot that takes 50 ms to write: the log is cheaper
CHEAP = LogCost(rounds_behind=100, log_bytes=10_000, round_seconds=0.0004, snapshot_bytes=1_000_000,
                since_snapshot=40.0)
POLICY = SnapshotPolicy(floor_seconds=30.0, every_rounds=1000, max_replay_seconds=30.0)
SNAPSHOT_LOCK = learner_key(LearnerRef("default", "m"), "snaplock")


def test_the_defaults_are_the_settings() -> None:
    assert SnapshotPolicy.of(Settings()) == SnapshotPolicy()
    assert SnapshotPolicy.of(Settings(snapshot_interval_seconds=5.0)).floor == 5.0


def test_a_slowly_fed_learner_is_not_snapshotted_by_the_clock() -> None:
    """Today's trouble: one feedback every 4 s, and a snapshot every floor's 30 s, each worth 130 rounds."""
    slow = dataclasses.replace(CHEAP, rounds_behind=1, log_bytes=100)
    for hours in (1, 24, 24 * 365):
        assert not POLICY.due(dataclasses.replace(slow, since_snapshot=hours * 3600.0))
    # (a replay that would take longer than the snapshot takes to write is no reason on its own: it is paid
    # only at a rebuild, while every snapshot is paid)
    assert not POLICY.due(dataclasses.replace(CHEAP, rounds_behind=126))
    clocked = dataclasses.replace(POLICY, interval_seconds=60.0)  # unless a clock is asked for
    assert not clocked.due(dataclasses.replace(slow, since_snapshot=59.9))
    assert clocked.due(dataclasses.replace(slow, since_snapshot=60.0))


def test_a_log_that_holds_the_snapshots_bytes_is_due_past_the_floor() -> None:
    large = dataclasses.replace(CHEAP, log_bytes=1_000_000)
    assert POLICY.due(large)
    assert not POLICY.due(dataclasses.replace(large, log_bytes=999_999))
    assert not POLICY.due(dataclasses.replace(large, since_snapshot=29.9))  # the floor
    # a learner leaving the cache gets the same rule without the floor (there is no later chance)
    assert POLICY.due(dataclasses.replace(large, since_snapshot=0.0), leaving=True)
    assert not POLICY.due(dataclasses.replace(CHEAP, since_snapshot=0.0), leaving=True)


def test_a_long_log_is_due_once_it_holds_a_third_of_the_snapshots_bytes() -> None:
    long = dataclasses.replace(CHEAP, rounds_behind=1000, log_bytes=333_333)
    assert not POLICY.due(long)  # the rounds alone would write 3x the log's bytes and more
    assert POLICY.due(dataclasses.replace(long, log_bytes=333_334))
    assert not POLICY.due(dataclasses.replace(long, rounds_behind=999, log_bytes=333_334))
    assert not POLICY.due(dataclasses.replace(long, log_bytes=333_334, since_snapshot=10.0))  # the floor


def test_a_replay_that_would_take_too_long_is_due_whatever_the_bytes() -> None:
    slow_replay = dataclasses.replace(CHEAP, rounds_behind=3000, log_bytes=1000, round_seconds=0.01)
    assert POLICY.due(slow_replay)  # 30 s of replay
    assert not POLICY.due(dataclasses.replace(slow_replay, round_seconds=0.0099))


def test_a_replay_is_priced_with_reading_its_rounds_back() -> None:
    """A rebuild reads each round back from the store before playing it: a dim-8 NystromKONS priced by its
    live rounds alone replayed 94,300 rounds in 14.4 s against a 10 s bound (reading a round back: 0.04 to
    0.05 ms of its 0.15)."""
    behind = dataclasses.replace(CHEAP, rounds_behind=30_000, log_bytes=1000, round_seconds=0.0006)
    assert not POLICY.due(behind)  # 18 s of playing
    assert POLICY.due(dataclasses.replace(behind, read_seconds=0.0004))  # and 12 s of reading: 30 s
    assert not POLICY.due(dataclasses.replace(behind, read_seconds=0.000399))


def test_the_replay_bound_holds_within_the_floor() -> None:
    """A learner fed 5,400 rounds a second accrued 14 s of replay 17.5 s after its last snapshot, while the
    floor's 30 s kept the next one away."""
    hot = dataclasses.replace(CHEAP, rounds_behind=94_300, log_bytes=1000, round_seconds=0.0001,
                              read_seconds=0.00005, since_snapshot=17.5)
    assert hot.replay_seconds > 10.0
    assert dataclasses.replace(POLICY, max_replay_seconds=10.0).due(hot)
    assert not POLICY.due(hot)  # (14 s, within a 30 s bound)
    assert not POLICY.due(dataclasses.replace(hot, log_bytes=10**7))  # the bytes wait for the floor


@pytest.mark.anyio
async def test_a_rebuild_measures_what_reading_the_log_costs_and_the_snapshots_price_it(
        make_client: AppFactory) -> None:
    client = await make_client(snapshot_min_seconds=3600.0)  # no snapshot: the rebuild replays the log
    url = "/v1/learners/m"
    assert (await client.put(url, json=SPEC)).status_code == 201
    rows = np.random.default_rng(3).normal(size=(1100, 4))  # two full pages of the log and a part
    for batch in (rows[:550], rows[550:]):
        items = [{"x": row[:3].tolist(), "y": float(row[3])} for row in batch]
        assert (await client.post(f"{url}/feedback", json={"items": items})).status_code == 200
    service = client.app.state.service
    ref = LearnerRef("default", "m")
    service.cache.log_read_seconds = prior = 1e-9  # (as if this process read its pages that quickly)
    service.cache.drop(ref)
    assert (await client.post(f"{url}/predict", json={"x": [0.1, 0.2, 0.3]})).json()["version"] == len(rows)
    entry = service.cache.entry(ref)
    assert entry.snap_version == 0 and service.cache.log_read_seconds > prior  # read back: measured
    entry.snap_version = len(rows) - 100  # 100 rounds behind a snapshot
    cost = service.snapshots.cost(entry, time.monotonic())
    assert cost.read_seconds == service.cache.log_read_seconds
    assert cost.replay_seconds == pytest.approx(100 * (entry.round_seconds + cost.read_seconds))


@pytest.mark.parametrize("feedbacks_per_second", [0.01, 0.25, 1.0, 10.0, 100.0, 10_000.0])
@pytest.mark.parametrize("snapshot_bytes", [2_000, 500_000, 6_000_000])
def test_snapshot_bytes_stay_within_3x_of_the_logs_at_every_rate(feedbacks_per_second: float,
                                                                  snapshot_bytes: int) -> None:
    """A day of one learner, round by round (100-byte rounds of 1 ms), the policy asked after each: the
    snapshot bytes written per logged byte. (6 MB behind 100-byte rounds is 20,000 rounds, 20 s to replay.)"""
    round_bytes, rounds = 100, int(min(feedbacks_per_second * 86_400, 200_000))
    written = behind = 0
    last = 0.0
    for i in range(1, rounds + 1):
        now = i / feedbacks_per_second
        behind += 1
        cost = LogCost(behind, behind * round_bytes, 0.001, snapshot_bytes, now - last)
        if POLICY.due(cost):
            written, behind, last = written + snapshot_bytes, 0, now
    assert written <= 3 * rounds * round_bytes
    # and the replay stays short: the longer of every_rounds, a third of the snapshot's bytes, the floor's
    assert behind <= max(POLICY.every_rounds, snapshot_bytes // (3 * round_bytes) + 1,
                         feedbacks_per_second * POLICY.floor_seconds + 1)
    if rounds * round_bytes >= 2 * snapshot_bytes and rounds / feedbacks_per_second > POLICY.floor_seconds:
        assert written > 0


def test_nothing_new_is_never_due_and_the_floor_is_at_most_the_interval() -> None:
    nothing = dataclasses.replace(CHEAP, rounds_behind=0, log_bytes=0, since_snapshot=1e6)
    assert not POLICY.due(nothing) and not POLICY.due(nothing, leaving=True)
    quick = dataclasses.replace(POLICY, interval_seconds=0.1)
    assert quick.due(dataclasses.replace(CHEAP, since_snapshot=0.1))


def test_a_learner_counts_its_log_since_its_snapshot_and_its_round_time() -> None:
    entry = CachedLearner(LearnerRef("t", "m"))
    entry.count_rounds(4, 400, 0.004, 0.002)
    entry.count_rounds(1, 100, 0.011, 0.001)
    assert entry.log_bytes == 500
    assert entry.round_seconds == pytest.approx(0.9 * 0.001 + 0.1 * 0.011)
    assert entry.round_cpu_seconds == pytest.approx(0.9 * 0.0005 + 0.1 * 0.001)
    entry.adopt(kons.learner_from_params("ons", {"dim": 2}), {}, Head("i", 7, 7, "r"))
    assert entry.log_bytes == 0  # a rebuild counts the log it replays again


def test_an_evicted_learner_whose_log_is_cheaper_is_not_snapshotted() -> None:
    snapshots = Snapshotter(cast(Any, None), Settings(), Metrics(per_learner=False))  # never reaches a store
    entry = CachedLearner(LearnerRef("t", "m"), version=5, snap_version=2, nbytes=10**9, log_bytes=300,
                          round_seconds=1e-4)
    snapshots.schedule(entry)
    assert not snapshots._pending


def test_a_learner_snapshotted_by_cost_is_rebuilt_exactly_after_a_sigkill(redis_server: RedisServer,
                                                                           tmp_path: Path) -> None:
    redis_server.client().flushall()
    # snapshots only by cost or by the interval, at most every 0.3 s
    service = ServiceProcess(redis_server.url, tmp_path / "service.log", snapshot_min_seconds=0.3,
                             snapshot_interval_seconds=0.6, snapshot_every_rounds=10**6).start()
    rng = np.random.default_rng(5)
    X = rng.normal(size=(80, 3))
    Y = np.sin(X[:, 0])
    url = "/v1/learners/m"
    try:
        with httpx.Client(base_url=service.url, timeout=30) as http:
            assert http.put(url, json=SPEC).status_code == 201
            for x, y in zip(X[:60], Y[:60], strict=True):
                assert http.post(f"{url}/feedback", json={"x": x.tolist(), "y": float(y)}).status_code == 200

            def written() -> bool:
                return (value(http.get("/metrics").text, "kons_snapshots_total", outcome="written") or 0) >= 1

            wait_until(written, 20, "a snapshot")
            # no snapshot after it (as if another process were writing one): the interval's next one would
            # cover the last rounds too if a loaded machine took 0.6 s from the last of them to the kill
            def locked() -> bool:
                return bool(redis_server.client().set(SNAPSHOT_LOCK, "elsewhere", nx=True, px=60_000))

            wait_until(locked, 10, "the snapshot lock")
            for x, y in zip(X[60:], Y[60:], strict=True):  # logged after it
                assert http.post(f"{url}/feedback", json={"x": x.tolist(), "y": float(y)}).status_code == 200
            metrics = http.get("/metrics").text
        service.kill()
        redis_server.client().delete(SNAPSHOT_LOCK)
        meta = redis_server.client().hgetall("kons:{default/m}:meta")
        assert 0 < int(meta[b"snap_version"]) < int(meta[b"version"]) == len(X)  # a snapshot plus a log
        assert (value(metrics, "kons_snapshot_bytes_total") or 0) > 0
        assert (value(metrics, "kons_log_bytes_total") or 0) >= len(X) * 3 * 8  # each row's float64s at least
        service.start()
        local = kons.learner_from_params(SPEC["algorithm"], {**SPEC["params"], "dim": SPEC["dim"]})
        local.learn_many(X, Y)
        probe = [0.3, -0.4, 0.5]
        with httpx.Client(base_url=service.url, timeout=30) as http:
            assert http.post(f"{url}/predict", json={"x": probe}).json() == {
                "prediction": local.predict_one(probe), "version": len(X)}
    finally:
        service.stop()
