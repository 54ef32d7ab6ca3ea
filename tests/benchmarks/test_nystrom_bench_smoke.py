"""Smoke tests of the NystromKONS benchmarks: the long-stream mode of ``benchmarks.scaling`` and the
quality comparison, on tiny runs (timings are not checked; only that the reports are complete)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks.stamps import assert_stamped
from tests.streams import benchmark_data


@pytest.mark.skipif(not benchmark_data("cadata"), reason="benchmark data (../shared/data) not found")
@pytest.mark.timeout(120)
def test_long_stream_mode_writes_table_plot_and_raw_numbers(tmp_path: Path) -> None:
    from benchmarks.scaling import main

    args = ["--long-stream", "--rounds", "3000", "--sketched-rounds", "1500", "--block", "100",
            "--max-dictionary", "20", "--out", str(tmp_path)]
    assert main(args) == 0
    raw = json.loads((tmp_path / "long_stream.json").read_text())
    series = {s["label"]: s for s in raw["series"]}
    assert [c["rounds"] for c in series["SketchedKONS"]["checkpoints"]] == [1000, 1400]
    nystrom = series["NystromKONS"]["checkpoints"]
    assert [c["rounds"] for c in nystrom] == [1000, 2000, 2900]
    assert all(c["dictionary_size"] == c["stored_points"] == 20 for c in nystrom)
    sizes = [c["state_bytes"] for c in nystrom]
    assert max(sizes) - min(sizes) < 100  # only the counters' text length may change
    report = (tmp_path / "long_stream.md").read_text()
    assert "--long-stream --rounds 3000" in report and "| 2,900 |" in report and "## Verdict" in report
    assert (tmp_path / "long_stream.png").stat().st_size > 1000
    assert_stamped(tmp_path / "long_stream.md", tmp_path / "long_stream.json", "long_stream.md")


@pytest.mark.skipif(not benchmark_data("space_ga"), reason="benchmark data (../shared/data) not found")
@pytest.mark.timeout(120)
def test_nystrom_quality_covers_both_regimes_and_every_variant(tmp_path: Path) -> None:
    from benchmarks.nystrom_quality import LEARNERS, main

    assert main(["--T", "300", "--datasets", "space_ga", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "nystrom_quality.json").read_text())["rows"]
    assert [r["regime"] for r in rows] == ["paper", "raw"]
    for row in rows:
        assert set(row["results"]) == set(LEARNERS)
        assert all(0.0 < r["metric"] < 10.0 for r in row["results"].values())
    report = (tmp_path / "nystrom_quality.md").read_text()
    assert report.count("| space_ga |") == 2 and "## Summary" in report
    assert_stamped(tmp_path / "nystrom_quality.md", tmp_path / "nystrom_quality.json", "nystrom_quality.md")
    # The report rebuilt from the raw numbers keeps the run's provenance.
    (tmp_path / "nystrom_quality.md").unlink()
    assert main(["--report-only", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "nystrom_quality.md").read_text() == report
