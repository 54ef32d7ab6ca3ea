r"""A local expert of :class:`~kons.Auto`'s mixture: the k nearest of the last rows learnt.

The grid's kernel bases keep a dictionary of :data:`~kons._grid.MAX_DICTIONARY` points that freezes once
full, so a concept that moves after it filled (a gradual drift of the class centroids, River's
``RandomRBFDrift``) is followed by the weights on points of the old geometry only. :class:`RecentNeighbours`
predicts from the ``k`` nearest (Euclidean, on the standardised row) of the last ``capacity`` rows it
learnt: its memory moves with the stream, at O(capacity d) a round and a state of fixed size (Cover and
Hart 1967; the window is River's ``LazySearch``).

Its plays are probabilities the mixture weighs by log loss, so the vote fraction is smoothed
(Laplace's rule: :math:`(n_y + 1) / (k + K)` for ``K`` classes), never 0 or 1; for regression it plays the
mean target of the neighbours, clipped. The grid (:mod:`kons._grid`) weighs it only once it holds
:data:`~kons._grid.NEIGHBOURS_WAKE_ROWS` rows, and keeps none on sparse or wide rows.
"""

from __future__ import annotations

import math

import numpy as np

from kons._recent import _Ring
from kons.errors import StateFormatError
from kons.sparse import SparseVector

__all__ = ["RecentNeighbours"]


def _dense(x: np.ndarray | SparseVector) -> np.ndarray:
    return x.to_dense() if isinstance(x, SparseVector) else x


def _squared_norm(row: np.ndarray) -> float:
    return float(row @ row)


class RecentNeighbours:
    """The ``k`` nearest of the last ``capacity`` rows learnt (a ring of fixed size), with their targets:
    the standardised target or a class index (binary: 0 for the label -1, 1 for +1)."""

    def __init__(self, capacity: int, dim: int, *, k: int, clip: float) -> None:
        self.k = k
        self.clip = clip
        self.rows = np.zeros((capacity, dim))
        self.targets = np.zeros(capacity)
        self.squared_norms = np.zeros(capacity)  # of the kept rows (not saved: computed from them)
        self.ring = _Ring(capacity)

    def _nearest(self, x: np.ndarray) -> np.ndarray:
        """The targets of the ``k`` nearest kept rows (all kept if fewer)."""
        if self.count <= self.k:
            return self.targets[:self.count]
        # |r - x|^2 = |r|^2 - 2 r.x + |x|^2, ranked without the constant |x|^2: one matrix-vector product,
        # where the differences' (rows, d) temporary cost 3 to 5 times as much at d = 10 to 400
        ranked = self.squared_norms[:self.count] - 2.0 * (self.rows[:self.count] @ x)
        nearest: np.ndarray = self.targets[np.argpartition(ranked, self.k - 1)[:self.k]]
        return nearest

    def keep(self, x: np.ndarray | SparseVector, target: float) -> None:
        """Keep the row ``x`` with its ``target`` (a standardised target or a class index), the oldest kept
        row leaving once the ring is full."""
        slot = self.ring.next
        self.rows[slot] = _dense(x)
        self.squared_norms[slot] = _squared_norm(self.rows[slot])
        self.targets[slot] = target
        self.ring.advance()

    # ----------------------------------------------------------------- one score
    def predict(self, x: np.ndarray | SparseVector, binary: bool) -> float:
        """The log-odds of the smoothed vote (``binary``), else the neighbours' mean target, clipped."""
        targets = self._nearest(_dense(x))
        if binary:
            positive = float(targets.sum())
            score = math.log((positive + 1.0) / (len(targets) - positive + 1.0))
        else:
            score = float(targets.mean()) if len(targets) else 0.0
        return min(max(score, -self.clip), self.clip)

    def learn(self, x: np.ndarray | SparseVector, t: float, binary: bool) -> float:
        """Play :meth:`predict`, then keep the row; a label -1/+1 kept as the class index 0/1 (a binary
        learner that meets a third class goes on with :meth:`learn_class` on its kept rows)."""
        dense = _dense(x)
        played = self.predict(dense, binary)
        self.keep(dense, self.kept_target(t, binary))
        return played

    @staticmethod
    def kept_target(t: float, binary: bool) -> float:
        """The target kept for ``t``: a binary label -1/+1 as its class index 0/1, else ``t``."""
        return float(t > 0.0) if binary else t

    # ----------------------------------------------------------------- K classes
    def probabilities(self, x: np.ndarray | SparseVector, classes: int) -> np.ndarray:
        targets = self._nearest(_dense(x)).astype(int)
        counts = np.bincount(targets, minlength=classes)[:classes].astype(float)
        smoothed: np.ndarray = (counts + 1.0) / (len(targets) + classes)
        return smoothed

    def learn_class(self, x: np.ndarray | SparseVector, label: int, classes: int) -> np.ndarray:
        dense = _dense(x)
        played = self.probabilities(dense, classes)
        self.keep(dense, float(label))
        return played

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
