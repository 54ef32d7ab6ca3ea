"""Redis and the service restarted together (a host reboot) after Redis lost its last acknowledged rounds:
no process holds them any more. What reports the loss, with its extent: the client's version sent back
(``Kons-Seen-Version``), to the restarted process and to one that never held the rounds; and, with
``KONS_ACK_MARKS_DIR``, the restarted process's own marks, before any client sends a version.
``python -m benchmarks.reliability`` runs it with more trials."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.scenarios import restart_rollback_scenario

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


@pytest.mark.parametrize("marks", [False, True], ids=["client_version", "marks"])
async def test_a_rollback_across_a_restart_is_reported_with_its_extent(tmp_path: Path, marks: bool) -> None:
    result = await restart_rollback_scenario(tmp_path, trials=2, kept=6, lost=4, marks=marks)
    assert [trial["lost_rounds"] for trial in result["trials"]] == [4, 4], result  # Redis did lose them
    assert result["reported_with_the_right_extent"] == result["reports_expected"] == 4, result
    # who saw it: the restarted process (a new one each trial) from its predecessor's marks, else from
    # the client; the other process (never restarted, never held the rounds) from the client, twice
    restarted = {"process": 0, "marks": 1, "client": 0} if marks else {"process": 0, "marks": 0, "client": 1}
    assert result["metric_detected_per_process"] == [restarted, {"process": 0, "marks": 0, "client": 2}]
    for trial in result["trials"]:
        assert [r["seen_by"] for r in trial["reports_restarted_process"]] == [
            "were acknowledged before this process started" if marks else "a client was answered"]
    assert result["metric_rounds_lost_per_process"] == [4, 8], result
    assert result["readyz_rollbacks_per_process"] == [{"detected": 1, "rounds_lost": 4},
                                                      {"detected": 2, "rounds_lost": 8}], result
