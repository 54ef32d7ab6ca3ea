r"""RP-SON: Sketched Online Newton with a Gaussian random-projection sketch (Alg. 1, 6 and 7)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from kons._numerics import check_finite
from kons._validation import Constraint
from kons.linear._learner import SECOND_ORDER_CONSTRAINTS, Features, LinearLearner, leverage, projection_step
from kons.linear._linalg import checked_matrix, checked_vector, sherman_morrison

__all__ = ["RPSON"]


_STATE_BOUND = 1e150


class RPSON(LinearLearner):
    r"""Sketched Online Newton whose sketch is :math:`S_t = S_{t-1} + r_t \hat g_t^\top` (Alg. 6).

    :math:`A_t = \alpha I + S_t^\top S_t` with :math:`r_t \sim \mathcal N(0, I_m/m)` (so that
    :math:`\mathbb E\, S^\top S = G^\top G`) and :math:`H_t = (\alpha I_m + S_t S_t^\top)^{-1}` kept by the
    two Sherman-Morrison updates of Alg. 6 with :math:`q = S_t\hat g_t - \tfrac{1}{2}\|\hat g_t\|^2 r_t`.
    The weights are stored as :math:`u = \bar u + S^\top b` (Alg. 7, App. G.1), so a round with ``s``
    non-zeros costs O(m^2 + m s) for sketch size ``m``:

    .. math::
        \hat x = S x,\ \gamma = \frac{\tau_C(\bar u^\top x + b^\top \hat x)}
        {x^\top x - \hat x^\top H \hat x},\
        \bar w = \bar u - \gamma x,\ b \leftarrow b + \gamma H \hat x;\quad
        \bar u \leftarrow \bar w - (r^\top b)\hat g - \tfrac{1}{\alpha} g,\
        b \leftarrow b + \tfrac{1}{\alpha} H S g.

    A round with :math:`\hat g = 0` leaves the sketch alone and draws nothing. With ``sketch_size=0``
    this is :class:`~kons.OGD` with the constant step :math:`1/\alpha`.

    Parameters
    ----------
    loss : {"squared", "logistic", "squared_hinge", "hinge"}, default "squared"
    alpha : float, default 1.0
        Regulariser :math:`\alpha` (:math:`1/\alpha` is the step size off the sketch).
    eta : float or None, default None
        :math:`\hat g_t = \sqrt{\eta}\, g_t`; None takes the loss's curvature :math:`\sigma(C)`.
    C : float, default 1.0
        Predictions are clipped to :math:`[-C, C]`.
    sketch_size : int, default 10
        ``m``, the number of rows of :math:`S`.
    diagonal : bool, default False
        Feed :math:`D_t^{-1/2} x_t` (Sec. 5.2).
    seed : int, default 0
        Seed of the projection draws (the generator's state is saved with the learner).
    dim : int or None, default None

    Examples
    --------
    >>> import numpy as np
    >>> from kons import RPSON
    >>> X = np.random.default_rng(0).normal(size=(400, 5))
    >>> y = np.sign(X @ [1.0, -1.0, 0.5, 0.0, 0.2])
    >>> m = RPSON(loss="squared", alpha=8.0, C=1.0, sketch_size=3, seed=1)
    >>> played = m.learn_many(X, y)
    >>> bool(np.mean(np.sign(played[200:]) != y[200:]) < 0.25), m.stats()["rounds"]
    (True, 400)
    >>> m.predict_one({"indices": [0, 1], "values": [1.0, -1.0]}) > 0
    True
    """

    name = "rp_son"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = SECOND_ORDER_CONSTRAINTS
    _eta_from_curvature = True
    _eta: float  # resolved in _set_params, never None here
    _sqrt_eta: float

    alpha: float
    eta: float | None

    sketch_size: int
    seed: int

    def __init__(
        self,
        *,
        loss: str = "squared",
        alpha: float = 1.0,
        eta: float | None = None,
        C: float = 1.0,
        sketch_size: int = 10,
        diagonal: bool = False,
        seed: int = 0,
        dim: int | None = None,
    ) -> None:
        self._set_params(loss=loss, alpha=alpha, eta=eta, C=C, sketch_size=sketch_size, diagonal=diagonal,
                         seed=seed, dim=dim)
        self._reset()

    def _reset_model(self) -> None:
        super()._reset_model()
        m = self.sketch_size
        self._S = np.zeros((m, self._dim))
        self._H = np.eye(m) / self.alpha
        self._ubar = np.zeros(self._dim)
        self._b = np.zeros(m)

    @classmethod
    def _model_floats(cls, dim: int, params: dict[str, Any]) -> int:
        m: int = params["sketch_size"]
        return super()._model_floats(dim, params) + m * dim + m * m + dim + m

    def _margin(self, f: Features) -> float:
        return f.dot(self._ubar) + float(self._b @ f.cols(self._S))

    def _metric(self, f: Features) -> tuple[np.ndarray, np.ndarray, float]:
        r""":math:`\hat x = S x`, :math:`H \hat x` and :math:`\alpha x^\top A^{-1} x` (the sketch's)."""
        sx = f.cols(self._S)
        hx = self._H @ sx
        return sx, hx, f.sq_norm - float(sx @ hx)

    def _quad(self, row: Features) -> float:
        return self._metric(row)[2] / self.alpha

    def _round(self, f: Features, y: float) -> tuple[float, float, float]:
        m, alpha, xx = self.sketch_size, self.alpha, f.sq_norm
        sx, hx, denom = self._metric(f)
        self._played_quad = denom / alpha
        y_hat, excess = self._play(f.dot(self._ubar) + float(self._b @ sx))
        gamma = projection_step(excess, denom)
        b = self._b + gamma * hx  # projection step (Alg. 7, line 4)
        gdot = self._loss.derivative(y_hat, y)
        c = self._sqrt_eta * gdot  # g_hat = c x
        H, sx_new, cols, shift = self._H, sx, None, 0.0
        if c != 0.0 and m and f.nonzero:
            r = self._generator.standard_normal(m) / math.sqrt(m)
            sx_new = sx + (c * xx) * r  # S_t x  with S_t = S_{t-1} + r g_hat'
            q = c * sx_new - (0.5 * c * c * xx) * r  # Alg. 6, line 2
            H = sherman_morrison(sherman_morrison(H, q, r), r, q)
            cols = self._S[:, f.index] + np.outer(r, c * f.values)
            shift = c * float(r @ b)  # keeps w = u_bar + S'b fixed while S moves
        b = b + (gdot / alpha) * (H @ sx_new)  # b += H S g / alpha
        delta = -(gamma + shift + gdot / alpha) * f.values  # u_bar = w_bar - (r'b) g_hat - g / alpha
        # The sketch and coefficients are sums of gradients: entries past sqrt(float max) mean a round
        # so extreme that every later product overflows and the learner would be stuck for good.
        check_finite(b, H, delta, 0.0 if cols is None else cols, bound=_STATE_BOUND)
        if cols is not None:
            self._S[:, f.index] = cols
            self._H = H
        self._b = b
        self._ubar[f.index] += delta
        return y_hat, leverage(c, denom / alpha), gdot

    def sketch_drift(self) -> float:
        """Max relative gap between :math:`H` and a fresh :math:`(\\alpha I + S S^\\top)^{-1}`; O(m^2 d)."""
        if not self._has_model or self.sketch_size == 0:
            return 0.0
        fresh = np.linalg.inv(self.alpha * np.eye(self.sketch_size) + self._S @ self._S.T)
        return float(np.abs(fresh - self._H).max() / np.abs(fresh).max())

    def _arrays(self) -> dict[str, np.ndarray]:
        return {"S": self._S, "H": self._H, "ubar": self._ubar, "b": self._b, **super()._arrays()}

    def _restore(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        super()._restore(arrays, scalars)
        m, d = self.sketch_size, self._dim
        self._S = checked_matrix(arrays["S"], m, d)
        self._H = checked_matrix(arrays["H"], m, m)
        self._ubar = checked_vector(arrays["ubar"], d)
        self._b = checked_vector(arrays["b"], m)
