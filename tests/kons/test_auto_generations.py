"""A generation started at a declared change plays its first rounds as a fresh learner's first rounds play
(regression): its own experts' weights sharpened among themselves, the power counted from its start, each
kernel copy's counting YOUNG_KERNEL_PLAY times against its linear models', and its total against the other
experts of the row's; the view is not state (a learner saved mid-way goes on identically), and a state saved
before it plays the mixture's own weights."""

from __future__ import annotations

from typing import cast

import numpy as np

import kons
from kons.auto.config import GRID, MIX_EARLY_ROUNDS, YOUNG_KERNEL_PLAY
from kons.auto.grid import Grid
from kons.auto.restarts import Generation
from tests.kons.streams import goes_on_identically

CHANGE = 600  # past the grid's own first rounds


def _stream(rows: int) -> tuple[np.ndarray, np.ndarray]:
    """A linear target whose weights flip at :data:`CHANGE` (the loss detector declares it within a few
    rounds)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(rows, 4))
    w = np.array([1.0, -2.0, 0.5, 1.5])
    y = X @ w + 0.1 * rng.normal(size=rows)
    y[CHANGE:] = -(X[CHANGE:] @ w) + 0.1 * rng.normal(size=rows - CHANGE)
    return X, y


def _learnt(X: np.ndarray, y: np.ndarray, rows: int) -> kons.Auto:
    model = kons.Auto()
    for x, t in zip(X[:rows], y[:rows], strict=True):
        model.learn_one(x, t)
    return model


def _change_generation(grid: Grid) -> tuple[int, Generation]:
    """The generation started at the last declared change, and its index."""
    return next((g, generation) for g, generation in enumerate(grid.young)
                if generation is not None and generation.start == grid.last_change)


def test_a_generation_plays_its_experts_sharpened_as_a_fresh_learner_at_its_age() -> None:
    X, y = _stream(CHANGE + 200)
    model = _learnt(X, y, CHANGE + 60)
    grid = cast(Grid, model._grid)
    assert CHANGE <= grid.last_change < CHANGE + 20
    g, generation = _change_generation(grid)
    age = grid.rounds - generation.start
    assert 0 < age < MIX_EARLY_ROUNDS and grid.rounds >= MIX_EARLY_ROUNDS  # the grid's own view is over
    assert all(other is generation or other is None or grid.rounds - other.start + 1 >= MIX_EARLY_ROUNDS
               for other in grid.young)  # the one young generation
    weights, played = grid._weights(), grid._played_weights()
    power = MIX_EARLY_ROUNDS / (age + 1)
    young = np.zeros(len(weights), dtype=bool)
    young[[slot for slot, _ in generation.experts(g)]] = True
    lags = np.zeros(len(weights), dtype=bool)
    lags[[grid.slot[name] for name in ("target_last", "target_lags", "target_long_lags")]] = True
    others = ~young & ~lags
    # the generation's total against the other experts of the row's, both raised to the power, their sum kept
    totals = np.array([weights[young].sum(), weights[others].sum()])
    raised_totals = totals**power
    new_totals = raised_totals / raised_totals.sum() * totals.sum()
    slots = [slot for slot, _ in generation.experts(g)]
    kernels = np.array([j < len(generation.members) and GRID[generation.members[j]][1] == "nystrom"
                        for j in range(len(slots))])
    assert kernels.sum() == 2 and len(slots) - kernels.sum() == 2  # two kernel copies, two linear models
    raised = weights[young] ** power * np.where(kernels, YOUNG_KERNEL_PLAY, 1.0)
    assert np.allclose(played[young], raised / raised.sum() * new_totals[0])
    assert np.allclose(played[others], weights[others] * new_totals[1] / totals[1])
    assert np.array_equal(played[lags], weights[lags])  # the lags at the mixture's own
    assert not np.allclose(played[young], weights[young])  # (the view moved them)


def test_a_learner_saved_while_a_generation_is_young_goes_on_identically() -> None:
    X, y = _stream(CHANGE + 200)
    model = _learnt(X, y, CHANGE + 40)
    goes_on_identically(model, X, y, CHANGE + 40)


def test_a_state_saved_before_the_view_plays_the_mixtures_weights_and_past_it_the_plays_agree() -> None:
    X, y = _stream(CHANGE + 3 * MIX_EARLY_ROUNDS)  # (the delayed generations too)
    viewed = _learnt(X, y, CHANGE + 40)
    blob = viewed.to_bytes()
    grid = cast(Grid, viewed._grid)
    assert grid.young_early
    plain = cast(kons.Auto, kons.load(blob))
    plain_grid = cast(Grid, plain._grid)
    plain_grid.young_early = False  # (as a grid saved before the view)
    assert plain_grid._played_weights() is plain_grid._weights()
    old = cast(kons.Auto, kons.load(plain.to_bytes()))  # saved without the flag: it stays without the view
    assert not cast(Grid, old._grid).young_early
    plays = [(viewed.learn_one(x, t), plain.learn_one(x, t)) for x, t in zip(X[CHANGE + 40:], y[CHANGE + 40:],
                                                                            strict=True)]
    assert plays[0][0] != plays[0][1]  # the view moved the generation's first rounds
    youngest = max(generation.start for generation in grid.young if generation is not None)
    after = youngest + MIX_EARLY_ROUNDS - (CHANGE + 40)
    assert 0 < after < len(plays)
    assert all(a == b for a, b in plays[after:])  # and nothing after them: the state is the same
