"""A feedback storm through two service processes while Redis rolls the learner back (its keys restored
as they were up to a second earlier), the storm going on: the rounds Redis forgot are the only ones lost,
a replica that held them reports it, and every replica ends bit-identical to a serial replay of the
surviving log. Before the history fence (the commit before cba4bee) the replicas ended different from the
replay here. ``python -m benchmarks.reliability`` runs it with more rollbacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.scenarios import rollback_scenario

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


@pytest.mark.slow  # ~19 s; quick: test_service_rollback
async def test_replicas_report_a_rollback_and_agree_on_the_surviving_log(tmp_path: Path) -> None:
    result = await rollback_scenario(tmp_path, rollbacks=2, replicas=2, clients=3)
    assert result["lost_by_the_rollbacks"] > 0, result  # the rollbacks did remove acknowledged rounds
    assert result["rollbacks_detected_per_replica"][0] >= 1, result  # the replica that held them
    assert result["unresolved"] == 0 and result["rejected_4xx"] == 0, result
    assert result["status_5xx_other_than_503"] == 0, result
    assert result["survivors_at_another_version"] == 0, result
    assert result["survivors_lost"] == result["survivors_duplicated"] == 0, result
    assert result["survivors_final_version"] == result["survivors_acknowledged_rounds"], result
    assert result["survivors_state_equals_replay"] and result["survivors_probes_equal_replay"], result
    assert result["survivors_replicas_agree_on_probes"], result
    assert result["survivors_log_mismatches"] == 0, result
