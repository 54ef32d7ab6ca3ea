"""Smoke test of the series benchmark: a short series through ``run_series`` and the report."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.series import Series, blocks, render, run_series, tenths, verdict


def _walk() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return np.arange(300.0)[:, None], 100.0 + np.cumsum(rng.normal(size=300))


@pytest.mark.timeout(120)
def test_a_series_is_scored_overall_and_per_tenth() -> None:
    pytest.importorskip("river")
    record = run_series(Series("walk", "held-out", "a random walk", _walk), ["auto", "last", "river_linear"])
    runs = {r["method"]: r for r in record["runs"]}
    assert record["windows"] == tenths(300) and len(record["windows"]) == 10
    assert all(np.isfinite(r["overall"]) and len(r["windows"]) == 10 for r in runs.values())
    assert runs["last"]["overall"] < runs["river_linear"]["overall"]  # a random walk: the last value wins
    # a stream shorter than a block is one block, scored as the whole stream
    assert record["blocks"] == [(0, 300)] and runs["auto"]["blocks"] == [runs["auto"]["overall"]]
    v = verdict(record)
    assert v["best"] == "last" and len(v["ratios"]) == 10 and len(v["ahead_blocks"]) == 1
    report = render([record], "python -m benchmarks.series", "abc")
    assert "## Summary" in report and "| walk | held-out | 300 |" in report


def test_blocks_are_the_issue_s_1000_row_windows_the_last_one_shorter() -> None:
    assert blocks(2225) == [(0, 1000), (1000, 2000), (2000, 2225)]
    assert blocks(3000) == [(0, 1000), (1000, 2000), (2000, 3000)]
