"""Smoke test of the marks benchmark: both apps take feedback, and the figures are there."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.ack_marks import markdown, run

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


async def test_the_marks_benchmark_runs_both_apps(tmp_path: Path) -> None:
    results = await run(tmp_path, runs=2, blocks=2, rounds=5)
    assert [r["marks_first"] for r in results["runs"]] == [True, False]
    assert all(r["feedbacks_each"] == 10 and r["ratio"] > 0 for r in results["runs"])
    assert results["mark_us"] > 0 and results["fsync_median_ms"] > 0
    assert "marks / none" in markdown(results, "python -m benchmarks.ack_marks")
