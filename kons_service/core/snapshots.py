"""Snapshots: a cached learner's full state written to the store, so that a rebuild replays a short log.

A snapshot is paid every time it is written; the log behind it costs its bytes in Redis all along, but its
replay only when the learner is rebuilt (a crash, a takeover, a reload after eviction). So a learner is
snapshotted by what the snapshot saves, never merely because time passed (:class:`SnapshotPolicy`): once its
log since the last snapshot holds more bytes than the snapshot would (keeping the log is the dearer), or
once it is ``snapshot_every_rounds`` behind and its log holds a third of the snapshot's bytes (a short
replay, while snapshot bytes stay within 3x of the log's at any feeding rate), or, whatever the bytes, once
its replay would take ``snapshot_max_replay_seconds`` (the bound on a rebuild: each round behind read back
from the store, as the cache measures it, and played, as this learner's rounds were timed). Never, but for
that bound, within ``snapshot_min_seconds`` of the last one (a hot learner's log grows faster than any
snapshot pays back);
``snapshot_interval_seconds``, if set, adds a clock. A learner leaving the cache (evicted) is snapshotted by
the same rule, without the floor (there is no later chance here), and :meth:`Snapshotter.close` snapshots
every learner that still has new rounds. One process writes a learner's snapshot at a time (a lock in the
store); publishing it trims the log behind it. ``kons_snapshot_bytes_total / kons_log_bytes_total`` is the
write amplification."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio.to_thread

from kons_service.core.cache import CachedLearner, LearnerCache
from kons_service.core.metrics import Metrics
from kons_service.settings import Settings
from kons_service.store import Head, KeepPolicy, LearnerRef, Publication, Store, StoreUnavailableError

__all__ = ["LogCost", "SnapshotPolicy", "Snapshotter"]

log = logging.getLogger("kons_service.snapshots")

_SNAPSHOT_LOCK_MS = 120_000
#: Past ``every_rounds``, a snapshot waits until the log holds this fraction of its bytes: the snapshot
#: bytes written per logged byte then stay within the inverse (3x), however slowly the learner is fed.
_REPLAY_LOG_FRACTION = 1 / 3


@dataclass(frozen=True, slots=True)
class LogCost:
    """A learner's log since its last snapshot, and what a snapshot of it would cost."""

    rounds_behind: int
    log_bytes: int  # of the rounds behind
    round_seconds: float  # to play one of them
    snapshot_bytes: int
    since_snapshot: float  # seconds
    read_seconds: float = 0.0  # to read one of them back from the store (a replay's cost beyond playing it)

    @property
    def replay_seconds(self) -> float:
        """How long a rebuild would take to replay the rounds behind: read back, then played."""
        return self.rounds_behind * (self.round_seconds + self.read_seconds)


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When a cached learner's snapshot is due (see the module's docstring); the settings of that name."""

    floor_seconds: float = 30.0
    every_rounds: int = 1000
    max_replay_seconds: float = 10.0
    interval_seconds: float | None = None

    @classmethod
    def of(cls, settings: Settings) -> SnapshotPolicy:
        return cls(settings.snapshot_min_seconds, settings.snapshot_every_rounds,
                   settings.snapshot_max_replay_seconds, settings.snapshot_interval_seconds)

    @property
    def floor(self) -> float:
        """The fewest seconds between two snapshots of a learner (at most the interval, if one is set)."""
        return min(self.floor_seconds, self.interval_seconds or self.floor_seconds)

    def due(self, cost: LogCost, *, leaving: bool = False) -> bool:
        """Whether to write a snapshot now: never without new rounds; once the log would take
        ``max_replay_seconds`` to replay, floor or not; never else within the floor (unless the learner
        is ``leaving`` the cache: then there is no later chance); then once the log holds the snapshot's
        bytes, or is ``every_rounds`` long with a third of them, or (if set) ``interval_seconds`` after the
        last one."""
        if cost.rounds_behind <= 0:
            return False
        # The bound holds within the floor too: a learner fed more than a third of a core's worth of rounds
        # accrues more than 10 s of replay in the floor's 30 s (a dim-8 NystromKONS at 5,400 rounds a second:
        # 14 s). This rule needs no floor of its own: a replay accrues at most about as fast as the learner
        # is played, so it fires at most about every ``max_replay_seconds``.
        if cost.replay_seconds >= self.max_replay_seconds:
            return True
        if cost.since_snapshot < self.floor and not leaving:
            return False
        return (cost.log_bytes >= cost.snapshot_bytes
                or (cost.rounds_behind >= self.every_rounds
                    and cost.log_bytes >= _REPLAY_LOG_FRACTION * cost.snapshot_bytes)
                or (self.interval_seconds is not None and cost.since_snapshot >= self.interval_seconds))


async def _newest_only(ref: LearnerRef, new_bytes: int, log_bytes: int) -> KeepPolicy:
    return KeepPolicy(1, 0, 0)


class Snapshotter:
    """Write the cached learners' snapshots: when due (:class:`SnapshotPolicy`), on eviction, at shutdown."""

    def __init__(self, store: Store, settings: Settings, metrics: Metrics) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.task: asyncio.Task[None] | None = None  # the periodic loop, once started
        self._pending: set[asyncio.Task[bool]] = set()  # snapshots of evicted learners
        self._closing = False
        #: When a learner's snapshot is due (in the cache, and as it leaves it).
        self.when_due = SnapshotPolicy.of(settings)
        #: Which older states a snapshot keeps (the service sets :meth:`.Versions.retention`).
        self.retention: Callable[[LearnerRef, int, int], Awaitable[KeepPolicy]] = _newest_only
        #: The cache whose learners it snapshots (once started), which measures what reading the log costs.
        self.cache: LearnerCache | None = None

    def start(self, cache: LearnerCache) -> None:
        self.cache = cache
        self.task = asyncio.create_task(self._loop(), name="kons-snapshotter")

    def schedule(self, entry: CachedLearner) -> None:
        """Snapshot ``entry`` in the background if one is due (it has just left the cache)."""
        if not self.when_due.due(self.cost(entry, time.monotonic()), leaving=True):
            return
        task = asyncio.create_task(self.snapshot_quietly(entry))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def close(self, deadline: float) -> None:
        """Stop the loop, then snapshot every learner with unsnapshotted rounds, until ``deadline``
        (loop time) or a Redis that does not answer (each of the others would wait for it as long). The
        learners left are said once: their rounds are in the log, replayed at their next load."""
        self._closing = True
        if self.task is not None:
            await self._stop_loop(self.task, deadline)
        cached = [] if self.cache is None else self.cache.entries()
        left = [entry for entry in cached if entry.version > entry.snap_version]
        try:
            async with asyncio.timeout_at(deadline):
                if self._pending:
                    await asyncio.gather(*self._pending, return_exceptions=True)
                while left:
                    if not await self.snapshot_quietly(left[0]):
                        log.warning("shutdown: Redis does not answer: %d learners left unsnapshotted (their "
                                    "acknowledged rounds are in the log)", len(left))
                        return
                    left.pop(0)
        except TimeoutError:
            log.warning("shutdown: %d learners left unsnapshotted at the deadline (their acknowledged rounds "
                        "are in the log)", len(left))

    def cost(self, entry: CachedLearner, now: float) -> LogCost:
        """What ``entry``'s log since its last snapshot costs, and what a snapshot of it would."""
        return LogCost(rounds_behind=entry.version - entry.snap_version, log_bytes=entry.log_bytes,
                       round_seconds=entry.round_seconds, snapshot_bytes=entry.nbytes,
                       since_snapshot=now - entry.last_snapshot,
                       read_seconds=0.0 if self.cache is None else self.cache.log_read_seconds)

    def _due(self, entry: CachedLearner, now: float) -> bool:
        return entry.learner is not None and self.when_due.due(self.cost(entry, now))

    async def _loop(self) -> None:
        assert self.cache is not None  # started by start(), which sets it
        cache = self.cache
        tick = max(0.05, min(1.0, self.when_due.floor / 2))
        while not self._closing:  # checked too, since a cancel can be lost (see _stop_loop)
            await asyncio.sleep(tick)
            now = time.monotonic()
            for entry in cache.entries():
                if self._closing:
                    return
                if self._due(entry, now):
                    await self.snapshot_quietly(entry)

    @staticmethod
    async def _stop_loop(task: asyncio.Task[None], deadline: float) -> None:
        """Cancel the snapshot loop and wait for it, at most until ``deadline`` (loop time).

        One cancel is not enough on Python 3.11: redis-py sends every command through
        ``asyncio.wait_for(..., socket_timeout)``, which swallows a cancel that lands just as the send
        completes (CPython gh-86296, fixed in 3.12); the loop then carried on for ever and a graceful
        shutdown hung. So the loop also stops on ``_closing``, and the wait is bounded and re-cancels.
        """
        loop = asyncio.get_running_loop()
        while not task.done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                log.warning("the snapshot task did not stop in time; shutting down without it")
                return
            task.cancel()
            await asyncio.wait({task}, timeout=min(remaining, 1.0))
        if not task.cancelled() and task.exception() is not None:
            log.error("the snapshot task failed", exc_info=task.exception())

    async def snapshot_quietly(self, entry: CachedLearner) -> bool:
        """:meth:`snapshot`, counting and logging a failure instead of raising it; False if Redis did not
        answer."""
        try:
            await self.snapshot(entry)
        except StoreUnavailableError as exc:
            self.metrics.snapshots.labels("error").inc()
            log.warning("snapshot of %s failed: %s", entry.ref, exc)
            return False
        except Exception:
            self.metrics.snapshots.labels("error").inc()
            log.exception("snapshot of %s failed", entry.ref)
        return True

    async def snapshot(self, entry: CachedLearner) -> bool:
        """Write the cached learner's full state as the newest snapshot; True if it was published."""
        ref = entry.ref
        if entry.learner is None or entry.version <= entry.snap_version:
            return False
        lock = uuid.uuid4().hex
        if not await self.store.snapshots.lock(ref, lock, _SNAPSHOT_LOCK_MS):
            return False  # another process is writing one
        started = time.perf_counter()
        try:
            async with entry.lock:
                if entry.learner is None or entry.version <= entry.snap_version:
                    return False
                head = Head(entry.incarnation, entry.version, entry.snap_version, entry.tip)
                covered_bytes = entry.log_bytes  # of the rounds this snapshot holds
                blob = await anyio.to_thread.run_sync(entry.learner.to_bytes)
            keep = await self.retention(ref, len(blob), covered_bytes)
            published = await self.store.snapshots.publish(
                ref, head, blob, self.settings.snapshot_chunk_bytes, keep, covered_bytes)
            self.metrics.snapshot_bytes.inc(len(blob))
        finally:
            entry.last_snapshot = time.monotonic()
            with contextlib.suppress(StoreUnavailableError):
                await self.store.snapshots.unlock(ref, lock)
        done = published is Publication.PUBLISHED
        if done and entry.incarnation == head.incarnation:
            entry.snap_version = max(entry.snap_version, head.version)
            entry.log_bytes = max(0, entry.log_bytes - covered_bytes)
        self.metrics.snapshots.labels("written" if done else "skipped").inc()
        self.metrics.snapshot_seconds.observe(time.perf_counter() - started)
        return done
