"""The learners this process holds, kept in step with their logs in the store.

A cached learner is at ``version`` of ``incarnation``, its newest round being ``tip``. Before it is used
it is brought to the store's head (:meth:`LearnerCache.sync`): by replaying the logged rounds it has not
seen, or, when the log no longer holds them (trimmed behind a newer snapshot) or the learner was
replaced, by rebuilding it from the newest snapshot plus the log after it. A replay continues only the
history the learner holds (the next round's parent is its tip): after a Redis lost acknowledged rounds
(a crash under ``appendfsync everysec``, a failover) and took others at the same versions, a process
that held the lost ones notices, logs the rollback and rebuilds from the store instead of serving them.
Since kons is deterministic, every process that replays the same log reaches a bit-identical learner.

The cache holds at most ``cache_size`` learners and about ``cache_bytes`` of learned state (each learner's
:meth:`~kons.Learner.state_nbytes`), least recently used first out; an evicted learner with unsnapshotted
rounds is handed to ``on_evict``. Only loaded learners count: the entry a request for an unknown name makes
leaves with that request, so such requests never displace a learner.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread

import kons
from kons_service.core import codec
from kons_service.core.errors import BusyError, LearnerNotFoundError
from kons_service.core.learning import build, offload, replayed_label, track_coverage, undecided
from kons_service.core.marks import AckMarks
from kons_service.core.metrics import Metrics
from kons_service.core.rollbacks import RollbackReporter, Witness
from kons_service.settings import Settings
from kons_service.store import Head, HeadMark, LearnerRef, LogEntry, LoggedRound, Store

__all__ = ["CachedLearner", "LearnerCache", "logged_bytes", "not_found"]

log = logging.getLogger("kons_service.cache")

_LOAD_ATTEMPTS = 5  # rebuilds from a snapshot before answering 503
_REPLAY_PAGE = 512
_ROUND_SECONDS_WEIGHT = 0.1  # of the newest batch in a learner's moving average of its round time
#: Seconds one logged round takes to read back from the store, until this process has read a full page of
#: them itself (measured 0.04-0.05 ms on 2 cores with Redis on loopback): without it a writer that never
#: replayed would price a replay at its live rounds alone, 26% short for a dim-8 NystromKONS.
_LOG_READ_SECONDS_PRIOR = 5e-5
_APPENDED_IDS = 256  # request ids a cached learner remembers having appended (about 20 KiB at most)


def logged_bytes(entries: Iterable[LogEntry]) -> int:
    """The bytes of logged rounds' payloads (features, label, play, consumed id)."""
    return sum(len(e.x) + len(e.y) + len(e.played) + len(e.id) for e in entries)


def not_found(ref: LearnerRef) -> LearnerNotFoundError:
    return LearnerNotFoundError(f"No learner named {ref.name!r}.")


def _averaged(average: float, newest: float) -> float:
    """A moving average (0.0: nothing yet) with its newest value."""
    return newest if not average else (1 - _ROUND_SECONDS_WEIGHT) * average + _ROUND_SECONDS_WEIGHT * newest


@dataclass(eq=False)
class CachedLearner:
    """A learner held by this process, at ``version`` of ``incarnation``; guarded by ``lock``."""

    ref: LearnerRef
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    learner: kons.Learner | None = None
    config: dict[str, Any] = field(default_factory=dict)
    incarnation: str = ""
    version: int = 0
    snap_version: int = 0
    tip: str = ""
    #: The version of the learner's latest rollback or promotion (0: none), which names the V2 side's
    #: ``model_version`` with its config.
    restored_at: int = 0
    #: Set by a replay that found the store's history is not the one this learner holds.
    lost_history: bool = False
    last_snapshot: float = field(default_factory=time.monotonic)
    users: int = 0  # requests holding or waiting for the lock: an entry in use is never evicted
    nbytes: int = 0  # the learner's state size when it was last left alone
    history_stride: int = 1  # of the learner's history series, as last heard from the store
    reserved_bytes: int = 0  # of the tenant's byte budget, as last heard from the store (0: not asked)
    #: Its request ids and the answers kept for their retries: their reservation in the tenant's budget
    #: (0: not asked) and what they hold, as last heard from the store.
    record_room: int = 0
    record_bytes: int = 0
    record_room_at: float = -1e9  # when (monotonic) the store last told of ``record_room``
    #: Feedback requests waiting for the learner's writer (see :mod:`kons_service.core.feedback`).
    queue: list[Any] = field(default_factory=list)
    #: Whether this process made the newest append it knows of, so that the next may skip the lease; and
    #: until when (monotonic) it must take the lease anyway, after a conflict, with the current back-off.
    optimistic: bool = False
    leased_until: float = 0.0
    leased_backoff: float = 0.0
    resume_at: float = 0.0  # when a learner whose growth is held asks for room again (monotonic)
    #: The head of a learner dropped after it played rounds that were not logged (:meth:`drop_played`).
    held: Head | None = None
    #: Taken before the head it was last brought to was read: while the store's watch finds it unchanged,
    #: that head is still the store's (see :meth:`LearnerCache.current`).
    head_mark: HeadMark | None = None
    #: Rounds its reservation still covers the growth of (see :meth:`.growth.GrowthBudget.held`).
    growth_credit: int = 0
    #: The request ids of the latest requests this process appended (an ordered set, at most
    #: :data:`_APPENDED_IDS`): a client's retry usually comes back to the process that answered, which
    #: then asks the store for the earlier answer before playing anything (see :meth:`appended_before`).
    appended_ids: dict[str, None] = field(default_factory=dict)
    _nbytes_at: tuple[str, int, str] = ("", -1, "")  # where ``nbytes`` was measured
    #: What the cache's totals count of it: its ``nbytes`` when last counted, -1 when not counted (no
    #: learner, or out of the cache) (see :meth:`LearnerCache._recount`).
    counted_nbytes: int = -1

    def appended(self, version: int, tip: str, stride: int, nbytes: int) -> None:
        """This process appended rounds up to ``version`` (round ``tip``), after which the learner's state
        is ``nbytes`` (measured as they were played); ``stride``: the history's, if the append reported
        it."""
        self.version, self.tip, self.optimistic = version, tip, True
        self.nbytes, self._nbytes_at = nbytes, (self.incarnation, version, tip)
        if stride > 0:
            self.history_stride = stride

    def remember_ids(self, request_ids: Iterable[str]) -> None:
        """These request ids were just appended by this process."""
        for request_id in request_ids:
            self.appended_ids[request_id] = None
        while len(self.appended_ids) > _APPENDED_IDS:
            del self.appended_ids[next(iter(self.appended_ids))]

    def appended_before(self, request_id: str | None) -> bool:
        """Whether this process appended a request with this id lately: a retry, whose rounds must not be
        played (they would leave the learner ahead of its log, to be dropped and rebuilt)."""
        return request_id is not None and request_id in self.appended_ids

    def conflicted(self, base: float, cap: float) -> None:
        """An optimistic append lost to another writer: take the lease for a while (doubling each time)."""
        now = time.monotonic()
        recent = now < self.leased_until + cap  # else an old conflict: start again from ``base``
        self.leased_backoff = min(cap, max(base, 2 * self.leased_backoff)) if recent else base
        self.leased_until = now + self.leased_backoff
        self.optimistic = False
    #: What replaying its log since its snapshot would cost, for the snapshot policy: the bytes of the
    #: logged rounds after ``snap_version`` that it has played here, and a moving average of the seconds
    #: one round takes to play here (0.0: none timed yet).
    log_bytes: int = 0
    round_seconds: float = 0.0
    #: A moving average of the CPU seconds one round takes the thread playing it (0.0: none timed yet),
    #: which decides where its next single round runs (:func:`.learning.offload`): unlike the wall time,
    #: it does not grow when a busy machine makes the thread wait for a core.
    round_cpu_seconds: float = 0.0

    def invalidate(self) -> None:
        self.learner, self.incarnation, self.version, self.tip = None, "", 0, ""
        self.head_mark = None
        self.optimistic, self.growth_credit = False, 0

    def drop_played(self) -> None:
        """Drop a learner that played rounds the log does not hold, remembering the head it was at: the
        next :meth:`LearnerCache.sync` checks that the store still has that history (see
        :meth:`LearnerCache.check_held`)."""
        if self.learner is not None:
            self.held = Head(self.incarnation, self.version, self.snap_version, self.tip)
        self.invalidate()

    def state_nbytes(self) -> int:
        """The learner's :meth:`~kons.Learner.state_nbytes`, measured once per version (lock held)."""
        here = (self.incarnation, self.version, self.tip)
        if here != self._nbytes_at:
            self.nbytes, self._nbytes_at = self.loaded().state_nbytes(), here
        return self.nbytes

    def recent_nbytes(self) -> int:
        """The learner's state size as last measured, measured now only if it never was since the learner
        was loaded (lock held): for what tolerates the growth of the few rounds replayed since (a batch's
        work bound, where its round runs), so that a feedback after another replica's rounds measures the
        state once, after its own rounds, not before them too."""
        if self._nbytes_at[0] != self.incarnation:
            return self.state_nbytes()
        return self.nbytes

    def at(self, head: Head) -> bool:
        here = (self.incarnation, self.version, self.tip)
        return self.learner is not None and here == (head.incarnation, head.version, head.tip)

    def loaded(self) -> kons.Learner:
        """The learner (only after a successful :meth:`LearnerCache.sync`)."""
        if self.learner is None:
            raise RuntimeError(f"{self.ref} is not loaded")
        return self.learner

    def adopt(self, learner: kons.Learner, config: dict[str, Any], head: Head, restored_at: int = 0) -> None:
        self.learner, self.config, self.restored_at = learner, config, restored_at
        self._nbytes_at = ("", -1, "")  # another state: measured again
        self.incarnation, self.version, self.tip = head.incarnation, head.version, head.tip
        self.snap_version = head.snap_version
        self.last_snapshot = time.monotonic()
        self.history_stride = 1
        self.reserved_bytes = 0
        self.record_room = self.record_bytes = 0
        self.growth_credit = 0
        self.log_bytes = 0

    def count_rounds(self, rounds: int, log_bytes: int, seconds: float, cpu_seconds: float) -> None:
        """``rounds`` logged rounds of ``log_bytes`` bytes were played here in ``seconds``, ``cpu_seconds``
        of them on a core."""
        self.log_bytes += log_bytes
        self.round_seconds = _averaged(self.round_seconds, seconds / max(rounds, 1))
        self.round_cpu_seconds = _averaged(self.round_cpu_seconds, cpu_seconds / max(rounds, 1))


class LearnerCache:
    """The per-process cache of learners, and their replay from the store."""

    def __init__(self, store: Store, settings: Settings, metrics: Metrics,
                 on_evict: Callable[[CachedLearner], None], marks: AckMarks | None = None) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self._on_evict = on_evict
        self.rollbacks = RollbackReporter(metrics, store.server.may_have_lost)
        self.marks = marks
        self._entries: OrderedDict[LearnerRef, CachedLearner] = OrderedDict()
        # The loaded learners among them and their bytes, kept as requests leave their entries, so that
        # eviction looks only at the least recently used ones (not at every entry, each request).
        self._loaded = self._loaded_nbytes = 0
        #: What a rebuild pays per round beyond playing it: a moving average of the seconds one logged round
        #: takes to read back from the store (full pages only, as a rebuild reads them: a catch-up of a few
        #: rounds pays a whole round trip for them). The snapshot policy adds it to a learner's round time.
        self.log_read_seconds = _LOG_READ_SECONDS_PRIOR

    # ------------------------------------------------------------------ entries
    def entry(self, ref: LearnerRef) -> CachedLearner:
        """The cache entry of ``ref`` (created empty if missing), marked as the most recently used; use it
        through :meth:`locked`, which takes an entry that stayed empty out again."""
        entry = self._entries.get(ref)
        if entry is None:
            entry = self._entries[ref] = CachedLearner(ref)
        self._entries.move_to_end(ref)
        return entry

    def held(self, ref: LearnerRef) -> kons.Learner | None:
        """The learner of ``ref`` if this process holds it (no entry is made, none is marked as used)."""
        entry = self._entries.get(ref)
        return None if entry is None else entry.learner

    def held_nbytes(self, ref: LearnerRef) -> int | None:
        """The state size of the learner of ``ref`` as last measured, if this process holds it (no entry is
        made, none is marked as used, nothing is measured again)."""
        entry = self._entries.get(ref)
        return None if entry is None or entry.learner is None else entry.nbytes

    def entries(self) -> list[CachedLearner]:
        return list(self._entries.values())

    def drop(self, ref: LearnerRef) -> None:
        entry = self._entries.pop(ref, None)  # a request still using it fails its compare-and-append
        if entry is not None:
            self._recount(entry)
        self._evict()

    def _recount(self, entry: CachedLearner) -> None:
        """Bring the totals of loaded learners and their bytes up to date with ``entry``."""
        now = entry.nbytes if entry.learner is not None and self._entries.get(entry.ref) is entry else -1
        was, entry.counted_nbytes = entry.counted_nbytes, now
        self._loaded += (now >= 0) - (was >= 0)
        self._loaded_nbytes += max(now, 0) - max(was, 0)

    def _release(self, entry: CachedLearner) -> None:
        """A request is done with ``entry``: take it out if it holds no learner (unless it keeps the head of
        a dropped learner for the next sync to check: :meth:`CachedLearner.drop_played`), then keep the
        budgets."""
        if entry.users == 0:
            if entry.learner is None:
                if entry.held is None and self._entries.get(entry.ref) is entry:
                    del self._entries[entry.ref]
            else:  # nobody plays on it now, so its arrays can be measured
                entry.state_nbytes()
        self._recount(entry)
        self._evict()

    def _evict(self) -> None:
        """Evict least recently used learners while over ``cache_size`` learners or ``cache_bytes``;
        never one in use, nor the most recently used (a learner larger than the budget stays alone).
        Looks at the entries from the least recently used on, only while over: O(1) a request but for
        the entries in use it passes over."""
        count, nbytes = self._loaded, self._loaded_nbytes
        victims: list[tuple[CachedLearner, bool]] = []
        seen = 0  # loaded learners looked at, the last of them the most recently used
        for entry in self._entries.values():
            over_count = count > self.settings.cache_size
            if not over_count and nbytes <= self.settings.cache_bytes:
                break
            if entry.counted_nbytes < 0:
                continue
            seen += 1
            if seen >= self._loaded:
                break
            if entry.users or entry.lock.locked():
                continue
            victims.append((entry, over_count))
            count, nbytes = count - 1, nbytes - entry.counted_nbytes
        for entry, over_count in victims:
            del self._entries[entry.ref]
            self._recount(entry)
            self.metrics.evictions.labels("count" if over_count else "bytes").inc()
            if entry.version > entry.snap_version:
                self._on_evict(entry)
        self.metrics.cached.set(self._loaded)
        self.metrics.cached_bytes.set(self._loaded_nbytes)

    @contextlib.asynccontextmanager
    async def locked(self, entry: CachedLearner) -> AsyncIterator[CachedLearner]:
        """Hold the learner's lock, waiting at most ``lease_wait_seconds`` (then 503 learner_busy): a
        request queued behind others that each wait for a frozen Redis must not hang without bound."""
        entry.users += 1
        try:
            if entry.lock.locked():  # (a free lock is taken at once: no timer to arm)
                try:
                    async with asyncio.timeout(self.settings.lease_wait_seconds):
                        await entry.lock.acquire()
                except TimeoutError:
                    raise BusyError(f"Learner {entry.ref.name!r} is busy in this process; retry.") from None
            else:
                await entry.lock.acquire()
            try:
                yield entry
            finally:
                entry.lock.release()
        finally:
            entry.users -= 1
            self._release(entry)

    @contextlib.asynccontextmanager
    async def current(self, ref: LearnerRef,
                      seen: int = 0) -> AsyncIterator[tuple[CachedLearner, kons.Learner]]:
        """The learner of ``ref`` at the store's head, locked for the block. The head is not read while the
        store's watch proves it unchanged since the learner was brought to it (the learner is then at the
        head already: any write since, by any process, makes the mark stale), unless a client says it saw a
        version after the learner's (``seen``), which must be checked against the store itself."""
        async with self.locked(self.entry(ref)) as entry:
            if not (entry.learner is not None and seen <= entry.version
                    and await self.store.heads.unchanged(entry.head_mark)):
                entry.head_mark = None
                mark = await self.store.heads.mark(ref)  # (before the head is read: a write after it counts)
                await self.sync(entry, await self.head(ref))
                entry.head_mark = mark
            yield entry, entry.loaded()

    async def head(self, ref: LearnerRef) -> Head:
        head = await self.store.head(ref)
        if head is None:
            raise not_found(ref)
        return head

    # ------------------------------------------------------------------ replay
    async def sync(self, entry: CachedLearner, head: Head) -> None:
        """Bring the cached learner (lock held) to at least ``head``: replay the log, or rebuild."""
        dropped = entry.held is not None
        if entry.learner is None:
            if entry.held is not None:
                held, entry.held = entry.held, None
                await self.check_held(entry.ref, held, "process")
            for mark in self.marks.unchecked(entry.ref) if self.marks is not None else ():
                await self.check_held(entry.ref, mark, "marks")
        # (a learner built before its task was decided cannot play the rounds logged since: rebuilt)
        same = entry.learner is not None and entry.incarnation == head.incarnation and not (
            undecided(entry.config) and head.version > entry.version)
        if same and entry.version <= head.version and await self._catch_up(entry, head):
            entry.snap_version = max(entry.snap_version, head.snap_version)
            return
        if same and (entry.version > head.version or entry.lost_history):
            self.rollbacks.held(entry.ref, entry.version, entry.tip, head)
        reason = "behind" if entry.learner is not None else "dropped" if dropped else "cold"
        self.metrics.loads.labels(reason).inc()
        try:
            await self._rebuild(entry)
        finally:
            self._recount(entry)  # (counted while in use, as loaded or not)

    async def _rebuild(self, entry: CachedLearner) -> None:
        """Rebuild the learner from its newest snapshot and the log after it."""
        for _ in range(_LOAD_ATTEMPTS):
            entry.invalidate()
            stored = await self.store.snapshots.read_state(entry.ref)
            if stored is None:
                raise not_found(entry.ref)
            config = json.loads(stored.config)
            if stored.snapshot is None:
                learner = build(config)
            else:
                learner = await anyio.to_thread.run_sync(kons.load, stored.snapshot)
            snap = stored.head.snap_version
            entry.adopt(learner, config, Head(stored.head.incarnation, snap, snap, stored.snap_tip),
                        stored.restored_at)
            if await self._catch_up(entry, stored.head):
                return
        entry.invalidate()
        raise BusyError(f"Learner {entry.ref.name!r} could not be loaded consistently; retry.")

    async def check_held(self, ref: LearnerRef, held: Head, witness: Witness) -> None:
        """This process's learner was at ``held`` and was dropped (it had played rounds its append did not
        log), or an earlier process's marks say it acknowledged up to ``held``: if the store no longer has
        that history (a Redis that lost those rounds), report it as :meth:`sync` does for a learner it
        still holds. Unknowable when the log was trimmed past ``held`` (then not reported)."""
        head = await self.store.head(ref)
        if head is None or head.incarnation != held.incarnation or held.version == 0:
            return
        if head.version <= held.version:
            lost = head.version < held.version or head.tip != held.tip
        else:  # others appended after it, or after a loss: is the round at ``held.version`` still ours?
            rows = await self.store.log.read(ref, held.version - 1, 1)
            lost = bool(rows) and rows[0].version == held.version and rows[0].tip != held.tip
        if lost:
            self.rollbacks.held(ref, held.version, held.tip, head, witness)

    async def _catch_up(self, entry: CachedLearner, head: Head) -> bool:
        """Replay logged rounds up to ``head``; False if the log no longer holds the next one (trimmed
        behind a newer snapshot) or continues another history than the learner's (then
        ``entry.lost_history`` is set): the caller rebuilds."""
        entry.lost_history = False
        while entry.version < head.version:
            # Never past the head: other processes append while this one reads, and a learner replayed
            # beyond the head it was given would look like one that holds rounds the store lost.
            started = time.perf_counter()
            rows = await self.store.log.read(entry.ref, entry.version,
                                             min(_REPLAY_PAGE, head.version - entry.version))
            if len(rows) == _REPLAY_PAGE:
                self.log_read_seconds = _averaged(self.log_read_seconds,
                                                  (time.perf_counter() - started) / _REPLAY_PAGE)
            expected = list(range(entry.version + 1, entry.version + 1 + len(rows)))
            if not rows or [row.version for row in rows] != expected:
                return False
            if rows[0].parent != entry.tip:
                entry.lost_history = True
                return False
            if any(row.rollback_to >= 0 for row in rows):  # rebuilt from its state, the newest snapshot
                return False
            await self.replay(entry, rows)
        entry.lost_history = entry.tip != head.tip
        return not entry.lost_history

    async def replay(self, entry: CachedLearner, rows: list[LoggedRound]) -> None:
        """Play logged rounds (no rollback among them) on the learner (lock held, or one of its own)."""
        await offload(functools.partial(self._replay, entry, rows), len(rows), entry.recent_nbytes(),
                      entry.round_cpu_seconds)

    def _replay(self, entry: CachedLearner, rows: list[LoggedRound]) -> None:
        learner = entry.loaded()
        started, cpu_started = time.perf_counter(), time.thread_time()
        track_coverage(learner, entry.config)  # as the writer played them
        for version, logged, tip, *_ in rows:
            x = codec.decode_features(logged.x)
            if learner.grows:  # where the writer held it (its tenant's budget was full)
                learner.hold_growth(logged.held)
            played = learner.learn_one(x, replayed_label(learner, codec.decode_label(logged.y)))
            entry.version, entry.tip = version, tip
            if played != codec.unpack_float(logged.played):
                self.metrics.divergence.inc()
                log.error("replay of %s round %d played %r, the log says %r (non-deterministic numerics?)",
                          entry.ref, version, played, codec.unpack_float(logged.played))
        entry.count_rounds(len(rows), logged_bytes(row.entry for row in rows), time.perf_counter() - started,
                           time.thread_time() - cpu_started)
        self.metrics.replayed.inc(len(rows))
