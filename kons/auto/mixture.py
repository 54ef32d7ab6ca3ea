r"""The mixture of :class:`~kons.Auto`: Vovk's aggregating algorithm over its experts' plays, with
Fixed-Share switching weights (:class:`SwitchingWeights`: Herbster and Warmuth, "Tracking the best
expert", 1998, the switching rate mixed over a small grid that includes 0, and experts that enter or are
replaced while the stream runs). The losses it mixes, their learning rates and the bounds they are
proved under: ``docs/auto.md``."""

from __future__ import annotations

import math

import numpy as np

from kons.auto.config import MIX_BOUND, RATES, SWITCHING_PRIOR

__all__ = ["MIX_BOUND", "RATES", "SWITCHING_PRIOR", "Mixture", "SwitchingWeights"]



#: The least weight an expert takes when it enters (a state holds finite numbers only; a weight that
#: underflowed to 0 would have the log -inf).
_SMALLEST_WEIGHT = float(np.finfo(float).tiny)


def _log_normalised(log_w: np.ndarray) -> np.ndarray:
    """``log_w`` minus its log-sum-exp along the last axis (rows of weights summing to 1)."""
    normalised: np.ndarray = log_w - np.logaddexp.reduce(log_w, axis=-1, keepdims=True)
    return normalised


class SwitchingWeights:
    r"""Fixed-Share weights over ``experts`` slots (the first ``active`` in play), mixed over the switching
    rates ``rates``: ``rates[0]`` is 0, with the prior weight ``1 - switching_prior``, the others share
    ``switching_prior``.

    For each rate :math:`\alpha_r` a weight vector :math:`w_r` over the active experts, and a weight
    :math:`v_r` on the rate. A round with the experts' losses :math:`\ell_i` (already multiplied by the
    mixture's learning rate :math:`\eta`, so that :math:`e^{-\ell_i}` is expert ``i``'s likelihood):

    .. math::

        v_r \leftarrow v_r \sum_i w_{r,i} e^{-\ell_i}, \qquad
        w_{r,i} \leftarrow (1 - \alpha_r) \frac{w_{r,i} e^{-\ell_i}}{\sum_j w_{r,j} e^{-\ell_j}}
        + \frac{\alpha_r}{K},

    ``K`` the number of active experts, and the mixture plays with the marginal weights
    :math:`p_i = \sum_r v_r w_{r,i}` (:meth:`weights`). This is Bayes' rule over the pairs (rate, sequence
    of experts) under the Fixed-Share prior: at every round the expert is kept with probability
    :math:`1 - \alpha` or drawn afresh. So the aggregating algorithm run with :math:`p` on an
    :math:`\eta`-mixable loss has, against any sequence of experts with ``m`` switches over ``T`` rounds,
    a cumulative loss at most

    .. math::

        L_{\text{seq}} + \frac{1}{\eta}\Big(\ln K + m \ln\frac{K}{\alpha_r} + (T - m - 1)
        \ln\frac{1}{1 - \alpha_r} + \ln\frac{1}{\pi_r}\Big)

    for every rate of the grid, :math:`\pi_r` its prior weight (Herbster and Warmuth 1998, Theorem 1;
    Vovk 1998 for the mixable losses; Cesa-Bianchi and Lugosi 2006, Sec. 5.2; the mixture over the rates
    is one more Bayes mixture, whose price is :math:`\ln(1/\pi_r)/\eta`). With :math:`\alpha = 0` in the
    grid, the price against the best single expert is the aggregating algorithm's :math:`\ln K / \eta`
    plus :math:`\ln(1/\pi_0)/\eta`, whatever the other rates; against a sequence with ``m`` switches, about
    :math:`m \ln(K T / m) / \eta` for the rate nearest ``m / T``. Assumptions: the loss is
    :math:`\eta`-mixable on the mixture's interval (the squared loss on :math:`[-B, B]` with
    :math:`\eta = 1/(2B^2)`, the log loss with :math:`\eta = 1`); the comparator may switch at arbitrary
    rounds, chosen in hindsight.

    An expert that enters at a round (:meth:`replace`: a restarted copy of a base) takes the prior
    weight ``prior`` in every :math:`w_r`, the others sharing the rest in their proportions; the bound
    then holds for sequences that use an expert only after it entered ("sleeping" experts, Freund et al.
    1997), at the price :math:`\ln(1/\text{prior})/\eta` per entry.
    """

    def __init__(self, experts: int, active: int, rates: tuple[float, ...] = RATES,
                 switching_prior: float = SWITCHING_PRIOR) -> None:
        self.rates = rates
        self.active = np.zeros(experts, dtype=bool)
        self.active[:active] = True
        others = len(rates) - 1
        prior = [1.0 - switching_prior, *[switching_prior / others] * others] if others else [1.0]
        self.log_rate_weights = np.log(prior)
        self.log_weights = np.where(self.active, -math.log(active), -math.inf) * np.ones((len(rates), 1))
        self._log_keep = np.log1p(-np.array(rates))[:, None]
        with np.errstate(divide="ignore"):  # the rate 0 shares nothing: log 0 = -inf, exactly
            self._log_share = np.log(np.array(rates))[:, None]

    def weights(self) -> np.ndarray:
        r"""The marginal weights :math:`p_i = \sum_r v_r w_{r,i}` of the experts (0 for inactive slots)."""
        log_p = np.logaddexp.reduce(self.log_rate_weights[:, None] + self.log_weights, axis=0)
        p = np.exp(log_p - log_p.max())
        normalised: np.ndarray = p / p.sum()
        return normalised

    def rate_weights(self) -> np.ndarray:
        """The weights :math:`v_r` of the switching rates."""
        v: np.ndarray = np.exp(self.log_rate_weights)
        normalised: np.ndarray = v / v.sum()
        return normalised

    def apply(self, losses: np.ndarray) -> None:
        r"""One round: Bayes' rule with the likelihoods :math:`e^{-\ell_i}`, then the share.

        ``losses``: (experts,), :math:`\eta`-scaled; an inactive slot's value is ignored.
        """
        posterior = self.log_weights - np.where(self.active, losses, 0.0)
        evidence = np.logaddexp.reduce(posterior, axis=1)
        self.log_rate_weights = _log_normalised(self.log_rate_weights + evidence)
        posterior -= evidence[:, None]
        uniform = np.where(self.active, -math.log(int(self.active.sum())), -math.inf)
        self.log_weights = np.logaddexp(self._log_keep + posterior, self._log_share + uniform)

    def replace(self, slots: list[int], prior: float | np.ndarray) -> None:
        """Experts enter ``slots`` (whatever was there leaves), each with weight ``prior`` (one for all, or
        one each) under every rate, the other active experts keeping their proportions of the rest."""
        priors = np.broadcast_to(np.asarray(prior, dtype=float), (len(slots),))
        self.active[slots] = False
        staying = _log_normalised(np.where(self.active, self.log_weights, -math.inf))
        self.log_weights = staying + math.log1p(-float(priors.sum()))
        self.log_weights[:, slots] = np.log(priors)
        self.active[slots] = True

    def leave(self, slots: list[int]) -> None:
        """The experts of ``slots`` leave (they play no more until they enter again), the others keeping
        their proportions under every rate."""
        self.active[slots] = False
        self.log_weights = _log_normalised(np.where(self.active, self.log_weights, -math.inf))

    def reprice(self, slots: list[int], was: float, now: float) -> None:
        """Move the weights of the experts in ``slots``, which entered with the prior ``was`` each, to those
        an entry at ``now`` each would have given them: their odds against the others scaled by
        ``now (1 - n was) / (was (1 - n now))`` under every rate (``n`` experts in ``slots``)."""
        n = len(slots)
        shift = np.full(len(self.active), math.log1p(-now * n) - math.log1p(-was * n))
        shift[slots] = math.log(now / was)
        self.log_weights = _log_normalised(self.log_weights + shift)

    def arrays(self) -> dict[str, np.ndarray]:
        """The state, finite (an inactive slot's -inf is saved as 0 and restored from ``active``)."""
        return {"mix_log_weights": np.where(self.active, self.log_weights, 0.0),
                "mix_log_rate_weights": self.log_rate_weights, "mix_active": self.active}

    def restore(self, arrays: dict[str, np.ndarray]) -> bool:
        """Load :meth:`arrays`' state; False (and nothing loaded) if its shapes do not match."""
        log_weights, active = arrays["mix_log_weights"], arrays["mix_active"]
        log_rate_weights = arrays["mix_log_rate_weights"]
        if (log_weights.shape != self.log_weights.shape or active.shape != self.active.shape
                or active.dtype != np.bool_ or log_rate_weights.shape != self.log_rate_weights.shape):
            return False
        self.active = active.copy()
        self.log_weights = np.where(active, log_weights, -math.inf)
        self.log_rate_weights = log_rate_weights.copy()
        return True




#: Floor of a probability whose log is taken (the smallest positive normal float64).
_TINY = float(np.finfo(float).tiny)


def _log_sigmoid(margin: np.ndarray) -> np.ndarray:
    logged: np.ndarray = -np.logaddexp(0.0, -margin)
    return logged


class Mixture:
    r"""Vovk's aggregating algorithm over ``experts`` predictions on standardised data, with switching
    weights (:class:`~kons.auto.mixture.SwitchingWeights`): it competes with the best *sequence* of experts.

    ``binary``: the log loss of probabilities, plays the score of the Bayes mixture; else the squared loss
    on :math:`[-B, B]`, :math:`B` = :data:`MIX_BOUND`. Every play is clipped at ``bound`` (the bases' own).
    ``active``: the experts in play at the start (the first ones; the others enter by :meth:`enter`).
    """

    def __init__(self, *, binary: bool, bound: float, experts: int, active: int | None = None,
                 rates: tuple[float, ...] = RATES) -> None:
        self.binary = binary
        self.bound = bound
        self.switching = SwitchingWeights(experts, experts if active is None else active, rates)
        # the last round's plays and weights (not state: read for its spread, kons.conformal)
        self._last: tuple[np.ndarray, np.ndarray] | None = None

    def weights(self) -> np.ndarray:
        return self.switching.weights()

    def mix(self, preds: np.ndarray, weights: np.ndarray | None = None) -> float:
        """The aggregating algorithm's play for the experts' predictions ``preds`` (``weights``: the
        current :meth:`weights`, if the caller has them)."""
        w = self.weights() if weights is None else weights
        self._last = (preds, w)
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

    def spread(self) -> float:
        """The standard deviation of the last :meth:`mix`'s plays under its weights."""
        if self._last is None:
            return 0.0
        preds, w = self._last
        mean = float(w @ preds)
        return math.sqrt(max(float(w @ (preds - mean) ** 2), 0.0))

    def mix_probabilities(self, probabilities: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        r"""The aggregating algorithm's play for the experts' class probabilities (experts, K): for the
        log loss, 1-mixable for any K, the Bayes mixture :math:`p = \sum_i w_i p_i` (``weights``: as
        :meth:`mix`'s)."""
        mixed: np.ndarray = (self.weights() if weights is None else weights) @ probabilities
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

