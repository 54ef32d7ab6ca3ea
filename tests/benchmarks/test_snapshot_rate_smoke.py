"""Smoke test of the snapshot-rate benchmark: every rate's service takes feedback; the figures are there."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.common import REPO
from benchmarks.snapshot_rate import markdown, run

pytestmark = [pytest.mark.redis]


def test_the_snapshot_rate_benchmark_feeds_every_rate(tmp_path: Path) -> None:
    record = run(tmp_path, {"this": REPO}, learners=2, seconds=6.0, rates=(1.0, 20.0))  # a request every 4 s
    rows = {r["rate"]: r for r in record["rows"]}
    assert set(rows) == {1.0, 20.0}
    assert rows[20.0]["acknowledged"] > rows[1.0]["acknowledged"] > 0
    assert all(r["log_bytes_per_feedback"] > 3 * 8 for r in rows.values())  # three float64 features at least
    assert all(r["max_rounds_behind"] >= 1 for r in rows.values())  # nothing is snapshotted within 6 s
    assert "snapshot / log" in markdown(record, "python -m benchmarks.snapshot_rate", 0.0)
