r"""Sketched-KONS (Calandriello, Lazaric, Valko, ICML 2017, Alg. 3)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from kons._numerics import MIN_CAPACITY
from kons._validation import POSITIVE, Constraint, Integer, Interval
from kons.kernel._newton import KernelNewton
from kons.kernel.kors import KORS, KORSProposal
from kons.kernels import RBF, Kernel

__all__ = ["SketchedKONS"]


class SketchedKONS(KernelNewton):
    r"""KONS whose second-order matrix only takes the rounds selected by ridge leverage scores.

    Each round with a non-zero gradient runs KORS (Alg. 2, :class:`~kons.kernel.kors.KORS`) to estimate its
    ridge leverage score :math:`\tau_t`; KORS keeps the point with probability
    :math:`p_t = \min(\beta\tau_t, 1)`, and an independent coin :math:`z_t` with probability
    :math:`\max(p_t, \gamma)` decides whether :math:`\eta\dot g_t^2\phi_t\phi_t^\top` enters
    :math:`\tilde A_t` (the dictionary :math:`R`). With ``gamma=1`` every coin succeeds and this is
    :class:`~kons.KONS` exactly. A round costs O(n d + |R|^2 + |I|^2) for ``n`` stored points.

    Parameters
    ----------
    kernel, loss, alpha, eta, C, dim
        As in :class:`~kons.KONS`.
    beta : float, default 1.0
        KORS oversampling factor (Thm. 2 asks for :math:`3\log(T/\delta)/\varepsilon^2`; smaller values
        trade accuracy for a smaller dictionary).
    epsilon : float, default 0.5
        KORS accuracy :math:`\varepsilon \in (0, 1)`.
    gamma : float, default 0.0
        Floor on the dictionary probability, :math:`\gamma \in [0, 1]`.
    seed : int, default 0
        Seed of the learner's own random generator (its state is saved with the learner).

    Examples
    --------
    >>> import numpy as np
    >>> from kons import SketchedKONS
    >>> from kons.kernels import RBF
    >>> m = SketchedKONS(kernel=RBF(gamma=0.5), loss="squared", alpha=1.0, eta=0.1, C=3.0,
    ...                  beta=1.0, epsilon=0.5, gamma=0.0, seed=0)
    >>> X = np.random.default_rng(1).normal(size=(300, 3))
    >>> played = m.learn_many(X, np.cos(X[:, 0]))
    >>> s = m.stats()
    >>> s["rounds"], s["dictionary_size"] < 300
    (300, True)
    """

    name = "sketched_kons"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        **KernelNewton._parameter_constraints,
        "beta": POSITIVE,
        "epsilon": Interval(low=0.0, high=1.0, low_open=True, high_open=True),
        "gamma": Interval(low=0.0, high=1.0),
        "seed": Integer(low=0),
    }

    beta: float
    epsilon: float
    gamma: float
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
        gamma: float = 0.0,
        seed: int = 0,
        dim: int | None = None,
    ) -> None:
        self._set_params(kernel=kernel, loss=loss, alpha=alpha, eta=eta, C=C, beta=beta, epsilon=epsilon,
                         gamma=gamma, seed=seed, dim=dim)
        self._reset()

    def _reset_model(self) -> None:
        super()._reset_model()
        self._kors = KORS(self.kernel, self.alpha, self.beta, self.epsilon, self._dim)

    @classmethod
    def _model_floats(cls, dim: int, params: dict[str, Any]) -> int:
        return super()._model_floats(dim, params) + MIN_CAPACITY * (dim + 3)  # KORS's points, weights, factor

    def _growth_floats(self, rounds: int) -> int:
        # and KORS's dictionary: the point, its squared norm, its weight and a row of its factor
        kors = self._kors.size
        return (super()._growth_floats(rounds) + rounds * (self._dim + 2 + kors)
                + rounds * (rounds + 1) // 2)

    def _uniform(self) -> float:
        """One U[0, 1) draw from the learner's generator (tests override it to force coins)."""
        return float(self._generator.random())

    def _decide(self, x: np.ndarray, kxx: float, scale: float) -> tuple[bool, KORSProposal | None]:
        proposal = self._kors.propose(x, kxx, scale)
        kors_keeps = self._uniform() < proposal.probability  # KORS's coin (Alg. 2)
        joins = self._uniform() < max(proposal.probability, self.gamma)  # z_t (Alg. 3)
        return joins, proposal if kors_keeps else None

    def _commit(self, pending: KORSProposal | None) -> None:
        if pending is not None:
            self._kors.add(pending)

    def _model_stats(self) -> dict[str, Any]:
        return {**super()._model_stats(), "kors_size": self._kors.size}

    def _arrays(self) -> dict[str, np.ndarray]:
        return {**super()._arrays(), **self._kors.arrays()}

    def _restore(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        super()._restore(arrays, scalars)
        self._kors = KORS(self.kernel, self.alpha, self.beta, self.epsilon, self._dim)
        self._kors.restore(arrays, self._dim)
