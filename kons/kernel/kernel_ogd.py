r"""Kernel online gradient descent (functional OGD, NORMA without shrinkage): the first-order baseline."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from kons._numerics import MIN_CAPACITY, SCHEDULES, GrowableRows, GrowableVector, scheduled_step
from kons._validation import POSITIVE, Constraint, OneOf
from kons.base import Learner
from kons.errors import NumericalError
from kons.kernels import RBF, Kernel, KernelParameter

__all__ = ["KernelOGD"]


class KernelOGD(Learner):
    r"""First-order functional gradient descent with prediction clipping.

    :math:`f_t = \sum_i c_i k(x_i, \cdot)`; round :math:`t` plays :math:`\hat y_t = \mathrm{clip}(f(x_t))`
    and appends :math:`c_t = -\eta_t \dot g_t` with :math:`\eta_t = \eta` (``"constant"``) or
    :math:`\eta/\sqrt{t}` (``"inverse_sqrt"``). O(n d) per round; only points with :math:`c_t \ne 0`
    are stored.

    Parameters
    ----------
    kernel : Kernel or dict, default RBF(gamma=1.0)
    loss : {"squared", "logistic", "squared_hinge", "hinge"}, default "squared"
    eta : float, default 0.5
        Base step size.
    C : float, default 1.0
        Clipping bound of the predictions.
    schedule : {"constant", "inverse_sqrt"}, default "inverse_sqrt"
    dim : int or None, default None

    Examples
    --------
    >>> import numpy as np
    >>> from kons import KernelOGD
    >>> m = KernelOGD(kernel={"name": "rbf", "gamma": 1.0}, loss="hinge", eta=0.5, C=1.0)
    >>> X = np.random.default_rng(0).normal(size=(100, 2))
    >>> played = m.learn_many(X, np.sign(X[:, 0]))
    >>> bool(np.mean(np.sign(played[50:]) != np.sign(X[50:, 0])) < 0.5)
    True
    """

    name = "kernel_ogd"
    uses_kernel = True
    # Every round with a non-zero gradient stores its point: there is no learning without growing.
    grows = True
    can_hold_growth = False
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        **Learner._parameter_constraints,
        "kernel": KernelParameter(),
        "eta": POSITIVE,
        "schedule": OneOf(SCHEDULES),
    }

    kernel: Kernel
    eta: float
    schedule: str

    def __init__(
        self,
        *,
        kernel: Kernel | dict[str, Any] = RBF(gamma=1.0),  # noqa: B008 - kernels are immutable
        loss: str = "squared",
        eta: float = 0.5,
        C: float = 1.0,
        schedule: str = "inverse_sqrt",
        dim: int | None = None,
    ) -> None:
        self._set_params(kernel=kernel, loss=loss, eta=eta, C=C, schedule=schedule, dim=dim)
        self._reset()

    def _reset_model(self) -> None:
        self._points = GrowableRows(self._dim)
        self._coef = GrowableVector()

    @classmethod
    def _model_floats(cls, dim: int, params: dict[str, Any]) -> int:
        # the first stored point's buffers: points (16, d), their squared norms and coefficients
        return MIN_CAPACITY * (dim + 2)

    def _growth_floats(self, rounds: int) -> int:
        return rounds * (self._dim + 2)  # a point, its squared norm and its coefficient per round

    def _predict(self, x: np.ndarray) -> float:
        points = self._points
        return float(self.kernel.row(x, points.view, points.sq_norms.view) @ self._coef.view)

    def _learn(self, x: np.ndarray, y: float) -> tuple[float, float]:
        y_bar = self._predict(x)
        if not math.isfinite(y_bar):
            raise NumericalError("the prediction overflowed for this input.")
        y_hat = self._clip(y_bar)
        step = scheduled_step(self.eta, self.schedule, self._rounds + 1)
        coef = -step * self._loss.derivative(y_hat, y)
        if not math.isfinite(coef):
            raise NumericalError("the round would put a non-finite number into the state.")
        if coef != 0.0 and not math.isfinite(self.kernel.diag(x)):
            # A stored point whose k(x, x) overflows makes every later prediction non-finite.
            raise NumericalError("the kernel value of this input overflows; it cannot be stored.")
        if coef != 0.0:
            self._points.append(x)
            self._coef.append(coef)
        return y_hat, 0.0

    def _model_stats(self) -> dict[str, Any]:
        return {"stored_points": self._points.n}

    def _arrays(self) -> dict[str, np.ndarray]:
        points = self._points
        return {"points": points.view, "points_sq_norms": points.sq_norms.view,
                "coef": self._coef.view}

    def _restore(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        if arrays["points"].ndim != 2 or arrays["points"].shape[1] != self._dim:
            raise ValueError("stored points do not match the learner's dimension")
        if len(arrays["points"]) != len(arrays["coef"]):
            raise ValueError("points and coefficients differ in number")
        self._points = GrowableRows(self._dim, arrays["points"], arrays["points_sq_norms"])
        self._coef = GrowableVector(arrays["coef"])
