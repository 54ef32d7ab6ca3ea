r"""Linear online gradient descent with SON's prediction projection (the first-order baseline)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from kons._numerics import SCHEDULES, check_finite, scheduled_step
from kons._validation import POSITIVE, Constraint, OneOf
from kons.linear._learner import Features, LinearLearner
from kons.linear._linalg import checked_vector

__all__ = ["OGD"]


class OGD(LinearLearner):
    r"""Online gradient descent, projected onto :math:`|w^\top x_t| \le C` before each prediction.

    Round :math:`t` (Alg. 1 with :math:`A = I/\eta_t`, i.e. SON with sketch size 0):

    .. math::
        w_t = u_t - \frac{\tau_C(u_t^\top x_t)}{x_t^\top x_t}\, x_t \ \text{(Lemma 1)},\qquad
        u_{t+1} = w_t - \eta_t\, \dot g_t\, x_t,

    with :math:`\eta_t = \eta` (``"constant"``) or :math:`\eta/\sqrt t` (``"inverse_sqrt"``). O(s) per
    round for an example with ``s`` non-zeros.

    Parameters
    ----------
    loss : {"squared", "logistic", "squared_hinge", "hinge"}, default "squared"
    eta : float, default 0.5
        Base step size.
    C : float, default 1.0
        Predictions are clipped to :math:`[-C, C]`.
    schedule : {"constant", "inverse_sqrt"}, default "inverse_sqrt"
    dim : int or None, default None

    Examples
    --------
    >>> import numpy as np
    >>> from kons import OGD
    >>> X = np.random.default_rng(0).normal(size=(400, 3))
    >>> m = OGD(loss="logistic", eta=0.5, C=5.0)
    >>> played = m.learn_many(X, np.sign(X[:, 0] - X[:, 1]))
    >>> bool(np.mean(np.sign(played[200:]) != np.sign(X[200:, 0] - X[200:, 1])) < 0.1)
    True
    """

    name = "ogd"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        **LinearLearner._parameter_constraints, "eta": POSITIVE, "schedule": OneOf(SCHEDULES),
    }

    eta: float
    schedule: str

    def __init__(
        self,
        *,
        loss: str = "squared",
        eta: float = 0.5,
        C: float = 1.0,
        schedule: str = "inverse_sqrt",
        dim: int | None = None,
    ) -> None:
        self._set_params(loss=loss, eta=eta, C=C, schedule=schedule, dim=dim)
        self._reset()

    def _reset_model(self) -> None:
        super()._reset_model()
        self._w = np.zeros(self._dim)

    @classmethod
    def _model_floats(cls, dim: int, params: dict[str, Any]) -> int:
        return super()._model_floats(dim, params) + dim

    def _margin(self, f: Features) -> float:
        return f.dot(self._w)

    def _round(self, f: Features, y: float) -> tuple[float, float, float]:
        y_hat, excess = self._play(f.dot(self._w))
        gamma = excess / f.sq_norm if excess != 0.0 else 0.0  # excess != 0 implies x != 0
        gdot = self._loss.derivative(y_hat, y)
        step = scheduled_step(self.eta, self.schedule, self._rounds + 1)
        delta = -(gamma + step * gdot) * f.values
        check_finite(delta)
        self._w[f.index] += delta
        return y_hat, 0.0, gdot

    def _arrays(self) -> dict[str, np.ndarray]:
        return {"w": self._w, **super()._arrays()}

    def _restore(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        super()._restore(arrays, scalars)
        self._w = checked_vector(arrays["w"], self._dim)
