r"""Kernel Online Newton Step (KONS; Calandriello, Lazaric, Valko, ICML 2017, Alg. 1)."""

from __future__ import annotations

from typing import Any

import numpy as np

from kons.kernel._newton import KernelNewton
from kons.kernels import RBF, Kernel

__all__ = ["KONS"]


class KONS(KernelNewton):
    r"""Exact second-order online kernel learning.

    Each round plays the clipped prediction of ONS with the prediction projection (paper Eq. 1)

    .. math::
        \bar y_t = \phi_t^\top u_t,\quad \hat y_t = \bar y_t - h(\bar y_t),\quad
        A_t = A_{t-1} + \eta\, \dot g_t^2\, \phi_t \phi_t^\top,

    in the dual form of ``docs/kons-math.md``. Every round with a non-zero gradient joins the
    dictionary, so a round costs O(t^2) time and the state O(t^2) memory.

    Parameters
    ----------
    kernel : Kernel or dict, default RBF(gamma=1.0)
        Kernel, or its JSON description such as ``{"name": "rbf", "gamma": 0.5}``.
    loss : {"squared", "logistic", "squared_hinge", "hinge"}, default "squared"
    alpha : float, default 1.0
        Regulariser :math:`\alpha` in :math:`A_0 = \alpha I`.
    eta : float or None, default None
        Step :math:`\eta`; None takes the loss's curvature constant :math:`\sigma(C)` (Thm. 1).
    C : float, default 1.0
        Predictions are clipped to :math:`[-C, C]`.
    dim : int or None, default None
        Input dimension; None fixes it at the first round.

    Examples
    --------
    >>> import numpy as np
    >>> from kons import KONS
    >>> from kons.kernels import RBF
    >>> model = KONS(kernel=RBF(gamma=0.5), loss="squared", C=2.0)
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2)); Y = np.sin(X[:, 0])
    >>> played = model.learn_many(X, Y)
    >>> bool(np.mean((played[100:] - Y[100:]) ** 2) < np.mean(Y[100:] ** 2))
    True
    >>> model.stats()["dictionary_size"] <= 200
    True
    """

    name = "kons"

    def __init__(
        self,
        *,
        kernel: Kernel | dict[str, Any] = RBF(gamma=1.0),  # noqa: B008 - kernels are immutable
        loss: str = "squared",
        alpha: float = 1.0,
        eta: float | None = None,
        C: float = 1.0,
        dim: int | None = None,
    ) -> None:
        self._set_params(kernel=kernel, loss=loss, alpha=alpha, eta=eta, C=C, dim=dim)
        self._reset()

    def _decide(self, x: np.ndarray, kxx: float, scale: float) -> tuple[bool, Any]:
        return True, None
