"""Smoke test of ``python -m benchmarks.state_bytes``: a learner's state measured in this checkout, the
report written with its provenance."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import state_bytes
from benchmarks.provenance import read_markdown_stamp


def test_the_benchmark_measures_a_state(tmp_path: Path) -> None:
    state_bytes.main(["--cases", "regression, d = 8", "--rows", "60", "--repeats", "1", "--saves", "1",
                      "--out", str(tmp_path)])
    report = (tmp_path / "state_bytes.md").read_text()
    assert "| regression, d = 8 |" in report and (tmp_path / "state_bytes.json").exists()
    stamp = read_markdown_stamp(report)
    assert stamp is not None and stamp["sources"] == list(state_bytes.SOURCES)
    assert "kons/auto/grid.py" in stamp["blobs"] and "benchmarks/state_bytes.py" in stamp["blobs"]
    assert json.loads((tmp_path / "state_bytes.json").read_text())["provenance"] == stamp
