"""Snapshots by cost (issue 18, item 6): the policy as a pure function, and a rebuild after a SIGKILL."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, cast

import httpx
import numpy as np
import pytest

import kons
from kons_service.core.cache import CachedLearner
from kons_service.core.metrics import Metrics
from kons_service.core.snapshots import LogCost, Snapshotter, log_dearer, snapshot_due
from kons_service.settings import Settings
from kons_service.store import Head, LearnerRef
from testkit.processes import SPEC, RedisServer, ServiceProcess, wait_until
from testkit.scrape import value

# 100 rounds of 0.4 ms and 100 bytes behind a 1 MB snapshot that takes 50 ms to write: the log is cheaper
CHEAP = LogCost(rounds_behind=100, log_bytes=10_000, round_seconds=0.0004, snapshot_bytes=1_000_000,
                write_seconds=0.05, since_snapshot=40.0)
POLICY: dict[str, Any] = {"floor_seconds": 30.0, "every_rounds": 1000, "interval_seconds": 60.0}


def test_a_log_cheaper_than_its_snapshot_waits_for_the_interval() -> None:
    assert not log_dearer(CHEAP)
    assert not snapshot_due(CHEAP, **POLICY)
    assert snapshot_due(dataclasses.replace(CHEAP, since_snapshot=60.0), **POLICY)


def test_a_log_slower_to_replay_or_larger_to_keep_than_the_snapshot_is_due_past_the_floor() -> None:
    slow = dataclasses.replace(CHEAP, rounds_behind=126)  # 50.4 ms of replay against 50 ms of writing
    large = dataclasses.replace(CHEAP, log_bytes=1_000_001)
    for dear in (slow, large):
        assert log_dearer(dear) and snapshot_due(dear, **POLICY)
        assert not snapshot_due(dataclasses.replace(dear, since_snapshot=29.9), **POLICY)  # the floor


def test_the_rounds_setting_still_forces_a_snapshot_but_not_within_the_floor() -> None:
    behind = dataclasses.replace(CHEAP, rounds_behind=1000, round_seconds=0.0)
    assert not log_dearer(behind) and snapshot_due(behind, **POLICY)
    assert not snapshot_due(dataclasses.replace(behind, since_snapshot=10.0), **POLICY)


def test_nothing_new_is_never_due_and_the_floor_is_at_most_the_interval() -> None:
    nothing = dataclasses.replace(CHEAP, rounds_behind=0, log_bytes=0, since_snapshot=1e6)
    assert not log_dearer(nothing) and not snapshot_due(nothing, **POLICY)
    quick: dict[str, Any] = {"floor_seconds": 30.0, "every_rounds": 1000, "interval_seconds": 0.1}
    assert snapshot_due(dataclasses.replace(CHEAP, since_snapshot=0.1), **quick)


def test_a_learner_counts_its_log_since_its_snapshot_and_its_round_time() -> None:
    entry = CachedLearner(LearnerRef("t", "m"))
    entry.count_rounds(4, 400, 0.004)
    entry.count_rounds(1, 100, 0.011)
    assert entry.log_bytes == 500
    assert entry.round_seconds == pytest.approx(0.9 * 0.001 + 0.1 * 0.011)
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
            for x, y in zip(X[60:], Y[60:], strict=True):  # logged after it
                assert http.post(f"{url}/feedback", json={"x": x.tolist(), "y": float(y)}).status_code == 200
            metrics = http.get("/metrics").text
        service.kill()
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
