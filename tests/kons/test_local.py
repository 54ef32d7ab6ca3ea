"""The local expert of ``auto``'s mixture (:mod:`kons.auto.experts.neighbours`): exact against a slow
reference."""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import pytest

import kons
import kons._state
import kons.auto.experts.neighbours
import kons.auto.grid
from kons.auto.config import (
    NAP_ROUNDS,
    NEIGHBOUR_ROWS,
    NEIGHBOURS_MAX_DIM,
    NEIGHBOURS_NAP_WEIGHT,
    NEIGHBOURS_PRIOR,
    NEIGHBOURS_WAKE_ROWS,
)
from kons.auto.experts.neighbours import SAME_POINT_DISTANCE, NeighboursExpert, RecentNeighbours
from kons.auto.grid import Grid, layout
from kons.errors import StateFormatError
from tests.kons.auto_internals import grid_of
from tests.kons.streams import linear_then_flipped

NEIGHBOURS_SLOT = layout(kons.auto.grid.EXPERTS).index("neighbours")


def _reference_nearest(rows: list[np.ndarray], targets: list[float], capacity: int, k: int,
                       x: np.ndarray) -> tuple[list[float], list[float]]:
    """The targets of the k nearest of the last ``capacity`` rows and their distances, by a full sort of
    the explicit differences."""
    window = [(math.sqrt(float(np.sum((row - x) ** 2))), t)
              for row, t in zip(rows[-capacity:], targets[-capacity:], strict=True)]
    window.sort(key=lambda pair: pair[0])
    return [t for _, t in window[:k]], [d for d, _ in window[:k]]


def _reference_probabilities(nearest: list[float], distances: list[float], classes: int) -> list[float]:
    """Each class's (W_y + mean weight) / (W + K mean weight), the weights 1 / max(d, the floor)."""
    if not nearest:
        return [1.0 / classes] * classes
    weights = [1.0 / max(d, SAME_POINT_DISTANCE) for d in distances]
    mean = sum(weights) / len(weights)
    return [(sum(w for w, t in zip(weights, nearest, strict=True) if t == c) + mean)
            / (sum(weights) + classes * mean) for c in range(classes)]


def _rows_with_duplicates(rounds: int, dim: int, seed: int) -> list[tuple[np.ndarray, int | None]]:
    """Normal rows, some of them an exact copy of an earlier one, each with the index of the row it copies
    (or None). Each original is copied at most once and a copy learns its original's target, so that rows
    tied at any distance from a query vote alike, whichever of them the ranking takes."""
    rng = np.random.default_rng(seed)
    rows: list[tuple[np.ndarray, int | None]] = []
    originals: list[int] = []
    for r in range(rounds):
        if originals and rng.random() < 0.3:
            source = originals.pop(int(rng.integers(len(originals))))
            rows.append((rows[source][0].copy(), source))
        else:
            rows.append((rng.normal(size=dim), None))
            originals.append(r)
    return rows


@pytest.mark.parametrize("task", ["binary", "regression", "classes"])
def test_the_local_expert_plays_its_nearest_kept_rows(task: str) -> None:
    rng = np.random.default_rng(3)
    capacity, k, dim, clip = 7, 3, 4, 2.0
    neighbours = RecentNeighbours(capacity, dim, k=k, clip=clip)
    rows: list[np.ndarray] = []
    targets: list[float] = []
    duplicates = 0
    for x, source in _rows_with_duplicates(40, dim, 9):  # from no kept row, past the capacity several times
        nearest, distances = _reference_nearest(rows, targets, capacity, k, x)
        duplicates += bool(distances) and distances[0] == 0.0
        drawn = {"classes": float(rng.integers(3)), "binary": float(rng.choice([-1.0, 1.0])),
                 "regression": float(rng.normal() * 2.0)}[task]
        t = drawn if source is None else targets[source]
        if task == "classes":
            np.testing.assert_allclose(_learn_class(neighbours, x, int(t), 3),
                                       _reference_probabilities(nearest, distances, 3), rtol=1e-9)
        elif task == "binary":
            negative, positive = _reference_probabilities([float(v > 0) for v in nearest], distances, 2)
            expected = math.log(positive / negative)
            assert _learn(neighbours, x, t, binary=True) == pytest.approx(min(max(expected, -clip), clip),
                                                                        rel=1e-9)
        else:
            weights = [1.0 / max(d, SAME_POINT_DISTANCE) for d in distances]
            expected = (sum(w * v for w, v in zip(weights, nearest, strict=True)) / sum(weights)
                        if nearest else 0.0)
            assert _learn(neighbours, x, t, binary=False) == pytest.approx(min(max(expected, -clip), clip),
                                                                         rel=1e-9)
        rows.append(x)
        targets.append(t)
    assert duplicates >= 5  # the stream did play copies of kept rows


def test_the_vote_is_laplace_at_equal_distances_and_stays_inside_0_1_at_distance_0() -> None:
    neighbours = RecentNeighbours(10, 2, k=4, clip=50.0)
    for row, label in (((1.0, 0.0), 0), ((-1.0, 0.0), 1), ((0.0, 1.0), 1), ((0.0, -1.0), 2)):
        neighbours.keep(np.array(row), float(label))
    # four neighbours at distance 1 from the origin: Laplace's (n_y + 1) / (k + K)
    np.testing.assert_allclose(neighbours.probabilities(np.zeros(2), 3), [2 / 7, 3 / 7, 2 / 7], rtol=1e-15)
    # a query on a kept row: that row weighs 1 / the floor, the others ~1 / 1.4 .. 1 / 2
    for classes in (3, 5):
        played = neighbours.probabilities(np.array([1.0, 0.0]), classes)
        assert np.isfinite(played).all() and (played > 0.0).all() and (played < 1.0).all()
        assert played.sum() == pytest.approx(1.0, rel=1e-15)
        assert played[0] < (4 + 1) / (4 + classes)  # at most Laplace's with every vote for the class
    assert math.isfinite(neighbours.predict(np.array([-1.0, 0.0]), binary=True))


def test_the_local_expert_state_round_trips_and_rejects_a_mismatch() -> None:
    rng = np.random.default_rng(4)
    neighbours = RecentNeighbours(5, 3, k=2, clip=3.0)
    for _ in range(8):
        _learn(neighbours, rng.normal(size=3), float(rng.normal()), binary=False)
    restored = RecentNeighbours(5, 3, k=2, clip=3.0)
    restored.restore({name: a.copy() for name, a in neighbours.arrays().items()}, neighbours.scalars())
    x = rng.normal(size=3)
    assert restored.predict(x, binary=False) == neighbours.predict(x, binary=False)
    with pytest.raises(StateFormatError):
        RecentNeighbours(6, 3, k=2, clip=3.0).restore(neighbours.arrays(), neighbours.scalars())


def test_a_binary_local_expert_goes_on_with_a_third_class() -> None:
    neighbours = RecentNeighbours(4, 1, k=2, clip=3.0)
    for x, label in ((0.0, -1.0), (1.0, 1.0), (2.0, 1.0)):
        _learn(neighbours, np.array([x]), label, binary=True)
    # the nearest of 1.9 are the rows 2 and 1, both +1: class 1 twice
    np.testing.assert_allclose(_learn_class(neighbours, np.array([1.9]), 2, 3), [1 / 5, 3 / 5, 1 / 5])


def _learn(neighbours: RecentNeighbours, x: np.ndarray, t: float, binary: bool) -> float:
    """Play, then keep the row, as the local expert does in a round."""
    played = neighbours.predict(x, binary)
    neighbours.keep(x, neighbours.kept_target(t, binary))
    return played


def _learn_class(neighbours: RecentNeighbours, x: np.ndarray, label: int, classes: int) -> np.ndarray:
    played = neighbours.probabilities(x, classes)
    neighbours.keep(x, float(label))
    return played


def _stream(rows: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, dim))
    return X, np.sin(2.0 * X[:, 0]) + X[:, 1] * X[:, 2] + 0.1 * rng.normal(size=rows)


def _window(grid: Grid) -> RecentNeighbours | None:
    """The local expert's window, if the grid has the local expert."""
    experts = grid.experts_of("neighbours")
    return None if experts is None else cast(NeighboursExpert, experts[0]).model


def test_the_local_expert_sleeps_until_it_holds_enough_rows_then_enters_at_its_prior(
        monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _stream(NEIGHBOURS_WAKE_ROWS + 40, 3, 5)
    learner = kons.Auto()
    without = kons.Auto()
    played, played_without = [], []
    entered = None
    for r, (x, t) in enumerate(zip(X, y, strict=True)):
        with monkeypatch.context() as patched:  # the same learner with no local expert
            patched.setattr(kons.auto.experts.neighbours, "NEIGHBOURS_MAX_DIM", 0)
            played_without.append(without.learn_one(x, float(t)))
        played.append(learner.learn_one(x, float(t)))
        if learner._grid is None:  # warming up
            continue
        grid = grid_of(learner)
        window = _window(grid)
        assert window is not None and _window(grid_of(without)) is None
        if entered is None and grid.mixture.switching.active[NEIGHBOURS_SLOT]:
            entered = r
            # in at its prior under every rate, the others keeping their proportions of the rest
            assert window.count == NEIGHBOURS_WAKE_ROWS
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


def test_a_state_whose_local_expert_plays_without_a_row_is_refused() -> None:
    X, y = _stream(100, 3, 7)
    learner = kons.Auto()
    for x, t in zip(X, y, strict=True):
        learner.learn_one(x, float(t))
    window = _window(grid_of(learner))
    assert window is not None
    window.forget(0)
    grid_of(learner).mixture.enter([NEIGHBOURS_SLOT], NEIGHBOURS_PRIOR)
    with pytest.raises(StateFormatError, match="plays without a row"):
        kons.load(learner.to_bytes())


def test_a_binary_learner_saved_soon_after_a_forgetting_change_plays_on_bit_identically() -> None:
    # its local expert plays on with the rows since the change's onset, fewer than it enters with: labels
    # by a checkerboard on two features (where the local expert leads, so that it does not nap), flipped
    # from row 600
    rng = np.random.default_rng(5)
    X = rng.normal(size=(900, 4))
    checkerboard = np.where(np.sin(2.0 * X[:, 0]) * np.sin(2.0 * X[:, 1]) > 0.0, 1.0, -1.0)
    y = np.where(np.arange(900) < 600, checkerboard, -checkerboard)
    learner = kons.Auto(task="classification")
    for x, t in zip(X[:750], y[:750], strict=True):
        learner.learn_one(x, t)
    window = _window(grid_of(learner))
    assert learner.changes_detected >= 1 and window is not None and window.count < NEIGHBOURS_WAKE_ROWS
    assert grid_of(learner).mixture.switching.active[NEIGHBOURS_SLOT]
    copy = kons.Auto.from_bytes(learner.to_bytes())
    for x, t in zip(X[750:], y[750:], strict=True):
        assert learner.predict_one(x) == copy.predict_one(x)
        assert learner.learn_one(x, t) == copy.learn_one(x, t)
    assert learner.to_bytes() == copy.to_bytes()


@pytest.mark.parametrize(("dim", "sparse", "has_one"), [(NEIGHBOURS_MAX_DIM, False, True),
                                                        (NEIGHBOURS_MAX_DIM + 1, False, False),
                                                        (5, True, False)])
def test_no_local_expert_on_sparse_or_wide_rows(dim: int, sparse: bool, has_one: bool) -> None:
    rng = np.random.default_rng(8)
    learner = kons.Auto()
    for _ in range(40):  # past the warm-up
        x = rng.normal(size=dim) * (rng.random(dim) < 0.5)
        learner.learn_one(kons.SparseVector.from_dense(x) if sparse else x, float(rng.normal()))
    grid = grid_of(learner)
    assert (_window(grid) is not None) == has_one
    assert ("neighbours_rows" in kons._state.decode(learner.to_bytes())[1]) == has_one
    assert grid.names()[NEIGHBOURS_SLOT].endswith(", none") != has_one
    assert kons.load(learner.to_bytes()).to_bytes() == learner.to_bytes()


def test_the_local_expert_naps_while_negligible_keeping_its_rows_and_wakes_at_a_change() -> None:
    X, y = linear_then_flipped(1900, 1600)
    learner = kons.Auto(task="regression")
    napped = woke = None
    for r, (x, t) in enumerate(zip(X, y, strict=True)):
        grid = learner._grid
        before = None
        window = None if grid is None else _window(grid)
        if grid is not None and window is not None:
            before = (grid.naps["neighbours"][1], window.kept, grid.mixture.weights())
        learner.learn_one(x, t)
        grid = learner._grid
        window = None if grid is None else _window(grid)
        if before is None or grid is None or window is None:
            continue
        was_napping, kept, weights = before
        napping = bool(grid.naps["neighbours"][1])
        in_play = bool(grid.mixture.switching.active[NEIGHBOURS_SLOT])
        assert window.kept == kept + 1  # it keeps every row, napping or not
        if napping:
            assert not in_play  # out of the mixture: it neither plays nor ranks its rows
            if not was_napping:  # it naps now: below NEIGHBOURS_NAP_WEIGHT for NAP_ROUNDS rounds in play
                napped = r if napped is None else napped  # (the first nap: it naps again after the change)
                assert weights[NEIGHBOURS_SLOT] < NEIGHBOURS_NAP_WEIGHT
                assert not any("nearest" in name for name in learner.stats()["weights"])
        elif was_napping:  # a change was declared this round: awake, it enters at the next round
            woke = r
            assert grid.last_change == grid.rounds and not in_play
        elif woke is not None and r == woke + 1:
            assert in_play
    assert napped is not None and woke is not None and NAP_ROUNDS < napped < 1600 <= woke


@pytest.mark.parametrize("saved_at", [1500, 1610])  # napping; just after the change, awake again
def test_a_learner_saved_with_a_napping_local_expert_plays_on_bit_identically(saved_at: int) -> None:
    X, y = linear_then_flipped(1700, 1600)
    learner = kons.Auto(task="regression")
    for x, t in zip(X[:saved_at], y[:saved_at], strict=True):
        learner.learn_one(x, t)
    copy = kons.Auto.from_bytes(learner.to_bytes())
    assert copy._grid is not None and learner._grid is not None and copy._grid.naps == learner._grid.naps
    for x, t in zip(X[saved_at:], y[saved_at:], strict=True):
        assert learner.predict_one(x) == copy.predict_one(x)
        assert learner.learn_one(x, t) == copy.learn_one(x, t)
    assert learner.to_bytes() == copy.to_bytes()


def test_among_three_classes_the_local_expert_never_naps_it_votes() -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2200, 5))
    score = X @ np.array([1.0, -2.0, 0.5, 1.5, -1.0])
    labels = np.digitize(score, np.quantile(score, [1 / 3, 2 / 3]))
    learner = kons.Auto(task="classification")
    negligible = longest = 0
    for x, label in zip(X, labels, strict=True):
        learner.learn_one(x, int(label))
        grid = learner._grid
        if grid is None or not grid.mixture.switching.active[NEIGHBOURS_SLOT]:
            continue
        assert grid.naps["neighbours"] == [0, 0]
        negligible = negligible + 1 if grid.mixture.weights()[NEIGHBOURS_SLOT] < NEIGHBOURS_NAP_WEIGHT else 0
        longest = max(longest, negligible)
    assert longest > NAP_ROUNDS  # long enough a nap would have begun (as for the trees)


def test_a_window_that_forgets_plays_as_one_that_kept_only_its_last_rows() -> None:
    rng = np.random.default_rng(6)
    capacity, dim = 7, 3
    neighbours = RecentNeighbours(capacity, dim, k=3, clip=5.0)
    rows = [rng.normal(size=dim) for _ in range(30)]
    labels = [float(rng.integers(2)) for _ in rows]
    for x, t in zip(rows[:11], labels[:11], strict=True):  # past the capacity: the ring has wrapped
        neighbours.keep(x, t)
    neighbours.forget(4)
    fresh = RecentNeighbours(capacity, dim, k=3, clip=5.0)
    for x, t in zip(rows[7:11], labels[7:11], strict=True):
        fresh.keep(x, t)
    assert neighbours.count == fresh.count == 4
    for x, t in zip(rows[11:], labels[11:], strict=True):  # on past the capacity again
        assert neighbours.predict(x, binary=True) == fresh.predict(x, binary=True)
        neighbours.keep(x, t)
        fresh.keep(x, t)
    for name, array in neighbours.arrays().items():
        np.testing.assert_array_equal(array, fresh.arrays()[name])


def test_at_a_declared_change_on_two_classes_the_local_expert_keeps_the_rows_since_its_onset() -> None:
    X, y = linear_then_flipped(1900, 1600, labels=True)
    learner = kons.Auto(task="classification")
    declared = None
    for r, (x, t) in enumerate(zip(X, y, strict=True)):
        grid = learner._grid
        window = None if grid is None else _window(grid)
        count = None if window is None else window.count
        learner.learn_one(x, t)
        grid = grid_of(learner) if learner._grid is not None else None
        if grid is None or count is None or grid.last_change != grid.rounds or declared is not None:
            continue
        declared = r
        window = _window(grid)
        assert window is not None and count == min(r, NEIGHBOUR_ROWS)  # before: the full window
        assert 1 <= window.count <= r + 1 - 1600 + 8  # the rows since the change's estimated onset
        # the last rows the grid kept for the replay, as the local expert took them
        kept = grid.kept.last(window.count)
        np.testing.assert_array_equal(window.rows[:window.count], [z for z, _, _ in kept])
        np.testing.assert_array_equal(window.targets[:window.count], [t for _, _, t in kept])
    assert declared is not None and 1600 <= declared < 1700


def test_a_binary_learner_saved_across_a_forgetting_change_plays_on_bit_identically() -> None:
    X, y = linear_then_flipped(1800, 1600, labels=True)
    learner = kons.Auto(task="classification")
    for x, t in zip(X[:1590], y[:1590], strict=True):
        learner.learn_one(x, t)
    copy = kons.Auto.from_bytes(learner.to_bytes())
    for x, t in zip(X[1590:], y[1590:], strict=True):
        assert learner.predict_one(x) == copy.predict_one(x)
        assert learner.learn_one(x, t) == copy.learn_one(x, t)
    assert learner.changes_detected == copy.changes_detected >= 1
    assert learner.to_bytes() == copy.to_bytes()


def test_among_three_classes_a_declared_change_leaves_the_local_expert_its_window(
        monkeypatch: pytest.MonkeyPatch) -> None:
    forgotten: list[int] = []
    monkeypatch.setattr(RecentNeighbours, "forget", lambda self, keep: forgotten.append(keep))
    rng = np.random.default_rng(5)
    X = rng.normal(size=(900, 4))
    labels = np.digitize(X[:, 0] + X[:, 1], [-0.5, 0.5])
    labels[600:] = (labels[600:] + 1) % 3  # every class renamed: the mixture's errors rise at once
    learner = kons.Auto(task="classification")
    for x, label in zip(X, labels, strict=True):
        learner.learn_one(x, int(label))
    assert learner.changes_detected >= 1 and not forgotten
