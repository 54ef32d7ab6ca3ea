"""Redis and the service restarted together (a host reboot) after Redis lost its last acknowledged rounds:
no process holds them any more, and the client's version sent back (``Kons-Seen-Version``) is what
reports the loss, with its extent, from the restarted process and from one that never held them.
``python -m benchmarks.reliability`` runs it with more trials."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.scenarios import restart_rollback_scenario

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


async def test_a_rollback_across_a_restart_is_reported_with_its_extent(tmp_path: Path) -> None:
    result = await restart_rollback_scenario(tmp_path, trials=2, kept=6, lost=4)
    assert [trial["lost_rounds"] for trial in result["trials"]] == [4, 4], result  # Redis did lose them
    assert result["reported_with_the_right_extent"] == result["reports_expected"] == 4, result
    assert result["metric_rounds_lost_per_process"] == [4, 8], result  # the restarted one forgot trial 1
    assert result["readyz_rollbacks_per_process"] == [{"detected": 1, "rounds_lost": 4},
                                                      {"detected": 2, "rounds_lost": 8}], result
