r"""The mixture of :class:`~kons.Auto`: Vovk's aggregating algorithm over its experts' plays, with the
switching weights of :class:`~kons._tracking.SwitchingWeights`. The losses it mixes, their learning rates and
the bounds they are proved under are described in :mod:`kons.auto`."""

from __future__ import annotations

import math

import numpy as np

from kons._tracking import RATES, SwitchingWeights
from kons.preprocessing import TARGET_BOUND

__all__ = ["MIX_BOUND", "Mixture"]

#: The interval [-B, B] of standardised targets on which the mixture is Vovk's aggregating algorithm:
#: learning rate 1/(2 B^2) and Vovk's substitution. A wider interval slows the mixture down (measured
#: with B = 5: bodyfat, 252 rows, 0.140 -> 0.174 relative MSE) for the rare targets beyond 3 deviations.
MIX_BOUND = TARGET_BOUND

#: Floor of a probability whose log is taken (the smallest positive normal float64).
_TINY = float(np.finfo(float).tiny)


def _log_sigmoid(margin: np.ndarray) -> np.ndarray:
    logged: np.ndarray = -np.logaddexp(0.0, -margin)
    return logged


class Mixture:
    r"""Vovk's aggregating algorithm over ``experts`` predictions on standardised data, with switching
    weights (:class:`~kons._tracking.SwitchingWeights`): it competes with the best *sequence* of experts.

    ``binary``: the log loss of probabilities, plays the score of the Bayes mixture; else the squared loss
    on :math:`[-B, B]`, :math:`B` = :data:`MIX_BOUND`. Every play is clipped at ``bound`` (the bases' own).
    ``active``: the experts in play at the start (the first ones; the others enter by :meth:`enter`).
    """

    def __init__(self, *, binary: bool, bound: float, experts: int, active: int | None = None,
                 rates: tuple[float, ...] = RATES) -> None:
        self.binary = binary
        self.bound = bound
        self.switching = SwitchingWeights(experts, experts if active is None else active, rates)

    def weights(self) -> np.ndarray:
        return self.switching.weights()

    def mix(self, preds: np.ndarray) -> float:
        """The aggregating algorithm's play for the experts' predictions ``preds``."""
        w = self.weights()
        bound = self.bound
        if self.binary:
            p = float(w @ np.exp(_log_sigmoid(preds)))
            p = min(max(p, 1.0 / (1.0 + math.exp(bound))), 1.0 / (1.0 + math.exp(-bound)))
            return math.log(p / (1.0 - p))
        eta = 1.0 / (2.0 * MIX_BOUND * MIX_BOUND)
        log_w = np.log(np.maximum(w, 1e-300))

        def g(y: float) -> float:
            return -float(np.logaddexp.reduce(log_w - eta * (preds - y) ** 2)) / eta

        # Vovk's substitution on [-MIX_BOUND, MIX_BOUND]; it follows bases that agree beyond that
        # interval (one expert's f gives f), so the play is clipped at the bases' own bound.
        return min(max((g(-MIX_BOUND) - g(MIX_BOUND)) / (4.0 * MIX_BOUND), -bound), bound)

    def mix_probabilities(self, probabilities: np.ndarray) -> np.ndarray:
        r"""The aggregating algorithm's play for the experts' class probabilities (experts, K): for the
        log loss, 1-mixable for any K, the Bayes mixture :math:`p = \sum_i w_i p_i`."""
        mixed: np.ndarray = self.weights() @ probabilities
        return mixed

    def losses(self, plays: np.ndarray, t: float) -> np.ndarray:
        r"""The experts' losses times the mixture's learning rate: :math:`\eta \ell(f_i, t)`, whose
        :math:`e^{-\eta \ell}` is each expert's likelihood (the log loss, or the squared loss on
        :math:`[-B, B]` with :math:`\eta = 1/(2B^2)`)."""
        if self.binary:
            scaled: np.ndarray = -_log_sigmoid(t * plays)
            return scaled
        target = min(max(t, -self.bound), self.bound)
        return (plays - target) ** 2 / (2.0 * MIX_BOUND * MIX_BOUND)

    def update(self, plays: np.ndarray, t: float) -> None:
        r""":math:`w_i \leftarrow w_i e^{-\eta \ell(f_i, t)}`, then the switching weights' share."""
        self.switching.apply(self.losses(plays, t))

    @staticmethod
    def class_losses(probabilities: np.ndarray, label: int) -> np.ndarray:
        r"""The experts' log losses for K classes, :math:`-\log p_i(y)` (the log loss is 1-mixable)."""
        losses: np.ndarray = -np.log(np.maximum(probabilities[..., label], _TINY))
        return losses

    def update_probabilities(self, probabilities: np.ndarray, label: int) -> None:
        r""":math:`w_i \leftarrow w_i\, p_i(y)`, then the share: :meth:`update` for K classes."""
        self.switching.apply(self.class_losses(probabilities, label))

    def enter(self, slots: list[int], prior: float) -> None:
        """Fresh experts enter ``slots``, each with the weight ``prior``."""
        self.switching.replace(slots, prior)

