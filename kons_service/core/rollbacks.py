"""Reports of Redis rollbacks: acknowledged rounds the store no longer has.

Two witnesses can see one, and both name the versions lost (a lower bound: the store may have lost more
than its witness held):

* **this process** held the lost rounds in memory (:class:`~kons_service.core.cache.LearnerCache`
  finds that the store's log does not continue the history of its cached learner): lost at least the
  versions from the store's head (or the first round of another history) up to the one it held;
* **a client** sends back the newest version it was answered (header ``Kons-Seen-Version``): a head
  below it means the store lost at least the versions after the head up to the one the client saw. Unlike
  the process's memory, a client's survives a restart of the service together with Redis (a host reboot),
  and reaches a replica that never held the lost rounds.

The same loss seen again (by another client, or by the process and a client) is reported once: a report
whose versions lie within the last one reported for that learner is left out. Each report is one log line
and counts in ``kons_history_rollbacks`` (seen by the process) or ``kons_rollbacks_seen_by_clients``, and
its rounds in ``kons_rollback_rounds_lost``; :meth:`RollbackReporter.summary` gives the totals to
``/readyz``.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass

from kons_service.core.metrics import Metrics
from kons_service.store import Head, LearnerRef

__all__ = ["LostVersions", "RollbackReporter"]

log = logging.getLogger("kons_service.cache")

#: Learners whose last report is remembered to leave out repeats of it (least recently reported out).
_REMEMBERED = 4096


@dataclass(frozen=True, slots=True)
class LostVersions:
    """Versions ``first`` to ``last`` of an incarnation of a learner are gone from the store."""

    incarnation: str
    first: int
    last: int

    @property
    def rounds(self) -> int:
        return self.last - self.first + 1

    def within(self, other: LostVersions) -> bool:
        return (self.incarnation == other.incarnation and other.first <= self.first
                and self.last <= other.last)


class RollbackReporter:
    """Logs and counts each rollback once per process."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.detected = 0
        self.rounds_lost = 0
        self._last: OrderedDict[LearnerRef, LostVersions] = OrderedDict()

    def held(self, ref: LearnerRef, version: int, tip: str, head: Head) -> None:
        """This process held ``ref`` at ``version`` (newest round ``tip``) and the store's history, at
        ``head``, no longer has it: lost at least from the version after the head (or ``version`` itself,
        when the store has since moved past it on another history) to ``version``."""
        lost = LostVersions(head.incarnation, min(head.version + 1, version), version)
        if self._new(ref, lost):
            self.metrics.count_rollback(ref)
            log.error("the store lost rounds of %s that this process held: it was at version %d (round %s), "
                      "the store's head is version %d (round %s); lost at least versions %d to %d (%d "
                      "rounds); rebuilding from the store", ref, version, tip, head.version, head.tip,
                      lost.first, lost.last, lost.rounds)

    def seen(self, ref: LearnerRef, seen: int, incarnation: str, head_version: int) -> None:
        """A client was answered version ``seen`` of ``ref``; the store's head (``incarnation``) is at
        ``head_version``: below it, the versions after the head up to ``seen`` are lost."""
        if seen <= head_version:
            return
        lost = LostVersions(incarnation, head_version + 1, seen)
        if self._new(ref, lost):
            self.metrics.rollbacks_seen_by_clients.inc()
            log.error("the store lost rounds of %s that a client was answered: the client saw version %d, "
                      "the store's head is version %d; lost at least versions %d to %d (%d rounds)",
                      ref, seen, head_version, lost.first, lost.last, lost.rounds)

    def _new(self, ref: LearnerRef, lost: LostVersions) -> bool:
        """Whether ``lost`` is news (then remembered and counted)."""
        last = self._last.get(ref)
        if last is not None and lost.within(last):
            return False
        self._last[ref] = lost
        self._last.move_to_end(ref)
        if len(self._last) > _REMEMBERED:
            self._last.popitem(last=False)
        self.detected += 1
        self.rounds_lost += lost.rounds
        self.metrics.rollback_rounds_lost.inc(lost.rounds)
        return True

    def summary(self) -> dict[str, int]:
        """The totals of this process since it started (for ``/readyz``: no learner is named)."""
        return {"detected": self.detected, "rounds_lost": self.rounds_lost}
