r"""Oja-SON: Sketched Online Newton with Oja's sketch, in the sparse form of Alg. 4-5 (App. H)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from scipy.linalg.blas import dtrsm

from kons._numerics import check_finite
from kons._validation import Constraint
from kons.errors import NumericalError
from kons.linear._factored import REBASE_AT, FactoredBasis
from kons.linear._learner import SECOND_ORDER_CONSTRAINTS, Features, LinearLearner, leverage, projection_step
from kons.linear._linalg import checked_vector

__all__ = ["OjaSON"]


class OjaSON(LinearLearner):
    r"""Sketched Online Newton whose sketch tracks the top eigenvectors of :math:`G^\top G` by Oja's rule.

    Oja's update (Eq. 4) with the paper's step :math:`\Gamma_t = I/t` (Sec. 5):

    .. math::
        \Lambda_t = (1 - \tfrac1t)\Lambda_{t-1} + \tfrac1t\,\mathrm{diag}\{V_{t-1}\hat g_t\}^2,\quad
        V_t \xleftarrow{\text{orth}} V_{t-1} + \tfrac1t V_{t-1}\hat g_t \hat g_t^\top,

    and the sketch :math:`S_t = (t\Lambda_t)^{1/2} V_t`,
    :math:`H_t = \mathrm{diag}\{1/(\alpha + t\Lambda_t)\}` (Alg. 3), so
    :math:`A_t = \alpha I + V_t^\top t\Lambda_t V_t`. The orthonormalisation is Gram-Schmidt in row
    order, kept sparse as the paper describes (Alg. 5, App. H): :math:`V = FZ` with
    :math:`Z \leftarrow Z + \delta \hat g^\top`, :math:`\delta = Z\hat g / t`, the Gram matrix
    :math:`K = ZZ^\top` updated in O(m^2), and :math:`F \leftarrow L^{-1} F` where :math:`LL^\top` is
    the Gram matrix of the rows of :math:`F(Z + \delta\hat g^\top)`,
    :math:`F K F^\top + \tfrac1t(2 + \tfrac1t\|\hat g\|^2)(V\hat g)(V\hat g)^\top` (row-order
    Gram-Schmidt is this Cholesky factor; forming it before :math:`K` grows along :math:`\delta` keeps
    it accurate where Alg. 13 in the grown :math:`K` loses digits). The weights are
    :math:`u = \bar u + Z^\top b` (Eq. 5-6), so a round with ``s`` non-zeros costs O(m^3 + m s),
    independent of the dimension ``d`` (see :class:`~kons.linear._factored.FactoredBasis` for the
    rare O(m^2 d) re-basing). The sketch has ``k = min(sketch_size, d)`` rows; ``sketch_size=0`` is
    :class:`~kons.OGD` with the constant step :math:`1/\alpha`.

    Parameters
    ----------
    loss : {"squared", "logistic", "squared_hinge", "hinge"}, default "squared"
    alpha : float, default 1.0
        Regulariser :math:`\alpha`; :math:`1/\alpha` is the step size (the parameter tuned in Sec. 5).
    eta : float or None, default None
        :math:`\hat g_t = \sqrt{\eta}\, g_t`; None takes the loss's curvature :math:`\sigma(C)`.
    C : float, default 1.0
        Predictions are clipped to :math:`[-C, C]`.
    sketch_size : int, default 10
        ``m``, the number of tracked directions.
    diagonal : bool, default False
        Feed :math:`D_t^{-1/2} x_t` (Sec. 5.2, the variant of the paper's Table 3).
    seed : int, default 0
        Seed of the random orthonormal initial directions.
    dim : int or None, default None

    Examples
    --------
    >>> import numpy as np
    >>> from kons import OjaSON
    >>> X = np.random.default_rng(0).normal(size=(400, 5))
    >>> y = np.sign(X @ [1.0, -1.0, 0.5, 0.0, 0.2])
    >>> m = OjaSON(loss="squared", alpha=8.0, C=1.0, sketch_size=3)
    >>> played = m.learn_many(X, y)
    >>> bool(np.mean(np.sign(played[200:]) != y[200:]) < 0.25), m.stats()["rounds"]
    (True, 400)
    >>> m.predict_one({"indices": [0, 1], "values": [1.0, -1.0]}) > 0
    True
    """

    name = "oja_son"
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
        k = min(self.sketch_size, self._dim)
        self._basis = FactoredBasis.start(k, self._dim, self._generator)  # random directions
        self._t = 0
        self._lam = np.zeros(k)  # Lambda
        self._h = np.full(k, 1.0 / self.alpha)  # H = diag(1 / (alpha + t Lambda))

    @classmethod
    def _model_floats(cls, dim: int, params: dict[str, Any]) -> int:
        k: int = min(params["sketch_size"], dim)
        # the basis (its random start draws a Gaussian (d, k) first), Lambda and H (k,)
        return super()._model_floats(dim, params) + FactoredBasis.floats(k, dim) + k * dim + 2 * k

    def _metric(self, f: Features) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        r""":math:`Z x`, :math:`V x`, the weights :math:`(t-1) \Lambda H` of the previous round (as in
        Alg. 4) and :math:`\alpha x^\top A^{-1} x` (the sketch's)."""
        zx = f.cols(self._basis.Z)
        vx = self._basis.F @ zx
        weight = self._t * self._lam * self._h
        return zx, vx, weight, f.sq_norm - float(vx @ (weight * vx))

    def _quad(self, row: Features) -> float:
        return self._metric(row)[3] / self.alpha

    def _round(self, f: Features, y: float) -> tuple[float, float, float]:
        alpha, xx, F, t = self.alpha, f.sq_norm, self._basis.F, self._t
        zx, vx, weight, denom = self._metric(f)
        self._played_quad = denom / alpha
        y_hat, excess = self._play(f.dot(self._basis.ubar) + float(self._basis.b @ zx))
        gamma = projection_step(excess, denom)
        b = self._basis.b + gamma * (F.T @ (weight * vx))  # Eq. 6
        gdot = self._loss.derivative(y_hat, y)
        c = self._sqrt_eta * gdot  # g_hat = c x
        t1 = t + 1
        rate = 1.0 / t1  # Gamma_t = I / t
        lam = (1.0 - rate) * self._lam + rate * (c * vx) ** 2  # Eq. 4
        Z, K, F1, zx1, cols, shift, rebased = self._basis.Z, self._basis.K, F, zx, None, 0.0, None
        if c != 0.0 and len(zx) and f.nonzero:
            if FactoredBasis.conditioning(F, K) > REBASE_AT:  # keep K = ZZ' well-conditioned
                rebased = self._basis.rebased(b, slice(None))  # the support: every column (random start)
                _, Z, F, K = rebased
                b = np.zeros_like(b)
                zx = f.cols(Z)
            zg = c * zx  # Z g_hat
            vg = F @ zg  # V g_hat
            delta = rate * zg  # F^{-1} Gamma F Z g_hat with Gamma = I / t
            # Orthonormalise F (Z + delta g_hat') by Gram-Schmidt in row order (Alg. 5, line 4): the Gram
            # matrix of its rows is W = F K F' + rate (2 + rate |g_hat|^2) (V g_hat)(V g_hat)', taken
            # before K grows along delta, and Gram-Schmidt is F <- chol(W)^{-1} F.
            W = F @ K @ F.T
            W = 0.5 * (W + W.T) + (rate * (2.0 + rate * c * c * xx)) * np.outer(vg, vg)
            try:
                # (LAPACK's trtrs is slow here; the arguments positional, as kons._numerics passes them: f2py
                # parses keywords slowly) (alpha, a, b, side: left, lower)
                F1 = dtrsm(1.0, np.linalg.cholesky(W), F, 0, 1)
            except np.linalg.LinAlgError:
                raise NumericalError("Oja's directions became linearly dependent.") from None
            K = K + np.outer(delta, zg) + np.outer(zg, delta) + (c * c * xx) * np.outer(delta, delta)
            cols = Z[:, f.index] + np.outer(delta, c * f.values)  # Z += delta g_hat'
            zx1 = zx + delta * (c * xx)
            shift = c * float(delta @ b)
        h = 1.0 / (alpha + t1 * lam)
        b = b + (gdot / alpha) * (F1.T @ (t1 * lam * h * (F1 @ zx1)))  # Eq. 5
        delta_u = -(gamma + gdot / alpha + shift) * f.values  # u_bar = w_bar - g/alpha - (delta'b) g_hat
        check_finite(b, lam, h, K, F1, delta_u, 0.0 if cols is None else cols,
                     0.0 if rebased is None else rebased[0])
        if rebased is not None:
            self._basis.ubar += rebased[0]
            self._basis.Z = Z
            self._basis.rebases += 1
        if cols is not None:
            self._basis.Z[:, f.index] = cols
            self._basis.K, self._basis.F = K, F1
        self._t, self._lam, self._h, self._basis.b = t1, lam, h, b
        self._basis.ubar[f.index] += delta_u
        return y_hat, leverage(c, denom / alpha), gdot

    def eigenvalues(self) -> np.ndarray:
        """Eigenvalue estimates :math:`t\\Lambda_t` of :math:`\\sum_s \\hat g_s \\hat g_s^\\top` (k,)."""
        return self._t * self._lam if self._has_model else np.zeros(0)

    def directions(self) -> np.ndarray:
        """The current orthonormal directions :math:`V = FZ` (k, d); O(k^2 d)."""
        return self._basis.F @ self._basis.Z if self._has_model else np.zeros((0, 0))

    def _margin(self, f: Features) -> float:
        return self._basis.margin(f)

    def _model_stats(self) -> dict[str, Any]:
        return {"rebases": self._basis.rebases, "top_eigenvalue": float(self.eigenvalues().max(initial=0.0))}

    def _arrays(self) -> dict[str, np.ndarray]:
        return {**self._basis.arrays(), **super()._arrays(), "lam": self._lam, "h": self._h}

    def _scalars(self) -> dict[str, Any]:
        return {"rebases": self._basis.rebases, "t": self._t}

    def _restore(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        super()._restore(arrays, scalars)
        k = min(self.sketch_size, self._dim)
        self._basis = FactoredBasis.restore(arrays, scalars, k, self._dim)
        self._lam = checked_vector(arrays["lam"], k)
        self._h = checked_vector(arrays["h"], k)
        self._t = int(scalars["t"])
