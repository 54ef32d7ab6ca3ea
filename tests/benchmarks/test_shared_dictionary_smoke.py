"""Smoke test of ``python -m benchmarks.shared_dictionary``: the shared and the private dictionaries play
the same rows identically, and the report says so."""

from __future__ import annotations

import pytest

from benchmarks.shared_dictionary import main


def test_the_benchmark_runs_and_finds_the_plays_identical(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--task", "binary", "--warmup", "200", "--rounds", "40"])
    report = capsys.readouterr().out
    assert "plays identical" in report and "median of the 2 paired blocks" in report
