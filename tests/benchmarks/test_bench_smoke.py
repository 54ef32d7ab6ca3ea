"""Smoke test of the quality benchmark harness: quick mode, one small data set, kons learners only."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest

from testkit.processes import REPO
from tests.streams import benchmark_data


@pytest.mark.skipif(not benchmark_data("space_ga"), reason="benchmark data (../shared/data) not found")
@pytest.mark.timeout(60)
def test_quality_quick_mode_writes_a_table_with_finite_metrics(tmp_path: Path) -> None:
    from benchmarks.quality import main

    assert main(["--quick", "--datasets", "space_ga", "--methods", "kons", "--out", str(tmp_path),
                 "--no-plots"]) == 0
    record = json.loads((tmp_path / "quality_raw" / "space_ga.json").read_text())
    assert record["scored_rows"] == 300 and record["tuning_rows"] == 150
    runs = record["runs"]
    assert {r["column"] for r in runs} == {"default", "tuned"}
    assert {"kons", "skons0", "kernel_ogd"} <= {r["method"] for r in runs}
    assert all(math.isfinite(r["metric"]) and r["rows"] == 300 for r in runs)
    # Tuning used two configurations per method, never the scored rows.
    assert all(info["configs"] == 2 for info in record["tuning"].values())
    report = (tmp_path / "quality.md").read_text()
    assert "| KONS |" in report and "Headline" in report


@pytest.mark.skipif(not benchmark_data("space_ga"), reason="benchmark data (../shared/data) not found")
@pytest.mark.timeout(60)
def test_without_out_the_results_go_to_a_temporary_directory_not_the_checkout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.quality import main

    committed = REPO / "benchmarks" / "results"
    before = {p: p.stat().st_mtime_ns for p in committed.rglob("*")}
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["--quick", "--datasets", "space_ga", "--methods", "kons", "--no-plots"]) == 0
    [out] = tmp_path.glob("kons-quality-*")
    assert (out / "quality_raw" / "space_ga.json").is_file() and (out / "quality.md").is_file()
    assert {p: p.stat().st_mtime_ns for p in committed.rglob("*")} == before
