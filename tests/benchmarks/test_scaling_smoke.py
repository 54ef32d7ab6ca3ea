"""Smoke test of ``python -m benchmarks.scaling`` with tiny checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.scaling import main
from tests.benchmarks.stamps import assert_stamped
from tests.streams import benchmark_data


@pytest.mark.skipif(not benchmark_data("cadata"), reason="benchmark data (../shared/data) not found")
@pytest.mark.timeout(120)
def test_scaling_writes_table_plot_and_raw_numbers(tmp_path: Path) -> None:
    args = ["--data", "cadata", "--out", str(tmp_path), "--checkpoints", "40,80", "--kons-max", "40",
            "--block", "5", "--gammas", "0,1"]
    assert main(args) == 0
    raw = json.loads((tmp_path / "scaling.json").read_text())
    series = {s["label"]: s for s in raw["series"]}
    assert list(series) == ["KONS (exact)", "SketchedKONS gamma=0", "SketchedKONS gamma=1", "KernelOGD",
                            "floor: RBF.row + dot"]
    assert [c["n"] for c in series["KONS (exact)"]["checkpoints"]] == [40]
    for label in list(series)[1:]:
        checkpoints = series[label]["checkpoints"]
        assert [c["n"] for c in checkpoints] == [40, 80], label
        assert all(0.0 < c["median_s"] < 1.0 for c in checkpoints)
        if not label.startswith("floor"):
            assert all(0.0 < c["paired_floor_s"] < 1.0 for c in checkpoints)
    # gamma = 1 is exact KONS: every stored point with a gradient is in the dictionary.
    assert all(c["dictionary_size"] == c["n"] for c in series["SketchedKONS gamma=1"]["checkpoints"])
    report = (tmp_path / "scaling.md").read_text()
    assert "python -m benchmarks.scaling --data cadata" in report
    assert "| KONS (exact) |" in report and "ratio to paired floor at 80" in report
    assert (tmp_path / "scaling.png").stat().st_size > 1000
    assert_stamped(tmp_path / "scaling.md", tmp_path / "scaling.json", "scaling.md")
    # The report can be rebuilt from the raw numbers alone.
    (tmp_path / "scaling.md").unlink()
    assert main(["--out", str(tmp_path), "--report-only"]) == 0
    assert (tmp_path / "scaling.md").read_text() == report
