r"""A local expert of :class:`~kons.Auto`'s mixture: the k nearest of the last rows learnt.

The grid's kernel bases keep a dictionary of :data:`~kons.auto.config.MAX_DICTIONARY` points that freezes
once full, so a concept that moves after it filled (a gradual drift of the class centroids, River's
``RandomRBFDrift``) is followed by the weights on points of the old geometry only. :class:`RecentNeighbours`
predicts from the ``k`` nearest (Euclidean, on the standardised row) of the last ``capacity`` rows it
learnt: its memory moves with the stream, at O(capacity d) a round and a state of fixed size (Cover and
Hart 1967; the window is River's ``LazySearch``).

Its plays are probabilities the mixture weighs by log loss, so they must never reach 0 or 1. A neighbour's
vote weighs the inverse of its distance (as in River's ``KNNClassifier``: a row next to ``x`` says more than
the k-th nearest), and the vote is smoothed by Laplace's rule counted in the mean weight :math:`\bar w` of the
``k`` votes: class ``y`` of ``K`` has the probability :math:`(W_y + \bar w) / (W + K \bar w)`, :math:`W_y` its
votes' weight and :math:`W` all of them. At equal distances that is Laplace's :math:`(n_y + 1) / (k + K)`
exactly; however close one neighbour is, no class goes above :math:`(k + 1) / (k + K)` nor to 0 (an exact copy
of ``x`` weighs the finite :data:`SAME_POINT_DISTANCE` floor's inverse). The inverse-distance vote was chosen
on ``benchmarks/drift.py``'s RBF drift, whose neighbourhoods straddle moving class boundaries
(``docs/auto-log.md``). For regression it plays the neighbours' target mean under the same weights, clipped.
The grid (:mod:`kons.auto.grid`) weighs it only once it holds :data:`~kons.auto.config.NEIGHBOURS_WAKE_ROWS`
rows, and keeps none on sparse or wide rows: its rows are dense.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np

from kons.auto.config import NEIGHBOUR_ROWS, NEIGHBOURS, NEIGHBOURS_MAX_DIM, NEIGHBOURS_WAKE_ROWS
from kons.auto.experts.protocol import Expert, GridContext, Row, in_play
from kons.auto.ring import Ring
from kons.errors import StateFormatError
from kons.preprocessing import TARGET_BOUND
from kons.sparse import dense

__all__ = ["NeighboursExpert", "RecentNeighbours", "build_neighbours", "restore_neighbours"]

#: Distances (in standardised units) below which a kept row counts as ``x`` itself: a vote weighs
#: 1 / max(distance, this). An exact duplicate is at distance 0, where 1 / d is infinite; and the ranking's
#: expansion |r|^2 - 2 r.x + |x|^2 puts it at a rounding residue (up to ~1e-7 for rows of norm 10), which
#: would make its weight, and the play, depend on the rounding. Below 1e-3 of a feature's standard
#: deviation both are the same weight (the floor), still a thousand times a neighbour's at distance 1.
SAME_POINT_DISTANCE = 1e-3


def _squared_norm(row: np.ndarray) -> float:
    # (ndarray.dot here and below: bit for bit ``@``, without the matmul ufunc's dispatch)
    return float(row.dot(row))


def _vote_weights(distances: np.ndarray) -> np.ndarray:
    """The inverse distances, a kept copy of the row at :data:`SAME_POINT_DISTANCE`."""
    weights: np.ndarray = 1.0 / np.maximum(distances, SAME_POINT_DISTANCE)
    return weights


def _smoothed_votes(targets: np.ndarray, distances: np.ndarray, classes: int) -> np.ndarray:
    """Each class's vote weight plus the mean weight (Laplace's rule in units of an average neighbour):
    proportional to the classes' probabilities; all equal (uniform) without neighbours."""
    if not len(targets):
        return np.ones(classes)
    weights = _vote_weights(distances)
    votes: np.ndarray = np.bincount(targets.astype(int), weights=weights, minlength=classes)[:classes]
    return votes + float(np.add.reduce(weights)) / len(weights)  # the mean weight (cheaper than ndarray.mean)


class RecentNeighbours:
    """The ``k`` nearest of the last ``capacity`` rows learnt (a ring of fixed size), with their targets:
    the standardised target or a class index (binary: 0 for the label -1, 1 for +1)."""

    def __init__(self, capacity: int, dim: int, *, k: int, clip: float) -> None:
        self.k = k
        self.clip = clip
        self.rows = np.zeros((capacity, dim))
        self.targets = np.zeros(capacity)
        self.squared_norms = np.zeros(capacity)  # of the kept rows (not saved: computed from them)
        self.ring = Ring(capacity)
        self.kept = 0  # rows kept or restored since it was made: its plays change with it

    def _nearest(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The targets of the ``k`` nearest kept rows (all kept if fewer) and their Euclidean distances."""
        # |r - x|^2 = |r|^2 - 2 r.x + |x|^2, ranked without the constant |x|^2: one matrix-vector product,
        # where the differences' (rows, d) temporary cost 3 to 5 times as much at d = 10 to 400
        ranked = self.squared_norms[:self.count] - 2.0 * self.rows[:self.count].dot(x)
        nearest = (ranked.argpartition(self.k - 1)[:self.k] if self.count > self.k
                   else np.arange(self.count))
        # rounding can leave a duplicate's squared distance slightly below 0
        distances = np.sqrt(np.maximum(ranked[nearest] + _squared_norm(x), 0.0))
        return self.targets[nearest], distances

    def keep(self, x: np.ndarray, target: float) -> None:
        """Keep the row ``x`` with its ``target`` (a standardised target or a class index), the oldest kept
        row leaving once the ring is full."""
        slot = self.ring.next
        self.rows[slot] = x
        self.squared_norms[slot] = _squared_norm(self.rows[slot])
        self.targets[slot] = target
        self.ring.advance()
        self.kept += 1

    def forget(self, keep: int) -> None:
        """Keep only the last ``keep`` rows, moved to the ring's first slots (oldest first); the others'
        slots are emptied, so that the state holds only what the window holds."""
        slots = self.ring.order()[max(self.ring.count - keep, 0):]
        count = len(slots)
        rows, targets = self.rows[slots], self.targets[slots]
        self.rows[:] = 0.0
        self.targets[:] = 0.0
        self.squared_norms[:] = 0.0
        self.rows[:count], self.targets[:count] = rows, targets
        self.squared_norms[:count] = [_squared_norm(row) for row in rows]  # as keep computes them
        self.ring.count, self.ring.next = count, count % self.ring.capacity
        self.kept += 1

    # ----------------------------------------------------------------- one score
    def predict(self, x: np.ndarray, binary: bool) -> float:
        """The log-odds of the smoothed vote (``binary``), else the neighbours' mean target weighted as the
        votes are, clipped."""
        targets, distances = self._nearest(x)
        if binary:
            negative, positive = _smoothed_votes(targets, distances, 2)
            score = math.log(positive / negative)
        elif len(targets):
            # weighted, as the votes (as good or better than the plain mean measured: docs/auto-log.md)
            weights = _vote_weights(distances)
            score = float(weights.dot(targets)) / float(np.add.reduce(weights))
        else:
            score = 0.0
        return min(max(score, -self.clip), self.clip)

    @staticmethod
    def kept_target(t: float, binary: bool) -> float:
        """The target kept for ``t``: a binary label -1/+1 as its class index 0/1, else ``t``."""
        return float(t > 0.0) if binary else t

    # ----------------------------------------------------------------- K classes
    def probabilities(self, x: np.ndarray, classes: int) -> np.ndarray:
        """The ``classes`` probabilities of the smoothed inverse-distance vote."""
        votes = _smoothed_votes(*self._nearest(x), classes)
        probabilities: np.ndarray = votes / np.add.reduce(votes)
        return probabilities

    # ----------------------------------------------------------------- the state
    @property
    def count(self) -> int:
        """The rows kept (at most ``capacity``)."""
        return self.ring.count

    def arrays(self) -> dict[str, np.ndarray]:
        return {"neighbours_rows": self.rows, "neighbours_targets": self.targets}

    def scalars(self) -> list[int]:
        return self.ring.scalars()

    def restore(self, arrays: dict[str, np.ndarray], scalars: list[int]) -> None:
        rows, targets = arrays["neighbours_rows"], arrays["neighbours_targets"]
        mismatch = "the kept neighbours do not match the grid."
        if rows.shape != self.rows.shape or targets.shape != self.targets.shape:
            raise StateFormatError(mismatch)
        ring = self.ring.restored(scalars, mismatch)
        if not (np.isfinite(rows).all() and np.isfinite(targets).all()):
            raise StateFormatError("the kept neighbours are not finite.")
        self.rows, self.targets = rows.astype(np.float64), targets.astype(np.float64)
        self.squared_norms = np.array([_squared_norm(row) for row in self.rows])  # as keep computed them
        self.ring = ring
        self.kept += 1


class NeighboursExpert:
    """:class:`RecentNeighbours` as an expert on the standardised row (dense). It sleeps: while out of the
    mixture it keeps each round's row (:meth:`observe`), and it is ready to enter once it holds
    ``wake_rows`` rows; in play, it keeps the row as it learns. ``binary``: its score is log-odds."""

    sleeps = True
    plays_together = None
    form = (False, False)

    def __init__(self, model: RecentNeighbours, *, binary: bool, wake_rows: int) -> None:
        self.model, self.binary, self.wake_rows = model, binary, wake_rows
        # the last row played, the rows kept then, the classes (0: one score) and the play: a row played
        # and then learnt is ranked once (the grid hands the same Row to both)
        self._played: tuple[Row, int, int, Any] | None = None

    def _input(self, row: Row) -> np.ndarray:
        return dense(row.forms[self.form])

    def _play(self, row: Row, classes: int) -> Any:
        played = self._played
        if played is not None and played[0] is row and played[1:3] == (self.model.kept, classes):
            return played[3]
        x = self._input(row)
        play = self.model.probabilities(x, classes) if classes else self.model.predict(x, self.binary)
        self._played = row, self.model.kept, classes, play
        return play

    def predict(self, row: Row) -> float:
        score: float = self._play(row, 0)
        return score

    def learn(self, row: Row, target: float) -> float:
        played = self.predict(row)
        self.model.keep(self._input(row), self.model.kept_target(target, self.binary))
        return played

    def probabilities(self, row: Row, classes: int) -> np.ndarray:
        probabilities: np.ndarray = self._play(row, classes)
        return probabilities

    def learn_class(self, row: Row, label: int, classes: int) -> np.ndarray:
        played = self.probabilities(row, classes)
        self.model.keep(self._input(row), float(label))
        return played

    def widen(self, classes: int) -> None:
        """Nothing: its targets are class indices already."""

    def observe(self, row: Row, target: float, classes: int, playing: bool) -> None:
        """Asleep, keep the row (``target`` the kept target: a class index, or the standardised target)."""
        if not playing:
            self.model.keep(self._input(row), target)

    def ready(self) -> bool:
        return self.model.count >= self.wake_rows

    def forget(self, rounds: int) -> None:
        """Keep only the last ``rounds`` rows of the window."""
        self.model.forget(rounds)

    def hold_growth(self, held: bool) -> None:
        """Nothing: a window of fixed size."""

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.model.arrays().values())

    def growth_nbytes(self, rounds: int) -> int:
        return 0

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        return self.model.arrays()

    def scalars(self) -> Any:
        return self.model.scalars()


def build_neighbours(grid: GridContext) -> list[Expert] | None:
    """The local expert, on dense rows of at most :data:`~kons.auto.config.NEIGHBOURS_MAX_DIM` features."""
    if grid.log_scaler.sparse or grid.dim > NEIGHBOURS_MAX_DIM:
        return None
    binary = grid.mixture.binary
    model = RecentNeighbours(NEIGHBOUR_ROWS, grid.dim, k=NEIGHBOURS,
                             clip=TARGET_BOUND if binary else grid.bound)
    return [NeighboursExpert(model, binary=binary, wake_rows=NEIGHBOURS_WAKE_ROWS)]


def restore_neighbours(grid: GridContext, built: list[Expert] | None, arrays: dict[str, np.ndarray],
                       scalars: dict[str, Any]) -> list[Expert] | None:
    """The local expert's window (none kept yet in a state saved before it existed); it plays only if it
    exists and holds a row: it enters once it holds :data:`~kons.auto.config.NEIGHBOURS_WAKE_ROWS`, and a
    change declared on two classes leaves it only the rows since the change's onset, fewer, while it plays
    on."""
    if "neighbours" in scalars:
        if built is None:
            raise StateFormatError("the kept neighbours do not match the grid.")
        cast(NeighboursExpert, built[0]).model.restore(arrays, scalars["neighbours"])
    if in_play(grid, "neighbours") and (built is None or not cast(NeighboursExpert, built[0]).model.count):
        raise StateFormatError("the local expert plays without a row.")
    return built
