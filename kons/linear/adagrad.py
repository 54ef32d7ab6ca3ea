r"""Diagonal AdaGrad (Duchi, Hazan, Singer 2011) with SON's prediction projection."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from kons._numerics import check_finite
from kons._validation import POSITIVE, Constraint
from kons.linear._learner import Features, LinearLearner
from kons.linear._linalg import checked_vector

__all__ = ["AdaGrad"]


class AdaGrad(LinearLearner):
    r"""Diagonal AdaGrad, projected onto :math:`|w^\top x_t| \le C` in its own metric before each prediction.

    With :math:`A_t = \mathrm{diag}(\delta + \sqrt{\textstyle\sum_{s\le t} g_s^2})/\eta` (coordinate-wise),
    round :math:`t` is Alg. 1's projection (Lemma 1) followed by AdaGrad's step:

    .. math::
        w_t = u_t - \frac{\tau_C(u_t^\top x_t)}{x_t^\top A_{t-1}^{-1} x_t} A_{t-1}^{-1} x_t,\qquad
        u_{t+1} = w_t - A_t^{-1} g_t.

    O(s) per round for an example with ``s`` non-zeros.

    Parameters
    ----------
    loss : {"squared", "logistic", "squared_hinge", "hinge"}, default "squared"
    eta : float, default 1.0
        Step size (the scale of :math:`A_t^{-1}`).
    delta : float, default 1e-8
        Added to the root of the accumulated squared gradients so that :math:`A_t` is invertible.
    C : float, default 1.0
        Predictions are clipped to :math:`[-C, C]`.
    dim : int or None, default None

    Examples
    --------
    >>> import numpy as np
    >>> from kons import AdaGrad
    >>> X = np.random.default_rng(0).normal(size=(400, 5))
    >>> y = np.sign(X @ [1.0, -1.0, 0.5, 0.0, 0.2])
    >>> m = AdaGrad(loss="logistic", eta=1.0, C=5.0)
    >>> played = m.learn_many(X, y)
    >>> bool(np.mean(np.sign(played[200:]) != y[200:]) < 0.25), m.stats()["rounds"]
    (True, 400)
    >>> m.predict_one({"indices": [0, 1], "values": [1.0, -1.0]}) > 0
    True
    """

    name = "adagrad"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        **LinearLearner._parameter_constraints, "eta": POSITIVE, "delta": POSITIVE,
    }

    eta: float
    delta: float

    def __init__(
        self,
        *,
        loss: str = "squared",
        eta: float = 1.0,
        delta: float = 1e-8,
        C: float = 1.0,
        dim: int | None = None,
    ) -> None:
        self._set_params(loss=loss, eta=eta, delta=delta, C=C, dim=dim)
        self._reset()

    def _reset_model(self) -> None:
        super()._reset_model()
        self._w = np.zeros(self._dim)
        self._sum_sq = np.zeros(self._dim)

    @classmethod
    def _model_floats(cls, dim: int, params: dict[str, Any]) -> int:
        return super()._model_floats(dim, params) + 2 * dim

    def _margin(self, f: Features) -> float:
        return f.dot(self._w)

    def _round(self, f: Features, y: float) -> tuple[float, float, float]:
        x = f.values
        inv_old = self.eta / (self.delta + np.sqrt(self._sum_sq[f.index]))  # diag of A_{t-1}^{-1}
        y_hat, excess = self._play(f.dot(self._w))
        gamma = excess / float(x * inv_old @ x) if excess != 0.0 else 0.0
        gdot = self._loss.derivative(y_hat, y)
        g = gdot * x
        sum_sq = self._sum_sq[f.index] + g * g
        delta = -gamma * inv_old * x - self.eta / (self.delta + np.sqrt(sum_sq)) * g
        check_finite(delta, sum_sq)
        self._w[f.index] += delta
        self._sum_sq[f.index] = sum_sq
        return y_hat, 0.0, gdot

    def _arrays(self) -> dict[str, np.ndarray]:
        return {"w": self._w, "sum_sq": self._sum_sq, **super()._arrays()}

    def _restore(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        super()._restore(arrays, scalars)
        self._w = checked_vector(arrays["w"], self._dim)
        self._sum_sq = checked_vector(arrays["sum_sq"], self._dim)
