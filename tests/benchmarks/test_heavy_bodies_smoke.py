"""Smoke test of the heavy-bodies benchmark: both services answer every body, and the table is there."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.heavy_bodies import BODIES, markdown, run

pytestmark = pytest.mark.redis


def test_the_heavy_bodies_benchmark_times_every_body_on_both_services(tmp_path: Path) -> None:
    results = run(tmp_path, requests=3)
    assert results["bytes"]["100 rows"] < 16 * 1024 < results["bytes"]["900 rows"]
    assert {body: {name: len(series) for name, series in by.items()}
            for body, by in results["latencies_ms"].items()} == {
        body: {"keys configured": 3, "single tenant": 3} for body in BODIES}
    report = markdown(results, "python -m benchmarks.heavy_bodies")
    assert report.count("x |") == len(BODIES)
