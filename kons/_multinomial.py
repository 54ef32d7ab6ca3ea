r"""The multinomial Online Newton Step with one second-order matrix shared by the class scores.

A learner with ``K`` classes keeps one weight column per class but the reference class 0 (whose score is
0): scores :math:`f = W^\top \phi \in \mathbb R^{K-1}` and probabilities
:math:`p = \mathrm{softmax}(0, f)`. The gradient of the log loss :math:`-\log p_y` with respect to the
column :math:`W_k` is :math:`g_k = (p_k - [y = k])\,\phi`: every column's gradient is a multiple of the
same vector :math:`\phi`. ONS on :math:`\mathrm{vec}(W)` with the block-diagonal matrix
:math:`A \otimes I` therefore updates :math:`A` by a rank-one term,

.. math::
    A_t = A_{t-1} + \eta \Big(\sum_{k \ge 1} (p_k - [y = k])^2\Big) \phi\phi^\top,\qquad
    W_{t+1} = W_t' - A_t^{-1}\phi\,(p - e_y)_{1:}^\top,

one :math:`A^{-1}\phi` per round whatever ``K`` (Sherman-Morrison, O(j^2)) and O(j K) for the columns,
where :math:`W_t'` is :math:`W_t` with each score projected onto :math:`[-C, C]` in the metric
:math:`A_{t-1}` (Lemma 1 of Luo et al. 2016, column by column: the metric is shared, so the projection
onto the box of scores splits by column). With ``K = 2`` this is exactly the binary logistic ONS step
(the one score is the log-odds of class 1, :math:`p_1 - [y = 1] = \ell'(f, \pm 1)`), which is why the sum
runs over the ``K - 1`` scores and not over all ``K`` classes.

What the sharing changes: the full-matrix ONS on :math:`\mathrm{vec}(W)` would accumulate
:math:`\eta\,\mathrm{vec}(G)\mathrm{vec}(G)^\top = \eta\,(g g^\top) \otimes (\phi\phi^\top)`, a
(j(K-1))^2 matrix coupling the classes; the shared matrix replaces :math:`g g^\top` by
:math:`\|g\|^2 I \succeq g g^\top`, which costs one O(j^2) update instead of O(j^2 K^2). What still holds:
on scores in :math:`[-C, C]^{K-1}` the log loss is strongly convex in the scores: every probability is
at least :math:`e^{-2C}/K`, so the Hessian :math:`\mathrm{diag}(p) - p p^\top` of the K-1 scores has its
eigenvalues above some :math:`\mu(C, K) > 0`, at least of the order of :math:`e^{-4C}/K^2`. With
:math:`\|g\|^2 \le 2`, for :math:`\eta \le \mu/2`

.. math:: \ell(W^*) \ge \ell(W) + \langle G, W^* - W\rangle + \tfrac{\eta}{2}\|g\|^2
          \|(W^* - W)^\top\phi\|^2,

which is the inequality the ONS analysis needs for the increment :math:`\eta\|g\|^2\phi\phi^\top`
(Hazan, Agarwal and Kale 2007, proof of Thm. 2; the norm :math:`\|\Delta\|_{A\otimes I}` grows by
exactly that term). Summing gives a regret of at most
:math:`\frac{\alpha}{2}\|W^*\|_F^2 + \frac{1}{2\eta}\log\det(A_T/\alpha) = O(\frac{j}{\eta}\log T)`
against the best fixed :math:`W^*` with bounded scores, whatever ``K``. That :math:`\eta` is tiny for
``auto``'s bound C = 10; ``auto`` uses the binary learners' steps (0.1 to 10), which the bound does not
cover, and its mixture (:mod:`kons.auto`) is what is guaranteed: the log loss of the best base plus
:math:`\ln N`. The step sizes are justified by measurement (``benchmarks/multiclass.py``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from kons._numerics import SMALLEST_NORMAL, TINY

if TYPE_CHECKING:
    from kons.base import Learner

__all__ = ["MultinomialRounds", "clipped_scores", "log_probability", "multinomial_rounds", "newton_outputs",
           "reference_softmax", "reference_softmaxes", "widened"]

#: The reference class's score (class 0's), before the others' in :func:`reference_softmax`.
_REFERENCE = np.zeros(1)


class MultinomialRounds(Protocol):
    """The rounds :class:`~kons.Auto` drives once a third class appears, on learners that declare
    ``multinomial = True`` (:class:`~kons.ONS`, :class:`~kons.NystromKONS`). ``x`` is a checked row of
    the learner's own form; the scores are those of classes 1.. against class 0."""

    def _widen(self, outputs: int) -> None:
        """Keep ``outputs`` scores (classes - 1): the binary weights become the first."""

    def _class_scores(self, x: Any) -> np.ndarray:
        """The clipped scores (K-1,) for ``x``, nothing learnt."""

    def _class_probabilities(self, x: Any) -> np.ndarray:
        """The classes' probabilities (K,) for ``x`` (:func:`reference_softmax` of :meth:`_class_scores`),
        nothing learnt: kept for the learning round of the row (read only)."""

    def _class_margins(self, x: Any) -> np.ndarray:
        """The unclipped scores (K-1,) for ``x``, nothing learnt (kept: not to be written to), which a caller
        that plays several learners at once clips and turns into probabilities itself
        (:meth:`_keep_class_play`)."""

    def _keep_class_play(self, x: Any, margins: np.ndarray, scores: np.ndarray, probabilities: np.ndarray,
                         unclipped: bool) -> None:
        """Keep, for the learning round of ``x``, the play a caller computed from :meth:`_class_margins`
        (``margins``, that very array): :func:`clipped_scores` with the bound ``C`` and
        :func:`reference_softmax`, bit for bit (``scores`` and ``probabilities`` made read only by the
        caller), and whether the caller found that the bound clipped none of the margins (``unclipped``),
        which the learning round's :func:`newton_outputs` takes."""

    def _learn_class(self, x: Any, label: int) -> tuple[np.ndarray, float]:
        """One round: ``(probabilities played, leverage)``."""


def multinomial_rounds(learner: Learner) -> MultinomialRounds:
    """``learner`` as its multinomial rounds; a :class:`TypeError` for a learner without them (a
    programming error: :class:`~kons.Auto` only builds learners that have them)."""
    if not learner.multinomial:
        raise TypeError(f"{type(learner).__name__} has no multinomial round.")
    return cast(MultinomialRounds, learner)


def clipped_scores(scores: np.ndarray, bound: float | np.ndarray) -> np.ndarray:
    """``np.clip(scores, -bound, bound)``, bit for bit, without np.clip's Python wrapper (``bound``: a
    float, or a column of one per row of ``scores``)."""
    clipped: np.ndarray = np.minimum(np.maximum(scores, -bound), bound)
    return clipped


def reference_softmax(scores: np.ndarray) -> np.ndarray:
    """Probabilities of the ``K`` classes for the (K-1,) ``scores`` of classes 1.. against class 0."""
    # (the ufuncs' reductions, which ndarray.max and .sum call through a Python wrapper: every expert's
    # play of every multinomial round comes here)
    z = np.concatenate((_REFERENCE, scores))
    e = np.exp(z - np.maximum.reduce(z))
    probabilities: np.ndarray = e / np.add.reduce(e)
    return probabilities


def reference_softmaxes(scores: np.ndarray) -> np.ndarray:
    """:func:`reference_softmax` of each row of the (n, K-1) ``scores``, bit for bit, in one numpy call
    per step for all the rows: each step is elementwise or a reduction along a row (a contiguous one,
    which numpy reduces as the row alone)."""
    z = np.concatenate((np.zeros((len(scores), 1)), scores), axis=1)
    e = np.exp(z - np.maximum.reduce(z, axis=1, keepdims=True))
    probabilities: np.ndarray = e / np.add.reduce(e, axis=1, keepdims=True)
    return probabilities


def newton_outputs(margins: np.ndarray, label: int, bound: float, eta: float, s: float, *,
                   played: tuple[np.ndarray, np.ndarray, bool] | None = None
                   ) -> tuple[np.ndarray, np.ndarray, float]:
    r"""One multinomial round's play and step (see the module docstring).

    ``margins`` (K-1,): the unclipped scores :math:`W^\top\phi`; ``s``: :math:`\phi^\top A_{t-1}^{-1}\phi`;
    ``played``: the clipped scores and the probabilities of ``margins`` if the play computed them already,
    and whether it found that the bound clipped none of the margins (then the scores equal them).
    Returns the played probabilities (K,), the step (K-1,) with :math:`W_{t+1} = W_t - v\,\mathrm{step}^\top`
    for :math:`v = A_{t-1}^{-1}\phi`, and the Sherman-Morrison coefficient ``shrink``,
    :math:`A_t^{-1} = A_{t-1}^{-1} - \mathrm{shrink}\; v v^\top`.
    """
    if played is None:
        scores = clipped_scores(margins, bound)
        probabilities = reference_softmax(scores)
        unclipped = False  # (not looked for: the step's term of the clipping is computed)
    else:
        scores, probabilities, unclipped = played
    gradient = probabilities[1:].copy()  # p_k - [y = k] for the scores k >= 1
    if label:
        gradient[label - 1] -= 1.0
    s = max(s, TINY)
    c2 = eta * float(gradient.dot(gradient))  # (``@`` bit for bit, without the matmul ufunc's dispatch)
    # Lemma 1, then A_t^{-1} g: (margins - scores) / s + gradient / (1 + c2 s), in the temporaries (the
    # gradient is this round's copy), each element rounded as there
    gradient /= 1.0 + c2 * s
    if unclipped and s < math.inf:
        # unclipped scores: the first term is a positive zero throughout, and
        # adding it to q is adding q to it for every q (a negative zero included, which becomes positive):
        # two numpy calls fewer a round of every Newton expert
        gradient += 0.0
        step = gradient
    else:
        step = margins - scores
        step /= s
        step += gradient
    return probabilities, step, c2 / (1.0 + c2 * s)


def widened(weights: np.ndarray, outputs: int) -> np.ndarray:
    """``weights`` as ``outputs`` columns: a binary learner's vector becomes the first column, and the new
    columns (classes not seen before) start at zero, the reference class's score."""
    columns = weights[:, None] if weights.ndim == 1 else weights
    return np.hstack([columns, np.zeros((len(columns), outputs - columns.shape[1]))])


def log_probability(probabilities: np.ndarray, label: int) -> float:
    """:math:`\\log p_y`, finite for the probabilities a bounded score gives."""
    return math.log(max(float(probabilities[label]), SMALLEST_NORMAL))
