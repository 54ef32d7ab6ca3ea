"""Shadow challengers: a learner of another configuration that learns every round its champion
acknowledges, in the same order, without serving any of its predictions; and the comparison of the two.

A challenger is a learner of its own (its config carries ``"shadow": <champion>``, its meta the link to
the champion: :class:`.ShadowLink`), created at the champion's head, version ``start``; its version ``v``
is then the champion's ``start + v``. It learns from the champion's durable log, never from a second
write on the feedback path: a task in every process (:meth:`Shadows.run`, woken by each feedback and
every half second, at most four times a second so that a catch-up's batch shares its costs) takes a
challenger's lock, takes the champion's rounds after the challenger's head and
feeds them to the challenger through the ordinary feedback writer, with request ids derived from
the champion's versions, so that a crash at any point (of either replica, between the champion's append
and the challenger's, or in the middle of a catch-up) leaves each round learnt once: the next catch-up
starts from the challenger's head, and a re-sent batch is answered from its request id. The rounds are
those the champion's writer in this process just logged and acknowledged, handed over as appended
(:meth:`Shadows.logged`: no read, no parse), once the log is seen to hold the last of them (its round id
at that version, from the head or one entry); else (another process wrote them, or the challenger is
further behind) they are read from the log. A rollback of the
champion is mirrored (the challenger rolls back to its own version of the target, or to its start), so
the mapping of versions holds. The champion keeps its log after what each challenger has learnt (the
cursors of :mod:`kons_service.store.shadows`). The challenger's own predictions (its log's plays) are
compared with the champion's on the same rounds (:meth:`Shadows.compare`): the error per window of
rounds and paired tests over the compared rounds.

A challenger more than ``shadow_max_lag_rounds`` behind (one that stopped following) is stalled for good:
its cursor keeps no more of the champion's log, and the comparison says so.

Feedback sent to a challenger by a client is refused (409 ``learner_is_shadow``): its log must stay its
champion's rounds.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import itertools
import logging
import math
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import numpy as np
from scipy import stats as scipy_stats

from kons.losses import get_loss
from kons_service.core import codec
from kons_service.core.cache import LearnerCache, not_found
from kons_service.core.errors import BusyError, InvalidShadowError
from kons_service.core.feedback import Feedback
from kons_service.core.learning import SHADOW_REQUEST, canonical, classifier
from kons_service.core.metrics import Metrics
from kons_service.settings import Settings
from kons_service.store import (
    Head,
    LearnerRef,
    LogEntry,
    LoggedRound,
    Publication,
    ShadowLink,
    Store,
    StoreUnavailableError,
    process_of,
    round_id,
)

if TYPE_CHECKING:
    from kons_service.core.feedback import FeedbackWriter
    from kons_service.core.versions import Versions

__all__ = ["ChallengerReport", "Promoted", "Shadows"]

log = logging.getLogger("kons_service.shadows")

_LOCK_MS = 60_000
#: How often the process holding a challenger's catch-up lock is asked about (``CLIENT LIST``): a lock of
#: a process that is gone (SIGKILLed) is taken over, not waited for for :data:`_LOCK_MS`.
_RECHECK_SECONDS = 1.0
_ATTEMPTS = 5
_INTERVAL_SECONDS = 0.5
_BATCH_SECONDS = 0.25
_SIGNIFICANCE = 0.05
#: The newest rounds a champion's writer in this process hands over to its challengers' catch-ups (a
#: catch-up further behind reads the log).
_RECENT_ROUNDS = 4096
#: ... for this long after a catch-up (or a challenger's creation) here last saw it followed.
_FOLLOWED_SECONDS = 60.0
#: A challenger's cursor is written before the challenger is created (:meth:`Shadows.register`): a
#: comparison forgets a cursor without a challenger (left by a create or a delete that crashed) only once it
#: has seen it so, unchanged, for this long, far longer than a create takes (and the shadow task then
#: settles the record of one that no comparison settles: :meth:`Shadows._settle_unlinked`).
_UNLINKED_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Promoted:
    """A promotion's answer: the champion's new version, the challenger promoted and its config, now the
    champion's."""

    version: int
    promoted: str
    config: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ChallengerReport:
    """A challenger of a champion: its config, how far it has learnt the champion's log, and how it
    compares on the rounds both hold (None: not comparable, see :meth:`Shadows.compare`)."""

    name: str
    config: dict[str, Any]
    start: int
    learnt: int
    behind: int
    status: str
    comparison: dict[str, Any] | None


class Shadows:
    """Create, catch up and compare the shadow challengers of every champion."""

    def __init__(self, store: Store, settings: Settings, metrics: Metrics, cache: LearnerCache,
                 writer: FeedbackWriter, versions: Versions) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.cache = cache
        self.writer = writer
        self.versions = versions
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._reported: dict[LearnerRef, str] = {}  # each challenger's last status, logged when it changes
        #: The champions whose challengers this process caught up lately (until when it keeps their rounds),
        #: and the newest rounds each one's writer here logged (:meth:`logged`).
        self._champions: dict[LearnerRef, float] = {}
        self._recent: dict[LearnerRef, _Recent] = {}
        #: The cursors a comparison here found without a challenger: when it first did (:meth:`compare`).
        self._unlinked: dict[tuple[LearnerRef, str, int], float] = {}
        self._holders_asked: dict[str, float] = {}  # catch-up lock holder -> until when it is not asked again
        #: A lock per challenger being caught up here (gone with its last holder): see :meth:`catch_up`.
        self._catching_up: weakref.WeakValueDictionary[LearnerRef, asyncio.Lock] = (
            weakref.WeakValueDictionary())

    # ------------------------------------------------------------------ creation
    async def link(self, ref: LearnerRef, champion: str) -> tuple[ShadowLink, str | None]:
        """The link of a new challenger ``ref`` of ``champion`` (which must be a learner of the same tenant
        and no challenger itself), starting at its head, and the champion's task (None: undecided)."""
        if champion == ref.name:
            raise InvalidShadowError(f"Learner {ref.name!r} cannot shadow itself.")
        origin = LearnerRef(ref.tenant, champion)
        async with self.cache.current(origin) as (entry, learner):
            if entry.config.get("shadow"):
                raise InvalidShadowError(
                    f"Learner {champion!r} is itself a shadow challenger (of {entry.config['shadow']!r}): "
                    "a shadow follows a champion.")
            task = entry.config["params"].get("task") if "task" in entry.config["params"] else (
                "classification" if get_loss(learner.loss).binary else "regression")
            link = ShadowLink(champion, entry.incarnation, entry.version)
        return link, task

    async def register(self, ref: LearnerRef, link: ShadowLink) -> ShadowLink:
        """Have the champion keep its log after the link's start before the challenger is created; a
        snapshot of the champion may have trimmed it meanwhile: the link then starts at its newer head."""
        champion = LearnerRef(ref.tenant, link.champion)
        self._champions[champion] = time.monotonic() + _FOLLOWED_SECONDS
        for _ in range(_ATTEMPTS):
            await self.store.shadows.follow(champion, ref.name, link.start, first=True)
            head = await self.cache.head(champion)
            rows = await self.store.log.read(champion, link.start, 1)
            if head.incarnation == link.incarnation and (
                    head.version == link.start or (rows and rows[0].version == link.start + 1)):
                return link
            link = ShadowLink(link.champion, head.incarnation, head.version)
        raise BusyError(f"Learner {link.champion!r} kept changing while its challenger was created; retry.")

    async def settle(self, ref: LearnerRef, link: ShadowLink) -> None:
        """After the challenger's create (made or not): a name that is no challenger of this champion (it
        existed as another learner, or the create failed) holds its champion's log no more; a challenger
        of it that existed already keeps its cursor (left as it was by :meth:`register`)."""
        stored = await self.store.shadows.link(ref)
        if stored is None or stored.champion != link.champion:
            await self.store.shadows.forget(LearnerRef(ref.tenant, link.champion), ref.name)
        self.nudge()

    async def deleted(self, ref: LearnerRef, link: ShadowLink | None) -> None:
        if link is not None:
            await self.store.shadows.forget(LearnerRef(ref.tenant, link.champion), ref.name)

    # ------------------------------------------------------------------ catching up
    def nudge(self) -> None:
        """A champion took feedback: catch its challengers up soon."""
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="kons-shadows")

    async def close(self) -> None:
        # (the flag too: a cancellation that lands in a Redis call may come out of redis-py as a connection
        # error, which the loop survives)
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def run(self) -> None:
        """Catch every challenger up, again whenever woken (at most every quarter second) and every half
        second."""
        while not self._closing:
            # (asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a cancellation that
            # comes as the event is set, and close() would wait for this loop forever)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_INTERVAL_SECONDS):
                    await self._wake.wait()
            self._wake.clear()
            try:
                challengers = await self.store.shadows.all()
            except StoreUnavailableError as exc:
                log.warning("shadow catch-up paused: %s", exc)
                continue
            # (a challenger deleted, promoted or stalled is listed no more: its status goes, so that they stay
            # as many as the challengers there are)
            self._reported = {ref: self._reported[ref] for ref in challengers if ref in self._reported}
            for ref in challengers:
                if self._closing:
                    return
                try:
                    status = await self.catch_up(ref)
                except Exception as exc:  # (a store outage, a mirrored rollback not kept, ...)
                    status = f"failed: {exc}"
                if status not in ("following", "busy", "gone") and self._reported.get(ref) != status:
                    log.warning("shadow challenger %s: %s", ref, status)  # (once, not every half second)
                self._reported[ref] = status
            now = time.monotonic()
            for champion in [c for c, until in self._champions.items() if until < now]:
                del self._champions[champion]
                self._recent.pop(champion, None)
            with contextlib.suppress(StoreUnavailableError):  # (settled at a later pass)
                await self._settle_unlinked(now)
            # at most 4 catch-ups a second: a batch of a quarter second's rounds shares one catch-up's Redis
            # calls and one write (a catch-up per feedback cost about 10 times the challenger's round)
            await asyncio.sleep(_BATCH_SECONDS)

    def logged(self, champion: LearnerRef, head: Head, token: str, entries: list[LogEntry]) -> None:
        """The writer of this process logged and acknowledged ``entries`` after ``head`` (appended under
        ``token``): if ``champion`` has challengers, keep them for their catch-ups, which then learn them
        without reading them back from the log (:meth:`_rows_after`)."""
        if self._champions.get(champion, 0.0) < time.monotonic():
            return
        recent = self._recent.get(champion)
        if recent is None or not recent.continued_by(head):
            recent = self._recent[champion] = _Recent(head.incarnation)
        recent.extend(head, token, entries)

    async def catch_up(self, ref: LearnerRef) -> str:
        """Feed the challenger the champion's rounds it has not learnt (one process at a time); its
        status: ``following``, ``busy`` (another process is at it) or why it stopped."""
        # A catch-up of this process waits for another one of this process (a comparison's for the shadow
        # task's), then learns what is left: told "busy" by its own process's lock, a comparison would
        # report the challenger short of the rounds acknowledged before it was asked.
        local = self._catching_up.get(ref)
        if local is None:
            local = self._catching_up[ref] = asyncio.Lock()
        async with local:
            return await self._catch_up_under_store_lock(ref)

    async def _catch_up_under_store_lock(self, ref: LearnerRef) -> str:
        """:meth:`catch_up` under the challenger's lock in the store, which one process holds at a time."""
        token = self.writer.leases.token()  # (names this process: see _taken_over)
        if not await self.store.shadows.lock(ref, token, _LOCK_MS) and not await self._taken_over(ref, token):
            return "busy"
        try:
            return await self._catch_up(ref, token)
        finally:
            await self.store.shadows.unlock(ref, token)

    async def _taken_over(self, ref: LearnerRef, token: str) -> bool:
        """Take the challenger's catch-up lock if its holder's process is gone (no connection to Redis, as
        after a SIGKILL; the writer lease's rule, :meth:`.WriterLeases._gone`), instead of leaving the
        challenger behind its champion until the lock expires; asked about a holder at most every
        :data:`_RECHECK_SECONDS` (``CLIENT LIST`` walks Redis's clients), and never about this process."""
        if not self.settings.lease_takeover:
            return False
        holder = await self.store.shadows.holder(ref)
        if holder is None or process_of(holder) == self.store.process_name:
            return False
        now = time.monotonic()
        if self._holders_asked.get(holder, now) > now:
            return False
        self._holders_asked = {h: until for h, until in self._holders_asked.items() if until > now}
        self._holders_asked[holder] = now + _RECHECK_SECONDS
        if await self.store.leases.holder_connected(holder) is not False:
            return False
        await self.store.shadows.unlock(ref, holder)  # (if that holder still has it)
        if not await self.store.shadows.lock(ref, token, _LOCK_MS):
            return False
        log.warning("took over the catch-up lock of shadow challenger %s from %s, whose process is gone", ref,
                    holder)
        return True

    async def _catch_up(self, ref: LearnerRef, token: str) -> str:
        link = await self.store.shadows.link(ref)
        if link is None:
            return "gone"
        if link.stalled:
            return f"stalled: {link.stalled}"
        champion = LearnerRef(ref.tenant, link.champion)
        self._champions[champion] = time.monotonic() + _FOLLOWED_SECONDS
        head = await self.store.head(champion)
        if head is None:
            return "stopped: its champion was deleted"
        if head.incarnation != link.incarnation:
            return "stopped: its champion's state was replaced (a state upload)"
        done = link.start + (await self.cache.head(ref)).version
        if head.version - done > self.settings.shadow_max_lag_rounds:
            why = (f"{head.version - done} rounds behind its champion (more than "
                   f"KONS_SHADOW_MAX_LAG_ROUNDS, {self.settings.shadow_max_lag_rounds}): it learns no more, "
                   "and its champion's log is no longer kept for it")
            await self.store.shadows.stall(ref, dataclasses.replace(link, stalled=why))
            self.metrics.shadows_stalled.inc()
            return f"stalled: {why}"
        while done < head.version:
            page = min(self.settings.max_batch, head.version - done)
            rows = await self._rows_after(champion, head, done, page)
            if not rows or rows[0].version != done + 1:
                return f"stopped: its champion's log no longer holds round {done + 1}"
            done = await self._learn(ref, link, rows)
            await self.store.shadows.follow(champion, ref.name, done)
            if not await self.store.shadows.lock_renewed(ref, token, _LOCK_MS):
                if await self.store.shadows.link(ref) is None:
                    # deleted meanwhile, with this lock: its delete may have forgotten it before the
                    # cursor above was written, which would keep the champion's log after it for ever (a
                    # delete after the lock was renewed forgets it after that cursor)
                    await self.store.shadows.forget(champion, ref.name)
                    return "gone"
                return "busy"
        return "following"

    async def _rows_after(self, champion: LearnerRef, head: Head, done: int, page: int) -> list[LoggedRound]:
        """Up to ``page`` of the champion's logged rounds after version ``done``, up to ``head``: those
        its writer in this process handed over (:meth:`logged`) if they are the log's (the last one's id
        is the log's at its version: ids are unique, and each round names its parent's), else read."""
        recent = self._recent.get(champion)
        if recent is not None and recent.incarnation == head.incarnation:
            rows = recent.after(done, min(page, head.version - done))
            if rows and (rows[-1].tip == head.tip if rows[-1].version == head.version else
                         [r.tip for r in await self.store.log.read(champion, rows[-1].version - 1, 1)]
                         == [rows[-1].tip]):
                return rows
        rows = await self.store.log.read(champion, done, page)
        self.metrics.shadow_rounds_read.inc(len(rows))
        return rows

    async def _learn(self, ref: LearnerRef, link: ShadowLink, rows: list[LoggedRound]) -> int:
        """Feed the challenger the leading rounds of ``rows`` (or mirror the rollback that leads them);
        returns the champion version it has learnt up to."""
        if rows[0].rollback_to >= 0:  # mirrored; a promotion of another challenger leaves this one as it is
            promoted = rows[0].rollback_to == rows[0].version
            own = (await self.cache.head(ref)).version
            await self.versions.rollback(ref, own if promoted else max(0, rows[0].rollback_to - link.start))
            return rows[0].version
        run = []
        for row in rows:
            if row.rollback_to >= 0:
                break
            run.append(row)
        items = [Feedback(codec.decode_label(r.entry.y), codec.decode_features(r.entry.x)) for r in run]
        request_id = f"{SHADOW_REQUEST}{link.incarnation}/{run[0].version}-{run[-1].version}"
        result = await self.writer.write(ref, items, request_id)
        if result.version != run[-1].version - link.start:
            log.error("shadow %s is out of step with %s: version %d after its round %d", ref,
                      link.champion, result.version, run[-1].version)
        self.metrics.shadow_rounds.inc(len(run))
        return run[-1].version

    # ------------------------------------------------------------------ promotion
    async def promote(self, champion: LearnerRef, name: str) -> Promoted:
        """Make the champion's name serve its challenger ``name``'s state and config from the next request
        on: the challenger is caught up to the champion's head while this process holds the champion's
        writer lease (feedback waits for it, then is played by the new champion), and ``promote.lua``
        swaps them in one step iff the lease and the head are still those; the previous champion stays a
        restorable version (with its config), and the challenger, now the champion, is deleted."""
        ref = LearnerRef(champion.tenant, name)
        link = await self.store.shadows.link(ref)
        if link is None or link.champion != champion.name:
            if await self.store.config(ref) is None:
                raise not_found(ref)
            raise InvalidShadowError(f"Learner {name!r} is not a shadow challenger of {champion.name!r}.")
        deadline = asyncio.get_running_loop().time() + self.settings.lease_wait_seconds
        while asyncio.get_running_loop().time() < deadline:
            await self.catch_up(ref)  # most of the way, while the champion still takes feedback
            # (the lease of this process's writers: renewed while it is held, and never taken over by one of
            # them, which would take a token of this process that none of them holds for a dead writer's)
            async with self.writer.leases.hold(champion) as lease:
                head = lease.head
                if head.incarnation != link.incarnation:
                    raise InvalidShadowError(f"Learner {champion.name!r}'s state was replaced since {name!r} "
                                             "started following it.")
                await self._catch_up_to(ref, link.start, head.version)  # the champion holds still now
                async with self.cache.current(ref) as (entry, learner):
                    if link.start + entry.version != head.version:
                        continue
                    blob = await anyio.to_thread.run_sync(learner.to_bytes)
                    config = {k: v for k, v in entry.config.items() if k != "shadow"}
                keep = await self.versions.retention(champion, len(blob), 0)
                outcome = await self.store.snapshots.promote(
                    champion, lease.token, head, canonical(config), blob, self.settings.snapshot_chunk_bytes,
                    uuid.uuid4().hex, keep, name)
                lease.consumed = outcome is Publication.PUBLISHED  # (promote.lua released it)
            if outcome is Publication.GONE:
                raise not_found(champion)
            if outcome is Publication.PUBLISHED:
                await self.store.delete(ref)
                await self.store.shadows.forget(champion, name)
                self.cache.drop(ref)
                self.cache.drop(champion)
                self.metrics.promotions.inc()
                return Promoted(head.version + 1, name, config)
        raise BusyError(f"Learner {champion.name!r} kept changing while {name!r} was promoted; retry.")

    async def _catch_up_to(self, ref: LearnerRef, start: int, version: int) -> str:
        """Catch the challenger up to the champion's ``version``, waiting for another process's catch-up
        (the lock) while it runs; the last catch-up's status (``busy`` if the other process still held
        the lock after the attempts)."""
        for _ in range(_ATTEMPTS * 20):
            status = await self.catch_up(ref)
            if status != "busy" or start + (await self.cache.head(ref)).version >= version:
                return status
            await asyncio.sleep(0.02)
        return status

    # ------------------------------------------------------------------ comparison
    async def compare(self, champion: LearnerRef) -> tuple[int, list[ChallengerReport]]:
        """The champion's version and its challengers, each caught up first (unless another process is at
        it) and compared with it on the last ``shadow_compare_rounds`` rounds both logs hold."""
        head = await self.cache.head(champion)
        async with self.cache.current(champion) as (_, learner):
            champion_error = _error_of(learner)
        reports = []
        cursors = await self.store.shadows.cursors(champion)
        for seen in [k for k in self._unlinked if k[0] == champion and cursors.get(k[1]) != k[2]]:
            del self._unlinked[seen]
        for name in sorted(cursors):
            ref = LearnerRef(champion.tenant, name)
            status = await self.catch_up(ref)
            link = await self.store.shadows.link(ref)
            if status == "busy" and link is not None:
                # another process is catching it up: waited for, like this process's own catch-up, so that
                # the report holds the rounds acknowledged before it was asked
                status = await self._catch_up_to(ref, link.start, head.version)
            unlinked = (champion, name, cursors[name])
            if link is None:  # a leftover, or a challenger being created (registered, not yet created)
                now = time.monotonic()
                if now - self._unlinked.setdefault(unlinked, now) > _UNLINKED_SECONDS:
                    await self.store.shadows.forget(champion, name)
                    self._unlinked.pop(unlinked, None)  # (unless the shadow task settled it meanwhile)
                continue
            self._unlinked.pop(unlinked, None)
            async with self.cache.current(ref) as (entry, challenger):
                learnt, config, challenger_error = entry.version, entry.config, _error_of(challenger)
            comparison = None
            if champion_error == challenger_error and link.incarnation == head.incarnation:
                comparison = await self._comparison(champion, ref, link, learnt, champion_error,
                                                    challenger_error)
            at = link.start + learnt
            reports.append(ChallengerReport(name, config, link.start, at, max(0, head.version - at),
                                            "following" if status == "busy" else status, comparison))
        return head.version, reports

    async def _settle_unlinked(self, now: float) -> None:
        """Settle the records of cursors a comparison here saw without a challenger more than
        :data:`_UNLINKED_SECONDS` before ``now`` that no comparison of their champion settled since (the
        champion or the challenger was deleted, by any process, or the champion is not compared again):
        forget a cursor still there, unchanged and without a challenger, as that comparison would have,
        and drop the record either way. A record so lasts about :data:`_UNLINKED_SECONDS` whatever becomes
        of its learners: a service whose tenants create and delete learners keeps no more of them than the
        last minute's comparisons made."""
        cursors: dict[LearnerRef, dict[str, int]] = {}  # a champion's, read once a pass for all its records
        for record in [r for r, seen in self._unlinked.items() if now - seen > _UNLINKED_SECONDS]:
            champion, name, cursor = record
            if champion not in cursors:
                cursors[champion] = await self.store.shadows.cursors(champion)
            if (cursors[champion].get(name) == cursor
                    and await self.store.shadows.link(LearnerRef(champion.tenant, name)) is None):
                await self.store.shadows.forget(champion, name)
            self._unlinked.pop(record, None)

    async def _comparison(self, champion: LearnerRef, ref: LearnerRef, link: ShadowLink, learnt: int,
                          champion_error: _Error, challenger_error: _Error) -> dict[str, Any] | None:
        """Both learners' errors on the rounds both logs hold, paired; for classifiers that play class
        probabilities the log loss, and the error rate beside it (``error_rate``: on the rounds whose log
        says whether each play predicted its label)."""
        first = max(0, learnt - self.settings.shadow_compare_rounds)
        own = {row.version: row for row in await self._rows(ref, first, learnt)}
        theirs = await self._rows(champion, first + link.start, learnt + link.start)
        pairs = [(row, own[row.version - link.start]) for row in theirs
                 if row.rollback_to < 0 and row.version - link.start in own]
        if not pairs:
            return None
        window = self.settings.shadow_window_rounds
        versions = [c.version for c, _ in pairs]
        if champion_error.name == "log_loss":  # (scored as logged: rounds logged before were not)
            scored = [(c.version, codec.play_scored(c.entry.played), codec.play_scored(s.entry.played))
                      for c, s in pairs]
            known = [(v, a, b) for v, a, b in scored if a is not None and b is not None]
            if not known:
                return None
            versions = [v for v, _, _ in known]
            comparison = _paired("log_loss", versions, np.array([a[0] for _, a, _ in known]),
                                 np.array([b[0] for _, _, b in known]), window)
            comparison["error_rate"] = _paired(
                "error_rate", versions, np.array([float(not a[1]) for _, a, _ in known]),
                np.array([float(not b[1]) for _, _, b in known]), window)
            return comparison
        labels = [codec.decode_label(c.entry.y) for c, _ in pairs]
        champion_losses = np.array([champion_error.of(c.entry.played, y) for (c, _), y in zip(pairs, labels,
                                                                                              strict=True)])
        challenger_losses = np.array([challenger_error.of(s.entry.played, y)
                                      for (_, s), y in zip(pairs, labels, strict=True)])
        comparison = _paired(champion_error.name, versions, champion_losses, challenger_losses, window)
        return comparison

    async def _rows(self, ref: LearnerRef, after: int, until: int) -> list[LoggedRound]:
        rows: list[LoggedRound] = []
        while after < until:
            page = await self.store.log.read(ref, after, min(1024, until - after))
            page = [row for row in page if row.version <= until]
            if not page:
                break
            rows += page
            after = page[-1].version
        return rows


class _Recent:
    """The newest rounds a champion's writer in this process logged, in one unbroken run (a round logged
    elsewhere, or a rollback, starts a new run): at most :data:`_RECENT_ROUNDS`."""

    def __init__(self, incarnation: str) -> None:
        self.incarnation = incarnation
        self.rows: collections.deque[LoggedRound] = collections.deque(maxlen=_RECENT_ROUNDS)

    def continued_by(self, head: Head) -> bool:
        """Whether rounds appended after ``head`` continue this run."""
        return head.incarnation == self.incarnation and bool(self.rows) and (
            self.rows[-1].version == head.version and self.rows[-1].tip == head.tip)

    def extend(self, head: Head, token: str, entries: list[LogEntry]) -> None:
        parent = head.tip
        for version, entry in enumerate(entries, head.version + 1):
            tip = round_id(token, version)
            self.rows.append(LoggedRound(version, entry, tip, parent))
            parent = tip

    def after(self, done: int, count: int) -> list[LoggedRound]:
        """Up to ``count`` rounds from version ``done + 1`` on, if this run holds it (else none)."""
        if not self.rows or not self.rows[0].version <= done + 1 <= self.rows[-1].version:
            return []
        start = done + 1 - self.rows[0].version
        return list(itertools.islice(self.rows, start, start + count))


@dataclass(frozen=True, slots=True)
class _Error:
    """A per-round error both learners' plays can be scored by: ``squared_error`` for numbers,
    ``error_rate`` (a wrong sign) for a binary learner's ±1 labels, ``log_loss`` (and the error rate
    beside it) for a classifier that plays class probabilities."""

    name: str

    def of(self, played: bytes, y: Any) -> float:
        """The error of a round played ``played`` (as logged) at ``y`` (not for ``log_loss``: the log
        holds those rounds' scores, :func:`.codec.play_scored`)."""
        value = codec.unpack_float(played)
        if self.name == "squared_error":
            return (value - float(y)) ** 2
        return float(value * (1.0 if float(y) > 0 else -1.0) <= 0)


def _error_of(learner: Any) -> _Error:
    """How the plays of ``learner`` are scored (two learners are compared if they are scored alike)."""
    if classifier(learner):
        return _Error("log_loss")
    return _Error("error_rate" if get_loss(learner.loss).binary else "squared_error")


def _paired(metric: str, versions: list[int], champion: np.ndarray, challenger: np.ndarray,
            window: int) -> dict[str, Any]:
    """The mean errors per window of ``window`` rounds (the last one may be shorter) and over all
    rounds, with a paired t test and a sign test of the champion's minus the challenger's error per
    round, and what they say at the 5% level."""
    difference = champion - challenger
    n = len(difference)
    windows = [{"from_version": versions[i], "to_version": versions[min(i + window, n) - 1],
                "rounds": min(window, n - i), "champion": float(champion[i:i + window].mean()),
                "challenger": float(challenger[i:i + window].mean())} for i in range(0, n, window)]
    spread = float(difference.std(ddof=1)) if n > 1 else 0.0
    t_value = p_value = None
    if n > 1 and spread > 0:
        t_value = float(difference.mean() / (spread / math.sqrt(n)))
        p_value = float(2 * scipy_stats.t.sf(abs(t_value), n - 1))
    wins, losses = int((difference > 0).sum()), int((difference < 0).sum())
    sign_p = float(scipy_stats.binomtest(wins, wins + losses).pvalue) if wins + losses else None
    verdict = "undecided"
    if p_value is not None and p_value < _SIGNIFICANCE:
        verdict = "challenger_better" if difference.mean() > 0 else "champion_better"
    return {"metric": metric, "rounds": n, "champion": float(champion.mean()),
            "challenger": float(challenger.mean()), "mean_difference": float(difference.mean()),
            "t": t_value, "p_value": p_value, "challenger_wins": wins, "champion_wins": losses,
            "sign_p_value": sign_p, "verdict": verdict, "windows": windows}

