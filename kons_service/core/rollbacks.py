"""Reports of Redis rollbacks: acknowledged rounds the store no longer has.

Three witnesses can see one, and each report names the versions lost (a lower bound: the store may
have lost more than its witness knew of):

* ``process``: this process held the lost rounds in memory (:class:`~kons_service.core.cache.LearnerCache`
  finds that the store's log does not continue the history of its cached learner): lost at least the
  versions from the store's head (or the first round of another history) up to the one it held;
* ``marks``: the high-water marks of acknowledged versions kept outside Redis (:mod:`.marks`, with
  ``KONS_ACK_MARKS_DIR``) by the processes that ran before this one on the host: the same comparison,
  once per learner, when this process first loads it;
* ``client``: a client sends back the newest version it was answered (header ``Kons-Seen-Version``): a
  head below it means the store lost at least the versions after the head up to the one the client saw,
  unless the store proves it lost nothing of that learner (:meth:`.ServerChecks.may_have_lost`: the Redis
  holding it has been up as a primary since the learner was created). A header the store refutes, any
  number a client sends, is then no witness: it is logged (info) and counted nowhere.

The marks and the client's memory survive a restart of the service together with Redis (a host reboot);
the client's also reaches a replica that never held the lost rounds. The same loss seen again (by
another witness, another client) is reported once: a report whose versions lie within the last one
reported for that learner is left out. Each report is one log line, counts in
``kons_rollbacks_detected{seen_by}`` (those of the process's memory in ``kons_history_rollbacks`` too),
and its rounds in ``kons_rollback_rounds_lost``; :meth:`RollbackReporter.summary` gives the totals to
``/readyz``.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from kons_service.core.metrics import Metrics
from kons_service.store import Head, LearnerRef

__all__ = ["LostVersions", "RollbackReporter", "Witness"]

log = logging.getLogger("kons_service.cache")

#: Learners whose last report is remembered to leave out repeats of it (least recently reported out).
_REMEMBERED = 4096
#: How long a proof that the store lost nothing of a learner answers its clients' claims (a Redis restart
#: later than that is noticed at the next claim).
_REFUTED_SECONDS = 5.0

Witness = Literal["process", "marks", "client"]

_SAW = {"process": "this process held", "marks": "were acknowledged before this process started",
        "client": "a client was answered"}


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
    """Logs and counts each rollback once per process. ``may_have_lost(ref)``: whether the store may have
    lost rounds of ``ref`` it acknowledged (False: it proves it lost none)."""

    def __init__(self, metrics: Metrics, may_have_lost: Callable[[LearnerRef], Awaitable[bool]]) -> None:
        self.metrics = metrics
        self.may_have_lost = may_have_lost
        self.detected = 0
        self.rounds_lost = 0
        self._last: OrderedDict[LearnerRef, LostVersions] = OrderedDict()
        #: Learners the store proved it lost nothing of, and when (monotonic s): a client's claim within
        #: _REFUTED_SECONDS of that is refuted without asking again (a claim per request costs no query).
        self._refuted: OrderedDict[LearnerRef, float] = OrderedDict()

    def held(self, ref: LearnerRef, version: int, tip: str, head: Head, witness: Witness = "process") -> None:
        """``ref`` was acknowledged (held by this process, or marked by an earlier one) up to ``version``
        (newest round ``tip``) and the store's history, at ``head``, no longer has it: lost at least from
        the version after the head (or ``version`` itself, when the store has since moved past it on
        another history) to ``version``."""
        lost = LostVersions(head.incarnation, min(head.version + 1, version), version)
        what = "it was at" if witness == "process" else "acknowledged up to"
        self._report(ref, lost, witness, f"{what} version {version} (round {tip}), the store's head is "
                                          f"version {head.version} (round {head.tip})")

    async def seen(self, ref: LearnerRef, seen: int, incarnation: str, head_version: int) -> None:
        """A client says it was answered version ``seen`` of ``ref``; the store's head (``incarnation``) is
        at ``head_version``: below it, the versions after the head up to ``seen`` are lost, unless the
        store proves it never acknowledged ``seen``."""
        if seen <= head_version:
            return
        lost = LostVersions(incarnation, head_version + 1, seen)
        last = self._last.get(ref)
        if last is not None and lost.within(last):
            return
        refuted = self._refuted.get(ref)
        if refuted is not None and time.monotonic() - refuted < _REFUTED_SECONDS:
            return
        if not await self.may_have_lost(ref):
            log.info("a client says it was answered version %d of %s, above its head (version %d), but the "
                     "store has been up since the learner was created and lost nothing: not a rollback",
                     seen, ref, head_version)
            self._refuted[ref] = time.monotonic()
            self._refuted.move_to_end(ref)
            if len(self._refuted) > _REMEMBERED:
                self._refuted.popitem(last=False)
            return
        self._report(ref, lost, "client", f"the client saw version {seen}, the store's head is version "
                                          f"{head_version}")

    def _report(self, ref: LearnerRef, lost: LostVersions, witness: Witness, detail: str) -> None:
        last = self._last.get(ref)
        if last is not None and lost.within(last):
            return
        self._last[ref] = lost
        self._last.move_to_end(ref)
        if len(self._last) > _REMEMBERED:
            self._last.popitem(last=False)
        self.detected += 1
        self.rounds_lost += lost.rounds
        self.metrics.count_rollback(ref, witness, lost.rounds)
        log.error("the store lost rounds of %s that %s: %s; lost at least versions %d to %d (%d rounds)%s",
                  ref, _SAW[witness], detail, lost.first, lost.last, lost.rounds,
                  "; rebuilding from the store" if witness == "process" else "")

    def summary(self) -> dict[str, int]:
        """The totals of this process since it started (for ``/readyz``: no learner is named)."""
        return {"detected": self.detected, "rounds_lost": self.rounds_lost}
