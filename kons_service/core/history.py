"""A learner's history: a capped, downsampled series of points recorded as it learns, kept in the store.

Every append of feedback rounds offers the history its rounds' errors, in the user's units, cut into
segments at the multiples of the series' stride: for regression the absolute and squared errors of the
played predictions; for labels, the rounds whose most probable class was the label and the log loss of
the played distribution (of the played log-odds for a binary learner without class probabilities). The store
(``lib/history.lua``, in the append's own script call) adds them to the learner's running totals and
keeps a point, with the totals so far, for each segment whose last round crosses a multiple of the
stride; the last point of an append also carries the learner's stats (losses, sizes, time). So one
request of 442 rounds gives a point per window of ``stride`` rounds, not one, and the error over any
window between two points (MAE, RMSE, accuracy, log loss) is the difference of their totals over the
difference of their rounds, exactly. When the series holds more than ``history_points`` every other
point is dropped and the stride doubles: a series of a million rounds stays at most ``history_points``
long, evenly spread, the same for every replica (it lives with the learner in the store and is deleted
with it).

A learner with a change detector (``auto``) that declares a change of the data in the rounds of an
append offers the change too (the round it was declared at, and the learner's count of changes so far):
the store keeps the newest :data:`CHANGE_EVENTS` of them beside the series, never thinned, so that a
change stays visible at its exact round however long the series grows.

**How sure the answers were.** The rounds answered with an interval or prediction set add, per target
coverage, to running totals of their count, how many held the label and the sum of their widths (an
interval's) or sizes (a set's); a learner of class probabilities adds each round to one of
:data:`CALIBRATION_BINS` bins of its most probable class's probability: the bin's count, sum of that
probability and count of rounds whose most probable class was the label. Both go into every point's
totals, so the coverage achieved against its target, the mean width and the expected calibration error
(the bins' sum of |probability - correct| over their count) of any window between two points are exact.
Each carries ``since``, the version before its first round counted (totals that start later than the series,
after an upgrade or when a target is first asked); at most :data:`COVERAGE_TARGETS` targets are kept, a new
one dropping the target answered longest ago, so a point's size is bounded whatever coverages are asked.
"""

from __future__ import annotations

import bisect
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

import kons
from kons.classes import class_position
from kons.losses import get_loss, log_loss
from kons_service.core.cache import CachedLearner, not_found
from kons_service.core.learning import Distribution
from kons_service.core.metrics import LEARNER_GAUGES
from kons_service.settings import Settings
from kons_service.store import LearnerRef, Store, StoreUnavailableError

__all__ = ["CALIBRATION_BINS", "CHANGE_EVENTS", "COVERAGE_TARGETS", "ChangeEvent", "Covered", "History",
           "HistoryRecorder", "RollbackEvent", "point"]

log = logging.getLogger("kons_service.history")

#: The change events a learner's history keeps (the newest; see ``lib/history.lua``).
CHANGE_EVENTS = 64
#: The target coverages whose totals a history keeps (those answered last; kons tracks as many at once).
COVERAGE_TARGETS = 8
#: The bins of the most probable class's probability: [0, 0.1), [0.1, 0.2), ..., [0.9, 1].
CALIBRATION_BINS = 10


class Covered(NamedTuple):
    """A round answered with an interval or set: its target ``coverage``, whether the answer held the
    label, and its width (an interval's) or size (a set's)."""

    coverage: float
    covered: bool
    width: float


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """A change of the data that the learner declared at round ``version``, its ``changes``-th."""

    version: int
    changes: int


@dataclass(frozen=True, slots=True)
class RollbackEvent:
    """A rollback (``POST .../rollback``): at ``version`` the learner became its state after ``to``."""

    version: int
    to: int
    time: float


@dataclass(frozen=True, slots=True)
class History:
    """The points of a learner's history, oldest first, about ``stride`` rounds apart, the changes of
    the data its detector declared (the newest :data:`CHANGE_EVENTS`, oldest first) and its rollbacks
    (the newest 64, ``rollback.lua``)."""

    stride: int
    points: list[dict[str, Any]]
    changes: list[ChangeEvent]
    rollbacks: list[RollbackEvent]


def point(version: int, stats: dict[str, Any], state_bytes: int) -> dict[str, Any]:
    """The point of a learner at ``version`` whose ``stats()`` and state size are those given: the time,
    the stats of :data:`LEARNER_GAUGES`, the size and, for ``auto``, the base that leads the mixture and
    the round it took the lead."""
    leader = {"leader": stats["leader"], "leader_since": stats["leader_since"]} if "leader" in stats else {}
    return {"version": version, "time": round(time.time(), 3),
            **{name: stats.get(name, 0) for name in LEARNER_GAUGES}, "state_bytes": state_bytes, **leader}


class HistoryRecorder:
    """Offer points of the learners' histories to the store and read them back."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    @staticmethod
    def due(entry: CachedLearner, before: int, ys: Sequence[Sequence[Any]], plays: Sequence[Sequence[float]],
            distributions: Sequence[Sequence[Distribution] | None], correct: Sequence[bool | None],
            covered: Sequence[Covered | None], stats: dict[str, Any], state_bytes: int) -> str:
        """What to offer the history (JSON, see ``lib/history.lua``) when the rounds of labels ``ys`` (as
        the learner learnt them: a classifier's classes, :class:`.learning.Round`),
        played predictions ``plays`` and, for a classifier that gives class probabilities, played
        ``distributions`` (per request, in order) take the cached learner (lock held, rounds played) from
        version ``before`` (``correct``: whether each round's predicted class was its label; ``covered``:
        each round's interval or set, if it answered one; both in order): their errors, coverage and
        calibration by stride window, and the learner's stats if the rounds cross a multiple of the stride
        (``stats``, ``state_bytes``: the learner's after the rounds, measured once by the writer). The append
        of the rounds offers it in the same call."""
        labels = [v for request in ys for v in request]
        zeros = np.zeros(len(labels))
        calibration = None
        if all(d is not None for d in distributions):
            played_as = [d for request in distributions if request is not None for d in request]
            losses = [log_loss(d, y) for d, y in zip(played_as, labels, strict=True)]
            columns = [zeros, zeros, np.array([bool(c) for c in correct], dtype=np.float64),
                       np.array(losses, dtype=np.float64)]
            calibration = _calibration(played_as, labels)
        else:
            played = np.array([v for request in plays for v in request], dtype=np.float64)
            columns = _columns(entry.loaded(), np.array(labels, dtype=np.float64), played)
        return _offer(entry, before, len(labels), columns, stats, state_bytes, covered, calibration)

    async def offer(self, entry: CachedLearner, before: int) -> None:
        """The cached learner (lock held) went from version ``before`` to its version outside a feedback
        (a state upload): record a point if due. A failure only costs a point: it is logged, not raised."""
        if entry.version // entry.history_stride == before // entry.history_stride:
            return
        at = point(entry.version, entry.loaded().stats(), entry.state_nbytes())
        text = json.dumps({"task": _task(entry.loaded()), "segments": [[entry.version, 0, 0, 0, 0, 0]],
                           "point": json.dumps(at, allow_nan=False)})
        try:
            stride = await self.store.history.record(entry.ref, entry.incarnation, entry.version, text,
                                                     self.settings.history_points)
        except StoreUnavailableError as exc:
            log.warning("history point of %s at version %d not recorded: %s", entry.ref, entry.version, exc)
            return
        entry.history_stride = max(stride, 1)

    async def read(self, ref: LearnerRef) -> History:
        found = await self.store.history.read(ref)
        if found is None:
            raise not_found(ref)
        stride, points, changes, rollbacks = found
        return History(stride, [json.loads(p) for p in points],
                       [ChangeEvent(int(version), int(count)) for version, count in json.loads(changes)],
                       [RollbackEvent(int(version), int(to), ms / 1000) for version, to, ms, _ in
                        json.loads(rollbacks)])


def _task(learner: kons.Learner) -> str:
    """``regression`` for a learner of numbers, ``classification`` for one of labels (a binary loss)."""
    return "classification" if get_loss(learner.loss).binary else "regression"


def _columns(learner: kons.Learner, y: np.ndarray, played: np.ndarray) -> list[np.ndarray]:
    """The per-round sums of rounds of targets ``y`` and plays ``played`` (both (n,)): |error| and error^2
    for regression; correct signs and, for the logistic loss, the log loss of the played log-odds for a
    binary learner's labels (the others 0)."""
    zeros = np.zeros(len(y))
    if _task(learner) == "regression":
        error = y - played
        return [np.abs(error), error * error, zeros, zeros]
    label = np.where(y > 0, 1.0, -1.0)
    margin = label * played
    logistic = np.logaddexp(0.0, -margin) if learner.loss == "logistic" else zeros
    return [zeros, zeros, (margin > 0).astype(np.float64), logistic]


#: A round of class probabilities: the bin of its most probable class's probability, that probability and
#: whether that class was the label.
_Calibrated = tuple[int, float, bool]


def _calibration(distributions: Sequence[Distribution], labels: Sequence[Any]) -> list[_Calibrated | None]:
    """Each round's bin, probability of its most probable class (the first on a tie, as
    :func:`kons.losses.top_label`) and whether that class was the label; None for a round that played no
    class (a classifier before its first label). In Python, not NumPy: a feedback is mostly one round."""
    rounds: list[_Calibrated | None] = []
    for d, y in zip(distributions, labels, strict=True):
        if not d:
            rounds.append(None)
            continue
        top = max(range(len(d)), key=lambda k: d[k][1])
        probability = d[top][1]
        rounds.append((min(int(probability * CALIBRATION_BINS), CALIBRATION_BINS - 1), probability,
                       class_position([c for c, _ in d], y) == top))
    return rounds


def _extras(segment_of: Sequence[int], segments: int, covered: Sequence[Covered | None],
            calibration: Sequence[_Calibrated | None] | None) -> list[dict[str, Any]]:
    """Each segment's coverage sums by target and calibration bins (see ``lib/history.lua``) of rounds in
    segments ``segment_of`` (each round's)."""
    extras: list[dict[str, Any]] = [{} for _ in range(segments)]
    for k, answer, calibrated in zip(segment_of, covered, calibration or [None] * len(covered), strict=True):
        if answer is not None:
            sums = extras[k].setdefault("coverage", {}).setdefault(json.dumps(answer.coverage), [0, 0, 0.0])
            sums[0] += 1
            sums[1] += int(answer.covered)
            sums[2] += answer.width
        if calibrated is not None:  # count, sum of probabilities, rounds right, per bin
            at, probability, right = calibrated
            bins = extras[k].setdefault("bins", [0] * CALIBRATION_BINS + [0.0] * CALIBRATION_BINS
                                        + [0] * CALIBRATION_BINS)
            bins[at] += 1
            bins[CALIBRATION_BINS + at] += probability
            bins[2 * CALIBRATION_BINS + at] += int(right)
    return extras


def _offer(entry: CachedLearner, before: int, rounds: int, columns: list[np.ndarray], stats: dict[str, Any],
           state_bytes: int, covered: Sequence[Covered | None] = (),
           calibration: Sequence[_Calibrated | None] | None = None) -> str:
    """The offer for ``rounds`` rounds ``before + 1 ..`` of per-round sums ``columns`` (|error|, error^2,
    correct, log loss; each (rounds,)), ``covered`` (each round's interval or set, if any; or none given)
    and ``calibration`` (:func:`_calibration`, of a learner of class probabilities): one segment per stride
    window they touch, ``[last version, rounds, sums..., extra]``, and the point after them (of the
    learner's ``stats`` and ``state_bytes`` then) if a window boundary is crossed."""
    learner = entry.loaded()
    task, stride, after = _task(learner), entry.history_stride, before + rounds
    # segment k ends at the k-th multiple of the stride after ``before`` (the last one at ``after``)
    ends = [*range((before // stride + 1) * stride, after, stride), after]
    starts = [0, *(end - before for end in ends[:-1])]
    # (a round alone is its own sums: most feedback is one round, whose reductions would cost more)
    sums = [column.tolist() if rounds == 1 else np.add.reduceat(column, starts) if rounds else np.zeros(0)
            for column in columns]
    segments = [[end, end - before - start, *(float(s[k]) for s in sums)]
                for k, (end, start) in enumerate(zip(ends, starts, strict=True))] if rounds else []
    offer: dict[str, Any] = {"task": task, "segments": segments}
    if rounds and (calibration is not None or any(c is not None for c in covered)):
        segment_of = [bisect.bisect_right(starts, i) - 1 for i in range(rounds)]
        for segment, extra in zip(segments, _extras(segment_of, len(segments), covered or [None] * rounds,
                                                    calibration), strict=True):
            if extra:
                segment.append(extra)
        offer["targets"] = COVERAGE_TARGETS
    if after // stride != before // stride:
        offer["point"] = json.dumps(point(after, stats, state_bytes), allow_nan=False)
    changed = learner.last_change_round
    if changed is not None and before < changed <= after:
        offer["change"] = [changed, learner.changes_detected, CHANGE_EVENTS]
    return json.dumps(offer, allow_nan=False)
