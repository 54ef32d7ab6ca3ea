"""Smoke test of the service load harness: a tiny learner, 50 requests a phase, no peer."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.benchmarks.stamps import assert_stamped
from tests.streams import benchmark_data


@pytest.mark.redis
@pytest.mark.skipif(not benchmark_data("space_ga"), reason="benchmark data (../shared/data) not found")
@pytest.mark.timeout(60)
def test_load_minimal_mode_reports_finite_percentiles_and_no_lost_update(tmp_path: Path) -> None:
    from benchmarks.load import main

    assert main(["--out", str(tmp_path), "--sizes", "60", "--requests", "50", "--warmup", "5",
                 "--concurrency", "4", "--max-seconds", "15", "--dataset", "space_ga", "--no-chantilly"]) == 0
    record = json.loads((tmp_path / "raw" / "load.json").read_text())
    phases = record["kons"]
    assert [(p["target"], p["endpoint"]) for p in phases] == [
        ("echo", "predict"), ("kons", "predict"), ("echo", "feedback"), ("kons", "feedback")]
    for p in phases:
        assert p["ok"] == p["requests"] == 50 and not p["errors"]
        assert all(math.isfinite(p[k]) and p[k] > 0 for k in ("p50", "p95", "p99", "throughput"))
        assert p["p50"] <= p["p95"] <= p["p99"] <= p["max"]
    feedback = phases[-1]["extra"]
    # 60 uploaded rounds + 5 warm-up feedbacks, then 50 acknowledged feedbacks: exactly 50 new versions.
    assert (feedback["version_before"], feedback["version_after"], feedback["lost_updates"]) == (65, 115, 0)
    # The same with two uvicorn worker processes sharing the learner through Redis.
    multi = record["kons_workers"][-1]
    assert multi["ok"] == 50 and multi["extra"]["workers"] == 2 and multi["extra"]["lost_updates"] == 0
    assert multi["extra"]["version_after"] - multi["extra"]["version_before"] == 50
    assert record["chantilly"]["status"] == "skipped"
    report = (tmp_path / "load.md").read_text()
    assert "| kons feedback | 65 | 50 |" in report and "python -m benchmarks.load --out" in report
    assert_stamped(tmp_path / "load.md", tmp_path / "raw" / "load.json", "load.md")
