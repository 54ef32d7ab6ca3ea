"""The local expert of ``auto``'s mixture (:mod:`kons._local`): exact against a slow reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kons
import kons._grid
import kons._state
from kons._grid import (
    NEIGHBOUR_ROWS,
    NEIGHBOURS_MAX_DIM,
    NEIGHBOURS_PRIOR,
    NEIGHBOURS_SLOT,
    NEIGHBOURS_WAKE_ROWS,
    Grid,
)
from kons._local import RecentNeighbours
from kons.errors import StateFormatError


def _reference_targets(rows: list[np.ndarray], targets: list[float], capacity: int, k: int,
                       x: np.ndarray) -> list[float]:
    """The targets of the k nearest of the last ``capacity`` rows, by a full sort."""
    window = list(zip(rows[-capacity:], targets[-capacity:], strict=True))
    window.sort(key=lambda pair: float(np.sum((pair[0] - x) ** 2)))
    return [t for _, t in window[:k]]


@pytest.mark.parametrize("task", ["binary", "regression", "classes"])
def test_the_local_expert_plays_its_nearest_kept_rows(task: str) -> None:
    rng = np.random.default_rng(3)
    capacity, k, dim, clip = 7, 3, 4, 2.0
    neighbours = RecentNeighbours(capacity, dim, k=k, clip=clip)
    rows: list[np.ndarray] = []
    targets: list[float] = []
    for _ in range(30):  # past the ring's capacity several times
        x = rng.normal(size=dim)
        nearest = _reference_targets(rows, targets, capacity, k, x)
        if task == "classes":
            label = int(rng.integers(3))
            played = neighbours.learn_class(x, label, 3)
            counts = np.array([nearest.count(c) for c in range(3)], dtype=float)
            np.testing.assert_allclose(played, (counts + 1.0) / (len(nearest) + 3), rtol=1e-12)
            t = float(label)
        elif task == "binary":
            t = float(rng.choice([-1.0, 1.0]))
            positive = sum(v > 0 for v in nearest)
            expected = math.log((positive + 1.0) / (len(nearest) - positive + 1.0))
            assert neighbours.learn(x, t, binary=True) == pytest.approx(min(max(expected, -clip), clip),
                                                                        rel=1e-12)
        else:
            t = float(rng.normal() * 2.0)
            expected = float(np.mean(nearest)) if nearest else 0.0
            assert neighbours.learn(x, t, binary=False) == pytest.approx(min(max(expected, -clip), clip),
                                                                         rel=1e-12)
        rows.append(x)
        targets.append(t)


def test_the_local_expert_state_round_trips_and_rejects_a_mismatch() -> None:
    rng = np.random.default_rng(4)
    neighbours = RecentNeighbours(5, 3, k=2, clip=3.0)
    for _ in range(8):
        neighbours.learn(rng.normal(size=3), float(rng.normal()), binary=False)
    restored = RecentNeighbours(5, 3, k=2, clip=3.0)
    restored.restore({name: a.copy() for name, a in neighbours.arrays().items()}, neighbours.scalars())
    x = rng.normal(size=3)
    assert restored.predict(x, binary=False) == neighbours.predict(x, binary=False)
    with pytest.raises(StateFormatError):
        RecentNeighbours(6, 3, k=2, clip=3.0).restore(neighbours.arrays(), neighbours.scalars())


def test_a_binary_local_expert_goes_on_with_a_third_class() -> None:
    neighbours = RecentNeighbours(4, 1, k=2, clip=3.0)
    for x, label in ((0.0, -1.0), (1.0, 1.0), (2.0, 1.0)):
        neighbours.learn(np.array([x]), label, binary=True)
    # the nearest of 1.9 are the rows 2 and 1, both +1: class 1 twice
    np.testing.assert_allclose(neighbours.learn_class(np.array([1.9]), 2, 3), [1 / 5, 3 / 5, 1 / 5])


def _stream(rows: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, dim))
    return X, np.sin(2.0 * X[:, 0]) + X[:, 1] * X[:, 2] + 0.1 * rng.normal(size=rows)


def _grid(learner: kons.Auto) -> Grid:
    assert learner._grid is not None
    return learner._grid


def test_the_local_expert_sleeps_until_it_holds_enough_rows_then_enters_at_its_prior(
        monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _stream(NEIGHBOURS_WAKE_ROWS + 40, 3, 5)
    learner = kons.Auto()
    without = kons.Auto()
    played, played_without = [], []
    entered = None
    for r, (x, t) in enumerate(zip(X, y, strict=True)):
        with monkeypatch.context() as patched:  # the same learner with no local expert
            patched.setattr(kons._grid, "NEIGHBOURS_MAX_DIM", 0)
            played_without.append(without.learn_one(x, float(t)))
        played.append(learner.learn_one(x, float(t)))
        if learner._grid is None:  # warming up
            continue
        grid = _grid(learner)
        assert grid.neighbours is not None and _grid(without).neighbours is None
        if entered is None and grid.mixture.switching.active[NEIGHBOURS_SLOT]:
            entered = r
            # in at its prior under every rate, the others keeping their proportions of the rest
            assert grid.neighbours.count == NEIGHBOURS_WAKE_ROWS
            weights = np.exp(grid.mixture.switching.log_weights)
            np.testing.assert_allclose(weights[:, NEIGHBOURS_SLOT], NEIGHBOURS_PRIOR, rtol=1e-12)
            np.testing.assert_allclose(np.delete(weights, NEIGHBOURS_SLOT, axis=1).sum(axis=1),
                                       1.0 - NEIGHBOURS_PRIOR, rtol=1e-12)
        elif entered is None:
            assert grid.mixture.weights()[NEIGHBOURS_SLOT] == 0.0
    # it keeps every row from the first (the warm-up's, replayed): in after the 200th row
    assert entered == NEIGHBOURS_WAKE_ROWS - 1
    # asleep it changed nothing: the plays are those of a learner without it, bit for bit, until it plays
    assert played[:NEIGHBOURS_WAKE_ROWS] == played_without[:NEIGHBOURS_WAKE_ROWS]
    assert played[NEIGHBOURS_WAKE_ROWS:] != played_without[NEIGHBOURS_WAKE_ROWS:]
    assert any("nearest" in name for name in learner.stats()["weights"])


def test_a_state_saved_while_the_local_expert_sleeps_goes_on_identically() -> None:
    X, y = _stream(NEIGHBOUR_ROWS + 20, 3, 6)
    learner = kons.Auto()
    for x, t in zip(X[:NEIGHBOURS_WAKE_ROWS - 10], y[:NEIGHBOURS_WAKE_ROWS - 10], strict=True):
        learner.learn_one(x, float(t))
    restored = kons.load(learner.to_bytes())
    # it wakes, then its ring turns over, the same in both
    rest = list(zip(X[NEIGHBOURS_WAKE_ROWS - 10:], y[NEIGHBOURS_WAKE_ROWS - 10:], strict=True))
    assert ([learner.learn_one(x, float(t)) for x, t in rest]
            == [restored.learn_one(x, float(t)) for x, t in rest])
    assert restored.to_bytes() == learner.to_bytes()


def test_a_state_whose_local_expert_plays_before_it_holds_enough_rows_is_refused() -> None:
    X, y = _stream(100, 3, 7)
    learner = kons.Auto()
    for x, t in zip(X, y, strict=True):
        learner.learn_one(x, float(t))
    _grid(learner).mixture.enter([NEIGHBOURS_SLOT], NEIGHBOURS_PRIOR)
    with pytest.raises(StateFormatError, match="before it holds enough rows"):
        kons.load(learner.to_bytes())


@pytest.mark.parametrize(("dim", "sparse", "has_one"), [(NEIGHBOURS_MAX_DIM, False, True),
                                                        (NEIGHBOURS_MAX_DIM + 1, False, False),
                                                        (5, True, False)])
def test_no_local_expert_on_sparse_or_wide_rows(dim: int, sparse: bool, has_one: bool) -> None:
    rng = np.random.default_rng(8)
    learner = kons.Auto()
    for _ in range(40):  # past the warm-up
        x = rng.normal(size=dim) * (rng.random(dim) < 0.5)
        learner.learn_one(kons.SparseVector.from_dense(x) if sparse else x, float(rng.normal()))
    grid = _grid(learner)
    assert (grid.neighbours is not None) == has_one
    assert ("neighbours_rows" in kons._state.decode(learner.to_bytes())[1]) == has_one
    assert grid.names()[NEIGHBOURS_SLOT].endswith(", none") != has_one
    assert kons.load(learner.to_bytes()).to_bytes() == learner.to_bytes()
