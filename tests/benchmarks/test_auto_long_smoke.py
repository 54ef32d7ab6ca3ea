"""Smoke test of the long-stream benchmark of ``auto``: checkpoints in order, changes declared on the
flipping target, a finite time and a state measured at each."""

from __future__ import annotations

import math

import pytest

from tests.streams import benchmark_data


@pytest.mark.skipif(not benchmark_data("cadata"), reason="benchmark data (../shared/data) not found")
@pytest.mark.timeout(120)
def test_checkpoints_measure_time_and_state_and_see_the_flips() -> None:
    from benchmarks.auto_long import measure

    rows = measure(rounds=1_300, period=300, block=200)
    assert [r[0] for r in rows] == [1_000]
    _, ms, state, blob, changes = rows[0]
    assert math.isfinite(ms) and ms > 0
    assert 0 < state <= blob  # the blob adds its headers to the arrays
    assert changes >= 1  # three sign flips before round 1,000


@pytest.mark.skipif(not benchmark_data("magic04"), reason="benchmark data (../shared/data) not found")
@pytest.mark.timeout(120)
def test_the_classification_stream_sees_its_label_swaps() -> None:
    from benchmarks.auto_long import measure

    rows = measure(rounds=1_300, period=300, block=200, task="classification")
    assert [r[0] for r in rows] == [1_000]
    _, ms, state, blob, changes = rows[0]
    assert math.isfinite(ms) and ms > 0 and 0 < state <= blob
    assert changes >= 1  # three swaps of the labels before round 1,000
