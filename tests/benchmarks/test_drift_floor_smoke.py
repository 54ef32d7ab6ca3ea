"""Smoke test of the restated recovery goal (benchmarks/drift_floor.py): the old concept's noiseless value
on a change's first row, from the generators themselves, and one short stream's window sums."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.drift import ORACLE_FACTOR, STREAMS, Stream
from benchmarks.drift_floor import Window, floor_windows, noiseless, old_concept, render


def _flip() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 2)) * [1.0, 30.0] + [0.0, 100.0]
    y = 5.0 * X[:, 0] + 0.1 * X[:, 1] + 0.5 * rng.normal(size=400)
    y[200:] = -y[200:] + 40.0
    return X, y


def test_the_noise_is_left_out_and_the_rows_kept() -> None:
    X, y = _flip()
    clean_X, clean = noiseless(_flip)
    assert np.array_equal(X, clean_X)
    assert np.allclose(clean[:200], 5.0 * X[:200, 0] + 0.1 * X[:200, 1])
    assert 0.4 < np.std(y - clean) < 0.6


def test_a_linear_old_concept_is_its_noiseless_value_on_the_changes_row() -> None:
    X, _ = _flip()
    (old,) = old_concept(Stream("flip", "abrupt", "regression", (200,), _flip))
    assert old == pytest.approx(5.0 * X[200, 0] + 0.1 * X[200, 1])


def test_a_river_drift_is_rebuilt_without_its_change() -> None:
    # friedman_gra swaps Friedman #1's features at 1,500: the old concept there is Friedman #1 itself.
    pytest.importorskip("river")
    stream = STREAMS["friedman_gra"]
    X, _ = stream.build()
    first, _ = old_concept(stream)
    x = X[1500]
    friedman = (10.0 * math.sin(math.pi * x[0] * x[1]) + 20.0 * (x[2] - 0.5) ** 2 + 10.0 * x[3]
                + 5.0 * x[4])
    assert first == pytest.approx(friedman)


@pytest.mark.timeout(120)
def test_a_windows_bars_are_measured_from_its_sums() -> None:
    (window,) = floor_windows(Stream("flip", "abrupt", "regression", (200,), _flip))
    assert window.span == (200, 400) and window.published == pytest.approx(window.auto / window.oracle)
    X, y = _flip()
    assert window.first == pytest.approx((5.0 * X[200, 0] + 0.1 * X[200, 1] - y[200]) ** 2)
    assert ORACLE_FACTOR * window.oracle <= window.bar_a <= window.bar_b


def test_a_window_past_the_restart_can_be_within_the_floors_bar() -> None:
    # The change's first row costs 5 of the oracle's 10 (its own first row 1): floor 14, bar A 15.4.
    past = Window("s", "held-out", "regression", (0, 10), 15.0, 10.0, 1.0, 5.0, 1.5)
    beyond = Window("t", "held-out", "regression", (0, 10), 20.0, 10.0, 1.0, 5.0, 2.0)
    assert past.bar_a == pytest.approx(15.4) and past.bar_b == pytest.approx(16.5)
    (counts,) = [line for line in render([past, beyond]) if line.startswith("Held-out")]
    assert "within 10% of the restart: 0 of 2 windows, 0 of 2 streams" in counts
    assert "within bar A: 1 of 2 windows, 1 of 2 streams" in counts
