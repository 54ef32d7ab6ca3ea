"""Smoke test of the series benchmark: a short series through ``run_series`` and the report."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.series import Series, render, run_series, tenths, verdict


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
    v = verdict(record)
    assert v["best"] == "last" and len(v["ratios"]) == 10
    report = render([record], "python -m benchmarks.series", "abc")
    assert "## Summary" in report and "| walk | held-out | 300 |" in report
