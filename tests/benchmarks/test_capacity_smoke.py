"""Smoke test of the capacity check: the model's predictions and the measured figures are all there."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.capacity import SERVICE_CPU_MS, markdown, run

pytestmark = [pytest.mark.redis]


def test_the_capacity_check_predicts_and_measures(tmp_path: Path) -> None:
    record = run(tmp_path, learners=3, warm=5, clients=2, seconds=2.0)
    predicted, measured = record["predicted"], record["measured"]
    assert measured["acknowledged"] > 0 and measured["cpu_ms_per_feedback"] > 0
    assert predicted["cpu_ms_per_feedback"] > SERVICE_CPU_MS  # the learner's round on top of the service's
    assert predicted["redis_bytes_per_learner"] >= record["model"]["state_bytes"] > 0
    assert measured["redis_bytes_per_learner"] > 0  # the stop snapshotted them
    assert "measured / predicted" in markdown(record, "python -m benchmarks.capacity", 0.0)
