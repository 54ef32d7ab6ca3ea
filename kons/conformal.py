r"""Online conformal prediction: intervals (regression) and prediction sets (classes) whose long-run
coverage holds whatever the stream does, drift included.

A learner that is asked for a coverage ``c`` (:meth:`kons.Learner.predict_interval_one`,
:meth:`kons.Learner.predict_set_one`, or ``coverage=`` of :meth:`~kons.Learner.predict_round` and
:meth:`~kons.Learner.learn_round`) starts a :class:`Conformal` component: from then on every round it
learns scores its own play (a nonconformity score :math:`s_t`, small when the label was easy) and moves one
threshold per coverage asked by quantile tracking (Angelopoulos, Candès and Tibshirani, "Conformal PID
control for time series prediction", 2023, the "P" part; Gibbs and Candès, "Adaptive conformal inference
under distribution shift", 2021, move the level the same way):

.. math::

    q_{t+1} = q_t + \eta\,(\mathrm{miss}_t - (1 - c)), \qquad \mathrm{miss}_t = [s_t > q_t].

The interval (or set) played at round :math:`t` is every label whose score would be at most :math:`q_t`.

**Guarantee.** If every score lies in :math:`[0, B]`, then :math:`q_t` stays in
:math:`[-(1-c)\eta, B + c\eta]` and, over any :math:`n` consecutive rounds,

.. math::

    \Big|\frac{1}{n}\sum \mathrm{miss}_t - (1 - c)\Big| \le \frac{B + \eta}{\eta\, n}.

Assumptions: none on the data (no exchangeability, no stationarity: the labels may be chosen by an
adversary who sees the intervals), only the bounded scores (regression scores are clipped at
:data:`SCORE_CAP`, sets' lie in [0, 1]). The statement is about the rounds learnt after the coverage was
first asked, the interval being the one of the play at that round (a prediction made on the same state).
It says nothing of the coverage conditional on ``x``; the local scale below is what makes the width follow
the row. Derivation and measurements: ``docs/intervals.md``.

**Scores.** Regression: :math:`s_t = |y_t - \hat y_t| / \sigma_t`, with the local scale
:math:`\sigma_t = m_t\,((d_t + \bar d_t) / (2 \bar d_t))^{\gamma}`: :math:`m_t` the recent mean absolute
residual; :math:`d_t` the learner's own uncertainty about the row (a second-order learner's: the square root
of the row's leverage :math:`x^\top A^{-1} x`, exponent :data:`LEVERAGE_EXPONENT`; :class:`kons.Auto`'s: the
spread of its experts' plays under the mixture's weights, exponent :data:`SPREAD_EXPONENT`; 0 for a learner
that has none, whose interval is then global but drift-adaptive) and :math:`\bar d_t` its recent mean.
Classes: the adaptive prediction sets' score (Romano, Sesia and Candès 2020), the probability of the classes
more probable than the label plus a share :math:`u_t` of the label's own (randomised sets, the draw
:math:`u_t` from a deterministic low-discrepancy sequence); the set holds the classes whose score is at
most :math:`q_t`.

The state is bounded: at most :data:`MAX_LEVELS` thresholds (a further coverage asked replaces the oldest
one), a ring of the last :data:`RING` scores (a newly asked coverage starts at their quantile, and a
coverage not tracked is answered from them) and a few scalars.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np

from kons._validation import check_real
from kons.errors import InvalidParameterError, StateFormatError

__all__ = ["LEVERAGE_EXPONENT", "MAX_LEVELS", "RING", "SCORE_CAP", "SPREAD_EXPONENT", "Conformal",
           "check_coverage"]

#: The most coverages tracked at once.
MAX_LEVELS = 8
#: The recent scores kept.
RING = 256
#: The largest regression score (residuals beyond this many local scales count as this).
SCORE_CAP = 1e3
#: Quantile tracking's step: regression scores are in local scales (a threshold of a few units), set
#: scores in probability.
STEP = {"interval": 0.05, "set": 0.01}
#: Weight of the newest round in the recent means of the absolute residual and of the spread (about the
#: last 100 rounds: a drift's new scale is followed within a few hundred rounds).
SCALE_WEIGHT = 0.01
#: The exponent of :class:`kons.Auto`'s own uncertainty (the spread of its experts' plays under the
#: mixture's weights) in its local scale (0: a global scale); chosen on the tuning streams of
#: benchmarks/intervals.py (docs/intervals.md): a global scale gave the narrowest mean width, the square
#: root keeps the width following the row for a little more.
SPREAD_EXPONENT = 0.5
#: The exponent for a second-order learner's spread, the square root of the row's leverage
#: :math:`x^\top A^{-1} x` (its own interval's local scale); chosen likewise, on the same tuning streams
#: (docs/intervals.md).
LEVERAGE_EXPONENT = 0.25
#: The golden ratio's fractional part (a low-discrepancy sequence of shares, :meth:`Conformal._share`).
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0
#: Scores needed in the ring before a new coverage starts at their quantile (else at a default).
_FEW = 20


def check_coverage(coverage: Any) -> float:
    """``coverage`` as a float in (0, 1), else :class:`InvalidParameterError`."""
    if type(coverage) is float and 0.0 < coverage < 1.0:  # the usual ask, without building the message
        return coverage
    return check_real("the learner", "coverage", coverage, low=0.0, high=1.0, low_open=True, high_open=True)


def _set_scores(probabilities: np.ndarray, share: float) -> np.ndarray:
    """Each class's score: the probability of the classes more probable than it (ties by index) plus the
    ``share`` of its own."""
    order = np.argsort(-probabilities, kind="stable")
    before = np.empty_like(probabilities)
    before[order] = np.cumsum(probabilities[order]) - probabilities[order]
    scores: np.ndarray = before + share * probabilities
    return scores


class Conformal:
    """The conformal state of one learner (see the module): ``kind`` is ``"interval"`` or ``"set"``."""

    def __init__(self, kind: str, *, step: float | None = None,
                 spread_exponent: float = SPREAD_EXPONENT) -> None:
        self.kind = kind
        self.step = STEP[kind] if step is None else step
        self.spread_exponent = spread_exponent  # (these two: for benchmarks.intervals' tuning runs)
        self.levels = np.zeros(0)
        self.quantiles = np.zeros(0)
        self._at: dict[float, int] = {}  # each tracked level's index (a lookup cheaper than a search)
        self.scores = np.zeros(RING)
        self.kept = 0  # scores in the ring (at most RING)
        self.next = 0  # the slot the next score takes, the oldest once the ring is full
        self.rounds = 0
        # recent means (unnormalised, bias-corrected by ``rounds``) of |residual| and of the spread
        self.residual = 0.0
        self.spread = 0.0
        self._bias = (0, 0.0)  # the recent means' bias correction: (rounds, its divisor)

    # ----------------------------------------------------------------- thresholds
    def track(self, coverage: float) -> None:
        """Track ``coverage`` from now on (it is learnt at every round); the oldest one out beyond
        :data:`MAX_LEVELS`."""
        if coverage in self.levels:
            return
        start = self.threshold(coverage)
        keep = slice(1, None) if len(self.levels) >= MAX_LEVELS else slice(None)
        self.levels = np.append(self.levels[keep], coverage)
        self.quantiles = np.append(self.quantiles[keep], start)
        self._index()

    def _index(self) -> None:
        self._at = {level: at for at, level in enumerate(self.levels.tolist())}

    def threshold(self, coverage: float) -> float:
        """The threshold of ``coverage``: tracked, else the ring's quantile, else a default."""
        at = self._at.get(coverage)
        if at is not None:
            return float(self.quantiles[at])
        count = self.kept
        if count >= _FEW:  # the split-conformal quantile of the kept scores
            rank = min(math.ceil((count + 1) * coverage), count) - 1
            return float(np.partition(self.scores[:count], rank)[rank])
        if self.kind == "set":
            return coverage
        # |residual| / mean |residual| of a normal residual
        return NormalDist().inv_cdf((1.0 + coverage) / 2.0) * math.sqrt(math.pi / 2.0)

    def learn(self, score: float) -> None:
        """One round's score: each threshold moves by quantile tracking, the ring keeps it."""
        score = min(score, SCORE_CAP)
        missed = (score > self.quantiles).astype(np.float64)
        self.quantiles = self.quantiles + self.step * (missed - (1.0 - self.levels))
        self.scores[self.next] = score
        self.next = (self.next + 1) % RING
        self.kept = min(self.kept + 1, RING)

    # ----------------------------------------------------------------- regression
    def _mean(self, total: float) -> float:
        rounds, divisor = self._bias
        if rounds != self.rounds:  # once per round, not at every ask
            divisor = -math.expm1(self.rounds * math.log1p(-SCALE_WEIGHT))
            self._bias = (self.rounds, divisor)
        return total / divisor

    def scale(self, spread: float) -> float:
        """The local scale of a row of uncertainty ``spread`` (0 before any round)."""
        if self.rounds == 0:
            return 0.0
        scale = self._mean(self.residual)
        mean_spread = self._mean(self.spread)
        if mean_spread > 0.0 and self.spread_exponent:
            scale *= ((spread + mean_spread) / (2.0 * mean_spread)) ** self.spread_exponent
        return scale

    def interval(self, prediction: float, spread: float, coverage: float) -> tuple[float, float] | None:
        """The interval around ``prediction`` of a row of uncertainty ``spread``; None before any round."""
        if self.rounds == 0:
            return None
        half = max(self.threshold(coverage), 0.0) * self.scale(spread)
        return prediction - half, prediction + half

    def learn_residual(self, prediction: float, y: float, spread: float) -> None:
        """A regression round: the play ``prediction`` of a row of spread ``spread``, its target ``y``."""
        residual = abs(y - prediction)
        scale = self.scale(spread)
        if self.rounds:
            self.learn(residual / scale if scale > 0.0 else (0.0 if residual == 0.0 else SCORE_CAP))
        self.rounds += 1
        self.residual += SCALE_WEIGHT * (residual - self.residual)
        self.spread += SCALE_WEIGHT * (spread - self.spread)

    # ----------------------------------------------------------------- classes
    def _share(self) -> float:
        """The share of its own probability in a class's score this round: the randomised sets' uniform
        draw (without it, a learner more accurate than the coverage asked would answer empty sets and
        single classes in turn), taken from the golden-ratio sequence of the round number, so that a
        replay draws the same."""
        return (self.rounds + 1) * _GOLDEN % 1.0

    def prediction_set(self, probabilities: np.ndarray, coverage: float) -> np.ndarray:
        """The indices of the classes in the set of ``coverage``, most probable first."""
        scores = _set_scores(probabilities, self._share())
        inside = np.flatnonzero(scores <= self.threshold(coverage))
        return inside[np.argsort(scores[inside], kind="stable")]

    def learn_label(self, probabilities: np.ndarray, label: int) -> None:
        """A round of classes: the probabilities played and the label's index (beyond them: a class the
        play did not know, which no set held)."""
        known = 0 <= label < len(probabilities)
        score = float(_set_scores(probabilities, self._share())[label]) if known else 1.0
        self.rounds += 1
        self.learn(score)

    # ----------------------------------------------------------------- persistence
    def nbytes(self) -> int:
        return self.levels.nbytes + self.quantiles.nbytes + self.scores.nbytes

    def arrays(self) -> dict[str, np.ndarray]:
        return {"conformal_levels": self.levels, "conformal_quantiles": self.quantiles,
                "conformal_scores": self.scores[:self.kept].copy()}

    def header(self) -> dict[str, Any]:
        return {"kind": self.kind, "ring": [self.kept, self.next], "rounds": self.rounds,
                "means": [self.residual, self.spread]}

    @classmethod
    def restored(cls, header: Any, arrays: dict[str, np.ndarray],
                 spread_exponent: float = SPREAD_EXPONENT) -> Conformal:
        """The component saved as :meth:`header` and :meth:`arrays` (which it pops from ``arrays``), for a
        learner whose spread takes ``spread_exponent`` (not saved: the learner's class fixes it)."""
        try:
            conformal = cls(header["kind"], spread_exponent=spread_exponent)
            levels = arrays.pop("conformal_levels")
            quantiles = arrays.pop("conformal_quantiles")
            scores = arrays.pop("conformal_scores")
            conformal.kept, conformal.next = (int(v) for v in header["ring"])
            if (levels.shape != quantiles.shape or levels.ndim != 1 or len(levels) > MAX_LEVELS
                    or scores.shape != (conformal.kept,) or not 0 <= conformal.next < RING
                    or (conformal.kept < RING and conformal.next != conformal.kept)):
                raise StateFormatError("the conformal arrays do not fit together.")
            conformal.levels, conformal.quantiles = levels.copy(), quantiles.copy()
            conformal._index()
            conformal.scores[:len(scores)] = scores
            conformal.rounds = int(header["rounds"])
            conformal.residual, conformal.spread = (float(v) for v in header["means"])
        except (KeyError, TypeError, ValueError, InvalidParameterError) as exc:
            if isinstance(exc, StateFormatError):
                raise
            raise StateFormatError(f"the conformal state is inconsistent: {exc}") from None
        return conformal
