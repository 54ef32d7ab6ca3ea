"""The threshold model since a declared change (two classes): started afresh and in the mixture at a
declared change, kept through the changes declared within FRESH_BINS_KEPT rounds of its start, saved and
restored exactly, absent from regression."""

from __future__ import annotations

from typing import cast

import numpy as np

import kons
from kons.auto.config import FRESH_BINS_KEPT
from kons.auto.experts.fresh_bins import FreshThresholds
from kons.auto.grid import Grid
from tests.kons.streams import goes_on_identically

CHANGE = 600


def _stream(rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Labels by a threshold on one feature, the threshold and the side moved at :data:`CHANGE` (the error
    detector declares it within tens of rounds)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(rows, 4))
    y = np.where(X[:, 0] > 0.5, 1.0, -1.0)
    y[CHANGE:] = np.where(X[CHANGE:, 1] < -0.3, 1.0, -1.0)
    return X, y


def _learnt(X: np.ndarray, y: np.ndarray, rows: int) -> kons.Auto:
    model = kons.Auto(task="classification")
    for x, t in zip(X[:rows], y[:rows], strict=True):
        model.learn_one(x, t)
    return model


def _fresh(grid: Grid) -> FreshThresholds:
    experts = grid.experts_of("fresh_bins")
    assert experts is not None
    return cast(FreshThresholds, experts[0])


def test_a_change_declared_on_two_classes_starts_the_threshold_model_in_the_mixture() -> None:
    X, y = _stream(CHANGE + 300)
    model = _learnt(X, y, CHANGE)
    grid = cast(Grid, model._grid)
    assert grid.changes == 0 and _fresh(grid).start == -1
    assert not grid.mixture.switching.active[grid.slot["fresh_bins"]]
    for x, t in zip(X[CHANGE:], y[CHANGE:], strict=True):
        model.learn_one(x, t)
        if grid.changes:
            break
    fresh = _fresh(grid)
    assert CHANGE < grid.last_change == fresh.start < CHANGE + 300
    assert grid.mixture.switching.active[grid.slot["fresh_bins"]]
    assert any(expert is fresh for _, expert in grid.playing())


def test_a_change_declared_again_soon_keeps_the_threshold_model() -> None:
    X, y = _stream(CHANGE + 300)
    model = _learnt(X, y, CHANGE + 300)
    grid = cast(Grid, model._grid)
    fresh = _fresh(grid)
    assert fresh.start > 0
    grid.last_change = grid.rounds  # a change declared now, within FRESH_BINS_KEPT rounds of its start
    assert grid.rounds - fresh.start < FRESH_BINS_KEPT
    grid._renew_fresh_bins()
    assert _fresh(grid) is fresh
    grid.rounds = fresh.start + FRESH_BINS_KEPT  # ... and one as long after it
    grid._renew_fresh_bins()
    assert _fresh(grid) is not fresh and _fresh(grid).start == grid.rounds
    assert any(expert is _fresh(grid) for _, expert in grid.alive())


def test_a_learner_saved_after_the_start_goes_on_identically() -> None:
    X, y = _stream(CHANGE + 400)
    model = _learnt(X, y, CHANGE + 150)
    assert _fresh(cast(Grid, model._grid)).start > 0
    goes_on_identically(model, X, y, CHANGE + 150)


def test_regression_has_none() -> None:
    rng = np.random.default_rng(1)
    model = kons.Auto()
    for x in rng.normal(size=(100, 3)):
        model.learn_one(x, float(x.sum()))
    assert cast(Grid, model._grid).experts_of("fresh_bins") is None
