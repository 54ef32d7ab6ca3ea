r"""The dual-form kernel Online Newton Step shared by :class:`~kons.KONS` and :class:`~kons.SketchedKONS`.

State (``docs/kons-math.md``, "Dual form"): stored points :math:`x_i` with coefficients :math:`\beta_i`, so
that :math:`u_t = A_{t-1}^{-1}\Phi\beta`; the dictionary :math:`R` (points whose coin :math:`z_i = 1`)
with scales :math:`d_i = \sqrt{\eta}\,\dot g_i`; the Cholesky factor :math:`L` of
:math:`E = D_R K_{RR} D_R + \alpha I` (packed, appended one row per new member); and
:math:`w = L^{-1} D_R m_R` with :math:`m_R = (K\beta)_R`, kept incrementally so that a round needs a
single triangular solve.

One round costs one kernel row over the stored points, O(n d), plus one solve with :math:`L`, O(|R|^2).
"""

from __future__ import annotations

import abc
import math
from typing import Any, ClassVar

import numpy as np

from kons._numerics import MIN_CAPACITY, TINY, GrowableRows, GrowableVector, PackedCholesky, ridge_leverage
from kons._validation import POSITIVE, REGULARISER, Constraint, NoneOr
from kons.base import Learner
from kons.conformal import LEVERAGE_EXPONENT
from kons.errors import NumericalError
from kons.kernels import Kernel, KernelParameter

__all__ = ["KernelNewton"]


class KernelNewton(Learner):
    """Base of the second-order kernel learners; subclasses decide which rounds join the dictionary."""

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        **Learner._parameter_constraints,
        "kernel": KernelParameter(),
        "alpha": REGULARISER,
        "eta": NoneOr(POSITIVE),
    }

    uses_kernel = True
    _eta_from_curvature = True
    _spread_exponent = LEVERAGE_EXPONENT
    # Every round with a non-zero gradient stores its point: there is no learning without growing.
    grows = True
    can_hold_growth = False
    _eta: float  # resolved in _set_params, never None here
    _sqrt_eta: float

    kernel: Kernel
    alpha: float
    eta: float | None

    def _reset_model(self) -> None:
        self._points = GrowableRows(self._dim)
        self._beta = GrowableVector()
        self._dict_index = GrowableVector(dtype=np.int64)  # positions in _points of R's members
        self._dict_scale = GrowableVector()  # d_i = sqrt(eta) gdot_i
        self._dict_kbeta = GrowableVector()  # m_R = (K beta)_R
        self._whitened = GrowableVector()  # w = L^{-1} D_R m_R
        self._chol = PackedCholesky()

    @classmethod
    def _model_floats(cls, dim: int, params: dict[str, Any]) -> int:
        # the first stored point's buffers: points (16, d), squared norms, beta and the dictionary's
        return MIN_CAPACITY * (dim + 7)

    def _growth_floats(self, rounds: int) -> int:
        # Per stored point: the point, its squared norm, beta and, as a dictionary member, its index,
        # scale, (K beta) entry, whitened entry and a row of the factor (one longer for each member).
        members = self._chol.size
        return rounds * (self._dim + 6 + members) + rounds * (rounds + 1) // 2

    # ----------------------------------------------------------------- the round
    def _dual_terms(self, x: np.ndarray) -> tuple[np.ndarray, float, np.ndarray, float, float, float]:
        """Kernel row ``k``, ``k(x,x)``, ``v = L^{-1} D_R k_R``, ``k'beta``, ``y_bar`` and ``s``."""
        points = self._points
        k = self.kernel.row(x, points.view, points.sq_norms.view)
        kxx = self.kernel.diag(x)
        v = self._chol.solve(self._dict_scale.view * k[self._dict_index.view])
        k_beta = float(k @ self._beta.view)
        # ybar_t = (k_t' beta - (D k_R)' E^{-1} (D m_R)) / alpha
        # s_t = (k_tt - (D k_R)' E^{-1} (D k_R)) / alpha
        y_bar = (k_beta - float(v @ self._whitened.view)) / self.alpha
        s = (kxx - float(v @ v)) / self.alpha
        return k, kxx, v, k_beta, y_bar, s

    def _predict(self, x: np.ndarray) -> float:
        terms = self._dual_terms(x)
        self._played_row, self._played_quad = None, terms[5]  # the leverage of the row, for _spread
        return terms[4]

    def _learn(self, x: np.ndarray, y: float) -> tuple[float, float]:
        k, kxx, v, k_beta, y_bar, s = self._dual_terms(x)
        self._played_row, self._played_quad = None, s
        if not (math.isfinite(y_bar) and math.isfinite(s)):
            raise NumericalError("the round overflowed (prediction or variance is not finite).")
        # s_t = phi' A^{-1} phi > 0 in exact arithmetic; rounding can leave it at or below zero, and a
        # projection step h/s with s ~ 0 then overflows and is rejected below instead of corrupting state.
        s = max(s, TINY)
        y_hat = self._clip(y_bar)
        excess = y_bar - y_hat  # h(ybar_t)
        gdot = self._loss.derivative(y_hat, y)
        scale = self._sqrt_eta * gdot
        leverage = ridge_leverage(scale * scale * s)

        join, pending = self._decide(x, kxx, scale) if gdot != 0.0 else (False, None)
        # beta_t = z_t eta gdot^2 yhat_t - gdot_t - h(ybar_t) / s_t   (docs/kons-math.md, "Dual form")
        beta_t = -gdot - (excess / s if excess != 0.0 else 0.0)
        if join:
            beta_t += scale * scale * y_hat
        k_dict = k[self._dict_index.view]
        kbeta_dict = self._dict_kbeta.view + beta_t * k_dict
        whitened = self._whitened.view + beta_t * v
        if join:
            # New row of E's factor: l = L^{-1} e = scale * v, d^2 = alpha + scale^2 (k_tt - v'v).
            kbeta_new = k_beta + kxx * beta_t
            diagonal = math.sqrt(self.alpha + scale * scale * self.alpha * s)
            whitened_new = (scale * kbeta_new - scale * float(v @ whitened)) / diagonal
            extra: tuple[float, ...] = (kbeta_new, diagonal, whitened_new)
        else:
            extra = ()
        if not (math.isfinite(beta_t) and np.isfinite(extra).all()
                and np.isfinite(kbeta_dict).all() and np.isfinite(whitened).all()):
            raise NumericalError("the round would put a non-finite number into the state.")

        # Commit: nothing above has touched the state.
        self._dict_kbeta.view[:] = kbeta_dict
        self._whitened.view[:] = whitened
        if beta_t != 0.0 or join:
            position = self._points.n
            self._points.append(x)
            self._beta.append(beta_t)
            if join:
                self._dict_index.append(position)
                self._dict_scale.append(scale)
                self._dict_kbeta.append(extra[0])
                self._chol.append(scale * v, extra[1])
                self._whitened.append(extra[2])
        self._commit(pending)
        return y_hat, leverage

    @abc.abstractmethod
    def _decide(self, x: np.ndarray, kxx: float, scale: float) -> tuple[bool, Any]:
        """Whether the round (with ``scale = sqrt(eta) gdot != 0``) joins the dictionary.

        May draw random numbers (a round that then fails takes them back, :meth:`Learner._learn_checked`);
        returns a token passed to :meth:`_commit` once the round has succeeded.
        """

    def _commit(self, pending: Any) -> None:
        """Make the side effects of :meth:`_decide` permanent (the round succeeded)."""

    # ----------------------------------------------------------------- statistics and state
    def _model_stats(self) -> dict[str, Any]:
        return {"stored_points": self._points.n, "dictionary_size": self._chol.size}

    def _arrays(self) -> dict[str, np.ndarray]:
        points = self._points
        return {
            "points": points.view,
            "points_sq_norms": points.sq_norms.view,
            "beta": self._beta.view,
            "dict_index": self._dict_index.view,
            "dict_scale": self._dict_scale.view,
            "dict_kbeta": self._dict_kbeta.view,
            "whitened": self._whitened.view,
            "chol": self._chol.packed,
        }

    def _restore(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        points = arrays["points"]
        if points.ndim != 2 or points.shape[1] != self._dim:
            raise ValueError("stored points do not match the learner's dimension")
        self._points = GrowableRows(self._dim, points, arrays["points_sq_norms"])
        self._beta = GrowableVector(arrays["beta"])
        self._dict_index = GrowableVector(arrays["dict_index"], dtype=np.int64)
        self._dict_scale = GrowableVector(arrays["dict_scale"])
        self._dict_kbeta = GrowableVector(arrays["dict_kbeta"])
        self._whitened = GrowableVector(arrays["whitened"])
        self._chol = PackedCholesky(arrays["chol"])
        sizes = {len(self._dict_index.view), len(self._dict_scale.view),
                 len(self._dict_kbeta.view), len(self._whitened.view), self._chol.size}
        index = self._dict_index.view
        if (len(sizes) != 1 or len(self._beta.view) != self._points.n
                or (len(index) and (index.min() < 0 or index.max() >= self._points.n))):
            raise ValueError("dictionary arrays are inconsistent")

    # ----------------------------------------------------------------- diagnostics
    def factor_drift(self) -> float:
        """Largest relative gap between the incremental factor and a fresh Cholesky of :math:`E`.

        O(|R|^3): for tests and monitoring, not the hot path.
        """
        if self._chol.size == 0:
            return 0.0
        members = self._points.view[self._dict_index.view]
        scale = self._dict_scale.view
        E = scale[:, None] * self.kernel.gram(members, members) * scale[None, :]
        E[np.diag_indices_from(E)] += self.alpha
        fresh = np.linalg.cholesky(E)
        return float(np.abs(fresh - self._chol.to_dense()).max() / np.abs(fresh).max())
