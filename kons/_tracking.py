r"""Following a changing stream: switching weights for a mixture of experts and a change detector.

:class:`SwitchingWeights` is the weight bookkeeping of :class:`kons._mixture.Mixture`: Fixed-Share
(Herbster and Warmuth, "Tracking the best expert", 1998) with its switching rate mixed over a small
grid that includes 0, and experts that enter (or are replaced) while the stream runs.
:class:`LossChangeDetector` watches the mixture's own loss and says when it has risen for good,
:class:`ErrorChangeDetector` its errors (classification) and says when their rate has risen. The weights
cost O(experts x rates) per round, the detectors O(1); all keep a state of fixed size. At a declared
change, :func:`change_span` estimates its onset from the detector's steps over the last rounds
(:meth:`LossChangeDetector.steps`, :meth:`ErrorChangeDetector.steps`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["RATES", "ErrorChangeDetector", "LossChangeDetector", "Probation", "SwitchingWeights",
           "change_span"]

#: The switching rates mixed by :class:`SwitchingWeights`: 0 (the aggregating algorithm itself) and
#: rates that let the weight move to another expert within about 100 and 10 rounds. A rate of 1e-3 was
#: measured too: it wins the likelihood on stationary raw cod-rna (a slowly drifting leader) while its
#: error rate rises from 0.0728 to 0.0750, and it changed no drifting stream of ``benchmarks/drift.py``
#: by more than 1%.
RATES = (0.0, 1e-2, 1e-1)
#: The prior weight of the rates other than 0, together: a stationary stream pays at most
#: :math:`\ln(1 / 0.95) / \eta` for them (uniform weights cost bodyfat, 252 rows, 0.140 -> 0.153 relative
#: MSE; this prior 0.1403), a changing one :math:`\ln(2 / 0.05) / \eta` once to bring them in.
SWITCHING_PRIOR = 0.05


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


class Probation:
    r"""A generation started at a declared change, on trial: a false alarm should cost the other experts
    what an entry at the prior ``low`` costs, a true change should have the weight of an entry at ``entry``
    from its first play on (the rows right after a change are where the old experts lose most).

    The generation's ``n`` experts (``slots``) entered at ``entry`` each (:meth:`SwitchingWeights.replace`).
    After its first round, if its weight under the switching rate 0 is still at least ``n entry`` (that
    round's likelihood at least the other experts'), the trial ends. Else its weights are moved to an entry
    at ``low`` (:meth:`SwitchingWeights.reprice`): under the rate 0, exactly the weights Bayes' rule would
    give after that round had the generation entered at ``low``, since a change of prior only rescales the
    posterior odds. At each of its next rounds, with :math:`L_i` its experts' losses since entry and
    :math:`L` the mixture's (:math:`\eta`-scaled, so that :math:`e^{L - L_i}` is expert ``i``'s likelihood
    ratio to the mixture),

    .. math:: \pi_i = \frac{a\, e^{L - L_i}}{(1 - n a) + \sum_j a\, e^{L - L_j}}, \qquad a = \text{entry},

    is its experts' posterior at an entry at ``entry`` with the mixture standing for the other experts (whose
    likelihood it bounds from below: the aggregating algorithm's guarantee); once
    :math:`\sum_i \pi_i > n a`, that is once :math:`\frac{1}{n}\sum_i e^{L - L_i} > 1` (the generation's
    Bayes factor against the mixture above 1), its experts take the weights :math:`\pi_i` under every rate
    and the trial ends. It ends anyway ``rounds`` rounds after the entry.

    Price, in :math:`\eta`-scaled loss against the mixture without the alarm (under the rate 0): a false
    alarm whose generation never catches up costs the other experts :math:`\ln\frac{1}{1 - n\,low}` for the
    entry at ``low``, plus its first round's play at ``entry``, at most
    :math:`\ln\frac{1 - n\,low}{1 - n\,a}` more; a true change is played at ``entry`` on its first round and
    pays, while demoted, the rounds until its evidence passes the mixture's. The other rates' weights are
    moved by the same factors, which makes them an approximation there (Fixed-Share's sharing does not
    commute with a change of prior).
    """

    def __init__(self, slots: list[int], *, entry: float, low: float, rounds: int) -> None:
        self.slots = slots
        self.entry = entry
        self.low = low
        self.rounds_left = rounds
        self.demoted = False
        self.losses = np.zeros(len(slots))  # the generation's experts' since entry
        self.mixture_loss = 0.0

    def observe(self, weights: SwitchingWeights, losses: np.ndarray, mixture_loss: float) -> bool:
        """After a round whose (weighted) losses were ``losses`` (every slot's) and the mixture's
        ``mixture_loss``, weighed by ``weights`` already: demote or promote the generation in ``weights``;
        True while the trial goes on."""
        self.losses = self.losses + losses[self.slots]
        self.mixture_loss += mixture_loss
        self.rounds_left -= 1
        n = len(self.slots)
        if not self.demoted:
            kept = float(np.logaddexp.reduce(weights.log_weights[0, self.slots]))
            if kept >= math.log(self.entry * n):
                return False
            weights.reprice(self.slots, self.entry, self.low)
            self.demoted = True
            return self.rounds_left > 0
        log_generation = math.log(self.entry) + (self.mixture_loss - self.losses)
        log_evidence = np.logaddexp(math.log1p(-self.entry * n), np.logaddexp.reduce(log_generation))
        posterior = np.exp(log_generation - log_evidence)
        if posterior.sum() > self.entry * n:
            # one expert may trail the mixture by hundreds of nats (a log loss of a class probability
            # near 0) while the others carry the generation: its weight must stay a finite log
            weights.replace(self.slots, np.maximum(posterior, _SMALLEST_WEIGHT))
            return False
        return self.rounds_left > 0

    def state(self) -> dict[str, Any]:
        return {"slots": list(self.slots), "entry": self.entry, "low": self.low,
                "rounds_left": self.rounds_left, "demoted": self.demoted,
                "losses": [float(v) for v in self.losses], "mixture_loss": self.mixture_loss}

    @classmethod
    def restored(cls, state: dict[str, Any]) -> Probation:
        """The trial :meth:`state` saved; ValueError (or KeyError, TypeError) if it is not one."""
        probation = cls([int(v) for v in state["slots"]], entry=float(state["entry"]),
                        low=float(state["low"]), rounds=int(state["rounds_left"]))
        probation.demoted = bool(state["demoted"])
        probation.losses = np.array([float(v) for v in state["losses"]])
        probation.mixture_loss = float(state["mixture_loss"])
        if (len(probation.losses) != len(probation.slots) or probation.rounds_left <= 0
                or not 0.0 < probation.low < probation.entry < 1.0 / len(probation.slots)
                or not np.isfinite([*probation.losses, probation.mixture_loss]).all()):
            raise ValueError("not a trial of a generation")
        return probation


def change_span(steps: np.ndarray) -> int:
    r"""How many of the last rounds a declared change spans: the :math:`k \ge 1` whose last ``k`` steps of
    the CUSUM (``steps``, oldest first) sum highest, the first such ``k`` on a tie.

    This is the maximum-likelihood change point of the CUSUM's model (Page 1954; Hinkley, "Inference about
    the change-point from cumulative sum tests", 1971): the round after the statistic was last at its
    running minimum. A detector's own run starts at a block's boundary, or at a random error before the
    change; a span that reached into the old concept by a few rounds cost the fresh learners as much as
    the rounds it missed (measured on ``benchmarks/drift.py``, see :mod:`kons.auto`)."""
    suffix_sums = np.cumsum(steps[::-1])
    return int(np.argmax(suffix_sums)) + 1


class LossChangeDetector:
    r"""A one-sided CUSUM (Page 1954) on the ratio of the loss's block means to their recent level.

    The losses are averaged over blocks of ``block`` rounds (a block mean of heavy-tailed losses, a
    squared error or a log loss, varies far less than one round's loss), each block mean :math:`\bar\ell_k`
    divided by a reference level :math:`m` (the losses' exponentially weighted mean over about ``memory``
    rounds, frozen while a rise is being accumulated) and capped at ``cap``, so that the detector is
    blind to the loss's units:

    .. math:: g_k = \max\big(0,\ g_{k-1} + \min(\bar\ell_k / m, c) - (1 + \delta)\big),

    and a change is declared when :math:`g_k > \lambda` (``threshold``): the loss has run more than
    :math:`1 + \delta` times its level for long enough (at a ratio :math:`\rho`, after about
    :math:`\lambda / (\rho - 1 - \delta)` blocks; one block when :math:`\rho > 1 + \delta + \lambda`, as
    after a flip of the target). Falls of the loss (a learner improving) never accumulate. At a change
    the level becomes the mean ratio of the run times the old level (the new regime's), and :math:`g`
    restarts at 0. For the ``memory`` rounds after a change the level follows the block means over about
    ``recovery`` rounds rather than ``memory``: it was set to the rise's level, and the new regime's losses
    fall below it as the restarted experts learn, so a level that lagged them would leave the detector
    blind to the next change (on ``benchmarks/drift.py``'s linear target, 1,000 rounds after a change the
    level still stood 80 times above the losses of its last block). A stream without changes is not
    affected. The first ``warmup`` rounds only set the level.

    The losses being nonnegative, a block whose first rounds already carry :math:`g` past :math:`\lambda`
    whatever its other rounds (their sum divided by the whole block, over :math:`m`) is declared at once,
    and the next block starts there: the same decision as at the block's end, up to ``block - 1`` rounds
    sooner. On that linear target, whose weights are redrawn every 1,000 rounds, the two declare the
    changes 3, 2 and 1 rounds after them, against 4, 12 and 4 rounds at the blocks' ends and with the level
    that lagged.

    The defaults, measured on ``auto``'s loss streams: no false alarm in 200,000 rounds of chi-square
    losses; on the 26 stationary raw data sets of the quality benchmark (about 75,000 rounds), 7 false
    alarms; a flipped target declared within 4 rounds, Friedman's global abrupt drift within 24-36, a
    gradual drift over 500 rounds after 100-200; SEA's and Agrawal's changes of concept, which raise
    the log loss by less than half, not at all (:class:`ErrorChangeDetector` declares those). A block of 1
    with a cap of 10 and a threshold of 40 detected some of those sooner, at 18 false alarms.
    """

    def __init__(self, *, threshold: float = 10.0, drift: float = 1.0, cap: float = 30.0, block: int = 8,
                 memory: int = 500, warmup: int = 100, recovery: int = 200) -> None:
        self.threshold = threshold
        self.drift = drift
        self.cap = cap
        self.block = block
        self.memory = memory
        self.recovery = recovery
        self.warmup = warmup
        self.seen = 0
        self.level = 0.0
        self.block_sum = 0.0
        self.cusum = 0.0
        self.run_sum = 0.0
        self.run_length = 0
        self.changed_at = -memory  # the round of the last change (none: long ago)
        self.offset = 0  # where the blocks start, modulo ``block``: moved by a change declared early

    def update(self, loss: float) -> bool:
        """Take a round's loss; True if it completes a rise of the loss (a change)."""
        self.seen += 1
        if self.seen <= self.warmup or self.level <= 0.0:
            self.level += (loss - self.level) / min(self.seen, self.memory)
            return False
        self.block_sum += loss
        into_block = (self.seen - self.warmup - self.offset) % self.block
        if into_block:
            # The losses are nonnegative, so the block's mean is at least its partial sum over the whole
            # block: a rise that carries the CUSUM past the threshold whatever the block's other rounds is
            # declared now (the decision the block's end would take, up to block - 1 rounds sooner).
            certain = min(self.block_sum / self.block / self.level, self.cap)
            if self.cusum + certain - 1.0 - self.drift <= self.threshold:
                return False
            self.offset = (self.offset + into_block) % self.block
            self.run_sum += min(self.block_sum / into_block / self.level, self.cap)
            self.run_length += 1
            self.block_sum = 0.0
            return self._declare()
        mean, self.block_sum = self.block_sum / self.block, 0.0
        ratio = min(mean / self.level, self.cap)
        self.cusum = max(0.0, self.cusum + ratio - 1.0 - self.drift)
        if self.cusum == 0.0:
            self.run_sum, self.run_length = 0.0, 0
            recovering = self.seen - self.changed_at < self.memory
            self.level += (mean - self.level) * self.block / (self.recovery if recovering else self.memory)
            return False
        self.run_sum += ratio
        self.run_length += 1
        if self.cusum <= self.threshold:
            return False
        return self._declare()

    def steps(self, losses: np.ndarray, level: float) -> np.ndarray:
        """The CUSUM's steps for single rounds' ``losses`` against a ``level`` (the one before the
        change: read :attr:`level` before the round that declares it), for :func:`change_span`."""
        ratios: np.ndarray = np.minimum(losses / level, self.cap) - 1.0 - self.drift
        return ratios

    def _declare(self) -> bool:
        """A change: the level becomes the new regime's (the run's mean ratio times the old level)."""
        self.changed_at = self.seen
        self.level *= self.run_sum / self.run_length
        self.cusum, self.run_sum, self.run_length = 0.0, 0.0, 0
        return True

    def state(self) -> list[float]:
        return [float(self.seen), self.level, self.block_sum, self.cusum, self.run_sum,
                float(self.run_length), float(self.offset), float(self.changed_at)]

    def restore(self, state: list[float]) -> None:
        """Load :meth:`state`; one saved before blocks could move and before the recovery (six values) has
        its blocks where they were and no change recent."""
        seen, self.level, self.block_sum, self.cusum, self.run_sum, run_length = (float(v) for v in state[:6])
        offset = state[6] if len(state) > 6 else 0.0
        changed_at = state[7] if len(state) > 7 else -float(self.memory)
        self.seen, self.run_length = int(seen), int(run_length)
        self.offset, self.changed_at = int(offset), int(changed_at)


class ErrorChangeDetector:
    r"""Page's CUSUM (1954) of the log-likelihood ratio of a rise of the error odds by the factor ``ratio``:
    the mixture's errors (classification), which a change of concept raises even when it raises the log
    loss too little for :class:`LossChangeDetector`.

    With :math:`p_0` the error rate's level when the current rise began (the errors' exponentially
    weighted mean over about ``memory`` rounds, clipped to :math:`[f, 1 - f]`, :math:`f` = ``floor``)
    and :math:`p_1` the rate of :math:`\rho` times its odds (:math:`\rho` = ``ratio``; an odds ratio
    keeps :math:`p_1 < 1` for the high error rates of many classes), a round with the error
    :math:`e \in \{0, 1\}` adds

    .. math:: e \ln\frac{p_1}{p_0} + (1 - e) \ln\frac{1 - p_1}{1 - p_0}

    to :math:`g` (floored at 0), and a change is declared when :math:`g > h` (``threshold``): the
    sequential probability ratio test of Bernoulli errors at :math:`p_0` against :math:`p_1`, restarted
    whenever it favours :math:`p_0` (Lorden 1971: at least :math:`e^h` rounds between false alarms on
    average for a known :math:`p_0`). The level follows every round: one that followed only the rounds at
    which :math:`g = 0` would miss the errors, which start the rises, and sit below the true rate
    (measured: false alarms every 1,000-2,000 rounds of independent errors at 0.2). After a change the
    level is learnt afresh over ``warmup`` rounds, as at the start.

    The defaults, measured: on independent errors, 21, 6, 11 and 11 false alarms in 50,000 rounds at the
    rates 0.02, 0.1, 0.3, 0.5 (16, 8, 3, 2 at the threshold 7); rises from 0.2 to 0.4 and from 0.1 to 0.3
    declared 35 and 36 rounds after them (37 and 53 at 7; the stream of ``tests/kons/test_tracking.py``).
    The threshold was 7 until the trial of a declared change's generation (:class:`Probation`) made a false
    alarm cheap: then 6, with :data:`~kons._grid.REPLAY_ROWS` from 64 to 192, met every goal of
    ``benchmarks/drift.py`` where 7 left SEA's last window at 1.13 of the oracle. SEA's last change of
    threshold raises the mixture's error from about 0.13 to 0.24 (odds about doubled, so the CUSUM gains
    about 0.04 a round): declared at round 3293 at 7 and 3155 at 6 (the change is at 3000). With 64
    rounds kept the onset found is at most 64 rounds back and the window 1.097 of the oracle; with 192
    kept, 1.03. Measured
    with Hoeffding trees among the experts (``docs/drift.md``, the trees' section), on the 26 stationary
    raw sets the threshold 6 changed only german.numer (0.2600 to 0.2590) of the figures at 7. The rounds
    kept are state: ``REPLAY_ROWS`` rows of both views of the row (``2 dim + 3`` floats each). A level that
    followed only the rounds at which :math:`g = 0` (with :math:`p_1 = 1.5 p_0`) did better on SEA,
    Agrawal and the RBF stream through the bias above, which a stationary stream pays for.
    """

    def __init__(self, *, ratio: float = 2.0, threshold: float = 6.0, memory: int = 500, warmup: int = 100,
                 floor: float = 0.01) -> None:
        self.ratio = ratio
        self.threshold = threshold
        self.memory = memory
        self.warmup = warmup
        self.floor = floor
        self.seen = 0  # rounds since the start or the last change
        self.level = 0.0
        self.reference = 0.0  # the level when the current rise began
        self.cusum = 0.0

    def update(self, error: float) -> bool:
        """Take a round's error (0 or 1); True if it completes a rise of the error rate (a change)."""
        self.seen += 1
        if self.seen <= self.warmup:
            self.level += (error - self.level) / self.seen
            return False
        self.reference = self.baseline
        p0, p1 = self._rates(self.reference)
        step = math.log(p1 / p0) if error else math.log((1.0 - p1) / (1.0 - p0))
        self.cusum = max(0.0, self.cusum + step)
        self.level += (error - self.level) / self.memory
        if self.cusum <= self.threshold:
            return False
        self.seen, self.level, self.cusum = 0, 0.0, 0.0  # the new regime's level learnt afresh
        return True

    @property
    def baseline(self) -> float:
        """The error rate the next round is tested against: the level when the current rise began."""
        return self.reference if self.cusum > 0.0 else self.level

    def _rates(self, reference: float) -> tuple[float, float]:
        """:math:`p_0` (``reference``, clipped) and :math:`p_1`, the rate of ``ratio`` times its odds."""
        p0 = min(max(reference, self.floor), 1.0 - self.floor)
        return p0, self.ratio * p0 / (1.0 - p0 + self.ratio * p0)

    def steps(self, errors: np.ndarray, baseline: float) -> np.ndarray:
        """The CUSUM's steps for ``errors`` (0 or 1) tested against ``baseline`` (read :attr:`baseline`
        before the round that declares the change), for :func:`change_span`."""
        p0, p1 = self._rates(baseline)
        llr: np.ndarray = np.where(errors > 0.0, math.log(p1 / p0), math.log((1.0 - p1) / (1.0 - p0)))
        return llr

    def state(self) -> list[float]:
        return [float(self.seen), self.level, self.reference, self.cusum]

    def restore(self, state: list[float]) -> None:
        seen, self.level, self.reference, self.cusum = (float(v) for v in state)
        self.seen = int(seen)
