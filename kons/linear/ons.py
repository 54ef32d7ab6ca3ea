r"""Online Newton Step with the prediction projection (Luo et al., NIPS 2016, Eq. 1-2, Lemma 1)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from kons._multinomial import clipped_scores, newton_outputs, reference_softmax, widened
from kons._numerics import (
    check_finite_vector,
    scaled_outer_bound,
    scaled_outer_peak,
    subtract_scaled_outer,
)
from kons._validation import Constraint
from kons.errors import InvalidParameterError
from kons.linear._learner import SECOND_ORDER_CONSTRAINTS, Features, LinearLearner, leverage, projection_step
from kons.linear._linalg import checked_matrix, checked_vector
from kons.sparse import SparseVector

__all__ = ["ONS"]


class ONS(LinearLearner):
    r"""Full-matrix Online Newton Step in the invariant setting (the d x d reference of the SON family).

    Round :math:`t` (Eq. 1 with Lemma 1's closed-form projection onto :math:`|w^\top x_t| \le C`):

    .. math::
        v = A_{t-1}^{-1} x_t,\quad s = x_t^\top v,\quad
        w_t = u_t - \frac{\tau_C(u_t^\top x_t)}{s}\, v,\quad
        A_t = A_{t-1} + \eta\,\dot g_t^2\, x_t x_t^\top \ \text{(Eq. 2)},\quad
        u_{t+1} = w_t - A_t^{-1} g_t,

    with :math:`A_0 = \alpha I`. :math:`A^{-1}` (d, d) is kept by the Sherman-Morrison update
    :math:`A_t^{-1} = A_{t-1}^{-1} - \frac{c^2 v v^\top}{1 + c^2 s}`, :math:`c = \sqrt\eta\,\dot g_t`, and
    :math:`A_t^{-1} g_t = \dot g_t v / (1 + c^2 s)`: O(d^2) time and memory per round, never an inversion.
    It equals :class:`~kons.KONS` with the linear kernel on the same stream. Sparse input is accepted but
    still costs O(d^2).

    Parameters
    ----------
    loss : {"squared", "logistic", "squared_hinge", "hinge"}, default "squared"
    alpha : float, default 1.0
        :math:`A_0 = \alpha I`.
    eta : float or None, default None
        Weight :math:`\sigma_t + \eta_t` of Eq. 2; None takes the loss's curvature :math:`\sigma(C)`.
    C : float, default 1.0
        Predictions are clipped to :math:`[-C, C]`.
    diagonal : bool, default False
        Feed :math:`D_t^{-1/2} x_t` (Sec. 5.2), see :mod:`kons.linear._learner`.
    dim : int or None, default None

    Examples
    --------
    >>> import numpy as np
    >>> from kons import ONS
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 5)) * [1.0, 10.0, 0.1, 1.0, 1.0]
    >>> Y = np.clip(X @ [0.5, 0.05, 5.0, 0.0, -0.5], -2, 2)
    >>> m = ONS(loss="squared", alpha=1.0, C=2.0)
    >>> played = m.learn_many(X, Y)
    >>> bool(np.mean((played[200:] - Y[200:]) ** 2) < 0.1 * np.mean(Y[200:] ** 2))
    True
    """

    name = "ons"
    multinomial = True
    _parameter_constraints: ClassVar[dict[str, Constraint]] = SECOND_ORDER_CONSTRAINTS
    _eta_from_curvature = True
    _eta: float  # resolved in _set_params, never None here
    _sqrt_eta: float

    alpha: float
    eta: float | None

    def __init__(
        self,
        *,
        loss: str = "squared",
        alpha: float = 1.0,
        eta: float | None = None,
        C: float = 1.0,
        diagonal: bool = False,
        dim: int | None = None,
    ) -> None:
        self._set_params(loss=loss, alpha=alpha, eta=eta, C=C, diagonal=diagonal, dim=dim)
        self._reset()

    def _reset_model(self) -> None:
        super()._reset_model()
        self._u = np.zeros(self._dim)
        self._Ainv = np.eye(self._dim) / self.alpha
        self._class_played: tuple[Any, np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool] | None = None

    @classmethod
    def _model_floats(cls, dim: int, params: dict[str, Any]) -> int:
        return super()._model_floats(dim, params) + dim * dim + dim

    def _margin(self, f: Features) -> float:
        return f.dot(self._u)

    def _metric(self, f: Features) -> tuple[np.ndarray, float]:
        r""":math:`v = A^{-1} x` (:math:`A^{-1}` is symmetric) and the leverage :math:`x^\top v`."""
        v = f.cols(self._Ainv)
        return v, f.dot(v)

    def _quad(self, row: Features) -> float:
        return self._metric(row)[1]

    def _round(self, f: Features, y: float) -> tuple[float, float, float]:
        v, s = self._metric(f)
        self._played_quad = s
        y_hat, excess = self._play(f.dot(self._u))
        gamma = projection_step(excess, s)  # Lemma 1
        gdot = self._loss.derivative(y_hat, y)
        c2 = self._eta * gdot * gdot
        # u_{t+1} = u_t - gamma v - A_t^{-1} g_t,  A_t^{-1} g_t = gdot v / (1 + c^2 s)
        step = gamma + gdot / (1.0 + c2 * s)
        u = self._u - step * v
        shrink = c2 / (1.0 + c2 * s)
        check_finite_vector(u, scaled_outer_bound(shrink, v) if c2 != 0.0 else 0.0)
        self._u = u
        if c2 != 0.0:
            subtract_scaled_outer(self._Ainv, shrink, v)  # Sherman-Morrison (Eq. 2), in place
        return y_hat, leverage(self._sqrt_eta * gdot, s), gdot

    # ----------------------------------------------------------------- the multinomial round
    # The classes' scores share A^{-1} (kons._multinomial); u becomes the (d, K-1) matrix of their
    # weights. Without the diagonal adaptation, which would need one D per class.
    def _widen(self, outputs: int) -> None:
        if self.diagonal:
            raise InvalidParameterError("the multinomial round of ONS has no diagonal adaptation.")
        self._u = widened(self._u, outputs)

    def _class_scores(self, x: np.ndarray | SparseVector) -> np.ndarray:
        return self._class_play(x)[1]

    def _class_probabilities(self, x: np.ndarray | SparseVector) -> np.ndarray:
        """The probabilities played for ``x`` (:func:`~kons._multinomial.reference_softmax` of
        :meth:`_class_scores`), kept for its learning round (read only)."""
        return self._class_play(x)[2]

    def _class_play(self, x: np.ndarray | SparseVector) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """The margins of ``x``, their clipped scores and probabilities, and whether the bound is known to
        have clipped none of them, once for a row played and then learnt (:meth:`_kept_play`)."""
        played = self._kept_play(x)
        if played is None:
            margins = self._new_margins(x)
            scores = clipped_scores(margins, self.C)
            probabilities = reference_softmax(scores)
            scores.flags.writeable = probabilities.flags.writeable = False  # (kept: read only)
            played = margins, scores, probabilities, False
            self._keep_class_play(x, *played)
        return played

    def _class_margins(self, x: np.ndarray | SparseVector) -> np.ndarray:
        played = self._kept_play(x)
        return self._new_margins(x) if played is None else played[0]

    def _new_margins(self, x: np.ndarray | SparseVector) -> np.ndarray:
        margins = self._features(x).rows(self._u)
        margins.flags.writeable = False
        return margins

    def _kept_play(self, x: np.ndarray | SparseVector
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool] | None:
        """The play kept for ``x`` while the weights stay the very array it was computed with (a round
        replaces them): a dense row is known by its bytes, a sparse one (``auto``'s forms and threshold
        codes, made once for a row's play and learning) by identity; the key keeps the row alive, so that
        no other takes its identity."""
        played = self._class_played
        if played is None or played[1] is not self._u:
            return None
        key = _row_key(x)
        return played[2:] if played[0] is key or played[0] == key else None

    def _keep_class_play(self, x: np.ndarray | SparseVector, margins: np.ndarray, scores: np.ndarray,
                         probabilities: np.ndarray, unclipped: bool) -> None:
        self._class_played = _row_key(x), self._u, margins, scores, probabilities, unclipped

    def _learn_class(self, x: np.ndarray | SparseVector, label: int) -> tuple[np.ndarray, float]:
        f = self._features(x)
        v = f.cols(self._Ainv)  # A^{-1} x
        s = f.dot(v)
        margins, scores, probabilities, unclipped = self._class_play(x)
        check_finite_vector(margins)
        probabilities, step, shrink = newton_outputs(margins, label, self.C, self._eta, s,
                                                     played=(scores, probabilities, unclipped))
        u = self._u - np.multiply.outer(v, step)
        # the whole update is checked, as in the binary round (shrink alone let an overflowing v v' through)
        check_finite_vector(u, scaled_outer_peak(shrink, v) if shrink != 0.0 else 0.0)
        self._u = u
        if shrink != 0.0:
            subtract_scaled_outer(self._Ainv, shrink, v)  # Sherman-Morrison, in place
        return probabilities, shrink * s

    def _arrays(self) -> dict[str, np.ndarray]:
        return {"u": self._u, "Ainv": self._Ainv, **super()._arrays()}

    def _restore(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        super()._restore(arrays, scalars)
        u = arrays["u"]
        # the weights of one score, or the (d, K-1) columns of the multinomial round
        self._u = checked_vector(u, self._dim) if u.ndim == 1 else checked_matrix(u, self._dim, u.shape[1])
        self._Ainv = checked_matrix(arrays["Ainv"], self._dim, self._dim)


def _row_key(x: np.ndarray | SparseVector) -> Any:
    """What a kept play knows its row by (:meth:`ONS._kept_play`)."""
    return x.tobytes() if isinstance(x, np.ndarray) else x
