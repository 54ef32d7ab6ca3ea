"""A learner's history: a capped, downsampled series of points recorded as it learns, kept in the store.

After feedback rounds take a learner from version ``before`` to ``after``, the writer offers a point
(version, time, losses, sizes) when the rounds crossed a multiple of the series' stride; ``history.lua``
keeps it, and when the series holds more than ``history_points`` it drops every other point and doubles
the stride. So a series of a million rounds stays at most ``history_points`` long, evenly spread, the
same for every replica (it lives with the learner in the store and is deleted with it).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import kons
from kons_service.cache import CachedLearner, not_found
from kons_service.metrics import LEARNER_GAUGES
from kons_service.settings import Settings
from kons_service.store import LearnerRef, Store, StoreUnavailableError

__all__ = ["History", "HistoryRecorder", "point"]

log = logging.getLogger("kons_service.history")


@dataclass(frozen=True, slots=True)
class History:
    """The points of a learner's history, oldest first, about ``stride`` rounds apart."""

    stride: int
    points: list[dict[str, Any]]


def point(learner: kons.Learner, version: int) -> dict[str, Any]:
    """The point of a learner at ``version``: the time, its ``stats()`` of :data:`LEARNER_GAUGES`, its
    state size and, for ``auto``, the base that leads the mixture."""
    stats = learner.stats()
    leader = {"leader": stats["leader"]} if "leader" in stats else {}  # auto's leading base
    return {"version": version, "time": round(time.time(), 3),
            **{name: stats.get(name, 0) for name in LEARNER_GAUGES}, "state_bytes": learner.state_nbytes(),
            **leader}


class HistoryRecorder:
    """Offer points of the learners' histories to the store and read them back."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    @staticmethod
    def due(entry: CachedLearner, before: int, after: int) -> str | None:
        """The point (JSON) to offer when rounds take the cached learner (lock held, rounds played) from
        version ``before`` to ``after``: None unless that crosses a multiple of the stride. The append of
        the rounds offers it in the same call."""
        stride = entry.history_stride
        if after // stride == before // stride:
            return None
        return json.dumps(point(entry.loaded(), after), allow_nan=False)

    async def offer(self, entry: CachedLearner, before: int) -> None:
        """The cached learner (lock held) went from version ``before`` to its version outside a feedback
        (a state upload): record a point if due. A failure only costs a point: it is logged, not raised."""
        text = self.due(entry, before, entry.version)
        if text is None:
            return
        try:
            stride = await self.store.record_history(entry.ref, entry.incarnation, entry.version, text,
                                                     self.settings.history_points)
        except StoreUnavailableError as exc:
            log.warning("history point of %s at version %d not recorded: %s", entry.ref, entry.version, exc)
            return
        entry.history_stride = max(stride, 1)

    async def read(self, ref: LearnerRef) -> History:
        found = await self.store.history(ref)
        if found is None:
            raise not_found(ref)
        stride, points = found
        return History(stride, [json.loads(p) for p in points])
