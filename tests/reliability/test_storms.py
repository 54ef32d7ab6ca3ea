"""Feedback storms from several clients against real service processes (``python -m kons_service``) and a real
redis-server: SIGKILLs of the service, Redis restarts, outages and freezes, and several replicas; the
same on a Redis Cluster, and a failover of a primary + replica pair mid-storm.

Each storm is audited by :func:`testkit.scenarios.audit`: every acknowledged round is in the
learner exactly once, in the acknowledged order (the state is byte-identical to a serial replay in
this process), and no answer was a 5xx other than 503. ``python -m benchmarks.reliability`` runs the
same scenarios with bigger numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testkit.scenarios import (
    cluster_failover_scenario,
    crash_scenario,
    failover_scenario,
    redis_fault_scenario,
    replica_scenario,
    shown,
)

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


def assert_kept(result: dict[str, Any]) -> None:
    """The promises every storm must keep."""
    assert result["acknowledged"] > 0
    assert result["unresolved"] == 0 and result["rejected_4xx"] == 0, shown(result)
    assert result["lost"] == 0 and result["duplicated"] == 0, shown(result)
    assert result["final_version"] == result["acknowledged_rounds"], shown(result)
    assert result["state_equals_replay"] and result["probes_equal_replay"], shown(result)
    assert result["replicas_agree_on_probes"], shown(result)
    assert result["log_mismatches"] == 0, shown(result)  # the tail may be empty once a snapshot trimmed it
    assert result["inconsistent_retries"] == 0, shown(result)
    assert result["status_500"] == result["status_5xx_other_than_503"] == 0, shown(result)


@pytest.mark.slow  # ~25 s; quick: test_service_processes' SIGKILL mid-stream
async def test_sigkills_mid_storm_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    result = await crash_scenario(tmp_path, kills=4, clients=3)
    assert_kept(result)
    assert sum(result["transport_errors"].values()) > 0  # the kills did hit requests


@pytest.mark.slow
async def test_twenty_sigkills(tmp_path: Path) -> None:
    result = await crash_scenario(tmp_path, kills=20, clients=4, gap=(0.2, 1.0), seed=1)
    assert_kept(result)


@pytest.mark.slow  # ~22 s; quick: test_service_store_faults, the outage in test_service_processes
async def test_redis_restart_outage_and_freeze_are_503s_and_recover(tmp_path: Path) -> None:
    # short timeouts (the defaults are 2 s and 10 s) keep this test fast and its bound tight
    timeout, lease_wait = 0.5, 2.0
    result = await redis_fault_scenario(
        tmp_path, outage_seconds=1.5, pause_seconds=2.5, calm_seconds=1.0,
        settings={"redis_timeout_seconds": timeout, "lease_wait_seconds": lease_wait})
    assert_kept(result)
    assert result["status_503"] > 0 and result["service_restarted"] == 0
    # bound: the learner's lock (lease_wait) + one failing command and the lease release, each
    # 3 attempts of the Redis timeout; plus slack for a shared machine
    assert result["max_latency_s"] <= lease_wait + 6 * timeout + 1.5, shown(result)
    for name, phase in result["phases"].items():
        assert phase["first_200_after_s"] is not None and phase["first_200_after_s"] < 5.0, (name, phase)
    assert "503" in result["phases"]["outage"]["statuses_of_requests_sent_meanwhile"]


@pytest.mark.slow  # ~7 s (16 s under load); quick: test_service_processes' replicas on one Redis, and the
# conflicts between two processes of tests/service/core/test_feedback.py, each checked against a replay
async def test_replicas_agree_bit_for_bit_with_a_serial_replay(tmp_path: Path) -> None:
    result = await replica_scenario(tmp_path, replicas=2, clients=4, seconds=4.0)
    assert_kept(result)
    assert result["transport_errors"] == {}  # (a 503 under heavy load is allowed: clients retry)


#: What a user gets with defaults: an ``auto`` learner (preprocessing, a mixture of bounded-cost bases).
AUTO = {"algorithm": "auto", "dim": 3, "params": {}}


@pytest.mark.slow  # ~18 s; quick: test_service_auto, the SIGKILL in test_service_processes
async def test_auto_learner_survives_sigkills_and_its_replicas_agree(tmp_path: Path) -> None:
    result = await crash_scenario(tmp_path / "crash", kills=3, clients=3, spec=AUTO)
    assert_kept(result)
    assert sum(result["transport_errors"].values()) > 0
    result = await replica_scenario(tmp_path / "replicas", replicas=2, clients=4, seconds=3.0, spec=AUTO)
    assert_kept(result)


# ---- on a Redis Cluster (3 primaries), and a failover of a primary + replica pair mid-storm

@pytest.mark.slow
async def test_sigkills_mid_storm_on_a_cluster_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    result = await crash_scenario(tmp_path, kills=4, clients=3, cluster=True)
    assert_kept(result)
    assert sum(result["transport_errors"].values()) > 0


@pytest.mark.slow
async def test_replicas_on_a_cluster_agree_with_a_serial_replay(tmp_path: Path) -> None:
    result = await replica_scenario(tmp_path, replicas=2, clients=4, seconds=4.0, cluster=True)
    assert_kept(result)


@pytest.mark.slow  # ~11 s (20 s under load); quick: test_service_cluster's feedbacks waiting for a replica
async def test_a_failover_with_wait_loses_no_acknowledged_round(tmp_path: Path) -> None:
    result = await failover_scenario(tmp_path, wait=True)
    assert_kept(result)  # lost == 0: every acknowledged round was on the replica that took over
    assert result["status_503"] > 0, shown(result)  # not_replicated while the link was cut


@pytest.mark.slow  # ~11 s; quick: test_service_rollback, tests/service/core/test_cache.py's lost histories
async def test_a_failover_without_wait_loses_rounds_but_reports_and_never_serves_them(tmp_path: Path) -> None:
    result = await failover_scenario(tmp_path, wait=False)
    # the rounds acknowledged while the replica lagged are gone ...
    assert result["acknowledged_during_lag"] > 0 and result["lost"] > 0, shown(result)
    # ... each process that held them says so, and serves the surviving history only
    assert result["rollbacks_reported"] >= 1, shown(result)
    assert result["duplicated"] == 0 and result["log_mismatches"] == 0, shown(result)
    # before the state: a round whose answer never came is missing from the replay the state is compared to
    assert result["unresolved"] == result["rejected_4xx"] == result["status_500"] == 0, shown(result)
    assert result["state_equals_replay"] and result["probes_equal_replay"], shown(result)
    assert result["replicas_agree_on_probes"], shown(result)


@pytest.mark.slow
async def test_a_cluster_failover_with_wait_loses_no_acknowledged_round(tmp_path: Path) -> None:
    result = await cluster_failover_scenario(tmp_path, wait=True)
    assert_kept(result)  # the service followed the slot to the replica that took over
