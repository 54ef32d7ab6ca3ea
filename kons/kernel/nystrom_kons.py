r"""Nystrom-KONS: the Online Newton Step in a growing Nystrom embedding (after PROS-N-KONS).

Calandriello, Lazaric, Valko, "Efficient Second-Order Online Kernel Learning with Adaptive Embedding",
NeurIPS 2017: embed each point in the span of a KORS dictionary and run ONS there, so that a round costs
O(j d + j^2) for a dictionary of ``j`` points, whatever the number of rounds. See :class:`NystromKONS`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from kons._multinomial import clipped_scores, newton_outputs, reference_softmax, widened
from kons._numerics import (
    MIN_CAPACITY,
    TINY,
    PackedCholesky,
    SymmetricMatrix,
    check_finite_vector,
    ridge_leverage,
    scaled_outer_bound,
)
from kons._validation import Constraint, Integer
from kons.base import Learner
from kons.errors import NumericalError
from kons.kernel._newton import KernelNewton
from kons.kernel.kors import KORS, KORSProposal
from kons.kernel.sketched_kons import SketchedKONS
from kons.kernels import RBF, Kernel

__all__ = ["NystromKONS", "dictionaries_restored", "dictionaries_saved_apart", "repeated_dictionary_nbytes",
           "share_dictionaries"]

#: A point joins the embedding only if its squared distance to the dictionary's span, relative to
#: k(x, x), exceeds this: the new coordinate divides by that distance, so a near-duplicate member would
#: amplify rounding by up to 1 / sqrt(ratio) (1e4 here) in every later round.
MIN_RELATIVE_RESIDUAL = 1e-8
#: The arrays of a dictionary: KORS's and ``L`` (saved only if replaying the points does not rebuild it).
_DICTIONARY_ARRAYS = ("kors_points", "kors_sq_norms", "kors_weights", "kors_chol", "factor")
#: The arrays of KORS that only its proposals use: a full dictionary's state leaves them out.
_PROPOSALS_ONLY = ("kors_weights", "kors_chol")
_FLOAT_NBYTES = np.dtype(np.float64).itemsize  # every array of the state holds float64
#: While a composite saves its learners (:func:`dictionaries_saved_apart`): the prefix of each learner's
#: dictionary's arrays in the composite's state, by the learner's id; while it restores them
#: (:func:`dictionaries_restored`): the composite's arrays.
_SAVING: ContextVar[Mapping[int, str]] = ContextVar("_SAVING", default=MappingProxyType({}))
_RESTORING: ContextVar[Mapping[str, np.ndarray]] = ContextVar("_RESTORING", default=MappingProxyType({}))
#: While a composite restores its learners: the ``L`` replayed for each dictionary saved apart, by its
#: prefix, so that the learners that share it replay it once.
_REPLAYED: ContextVar[dict[str, np.ndarray] | None] = ContextVar("_REPLAYED", default=None)


class _SharedRound:
    """The round of the learners that share one dictionary (see :func:`share_dictionaries`): the features
    of the last row and KORS's proposal for it, at the dictionary size they were computed for, and whether
    that row joined. Both are functions of the row's values and of the dictionary's first ``size``
    members alone, which only ever grow at the end, so every sharer gets the very floats it would have
    computed on its own dictionary."""

    __slots__ = ("filling", "given", "joined", "kxx", "phi", "proposal", "row", "size")

    def __init__(self, filling: set[int]) -> None:
        #: The sharers (by id) whose embedding is not full yet: KORS retires once none is left.
        self.filling = filling
        self.row: bytes | None = None  # the row's values, bit for bit
        self.given: np.ndarray | None = None  # the array the row came in
        self.size = -1
        self.phi = np.zeros(0)
        self.kxx = 0.0
        self.proposal: KORSProposal | None = None
        self.joined = False

    def holds(self, x: np.ndarray, size: int) -> bool:
        """Whether the round kept is that of the row ``x`` (its values bit for bit: the features are a
        function of those) on the dictionary's first ``size`` members. The very array it came in is
        recognised without reading its values when nothing can have written to it (read-only, owning its
        memory): the sharers of a grid take the same array, the round's form of the row, and a play and the
        learning round after it the same row."""
        if self.size != size or self.row is None:
            return False
        if x is self.given and not x.flags.writeable and x.base is None:
            return True
        return x.tobytes() == self.row  # (a float64 row of the learner's dimension, as the one kept)

    def keep(self, x: np.ndarray, size: int, phi: np.ndarray, kxx: float) -> None:
        self.row, self.size, self.phi, self.kxx = x.tobytes(), size, phi, kxx
        self.given = x
        self.proposal, self.joined = None, False


class NystromKONS(Learner):
    r"""Kernel Online Newton Step on Nystrom features: constant cost and memory per round.

    **Embedding.** The dictionary :math:`D` (``j`` points, chosen by KORS, Alg. 2 of the ICML 2017
    paper, see *Growth*) defines the features

    .. math::
        \phi(x) = L^{-1} k_D(x) \in \mathbb R^j,\qquad L L^\top = K_{DD},

    so that :math:`\phi(x)^\top\phi(x') = k_D(x)^\top K_{DD}^{-1} k_D(x')`, the kernel projected onto the
    span of the dictionary. ``L`` is lower triangular and grows one row at a time: a new member ``x``
    appends the row :math:`[\phi(x)^\top, \rho]` with :math:`\rho^2 = k(x,x) - \|\phi(x)\|^2`, and then
    every point gets one more coordinate, :math:`(k(x, \cdot) - \phi(x)^\top\phi(\cdot))/\rho`, while
    its first ``j`` coordinates are unchanged.

    **Round** ``t`` (ONS with the prediction projection, Luo et al. 2016 Eq. 1 and Lemma 1, in
    :math:`\mathbb R^j`, as :class:`~kons.ONS`):

    .. math::
        \bar y_t = u_t^\top\phi_t,\quad \hat y_t = \mathrm{clip}_C(\bar y_t),\quad
        v = A_{t-1}^{-1}\phi_t,\quad s_t = \phi_t^\top v,\quad
        w_t = u_t - \frac{\bar y_t - \hat y_t}{s_t}\, v,

    .. math::
        A_t = A_{t-1} + \eta\dot g_t^2\phi_t\phi_t^\top,\qquad
        u_{t+1} = w_t - A_t^{-1}\dot g_t\phi_t = w_t - \frac{\dot g_t}{1 + \eta\dot g_t^2 s_t}\, v,

    with :math:`A^{-1}` kept dense (one triangle read and written: exactly symmetric; saved packed) and
    updated by Sherman-Morrison,
    :math:`A_t^{-1} = A_{t-1}^{-1} - \frac{\eta\dot g_t^2}{1 + \eta\dot g_t^2 s_t} v v^\top`: O(j^2) per
    round, never an inversion. Nothing outside the dictionary is stored.

    **Growth.** Every round, until the dictionary is full, asks KORS whether :math:`x_t` joins, with the
    point itself (scale 1, ridge :math:`\alpha`) rather than the gradient-scaled point Sketched-KONS
    feeds it: the dictionary's job here is to make the embedding accurate where the data are, as in
    PROS-N-KONS, whose KORS runs on :math:`\phi(x_t)`. (Measured: ``docs/kons-math.md``,
    Nystrom-KONS.)
    If KORS keeps :math:`x_t`, it joins :math:`D` *before* the Newton step of its own round (the
    prediction is unchanged by the new coordinate, whose weight is 0), and the Newton state is
    **extended**, not restarted:

    .. math::
        u \leftarrow \begin{bmatrix} u \\ 0 \end{bmatrix},\qquad
        A^{-1} \leftarrow \begin{bmatrix} A^{-1} & 0 \\ 0 & 1/\alpha \end{bmatrix}.

    This is ONS on features that were projected on the span of the dictionary of their time: the past
    curvature along the old coordinates is kept, and the new direction starts from the prior
    :math:`\alpha`. PROS-N-KONS restarts :math:`u = 0, A = \alpha I` at every growth instead (its regret
    analysis works phase by phase). Measured on the shared suite, 12 data sets in both regimes of the
    benchmark protocol, 5,000 rounds (``benchmarks/nystrom_quality.py``, results in
    ``benchmarks/results/nystrom_quality.md``), extending beat restarting on all 24 runs, typically by a
    factor of 2 to 3 in error: the dictionary grows most often early in the stream, and each restart
    throws the model away.

    **Held growth.** While :meth:`hold_growth` holds it (a service at its byte budget), the learner
    behaves as with a full dictionary: KORS is not consulted, no coin is drawn, and the Newton steps go
    on in the embedding it has.

    **Memory bound.** Once ``max_dictionary`` members are in :math:`D`, KORS is no longer consulted (no
    coin is drawn) and the embedding stays fixed: the learner is then exactly ONS on fixed features, a
    round costs O(j d + j^2) and the state stays at its size, whatever the stream (even an adversarial one
    that would keep the dictionary growing). A point closer to the span than
    :data:`MIN_RELATIVE_RESIDUAL` (a near-duplicate) never joins.

    Parameters
    ----------
    kernel : Kernel or dict, default RBF(gamma=1.0)
    loss : {"squared", "logistic", "squared_hinge", "hinge"}, default "squared"
    alpha : float, default 1.0
        :math:`A_0 = \alpha I`, also KORS's ridge.
    eta : float or None, default None
        Step :math:`\eta`; None takes the loss's curvature :math:`\sigma(C)`.
    C : float, default 1.0
        Predictions are clipped to :math:`[-C, C]`.
    beta, epsilon : float, default 1.0, 0.5
        KORS oversampling and accuracy, as in :class:`~kons.SketchedKONS`.
    max_dictionary : int, default 500
        Hard bound on ``j``. The state takes about :math:`8(2 j^2 + j(d + 3))` bytes in memory (two
        triangular factors, KORS's and :math:`L`, packed, :math:`A^{-1}` dense, plus the points); once the
        dictionary is full, about :math:`8(3 j^2 / 2 + j(d + 3))` (KORS's factor and weights, which only
        its proposals use, are neither saved nor kept in memory: :meth:`~kons.kernel.kors.KORS.retire`).
        Saved, :math:`A^{-1}` is its packed triangle, and the state leaves :math:`L` out: a load replays the
        members through it in their order, which rebuilds it bit for bit (kept only if restored from a
        state whose :math:`L` the replay does not give). 500
        trades a little error for memory against the smaller and larger bounds measured
        (``docs/kons-math.md``, Nystrom-KONS); an operator short of memory can take 256.
    seed : int, default 0
        Seed of KORS's coins (the generator's state is saved with the learner).
    dim : int or None, default None

    Examples
    --------
    >>> import numpy as np
    >>> from kons import NystromKONS
    >>> from kons.kernels import RBF
    >>> m = NystromKONS(kernel=RBF(gamma=0.5), loss="squared", alpha=1.0, eta=0.1, C=3.0,
    ...                 max_dictionary=40, seed=0)
    >>> X = np.random.default_rng(1).normal(size=(2000, 3))
    >>> played = m.learn_many(X, np.cos(X[:, 0]))
    >>> s = m.stats()
    >>> s["rounds"], s["dictionary_size"] <= 40
    (2000, True)
    >>> bool(np.mean((played[1000:] - np.cos(X[1000:, 0])) ** 2) < 0.1)
    True
    """

    name = "nystrom_kons"
    multinomial = True
    # kernel, alpha and eta as for the dual-form learners (not their state: this is not a KernelNewton),
    # and KORS's beta, epsilon and seed as for SketchedKONS.
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        **KernelNewton._parameter_constraints,
        **{k: SketchedKONS._parameter_constraints[k] for k in ("beta", "epsilon", "seed")},
        "max_dictionary": Integer(low=1),
    }
    uses_kernel = True
    _eta_from_curvature = True
    _spread_exponent = KernelNewton._spread_exponent
    # The dictionary grows up to max_dictionary; held, it admits no new point (the embedding stays).
    grows = True
    can_hold_growth = True
    _eta: float  # resolved in _set_params, never None here
    _sqrt_eta: float
    #: The features, weights and score of the last row scored (:meth:`_score`); not state.
    _scored: tuple[np.ndarray, np.ndarray, Any] | None = None
    #: The margins, clipped scores and probabilities of the last multinomial play (:meth:`_class_play`), and
    #: whether the bound is known to have clipped none of the margins.
    _class_played: tuple[np.ndarray, np.ndarray, np.ndarray, bool] | None = None

    kernel: Kernel
    alpha: float
    eta: float | None
    beta: float
    epsilon: float
    max_dictionary: int
    seed: int

    def __init__(
        self,
        *,
        kernel: Kernel | dict[str, Any] = RBF(gamma=1.0),  # noqa: B008 - kernels are immutable
        loss: str = "squared",
        alpha: float = 1.0,
        eta: float | None = None,
        C: float = 1.0,
        beta: float = 1.0,
        epsilon: float = 0.5,
        max_dictionary: int = 500,
        seed: int = 0,
        dim: int | None = None,
    ) -> None:
        self._set_params(kernel=kernel, loss=loss, alpha=alpha, eta=eta, C=C, beta=beta, epsilon=epsilon,
                         max_dictionary=max_dictionary, seed=seed, dim=dim)
        self._reset()

    # ----------------------------------------------------------------- state
    def _reset_model(self) -> None:
        self._kors = self._new_kors()
        self._factor = PackedCholesky()  # L, L L' = K_DD
        #: Whether replaying the dictionary's points rebuilds ``L`` bit for bit (:meth:`_replayed_factor`):
        #: then the state leaves it out. Not when it was restored from a state whose ``L`` the replay
        #: does not give (saved by another build of the arithmetic).
        self._factor_replays = True
        self._shared: _SharedRound | None = None  # the round of the learners sharing _kors and _factor
        self._inverse = SymmetricMatrix()  # A^{-1}
        self._weights = np.zeros(0)  # u

    @property
    def _size(self) -> int:
        """The size of this learner's embedding: its dictionary's, or the first members of a shared one
        (a sharer that did not take a row that joined stays behind until its next round, see
        :meth:`_detach`)."""
        return self._inverse.size

    @classmethod
    def _model_floats(cls, dim: int, params: dict[str, Any]) -> int:
        # The bound once the dictionary is full (m = max_dictionary): KORS's points (a growable buffer of
        # at most max(16, 2m) rows of d, their norms and weights), KORS's factor and L (growable packed
        # triangles of m(m+1)/2, at most twice that or 16 each), A^{-1} (dense, m^2: within the same bound)
        # and u.
        m: int = params["max_dictionary"]
        rows = max(MIN_CAPACITY, 2 * m)
        return rows * (dim + 2) + 3 * max(MIN_CAPACITY, m * (m + 1)) + m

    def _growth_floats(self, rounds: int) -> int:
        # Per new member: KORS's point, squared norm, weight and factor row, a row of L and of A^{-1}
        # (each as long as the dictionary with it) and a weight per score; at most max_dictionary members.
        size = self._size
        joins = min(rounds, self.max_dictionary - size)
        scores = 1 if self._weights.ndim == 1 else int(self._weights.shape[-1])
        return joins * (self._dim + 2 + scores) + 3 * (joins * size + joins * (joins + 1) // 2)

    def _new_kors(self) -> KORS:
        return KORS(self.kernel, self.alpha, self.beta, self.epsilon, self._dim)

    def _features(self, x: np.ndarray) -> tuple[np.ndarray, float]:
        """:math:`\\phi(x) = L^{-1} k_D(x)` and :math:`k(x, x)`, computed once per row for the learners that
        share the dictionary."""
        shared = self._shared
        if shared is not None:
            size = self._inverse.size  # (:attr:`_size`, read once: every play and round of a sharer asks)
            if shared.holds(x, size):
                return shared.phi, shared.kxx
            if size != self._factor.size:
                self._detach()
            else:
                phi, kxx = self._computed_features(x)
                shared.keep(x, size, phi, kxx)
                return phi, kxx
        return self._computed_features(x)

    def _computed_features(self, x: np.ndarray) -> tuple[np.ndarray, float]:
        # A contiguous row, as the replay of a member (:meth:`_replayed_factor`) reads it from the
        # dictionary: BLAS sums a strided vector in another order.
        x = np.ascontiguousarray(x)
        points = self._kors.points
        k = self.kernel.row(x, points.view, points.sq_norms.view)
        kxx = self.kernel.diag(x)
        if not math.isfinite(kxx):  # the point itself overflows the kernel: no round can use it
            raise NumericalError("the kernel value k(x, x) of this input overflowed.")
        return self._factor.solve(k), kxx

    def _predict(self, x: np.ndarray) -> float:
        phi, kxx = self._features(x)
        self._played_row, self._played_quad = (phi, kxx, self._inverse, None), None  # for _spread
        return float(self._score(phi))

    def _score(self, phi: np.ndarray) -> Any:
        """:math:`\\phi^\\top u` (the margins ``phi @ W`` of the multinomial round), once for a row played and
        then learnt: kept with the very arrays it was computed from (a round replaces the weights, a new
        row's features are new arrays), whose product it then is bit for bit."""
        scored = self._scored
        if scored is not None and scored[0] is phi and scored[1] is self._weights:
            return scored[2]
        score = phi.dot(self._weights)  # (as ``@`` bit for bit, without the matmul ufunc's dispatch)
        self._scored = phi, self._weights, score
        return score

    def _quad(self, row: tuple[np.ndarray, float, SymmetricMatrix, float | None]) -> float:
        r"""The leverage of the row in the whole feature space: :math:`\phi^\top A^{-1} \phi` in the
        embedding plus :math:`\rho^2 / \alpha` off it (:math:`\rho^2 = k(x, x) - \|\phi\|^2`, the
        squared distance to the dictionary's span, where :math:`A = \alpha I`); ``row``: the features,
        :math:`k(x, x)`, the :math:`A^{-1}` of the round and its :math:`\phi^\top A^{-1} \phi` if known."""
        phi, kxx, inverse, inside = row
        if inside is None:
            inside = float(phi.dot(inverse.matvec(phi)))
        return inside + max(kxx - float(phi @ phi), 0.0) / self.alpha

    def _uniform(self) -> float:
        """One U[0, 1) draw from the learner's generator (tests override it to force coins)."""
        return float(self._generator.random())

    def _grown(self, weights: np.ndarray, inverse: SymmetricMatrix) -> tuple[np.ndarray, SymmetricMatrix]:
        """The Newton state ``(u, A^{-1})`` in the embedding grown by one coordinate (new objects); the
        weights of the multinomial round grow by a row."""
        grown = np.concatenate([weights, np.zeros((1, *weights.shape[1:]))])
        return grown, inverse.extended(1.0 / self.alpha)

    # ----------------------------------------------------------------- the round
    def _embedded(self, x: np.ndarray, phi: np.ndarray, kxx: float
                  ) -> tuple[np.ndarray, SymmetricMatrix, np.ndarray, tuple[Any, np.ndarray, float] | None]:
        """KORS's decision on ``x`` (see *Growth*): the weights, ``A^{-1}`` and ``phi`` in the embedding
        of this round, and what joins the dictionary (None: nothing); nothing committed."""
        weights, inverse = self._weights, self._inverse
        joining = None
        if inverse.size < self.max_dictionary and not self._growth_held:  # (:attr:`_size`, read once)
            proposal = self._proposal(x, kxx)
            residual = kxx - float(phi @ phi)  # rho^2: squared distance of phi(x) to the span of D
            if self._uniform() < proposal.probability and residual > MIN_RELATIVE_RESIDUAL * kxx:
                rho = math.sqrt(residual)
                joining = (proposal, phi, rho)
                weights, inverse = self._grown(weights, inverse)
                phi = np.append(phi, rho)  # x_t's coordinates in the grown embedding
        return weights, inverse, phi, joining

    def _proposal(self, x: np.ndarray, kxx: float) -> KORSProposal:
        """KORS's proposal for ``x`` on the embedding's dictionary (unscaled points), once per row for the
        learners that share it (:meth:`_features` kept the row's round)."""
        shared = self._shared
        if shared is None:
            return self._kors.propose(x, kxx, 1.0)
        if shared.proposal is None:
            shared.proposal = self._kors.propose(x, kxx, 1.0)
        return shared.proposal

    def _commit(self, joining: tuple[Any, np.ndarray, float] | None, inverse: SymmetricMatrix,
                weights: np.ndarray, shrink: float, v: np.ndarray) -> None:
        """Keep the round: the new member, the weights and the Sherman-Morrison update of ``A^{-1}``."""
        if joining is not None and (self._shared is None or not self._shared.joined):
            self._kors.add(joining[0])
            self._factor.append(joining[1], joining[2])
            if self._shared is not None:
                self._shared.joined = True  # the other sharers that take the row grow their embedding only
        self._inverse = inverse
        self._weights = weights
        if joining is not None and self._size >= self.max_dictionary:
            self._filled()
        if shrink != 0.0:
            inverse.rank_one_update(-shrink, v)  # Sherman-Morrison (Eq. 2)

    def _learn(self, x: np.ndarray, y: float) -> tuple[float, float]:
        phi, kxx = self._features(x)
        y_bar = float(self._score(phi))
        if not math.isfinite(y_bar):
            raise NumericalError("the prediction overflowed for this input.")
        y_hat = self._clip(y_bar)
        excess = y_bar - y_hat  # h(ybar_t)
        gdot = self._loss.derivative(y_hat, y)
        scale = self._sqrt_eta * gdot

        played = phi, kxx, self._inverse
        weights, inverse, phi, joining = self._embedded(x, phi, kxx)
        v = inverse.matvec(phi)  # A_{t-1}^{-1} phi_t
        inside = float(phi.dot(v))
        # the row's leverage before the round (a new member's, on the embedding before it joined)
        self._played_row, self._played_quad = (*played, None if joining else inside), None
        # s_t > 0 in exact arithmetic; rounding can leave it at zero, and h/s then overflows and is
        # rejected below instead of corrupting the state.
        s = max(inside, TINY)
        c2 = scale * scale
        projection = excess / s if excess != 0.0 else 0.0  # Lemma 1
        # u_{t+1} = u_t - (h/s) v - A_t^{-1} g_t,  A_t^{-1} g_t = gdot v / (1 + c^2 s)
        new_weights = weights - (projection + gdot / (1.0 + c2 * s)) * v
        shrink = c2 / (1.0 + c2 * s)
        check_finite_vector(new_weights, s, scaled_outer_bound(shrink, v))
        self._commit(joining, inverse, new_weights, shrink, v)  # nothing above has touched the state
        return y_hat, ridge_leverage(c2 * s)

    # ----------------------------------------------------------------- the multinomial round
    # The classes' scores share A^{-1} (kons._multinomial) and the embedding; the weights become the
    # (j, K-1) matrix of their columns.
    def _widen(self, outputs: int) -> None:
        self._weights = widened(self._weights, outputs)

    def _class_scores(self, x: np.ndarray) -> np.ndarray:
        return self._class_play(self._class_margins(x))[0]

    def _class_probabilities(self, x: np.ndarray) -> np.ndarray:
        """The probabilities played for ``x`` (:func:`~kons._multinomial.reference_softmax` of
        :meth:`_class_scores`), kept for its learning round (read only)."""
        return self._class_play(self._class_margins(x))[1]

    def _class_margins(self, x: np.ndarray) -> np.ndarray:
        margins: np.ndarray = self._score(self._features(x)[0])
        return margins

    def _class_play(self, margins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The clipped scores of ``margins`` and their probabilities, once for a row played and then learnt
        (the margins are the very array :meth:`_score` keeps)."""
        played = self._class_played
        if played is None or played[0] is not margins:
            scores = clipped_scores(margins, self.C)
            probabilities = reference_softmax(scores)
            scores.flags.writeable = probabilities.flags.writeable = False
            played = self._class_played = margins, scores, probabilities, False
        return played[1], played[2]

    def _keep_class_play(self, x: np.ndarray, margins: np.ndarray, scores: np.ndarray,
                         probabilities: np.ndarray, unclipped: bool) -> None:
        self._class_played = margins, scores, probabilities, unclipped

    def _learn_class(self, x: np.ndarray, label: int) -> tuple[np.ndarray, float]:
        phi, kxx = self._features(x)
        margins = self._score(phi)
        check_finite_vector(margins)
        played = self._class_played
        weights, inverse, phi, joining = self._embedded(x, phi, kxx)
        v = inverse.matvec(phi)
        s = float(phi.dot(v))
        probabilities, step, shrink = newton_outputs(
            margins, label, self.C, self._eta, s,
            played=played[1:] if played is not None and played[0] is margins else None)
        new_weights = weights - np.multiply.outer(v, step)
        check_finite_vector(new_weights, scaled_outer_bound(shrink, v))
        self._commit(joining, inverse, new_weights, shrink, v)
        return probabilities, shrink * max(s, TINY)

    # ----------------------------------------------------------------- statistics and state
    def _model_stats(self) -> dict[str, Any]:
        size = self._size
        return {"stored_points": size, "dictionary_size": size, "kors_size": size,
                "dictionary_full": size >= self.max_dictionary}

    def _dictionary_arrays(self) -> dict[str, np.ndarray]:
        """KORS's arrays and ``L`` of the embedding's dictionary (the first members of a shared one); a full
        dictionary's without KORS's weights and factor, which only its proposals use."""
        size = self._size
        triangle = size * (size + 1) // 2
        arrays = {**self._kors.arrays(), "factor": self._factor.packed}
        full = size >= self.max_dictionary
        return {name: array[:triangle] if name in ("kors_chol", "factor") else array[:size]
                for name, array in arrays.items() if not (full and name in _PROPOSALS_ONLY)}

    def _saved_dictionary_arrays(self) -> dict[str, np.ndarray]:
        """:meth:`_dictionary_arrays` as saved: without ``L`` when replaying the points rebuilds it."""
        arrays = self._dictionary_arrays()
        if self._factor_replays:
            del arrays["factor"]
        return arrays

    def _dictionary_nbytes(self) -> int:
        """The bytes of :meth:`_saved_dictionary_arrays`, from the sizes alone (nothing gathered)."""
        size, dim = self._size, self._dim
        triangle = size * (size + 1) // 2
        floats = size * dim + size  # the points and their squared norms
        if not self._factor_replays:
            floats += triangle  # ``L``
        if size < self.max_dictionary and not self._kors.retired:
            floats += size + triangle  # KORS's weights and factor
        return floats * _FLOAT_NBYTES

    def _arrays_nbytes(self) -> int:
        newton = self._inverse.packed_nbytes + self._weights.nbytes
        return newton if id(self) in _SAVING.get() else newton + self._dictionary_nbytes()

    def _arrays(self) -> dict[str, np.ndarray]:
        newton = {"inverse": self._inverse.packed, "weights": self._weights}
        if id(self) in _SAVING.get():  # the composite saves the dictionary
            return newton
        return {**self._saved_dictionary_arrays(), **newton}

    def _scalars(self) -> dict[str, Any]:
        prefix = _SAVING.get().get(id(self))
        return {} if prefix is None else {"dictionary": prefix}

    def _own_dictionary(self, arrays: dict[str, np.ndarray], *, replays: bool | None = None) -> None:
        """A private dictionary restored from ``arrays`` (a full one's KORS retired: it proposes nothing);
        ``L`` replayed from its points if not among them. ``replays``: whether replaying the points gives
        the ``L`` among them, None to find out (once, for a state that saved it)."""
        self._kors = self._new_kors()
        self._kors.restore(arrays, self._dim, retired=len(arrays["kors_points"]) >= self.max_dictionary)
        saved = arrays.get("factor")
        if saved is None:
            self._factor, self._factor_replays = self._replayed_factor(), True
        else:
            self._factor = PackedCholesky(saved)
            if replays is None:
                replays = self._replayed_factor().packed.tobytes() == self._factor.packed.tobytes()
            self._factor_replays = replays
        self._shared = None

    def _replayed_factor(self) -> PackedCholesky:
        """``L`` rebuilt as it grew: each member's row ``[phi(x), rho]`` on the members before it, by the
        very operations of :meth:`_computed_features` and :meth:`_embedded` (bit for bit the same)."""
        points, sq_norms = self._kors.points.view, self._kors.points.sq_norms.view
        factor = PackedCholesky()
        for i, x in enumerate(points):
            phi = factor.solve(self.kernel.row(x, points[:i], sq_norms[:i]))
            factor.append(phi, math.sqrt(self.kernel.diag(x) - float(phi @ phi)))
        return factor

    def _shares_with(self, other: NystromKONS, arrays: dict[str, np.ndarray]) -> bool:
        """Whether ``other``, whose dictionary's ``arrays`` are given, may take this learner's dictionary."""
        used = ("kernel", "alpha", "beta", "epsilon", "_dim")  # by KORS's proposals and the features
        if self._size != self._factor.size or any(getattr(other, p) != getattr(self, p) for p in used):
            return False
        mine = self._dictionary_arrays()
        return mine.keys() == arrays.keys() and all(
            mine[name].shape == array.shape and mine[name].tobytes() == array.tobytes()
            for name, array in arrays.items())

    def _detach(self) -> None:
        """Leave a shared dictionary that grew by a row this learner did not take (its coin, or its round
        that failed, said otherwise): a private copy of the members it has, as it would have had alone."""
        shared, kors = self._shared, self._kors
        self._own_dictionary(self._dictionary_arrays(), replays=self._factor_replays)
        if shared is not None:
            self._filling_done(shared, kors)

    def _filled(self) -> None:
        """The embedding is full: KORS's weights and factor, which only its proposals use, are let go, once
        no sharer of the dictionary still fills it (:meth:`_filling_done`)."""
        if self._shared is None:
            self._kors.retire()
        else:
            self._filling_done(self._shared, self._kors)

    def _filling_done(self, shared: _SharedRound, kors: KORS) -> None:
        """This learner no longer fills the shared dictionary of ``kors`` (full, or left behind): the last
        to stop retires KORS if the dictionary is full (one left behind took its own copy first)."""
        shared.filling.discard(id(self))
        if not shared.filling and kors.size >= self.max_dictionary:
            kors.retire()

    def _restore(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        if "dictionary" in scalars:  # saved apart by the composite that held this learner
            prefix, saved = str(scalars["dictionary"]), _RESTORING.get()
            if f"{prefix}kors_points" not in saved:
                raise ValueError("the learner's dictionary is not in the state of the composite restoring it")
            arrays = {**{name: saved[prefix + name] for name in _DICTIONARY_ARRAYS if prefix + name in saved},
                      **arrays}
            replayed = _REPLAYED.get()
            if replayed is not None and prefix in replayed and "factor" not in arrays:
                arrays["factor"] = replayed[prefix]  # the ``L`` a learner sharing it replayed
                self._own_dictionary(arrays, replays=True)
            else:
                self._own_dictionary(arrays)
                if replayed is not None and self._factor_replays:
                    replayed[prefix] = self._factor.packed
        else:
            self._own_dictionary(arrays)
        self._inverse = SymmetricMatrix(arrays["inverse"])
        self._weights = np.asarray(arrays["weights"], dtype=np.float64)
        size = self._kors.size
        # the weights of one score, or the (j, K-1) columns of the multinomial round
        if (self._weights.shape[:1] != (size,) or self._weights.ndim > 2
                or not self._factor.size == self._inverse.size == size or size > self.max_dictionary):
            raise ValueError("dictionary arrays are inconsistent")

    # ----------------------------------------------------------------- diagnostics
    def factor_drift(self) -> float:
        """Largest relative gap between the incremental ``L`` and a fresh Cholesky of :math:`K_{DD}`.

        O(j^3): for tests and monitoring, not the hot path.
        """
        if self._size == 0:
            return 0.0
        members = self._kors.points.view[:self._size]
        fresh = np.linalg.cholesky(self.kernel.gram(members, members))
        factor = self._factor.to_dense()[:self._size, :self._size]
        return float(np.abs(fresh - factor).max() / np.abs(fresh).max())


def share_dictionaries(learners: Sequence[NystromKONS]) -> None:
    """Let the learners whose dictionaries are equal (the same kernel, ridge, KORS parameters, and the same
    members bit for bit: learners that differ only in their loss, step or bound and draw the same coins)
    share one, its points, factors, kernel rows and solves: each then plays exactly as alone, and a
    learner whose coin or failed round keeps a row out that the others took gets its own copy again."""
    owners: list[NystromKONS] = []
    for learner in learners:
        if not learner._has_model:
            continue
        mine = learner._dictionary_arrays()
        owner = next((owner for owner in owners if owner._shares_with(learner, mine)), None)
        if owner is None:
            owners.append(learner)
            continue
        if owner._shared is None:
            owner._shared = _SharedRound({id(owner)} if owner._size < owner.max_dictionary else set())
        learner._kors, learner._factor, learner._shared = owner._kors, owner._factor, owner._shared
        learner._factor_replays = owner._factor_replays  # (the same arrays: the same answer)
        if learner._size < learner.max_dictionary:
            owner._shared.filling.add(id(learner))


def _by_dictionary(learners: Mapping[str, Learner]) -> list[list[tuple[str, NystromKONS]]]:
    """The Nystrom learners of ``learners`` that have a model, grouped by the dictionary they use (the same
    shared object, the same size used of it: the same arrays), each group and the groups in their order."""
    groups: dict[tuple[int, int], list[tuple[str, NystromKONS]]] = {}
    for name, learner in learners.items():
        if isinstance(learner, NystromKONS) and learner._has_model:
            groups.setdefault((id(learner._kors), learner._size), []).append((name, learner))
    return list(groups.values())


@contextmanager
def dictionaries_saved_apart(learners: Mapping[str, Learner], prefix: str) -> Iterator[dict[str, np.ndarray]]:
    """Save each distinct dictionary of a composite's Nystrom learners (``learners``, by name) once.

    Yields the arrays the composite saves: a dictionary's as ``<prefix><name>_<array>``, ``name`` the first
    learner's that uses it. A learner's blob saved inside the context holds its Newton state and the
    prefix of its dictionary's arrays instead of a copy of them; :func:`dictionaries_restored` loads it.
    """
    prefixes: dict[int, str] = {}
    arrays: dict[str, np.ndarray] = {}
    for group in _by_dictionary(learners):
        first, learner = group[0]
        saved_as = f"{prefix}{first}_"
        arrays |= {saved_as + name: array for name, array in learner._saved_dictionary_arrays().items()}
        prefixes |= {id(sharer): saved_as for _, sharer in group}
    token = _SAVING.set(MappingProxyType(prefixes))
    try:
        yield arrays
    finally:
        _SAVING.reset(token)


def repeated_dictionary_nbytes(learners: Iterable[Learner], *, growing: bool = False) -> int:
    """The bytes of the dictionaries that several of ``learners`` use, once per learner but the first: what
    :func:`dictionaries_saved_apart` saves once instead. ``growing``: of the dictionaries not yet full only
    (a sharer that keeps a row out of one, its coin or its failed round, takes its own copy again).

    The groups of :func:`_by_dictionary`, counted in one pass without listing them (the service asks the
    size after every round): each sharer after a group's first adds the first's dictionary bytes."""
    firsts: dict[tuple[int, int], NystromKONS] = {}
    repeated = 0
    for learner in learners:
        if isinstance(learner, NystromKONS) and learner._has_model:
            first = firsts.setdefault((id(learner._kors), learner._size), learner)
            if first is not learner and (not growing or first._size < first.max_dictionary):
                repeated += first._dictionary_nbytes()
    return repeated


@contextmanager
def dictionaries_restored(arrays: Mapping[str, np.ndarray]) -> Iterator[None]:
    """Learners restored inside the context whose dictionaries were saved apart
    (:func:`dictionaries_saved_apart`) take them from ``arrays``, the state of their composite."""
    token, replayed = _RESTORING.set(arrays), _REPLAYED.set({})
    try:
        yield
    finally:
        _RESTORING.reset(token)
        _REPLAYED.reset(replayed)
