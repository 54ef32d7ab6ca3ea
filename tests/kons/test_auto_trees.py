"""The Hoeffding trees inside kons.Auto (classification): when they enter the mixture, what they play, and
that a saved learner plays on bit-identically before and after they do."""

from __future__ import annotations

from typing import cast

import numpy as np
import pytest

import kons
from kons.auto.config import NAP_ROUNDS, NAP_WEIGHT, TREE_GRACES, TREE_WAKE_ROWS
from kons.auto.experts.tree import HoeffdingTree, TreeExpert
from kons.auto.grid import ENTRY_PRIOR, EXPERTS, Grid, layout
from tests.kons.streams import linear_then_flipped

TREE_NAMES = [f"hoeffding_tree(raw, grace {grace})" for grace in TREE_GRACES]

NEIGHBOURS_SLOT = layout(EXPERTS).index("neighbours")
TREE_SLOTS = [layout(EXPERTS).index(f"tree{i}") for i in range(len(TREE_GRACES))]


def _trees(grid: Grid) -> list[HoeffdingTree] | None:
    """The grid's Hoeffding trees, if it has them."""
    experts = grid.experts_of("tree0")
    return None if experts is None else [cast(TreeExpert, expert).model for expert in experts]


def _interaction(rows: int, classes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Agrawal-like rows: the class set by age *and* salary thresholds (raw units), 5% label noise."""
    rng = np.random.default_rng(seed)
    age, salary, other = rng.uniform(20, 80, rows), rng.uniform(2e4, 1.5e5, rows), rng.normal(size=rows)
    y = ((age < 40) & (salary > 5e4)).astype(int) + ((age > 60) & (salary < 1e5)).astype(int) * (classes - 1)
    y = np.where(rng.random(rows) < 0.05, rng.integers(0, classes, rows), y)
    labels = np.where(y == 0, -1, 1) if classes == 2 else y
    return np.column_stack([age, salary, other]), labels.astype(float)


def test_the_trees_enter_after_their_wake_rows_at_the_entry_prior_together() -> None:
    X, y = _interaction(TREE_WAKE_ROWS + 1, 2)
    learner = kons.Auto(task="classification")
    entered = None
    for r, (x, t) in enumerate(zip(X, y, strict=True)):
        learner.learn_one(x, t)
        grid = learner._grid
        if grid is None or entered is not None:
            continue
        trees = _trees(grid)
        assert trees is not None
        if grid.mixture.switching.active[TREE_SLOTS[0]]:
            entered = r
            # in at the prior under every rate, shared by the trees, the others keeping their proportions
            # (the local expert wakes at the same round, after them, and takes its share of theirs too)
            weights = np.exp(grid.mixture.switching.log_weights)
            awake = grid.mixture.switching.active[NEIGHBOURS_SLOT]
            neighbours = weights[:, NEIGHBOURS_SLOT] if awake else 0.0
            np.testing.assert_allclose(weights[:, TREE_SLOTS].sum(axis=1) / (1.0 - neighbours), ENTRY_PRIOR,
                                       rtol=1e-12)
            assert np.ptp(weights[:, TREE_SLOTS], axis=1).max() == 0.0
            assert all(tree.rows_learnt == TREE_WAKE_ROWS for tree in trees)
        else:
            assert not set(TREE_NAMES) & set(learner.stats()["weights"])
    assert entered is not None


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("saved_at", [TREE_WAKE_ROWS - 50, 700])
def test_a_saved_learner_plays_on_bit_identically(classes: int, saved_at: int) -> None:
    X, y = _interaction(1000, classes, seed=classes)
    learner = kons.Auto(task="classification")
    for x, t in zip(X[:saved_at], y[:saved_at], strict=True):
        learner.learn_one(x, t)
    copy = kons.Auto.from_bytes(learner.to_bytes())
    for x, t in zip(X[saved_at:], y[saved_at:], strict=True):
        if classes == 2:
            assert learner.predict_one(x) == copy.predict_one(x)
        else:
            assert np.array_equal(learner.predict_proba_by_class_one(x), copy.predict_proba_by_class_one(x))
        learner.learn_one(x, t)
        copy.learn_one(x, t)
    assert learner.to_bytes() == copy.to_bytes()


def test_three_classes_widen_the_trees_and_their_probabilities_sum_to_one() -> None:
    X, y = _interaction(600, 3, seed=5)
    learner = kons.Auto(task="classification")
    for x, t in zip(X, y, strict=True):
        learner.learn_one(x, t)
    p = learner.predict_proba_by_class_one(X[0])
    assert p.shape == (3,) and p.sum() == pytest.approx(1.0)
    assert sum(learner.stats()["weights"].get(name, 0.0) for name in TREE_NAMES) > 0.0


def test_regression_has_no_trees() -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(TREE_WAKE_ROWS + 50, 3))
    learner = kons.Auto(task="regression")
    for x in X:
        learner.learn_one(x, float(x[0] * x[1]))
    assert not set(TREE_NAMES) & set(learner.stats()["weights"])


def test_the_trees_nap_while_negligible_and_wake_at_a_change() -> None:
    X, y = linear_then_flipped(1300, 1000, labels=True)
    learner = kons.Auto(task="classification")
    napped = woke = None
    for r, (x, t) in enumerate(zip(X, y, strict=True)):
        grid = learner._grid
        trees = None if grid is None else _trees(grid)
        before = None
        if grid is not None and trees is not None:
            before = (grid.naps["tree0"][1], [tree.rows_learnt for tree in trees], grid.mixture.weights())
        learner.learn_one(x, t)
        grid = learner._grid
        trees = None if grid is None else _trees(grid)
        if before is None or grid is None or trees is None:
            continue
        was_napping, learnt, weights = before
        napping = bool(grid.naps["tree0"][1])
        in_play = grid.mixture.switching.active[TREE_SLOTS]
        if napping:
            assert not in_play.any()  # out of the mixture, and they learn nothing (after this round's row)
            assert [tree.rows_learnt for tree in trees] == [n + (not was_napping) for n in learnt]
            if not was_napping:  # they nap now: below NAP_WEIGHT for NAP_ROUNDS rounds in play
                napped = r
                assert weights[TREE_SLOTS].sum() < NAP_WEIGHT
                assert not set(TREE_NAMES) & set(learner.stats()["weights"])
        elif was_napping:  # a change was declared this round: awake, they learn from the next round
            woke = r
            assert grid.last_change == grid.rounds
            assert [tree.rows_learnt for tree in trees] == learnt
        elif woke is not None and r == woke + 1:  # they learnt this round's row and entered again
            assert [tree.rows_learnt for tree in trees] == [n + 1 for n in learnt]
            assert in_play.all()
    assert napped is not None and woke is not None and NAP_ROUNDS < napped < 1000 <= woke


@pytest.mark.parametrize("saved_at", [900, 1010])  # napping; just after the change, awake again
def test_a_learner_saved_with_napping_trees_plays_on_bit_identically(saved_at: int) -> None:
    X, y = linear_then_flipped(1100, 1000, labels=True)
    learner = kons.Auto(task="classification")
    for x, t in zip(X[:saved_at], y[:saved_at], strict=True):
        learner.learn_one(x, t)
    blob = learner.to_bytes()
    copy = kons.Auto.from_bytes(blob)
    assert copy._grid is not None and learner._grid is not None and copy._grid.naps == learner._grid.naps
    for x, t in zip(X[saved_at:], y[saved_at:], strict=True):
        assert learner.predict_one(x) == copy.predict_one(x)
        assert learner.learn_one(x, t) == copy.learn_one(x, t)
    assert learner.to_bytes() == copy.to_bytes()
