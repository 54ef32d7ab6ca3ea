r"""Kernel Online Row Sampling (KORS; Calandriello et al. 2017, Alg. 2).

KORS keeps a weighted dictionary :math:`\mathcal I` of the rescaled points
:math:`\bar\phi_t = \sqrt{\eta}\,\dot g_t\,\phi(x_t)` and estimates each new point's ridge leverage score
with respect to it (Eq. 4, in the closed form of ``docs/kons-math.md``)

.. math::
    r_t = \bar k_{tt} - a^\top (S_I \bar K_{II} S_I + \alpha I)^{-1} a, \qquad
    \tau_t = (1 + \varepsilon)\, \frac{r_t}{r_t + \alpha},

then adds :math:`(t, 1/p_t)` with probability :math:`p_t = \min(\beta \tau_t, 1)`. With
:math:`q_i = \sqrt{\eta}\,\dot g_i / \sqrt{p_i}` the system is :math:`M = Q K_{II} Q + \alpha I`, kept as
a packed Cholesky factor, and :math:`r_t = (\sqrt{\eta}\dot g_t)^2 (k_{tt} - u^\top u)` with
:math:`u = L^{-1} Q k_{I,t}`.

This is a sampler, not a learner: :class:`~kons.SketchedKONS` owns one and drives it. A learner whose
dictionary is full (:class:`~kons.NystromKONS` at its bound) asks it nothing more and keeps only its points:
a *retired* sampler (:meth:`KORS.retire`), without the weights and factor that only its proposals use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kons._numerics import GrowableRows, GrowableVector, PackedCholesky, ridge_leverage
from kons.kernels import Kernel

__all__ = ["KORS", "KORSProposal"]


@dataclass(frozen=True)
class KORSProposal:
    """What KORS would do with one point, computed without touching its state."""

    x: np.ndarray
    kxx: float
    scale: float
    u: np.ndarray
    tau: float  # the ridge leverage score estimate of Eq. 4
    probability: float  # p_t = min(beta tau_t, 1)


class KORS:
    """Online ridge-leverage-score sampler over rescaled kernel points.

    Parameters
    ----------
    kernel : Kernel
    alpha : float
        Ridge regulariser (the learner's :math:`\\alpha`).
    beta : float
        Oversampling factor; Theorem 2 asks for :math:`\\beta \\ge 3 \\log(T/\\delta)/\\varepsilon^2`.
    epsilon : float
        Accuracy parameter :math:`\\varepsilon` of the estimates.
    dim : int
    """

    def __init__(self, kernel: Kernel, alpha: float, beta: float, epsilon: float, dim: int) -> None:
        self.kernel = kernel
        self.alpha = alpha
        self.beta = beta
        self.epsilon = epsilon
        self._points = GrowableRows(dim)
        self._weights = GrowableVector()  # q_i = sqrt(eta) gdot_i / sqrt(p_i)
        self._chol = PackedCholesky()

    @property
    def size(self) -> int:
        """Number of points in the dictionary :math:`\\mathcal I`."""
        return self._points.n

    @property
    def retired(self) -> bool:
        """Whether the sampler kept only its points (:meth:`restore` of a full dictionary's arrays): it
        proposes nothing more."""
        return self._chol.size != self._points.n

    @property
    def points(self) -> GrowableRows:
        """The dictionary's points and their squared norms (read only: a learner's kernel rows use them)."""
        return self._points

    def propose(self, x: np.ndarray, kxx: float, scale: float) -> KORSProposal:
        """Leverage estimate and inclusion probability of the point ``x`` with ``scale = sqrt(eta) gdot``."""
        points = self._points
        k = self.kernel.row(x, points.view, points.sq_norms.view)
        u = self._chol.solve(self._weights.view * k)
        r = scale * scale * max(kxx - float(u @ u), 0.0)
        tau = (1.0 + self.epsilon) * ridge_leverage(r / self.alpha)  # r / (r + alpha), NaN-free
        return KORSProposal(x, kxx, scale, u, tau, min(self.beta * tau, 1.0))

    def add(self, proposal: KORSProposal) -> None:
        """Add the proposed point with weight :math:`1/p_t`."""
        q = proposal.scale / math.sqrt(proposal.probability)
        u = proposal.u
        diagonal = math.sqrt(self.alpha + q * q * max(proposal.kxx - float(u @ u), 0.0))
        self._points.append(proposal.x)
        self._weights.append(q)
        self._chol.append(q * u, diagonal)

    def retire(self) -> None:
        """Keep the points only, the weights and the factor let go: the dictionary is full, nothing more
        will be proposed."""
        self._weights, self._chol = GrowableVector(), PackedCholesky()

    def arrays(self) -> dict[str, np.ndarray]:
        """The points and their squared norms, and (not retired) the weights and the factor."""
        points = {"kors_points": self._points.view, "kors_sq_norms": self._points.sq_norms.view}
        if self.retired:
            return points
        return {**points, "kors_weights": self._weights.view, "kors_chol": self._chol.packed}

    def restore(self, arrays: dict[str, np.ndarray], dim: int, *, retired: bool = False) -> None:
        """The sampler saved as ``arrays``; ``retired``: its points only (any weights and factor saved are
        left out), for a dictionary that is full."""
        self._points = GrowableRows(dim, arrays["kors_points"], arrays["kors_sq_norms"])
        if retired:
            self.retire()
            return
        self._weights = GrowableVector(arrays["kors_weights"])
        self._chol = PackedCholesky(arrays["kors_chol"])
        if not (self._points.n == len(self._weights.view) == self._chol.size):
            raise ValueError("KORS arrays are inconsistent")
