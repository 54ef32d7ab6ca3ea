r"""The change detectors of :class:`~kons.Auto`'s grid, on the mixture's own plays.

:class:`LossChangeDetector` watches the mixture's own loss and says when it has risen for good,
:class:`ErrorChangeDetector` its errors (classification) and says when their rate has risen,
:class:`LabelChangeDetector` the labels (two classes) and says when a class's rate has risen with the
errors; each costs O(1) a round (the labels' a look at the kept rounds when its test fires) and keeps a
state of fixed size. At a declared change, :func:`change_span` estimates its
onset from the detector's steps over the last rounds (:meth:`LossChangeDetector.steps`,
:meth:`ErrorChangeDetector.steps`).
"""

from __future__ import annotations

import math

import numpy as np

from kons._numerics import clip
from kons.auto.config import (
    LABEL_SHIFT_DEVIATIONS,
    LABEL_SHIFT_LEAST_ROUNDS,
    LABEL_SHIFT_RATIO,
    LABEL_SHIFT_THRESHOLD,
    LEVEL_CEILING,
)

__all__ = ["ErrorChangeDetector", "LabelChangeDetector", "LossChangeDetector", "change_span"]


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

    Once a change has been declared, the level never stands more than ``ceiling`` times the block means'
    recent mean (their exponentially weighted mean over about ``recovery`` rounds, frozen and reset with
    the level): the restarted experts' losses fall far faster than a mean over ``memory`` rounds, and a
    level left above them hides the next rise until the losses outgrow it (a shrink of the target's spread
    on ``benchmarks/drift.py``'s piecewise_scaled stream was declared late so). Before any change the
    level keeps its lag: the ceiling there declared a burst of a real series (water_flow) a change, and
    played it worse (``docs/drift-log.md``).

    The losses being nonnegative, a block whose first rounds already carry :math:`g` past :math:`\lambda`
    whatever its other rounds (their sum divided by the whole block, over :math:`m`) is declared at once,
    and the next block starts there: the same decision as at the block's end, up to ``block - 1`` rounds
    sooner. On that linear target, whose weights are redrawn every 1,000 rounds, the two declare the
    changes 3, 2 and 1 rounds after them, against 4, 12 and 4 rounds at the blocks' ends and with the level
    that lagged.

    With ``lone``, a round whose loss alone exceeds ``lone`` times the level declares a change too, when its
    caller says the round may (:meth:`update`'s ``alone``): a change that moves the target far errs so on
    its first row, which the block counts as an eighth, so that the CUSUM declared it a row later.

    The defaults and what chose them: ``docs/auto-log.md`` (the change detectors).
    """

    def __init__(self, *, threshold: float = 10.0, drift: float = 1.0, cap: float = 30.0, block: int = 8,
                 memory: int = 500, warmup: int = 100, recovery: int = 200,
                 ceiling: float = LEVEL_CEILING, lone: float | None = None) -> None:
        self.threshold = threshold
        self.lone = lone
        self.drift = drift
        self.cap = cap
        self.block = block
        self.memory = memory
        self.recovery = recovery
        self.ceiling = ceiling
        self.warmup = warmup
        self.seen = 0
        self.level = 0.0
        self.recent = 0.0  # the block means' mean over about ``recovery`` rounds
        self.block_sum = 0.0
        self.cusum = 0.0
        self.run_sum = 0.0
        self.run_length = 0
        self.changed_at = -memory  # the round of the last change (none: long ago)
        self.offset = 0  # where the blocks start, modulo ``block``: moved by a change declared early

    def update(self, loss: float, alone: bool = False) -> bool:
        """Take a round's loss; True if it completes a rise of the loss (a change), or, ``alone`` allowed,
        exceeds ``lone`` times the level by itself."""
        self.seen += 1
        if self.seen <= self.warmup or self.level <= 0.0:
            self.level += (loss - self.level) / min(self.seen, self.memory)
            self.recent = self.level
            return False
        self.block_sum += loss
        lone = alone and self.lone is not None and loss > self.lone * self.level
        into_block = (self.seen - self.warmup - self.offset) % self.block
        if into_block:
            # The losses are nonnegative, so the block's mean is at least its partial sum over the whole
            # block: a rise that carries the CUSUM past the threshold whatever the block's other rounds is
            # declared now (the decision the block's end would take, up to block - 1 rounds sooner).
            certain = min(self.block_sum / self.block / self.level, self.cap)
            if self.cusum + certain - 1.0 - self.drift <= self.threshold and not lone:
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
            self.recent += (mean - self.recent) * self.block / self.recovery
            if self.changed_at > 0:
                self.level = min(self.level, self.ceiling * self.recent)
            return False
        self.run_sum += ratio
        self.run_length += 1
        if self.cusum <= self.threshold and not lone:  # (a lone round's block mean is past the drift)
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
        self.recent = self.level
        self.cusum, self.run_sum, self.run_length = 0.0, 0.0, 0
        return True

    def state(self) -> list[float]:
        return [float(self.seen), self.level, self.block_sum, self.cusum, self.run_sum,
                float(self.run_length), float(self.offset), float(self.changed_at), self.recent]

    def restore(self, state: list[float]) -> None:
        """Load :meth:`state`; one saved before blocks could move and before the recovery (six values) has
        its blocks where they were and no change recent, one saved before the level's ceiling (eight) the
        level as its recent mean."""
        seen, self.level, self.block_sum, self.cusum, self.run_sum, run_length = (float(v) for v in state[:6])
        offset = state[6] if len(state) > 6 else 0.0
        changed_at = state[7] if len(state) > 7 else -float(self.memory)
        self.recent = float(state[8]) if len(state) > 8 else self.level
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
    (it raised false alarms: ``docs/auto-log.md``). After a change the
    level is learnt afresh over ``warmup`` rounds, as at the start.

    The defaults, the threshold's history (7, then 6 once a false alarm was made cheap by the trial of
    the generation it starts) and what chose them: ``docs/auto-log.md`` (the change detectors).
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
        self.cusum = max(0.0, self.cusum + self._log_ratio(error, *self._rates(self.reference)))
        self.level += (error - self.level) / self.memory
        if self.cusum <= self.threshold:
            return False
        self.seen, self.level, self.cusum = 0, 0.0, 0.0  # the new regime's level learnt afresh
        return True

    @property
    def baseline(self) -> float:
        """The error rate the next round is tested against: the level when the current rise began."""
        return self.reference if self.cusum > 0.0 else self.level

    def _clipped(self, rate: float) -> float:
        """``rate`` clipped to :math:`[f, 1 - f]` (``floor``): no rate the tests take is 0 or 1."""
        return clip(rate, self.floor, 1.0 - self.floor)

    def _rates(self, reference: float) -> tuple[float, float]:
        """:math:`p_0` (``reference``, clipped) and :math:`p_1`, the rate of ``ratio`` times its odds."""
        p0 = self._clipped(reference)
        return p0, self.ratio * p0 / (1.0 - p0 + self.ratio * p0)

    @staticmethod
    def _log_ratio(error: float, p0: float, p1: float) -> float:
        r"""The CUSUM's step after a round with an ``error`` (1) or a right play (0), testing the rate
        :math:`p_0` against :math:`p_1`: :math:`\ln(p_1 / p_0)` or :math:`\ln((1 - p_1) / (1 - p_0))`."""
        return math.log(p1 / p0) if error else math.log((1.0 - p1) / (1.0 - p0))

    def _log_ratios(self, errors: np.ndarray, p0: float, p1: float) -> np.ndarray:
        """:meth:`_log_ratio` of each of ``errors`` (0 or 1)."""
        steps: np.ndarray = np.where(errors > 0.0, self._log_ratio(1.0, p0, p1), self._log_ratio(0.0, p0, p1))
        return steps

    def steps(self, errors: np.ndarray, baseline: float) -> np.ndarray:
        """The CUSUM's steps for ``errors`` (0 or 1) tested against ``baseline`` (read :attr:`baseline`
        before the round that declares the change), for :func:`change_span`."""
        return self._log_ratios(errors, *self._rates(baseline))

    def onset_span(self, errors: np.ndarray, baseline: float, span: int) -> int:
        r"""The rounds a declared change spans, estimated again (:func:`change_span`) with :math:`p_1` the
        errors' rate over the last ``span`` of the kept ``errors`` (the first estimate) rather than the
        rate of ``ratio`` times the odds, :math:`p_0` still ``baseline``; ``span`` if that rate is no rise.

        A change of concept raises the errors far past the rate the test looks for, and with :math:`p_1`
        that low a right play costs the run little: the estimate reached back to an error of the old
        concept tens of rounds before the change, and the change's generation replayed those rows (on
        ``benchmarks/drift.py``'s held-out Sine stream, 28 of the 38 it replayed). With the run's own rate
        a right play costs what it says against the rise. On the binary drift tuning streams the onsets
        of the changes declared on the errors came nearer the true ones (``docs/drift-log.md``)."""
        p0, p1 = self._clipped(baseline), self._clipped(float(errors[-span:].mean()))
        if p1 <= p0:
            return span
        return change_span(self._log_ratios(errors, p0, p1))

    def state(self) -> list[float]:
        return [float(self.seen), self.level, self.reference, self.cusum]

    def restore(self, state: list[float]) -> None:
        seen, self.level, self.reference, self.cusum = (float(v) for v in state)
        self.seen = int(seen)


class LabelChangeDetector:
    r"""A shift of the labels' rate (two classes), declared once the mixture's errors rose with it.

    Two :class:`ErrorChangeDetector` tests run on the labels rather than on the errors, one for a rise of
    each class's odds by ``ratio`` (on its indicator), each at ``threshold``. A change of
    concept that moves the class prior (Agrawal's loan functions) shifts the labels within tens of rounds,
    where the mixture's errors, tested against a level that lags their fall, take hundreds or never pass
    the error detector's threshold. The labels of a stationary stretch wander as far, though, and they
    leave the errors where they were: a test that fires is declared a change only if the mixture's errors
    over its run (:meth:`span`) stand at least ``deviations`` binomial standard deviations above their rate
    over the kept rounds before it (:meth:`confirmed`; at least ``least`` rounds on either side), the rate
    clipped as the tests clip theirs. A test that fires restarts its level as at a change, whether
    confirmed or not.

    A run shorter than ``least`` rounds is not confirmed: a few errors among a few rounds pass the bar of
    ``deviations`` far more often than that many deviations say (the normal bound of a binomial at a low
    rate over few rounds), and such a burst soon after a declared change replaced the generation that
    carried the new concept (``docs/drift-log.md``).

    The defaults and what chose them: ``docs/drift-log.md`` ("Agrawal's first change, declared on the labels'
    rate with the errors"; "A burst of the labels is no change").
    """

    def __init__(self, *, ratio: float = LABEL_SHIFT_RATIO, threshold: float = LABEL_SHIFT_THRESHOLD,
                 deviations: float = LABEL_SHIFT_DEVIATIONS, least: int = LABEL_SHIFT_LEAST_ROUNDS) -> None:
        self.deviations = deviations
        self.least = least
        # test k: a rise of class k's odds
        self.tests = (ErrorChangeDetector(ratio=ratio, threshold=threshold),
                      ErrorChangeDetector(ratio=ratio, threshold=threshold))
        self.fired = 0  # the class whose test fired last
        self.baseline = 0.0  # its baseline before the round that fired it

    def update(self, label: float) -> bool:
        """Take a round's class index (0 or 1); True if a test fires (then ask :meth:`confirmed`). A label
        raises one class's test and lowers the other's: both never fire at once."""
        fired = False
        for k, test in enumerate(self.tests):
            baseline = test.baseline
            if test.update(float(label == k)):
                self.fired, self.baseline, fired = k, baseline, True
        return fired

    def span(self, labels: np.ndarray) -> int:
        """The rounds of the kept ``labels`` (class indices, oldest first, this round's included) that the
        fired test's run spans (:func:`change_span`)."""
        indicator = (labels == self.fired).astype(float)
        return change_span(self.tests[self.fired].steps(indicator, self.baseline))

    def confirmed(self, errors: np.ndarray, span: int) -> bool:
        """Whether the mixture's kept ``errors`` (oldest first) rose over the last ``span`` rounds."""
        before, since = errors[:-span], errors[-span:]
        if len(before) < self.least or span < self.least:
            return False
        rate = self.tests[0]._clipped(float(before.mean()))
        rise = (float(since.mean()) - rate) / math.sqrt(rate * (1.0 - rate) / span)
        return rise >= self.deviations

    def state(self) -> list[float]:
        return [*self.tests[0].state(), *self.tests[1].state()]

    def restore(self, state: list[float]) -> None:
        self.tests[0].restore(state[:4])
        self.tests[1].restore(state[4:8])
