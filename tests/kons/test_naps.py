"""Naps of a kind of expert that plays from the grid's start (:attr:`kons.auto.grid.Kind.start_prior`), not
only of those that sleep until ready: out of the mixture while negligible, neither learning nor playing, and
back at once at the next change declared, with its start prior. ``auto``'s own such kind, the linear model
on the quantile thresholds, does not nap (docs/auto.md#nap_weight-and-nap_rounds): here a grid whose
threshold model naps stands for any such kind."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import kons
import kons.auto.grid
from kons.auto.config import GRID, NAP_ROUNDS, NAP_WEIGHT
from kons.auto.experts.newton import ThresholdExpert
from kons.auto.grid import Grid, layout
from kons.errors import StateFormatError
from tests.kons.auto_internals import walk_naps
from tests.kons.streams import linear_then_flipped

BINS_SLOT = layout(kons.auto.grid.EXPERTS).index("bins")
#: The prior the threshold model plays from the start with, and enters again with after a nap.
START_PRIOR = 1.0 / (len(GRID) + 2)


@pytest.fixture(autouse=True)
def napping_bins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The grid's kinds, the threshold model's napping."""
    kinds = tuple(dataclasses.replace(kind, naps=True) if kind.slots[0] == "bins" else kind
                  for kind in kons.auto.grid.EXPERTS)
    assert kinds != kons.auto.grid.EXPERTS
    monkeypatch.setattr(kons.auto.grid, "EXPERTS", kinds)


def _bins(grid: Grid) -> ThresholdExpert:
    experts = grid.experts[[kind.slots[0] for kind in grid.kinds].index("bins")]
    assert experts is not None and isinstance(experts[0], ThresholdExpert)
    return experts[0]


def test_the_threshold_model_naps_while_negligible_and_enters_again_at_a_change() -> None:
    X, y = linear_then_flipped(1700, 1600, labels=True)
    def shown(weights: dict[str, float]) -> bool:
        return any("quantile" in name for name in weights)

    walk = walk_naps(kons.Auto(task="classification"), zip(X, y.tolist(), strict=True), "bins", BINS_SLOT,
                     lambda grid: _bins(grid).base, shown, NAP_WEIGHT, START_PRIOR)
    assert walk.napped is not None and walk.woke is not None
    assert NAP_ROUNDS < walk.napped < 1600 <= walk.woke


@pytest.mark.parametrize("saved_at", [1000, 1620])  # napping; after the change, in play again
def test_a_learner_saved_with_a_napping_threshold_model_plays_on_bit_identically(saved_at: int) -> None:
    X, y = linear_then_flipped(1700, 1600, labels=True)
    learner = kons.Auto(task="classification")
    for x, t in zip(X[:saved_at], y[:saved_at], strict=True):
        learner.learn_one(x, t)
    grid = learner._grid
    assert grid is not None and grid.naps["bins"][1] == (saved_at < 1600)
    copy = kons.Auto.from_bytes(learner.to_bytes())
    assert copy._grid is not None and copy._grid.naps == grid.naps
    for x, t in zip(X[saved_at:], y[saved_at:], strict=True):
        assert learner.predict_one(x) == copy.predict_one(x)
        assert learner.learn_one(x, t) == copy.learn_one(x, t)
    assert learner.to_bytes() == copy.to_bytes()


def test_a_state_saved_napping_in_play_is_refused() -> None:
    X, y = linear_then_flipped(700, 1600, labels=True)
    learner = kons.Auto(task="classification")
    for x, t in zip(X, y, strict=True):
        learner.learn_one(x, t)
    grid = learner._grid
    assert grid is not None and grid.naps["bins"][1]
    grid.mixture.switching.active[BINS_SLOT] = True  # a nap that says it is out of the mixture, in it
    with pytest.raises(StateFormatError):
        kons.Auto.from_bytes(learner.to_bytes())



@pytest.mark.parametrize("wrong", [
    [1.5, 0],  # not a count (int() would load it as one)
    [3.0, 0],  # a float, even a whole one
    [True, 0],
    [-1, 0],
    [0, 2],  # napping is 0 or 1
    [0],
    [0, 0, 0],
], ids=["fraction", "float", "bool", "negative", "napping_2", "short", "long"])
def test_naps_saved_wrong_are_refused(wrong: list[Any]) -> None:
    X, y = linear_then_flipped(300, 1600, labels=True)
    learner = kons.Auto(task="classification")
    for x, t in zip(X, y, strict=True):
        learner.learn_one(x, t)
    grid = learner._grid
    assert grid is not None and "bins" in grid.naps
    kons.Auto.from_bytes(learner.to_bytes())  # saved right, it loads
    grid.naps["bins"] = wrong
    with pytest.raises(StateFormatError, match="naps"):
        kons.Auto.from_bytes(learner.to_bytes())


def test_a_count_saved_under_longer_naps_loads_and_naps_at_the_next_negligible_round(
        monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = linear_then_flipped(520, 1600, labels=True)
    learner = kons.Auto(task="classification")
    with monkeypatch.context() as longer:
        longer.setattr(kons.auto.grid, "NAP_ROUNDS", 4 * NAP_ROUNDS)
        for x, t in zip(X[:-1], y[:-1], strict=True):
            learner.learn_one(x, t)
    grid = learner._grid
    assert grid is not None and grid.naps["bins"][0] > NAP_ROUNDS and not grid.naps["bins"][1]
    copy = kons.Auto.from_bytes(learner.to_bytes())
    copy.learn_one(X[-1], y[-1])
    assert copy._grid is not None and copy._grid.naps["bins"] == [0, 1]
