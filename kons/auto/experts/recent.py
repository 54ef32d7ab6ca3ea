r"""The Bayesian linear model of the rows since a restart: the first expert of a restarted generation.

A generation of :mod:`kons.auto`'s restarted bases starts at a declared change with learners that know
nothing; the online Newton steps of its linear copies then need tens of rounds to reach the new concept
(``docs/auto-log.md``: on a flipped linear target, far worse over the first rounds after the change than
``auto`` started afresh, whose warm-up plays this model of its first rows).
:class:`RecentLinear` is that warm-up made incremental: the posterior mean of a Bayesian linear model of
the rows learnt since it started, O(d^2) per round and a state of fixed size.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np

from kons._multinomial import clipped_scores, reference_softmax
from kons._numerics import check_finite, check_finite_vector, divided_outer_bound
from kons.auto.experts.protocol import (
    Expert,
    GridContext,
    LearnsInItsPlays,
    Row,
    guarded,
    guarded_probabilities,
    restore_saved,
)
from kons.errors import StateFormatError
from kons.preprocessing import TARGET_BOUND
from kons.sparse import SparseVector, dense

__all__ = ["RecentExpert", "RecentLinear", "build_linear", "restore_linear"]


class RecentLinear:
    r"""Posterior mean of :math:`t = w^\top x + \epsilon` on the rows it has learnt, one column of
    weights per score.

    ``x`` is a standardised row with the intercept last (``dim + 1`` coordinates); the prior is
    :math:`w \sim N(0, \Sigma_0)`, :math:`\Sigma_0 = \mathrm{diag}(v/d, \dots, v/d, B^2)` (a prior
    variance ``weight_variance`` :math:`= v` of :math:`w^\top z` on standardised rows, by default 1, as
    :meth:`kons.Auto._warmup_prediction`, and an intercept of spread ``intercept_scale`` :math:`= B`,
    the mixture's interval :math:`[-B, B]` for ``auto``), the noise of unit variance. After the
    rows :math:`x_1..x_n` with targets :math:`t_1..t_n`:

    .. math::

        P_n = \Big(\Sigma_0^{-1} + \sum_{s \le n} x_s x_s^\top\Big)^{-1}, \qquad
        b_n = \sum_{s \le n} t_s x_s, \qquad f(x) = x^\top P_n b_n,

    :math:`P` kept by the Sherman-Morrison update :math:`P_n = P_{n-1} - \frac{v v^\top}{1 + x_n^\top v}`,
    :math:`v = P_{n-1} x_n` (ridge regression, Hoerl and Kennard 1970, as the Bayes posterior: Bishop,
    *Pattern Recognition and Machine Learning*, 2006, Eq. 3.53-3.54). Plays are clipped at ``clip``.
    With the squared loss and targets in :math:`[-B, B]`, the clipped ridge forecaster's regret against
    every linear predictor :math:`u` on the rows since its start is at most
    :math:`\frac12 u^\top\Sigma_0^{-1}u + O(d\, B^2 \ln(1 + n X^2 / d))` for rows of norm at most
    :math:`X` (Cesa-Bianchi and Lugosi, *Prediction, Learning, and Games*, 2006, Sec. 11.7-11.8; Vovk
    2001 and Azoury and Warmuth 2001): logarithmic in the rounds since the restart, which is what a
    concept that just changed needs.

    Targets: the standardised target (regression), the label :math:`\pm 1` (two classes: the score is
    the log-odds played), or for ``K`` classes each class against the others, :math:`\pm 1` in ``K``
    columns, played as the softmax of half the scores (for two classes the sigmoid of the binary score,
    the rule of :meth:`kons.Auto._warmup_probabilities`'s linear model). A class that appears later
    takes the column of a target -1 on every row before it: :math:`-\sum_s x_s`, exact, which is why the
    sum is kept.
    """

    def __init__(self, dim: int, *, intercept_scale: float, clip: float, weight_variance: float = 1.0
                 ) -> None:
        self.dim = dim
        self.clip = clip
        self.P = np.diag(np.append(np.full(dim, weight_variance / dim), intercept_scale * intercept_scale))
        self.b = np.zeros((dim + 1, 1))
        self.sum = np.zeros(dim + 1)  # sum of the rows: a new class's column is its negative
        self._score: np.ndarray | None = None  # P b of the one score, until P or b change (not state)

    # ----------------------------------------------------------------- one score
    # Products by ndarray.dot: bit for bit ``@``, without the matmul ufunc's dispatch, which costs more than
    # the product itself at a round's sizes.
    def predict(self, x: np.ndarray | SparseVector) -> float:
        """The clipped score of the one-score model for ``x`` (with the intercept)."""
        if self._score is None:  # (a round's prediction and its learning take the same)
            self._score = self.P.dot(self.b[:, 0])
        return self._clipped(float(dense(x).dot(self._score)))

    def learn(self, x: np.ndarray | SparseVector, t: float, played_on: np.ndarray | None = None) -> float:
        """Play :meth:`predict` (for ``played_on`` if given, else ``x``), then learn the target ``t`` for
        ``x``; the state is unchanged if it raises."""
        row = dense(x)
        played = self.predict(row if played_on is None else played_on)
        self._update(row, self._column(row, t))
        return played

    def learn_unplayed(self, x: np.ndarray, t: float) -> float:
        """:meth:`learn` of a dense ``x`` without computing its play (an expert asleep: no one reads it);
        0."""
        self._update(x, self._column(x, t))
        return 0.0

    def restandardise(self, scale: float, shift: float) -> None:
        """Re-express the targets learnt (one score) in new units, ``t -> scale * t + shift``: the target's
        scale of a restarted generation moves in its first rounds, and targets learnt in its earlier units
        would stay biased by the move in the fit (``b`` and the sum of the rows give it exactly)."""
        b = scale * self.b[:, 0] + shift * self.sum
        check_finite(b)
        self.b = b[:, None]
        self._score = None

    # ----------------------------------------------------------------- K classes
    def widen(self, classes: int) -> None:
        """Score ``classes`` classes from now on (a binary model's one score is class 1's, class 0's the
        opposite; a new class's weights those of a target -1 on every row learnt)."""
        b = self.b if self.b.shape[1] > 1 else np.hstack([-self.b, self.b])
        new = classes - b.shape[1]
        self.b = np.hstack([b, np.repeat(-self.sum[:, None], new, axis=1)]) if new > 0 else b
        self._score = None

    def probabilities(self, x: np.ndarray | SparseVector) -> np.ndarray:
        """The classes' probabilities for ``x``: the softmax of half the clipped scores."""
        scores = clipped_scores(dense(x).dot(self.P.dot(self.b)), self.clip) / 2.0
        return reference_softmax(scores[1:] - scores[0])

    def learn_class(self, x: np.ndarray | SparseVector, label: int) -> np.ndarray:
        """Play :meth:`probabilities`, then learn ``label`` (+1 for its column, -1 for the others)."""
        row = dense(x)
        played = self.probabilities(row)
        targets = -np.ones(self.b.shape[1])
        targets[label] = 1.0
        self._update(row, np.multiply.outer(row, targets))
        return played

    # ----------------------------------------------------------------- the state
    def _clipped(self, f: float) -> float:
        return min(max(f, -self.clip), self.clip)

    @staticmethod
    def _column(x: np.ndarray, t: float) -> np.ndarray:
        """The one score's step of ``b``: each ``x_i * t`` as the outer product with ``[t]`` rounds it,
        without building that array and the outer product's broadcast (a round of every regression
        expert on this model takes it)."""
        return (x * t)[:, None]

    def _update(self, x: np.ndarray, step: np.ndarray) -> None:
        """Learn ``x`` whose targets add ``step`` to ``b`` (``x`` times the targets, one column each)."""
        v = self.P.dot(x)
        divisor = 1.0 + float(x.dot(v))
        shrink = np.multiply.outer(v, v)  # (np.outer, without its wrapper)
        shrink /= divisor  # (in place: no second (d, d) temporary)
        b = self.b + step
        if not math.isfinite(divided_outer_bound(v, divisor)):  # (else every element of shrink is finite)
            check_finite(shrink)
        check_finite_vector(b.ravel())  # (a new array: its elements, without check_finite's dispatch)
        self.P -= shrink
        self.b = b
        self.sum += x
        self._score = None

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays().values())

    def arrays(self) -> dict[str, np.ndarray]:
        return {"P": self.P, "b": self.b, "sum": self.sum}

    def restore(self, arrays: dict[str, np.ndarray]) -> None:
        P, b, total = arrays["P"], arrays["b"], arrays["sum"]
        d = self.dim + 1
        if P.shape != (d, d) or b.ndim != 2 or b.shape[0] != d or total.shape != (d,):
            raise StateFormatError("a restarted linear model does not match the grid.")
        if not (np.isfinite(P).all() and np.isfinite(b).all() and np.isfinite(total).all()):
            raise StateFormatError("a restarted linear model is not finite.")
        self.P, self.b, self.sum = P.astype(np.float64), b.astype(np.float64), total.astype(np.float64)
        self._score = None


class RecentExpert(LearnsInItsPlays):
    """A generation's :class:`RecentLinear` as an expert, on the standardised row with the intercept.

    Regression's dense rows: it plays on the row standardised by the statistics before it
    (:attr:`Row.before`) and learns the row as the other experts take it, standardised by the statistics
    that include it, as River's ``StandardScaler`` in a pipeline does (it predicts, then learns and
    transforms). A row far out in a heavy tail raises the deviation it is divided by: standardised by
    statistics that include it, it comes out nearer the mean than the rows learnt before it stood, and a
    linear model, whose play is in the units of the targets before the round, under-plays it
    (``docs/series.md``)."""

    plays_together = None
    form = (False, True)

    def __init__(self, model: RecentLinear) -> None:
        self.model = model

    def predict(self, row: Row) -> float:
        return guarded(self.model.predict, row.forms[self.form] if row.before is None else row.before)

    def learn(self, row: Row, target: float) -> float:
        return guarded(self.model.learn, row.forms[self.form], target, row.before)

    def learn_unplayed(self, row: Row, target: float) -> None:
        """:meth:`learn` without its play, made before: a restarted generation's linear model plays in its
        generation's units before the round and learns the round's target once its targets learnt so far
        are in the units after it (:meth:`kons.auto.restarts.Generation.move_scale`)."""
        guarded(self.model.learn_unplayed, dense(row.forms[self.form]), target)

    def probabilities(self, row: Row, classes: int) -> np.ndarray:
        return guarded_probabilities(RecentLinear.probabilities, classes, self.model, row.forms[self.form])

    def learn_class(self, row: Row, label: int, classes: int) -> np.ndarray:
        return guarded_probabilities(self.model.learn_class, classes, row.forms[self.form], label)

    def widen(self, classes: int) -> None:
        self.model.widen(classes)

    def hold_growth(self, held: bool) -> None:
        """Nothing: a fixed size."""

    def nbytes(self) -> int:
        return self.model.nbytes()

    def growth_nbytes(self, rounds: int) -> int:
        return 0

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        return {f"{name}_{key}": array for key, array in self.model.arrays().items()}

    def scalars(self) -> Any:
        return None


def build_linear(grid: GridContext) -> list[Expert] | None:
    """The Bayesian linear model of every row (regression), on the standardised row with the intercept."""
    if grid.mixture.binary:
        return None
    return [RecentExpert(RecentLinear(grid.dim, intercept_scale=TARGET_BOUND, clip=grid.bound,
                                      weight_variance=grid.weight_variance))]


def restore_linear(grid: GridContext, built: list[Expert] | None, arrays: dict[str, np.ndarray],
                   scalars: dict[str, Any]) -> list[Expert] | None:
    """The linear model of every row."""
    return restore_saved(grid, built, arrays, "linear", "the linear model's experts", lambda experts: cast(
        RecentExpert, experts[0]).model.restore({key: arrays[f"linear_{key}"] for key in ("P", "b", "sum")}))
