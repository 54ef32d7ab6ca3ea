"""Smoke test of ``python -m benchmarks.state_bytes``: a learner's state measured in this checkout, the
report written."""

from __future__ import annotations

from pathlib import Path

from benchmarks import state_bytes


def test_the_benchmark_measures_a_state(tmp_path: Path) -> None:
    state_bytes.main(["--cases", "regression, d = 8", "--rows", "60", "--repeats", "1", "--saves", "1",
                      "--out", str(tmp_path)])
    report = (tmp_path / "state_bytes.md").read_text()
    assert "| regression, d = 8 |" in report and (tmp_path / "state_bytes.json").exists()
