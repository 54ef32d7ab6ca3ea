"""Real failures of the shard serving a learner on a real Redis Cluster (3 primaries with a replica each),
with no forced takeover: the cluster elects the replica itself. ``python -m benchmarks.cluster_failover``
runs every failure with and without ``WAIT``, several times."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.scenarios import cluster_outage_scenario, shown

pytestmark = [pytest.mark.anyio, pytest.mark.redis, pytest.mark.slow]  # ~20 s each


@pytest.mark.parametrize("wait", [False, True], ids=["no_wait", "wait"])
async def test_a_lagging_replica_promoted_loses_rounds_only_without_wait(tmp_path: Path, wait: bool) -> None:
    result = await cluster_outage_scenario(tmp_path, outage="lagging_replica", wait=wait)
    assert result["promote_s"] is not None and result["writes_resumed_s"] is not None, shown(result)
    assert result["status_5xx_other_than_503"] == 0 and result["retry_after_missing"] == 0, shown(result)
    assert result["service_log_tracebacks"] == 0 and result["duplicated"] == 0, shown(result)
    assert result["unresolved"] == result["rejected_4xx"] == 0, shown(result)
    assert result["state_equals_replay"] and result["probes_equal_replay"], shown(result)
    assert result["replicas_agree_on_probes"], shown(result)
    if wait:
        assert result["lost"] == 0, shown(result)
    else:  # what the replica missed is gone, and a process that held it says so
        assert result["lost"] > 0 and result["rollbacks_reported"] >= 1, shown(result)


async def test_a_shard_down_with_its_replica_answers_503_with_retry_after_then_resumes(
    tmp_path: Path,
) -> None:
    result = await cluster_outage_scenario(tmp_path, outage="shard_down", wait=False, down_seconds=2.0)
    assert set(result["statuses_while_down"]) == {"503"}, shown(result)
    assert result["retry_after_missing"] == 0 and result["status_500"] == 0, shown(result)
    assert result["service_log_tracebacks"] == 0, result  # the lease tasks outlived the store's errors
    assert result["writes_resumed_s"] is not None and result["lost"] == 0, shown(result)
