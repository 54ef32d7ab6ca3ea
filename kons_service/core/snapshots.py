"""Snapshots: a cached learner's full state written to the store, so that a rebuild replays a short log.

A snapshot is written when the log since the last one costs more than the snapshot itself
(:func:`snapshot_due`): more time to replay (the learner's measured seconds per round times the rounds
behind) than the snapshot takes to write (its bytes, ``state_nbytes``, times the seconds per byte that
this process's snapshots have taken), or more bytes to keep in Redis than the snapshot. Never within
``snapshot_min_seconds`` of the last one (a hot learner's log grows faster than any snapshot pays back),
and always by ``snapshot_every_rounds`` rounds or ``snapshot_interval_seconds`` (past the floor). An
evicted learner is snapshotted if its log is the dearer of the two (else its log is replayed when it is
next loaded), and :meth:`Snapshotter.close` snapshots every learner that still has new rounds. One
process writes a learner's snapshot at a time (a lock in the store); publishing it trims the log behind
it. ``kons_snapshot_bytes_total / kons_log_bytes_total`` is the write amplification.
"""

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

__all__ = ["LogCost", "Snapshotter", "log_dearer", "snapshot_due"]

log = logging.getLogger("kons_service.snapshots")

_SNAPSHOT_LOCK_MS = 120_000
#: Seconds per byte a snapshot is assumed to take before this process has timed one (100 MB/s).
_FIRST_SECONDS_PER_BYTE = 1e-8
_WRITE_SPEED_WEIGHT = 0.2  # of the newest snapshot in the moving average of the seconds per byte


@dataclass(frozen=True, slots=True)
class LogCost:
    """A learner's log since its last snapshot, and what a snapshot of it would cost."""

    rounds_behind: int
    log_bytes: int  # of the rounds behind
    round_seconds: float  # to replay one of them
    snapshot_bytes: int
    write_seconds: float  # to write the snapshot
    since_snapshot: float  # seconds


def log_dearer(cost: LogCost) -> bool:
    """Whether the log since the last snapshot costs more to replay, or to keep, than a snapshot."""
    return cost.rounds_behind > 0 and (cost.rounds_behind * cost.round_seconds > cost.write_seconds
                                       or cost.log_bytes > cost.snapshot_bytes)


def snapshot_due(cost: LogCost, *, floor_seconds: float, every_rounds: int, interval_seconds: float) -> bool:
    """Whether to write a snapshot now: never without new rounds or within the floor (itself at most the
    interval), then once the log is the dearer (:func:`log_dearer`), ``every_rounds`` behind, or
    ``interval_seconds`` after the last one."""
    if cost.rounds_behind <= 0 or cost.since_snapshot < min(floor_seconds, interval_seconds):
        return False
    return (cost.rounds_behind >= every_rounds or cost.since_snapshot >= interval_seconds
            or log_dearer(cost))


async def _newest_only(ref: LearnerRef, new_bytes: int, log_bytes: int) -> KeepPolicy:
    return KeepPolicy(1, 0, 0)


class Snapshotter:
    """Write the cached learners' snapshots: when due (:func:`snapshot_due`), on eviction and at shutdown."""

    def __init__(self, store: Store, settings: Settings, metrics: Metrics) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.task: asyncio.Task[None] | None = None  # the periodic loop, once started
        self._pending: set[asyncio.Task[None]] = set()  # snapshots of evicted learners
        self._closing = False
        self._seconds_per_byte = _FIRST_SECONDS_PER_BYTE  # moving average over this process's snapshots
        #: Which older states a snapshot keeps (the service sets :meth:`.Versions.keep_policy`).
        self.keep_policy: Callable[[LearnerRef, int, int], Awaitable[KeepPolicy]] = _newest_only

    def start(self, cache: LearnerCache) -> None:
        self.task = asyncio.create_task(self._loop(cache), name="kons-snapshotter")

    def schedule(self, entry: CachedLearner) -> None:
        """Snapshot ``entry`` in the background if its log is the dearer (it has just left the cache)."""
        if not log_dearer(self.cost(entry, time.monotonic())):
            return
        task = asyncio.create_task(self.snapshot_quietly(entry))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def close(self, cache: LearnerCache, deadline: float) -> None:
        """Stop the loop, then snapshot every learner with unsnapshotted rounds, until ``deadline``
        (loop time)."""
        self._closing = True
        if self.task is not None:
            await self._stop_loop(self.task, deadline)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline):
                if self._pending:
                    await asyncio.gather(*self._pending, return_exceptions=True)
                for entry in cache.entries():
                    await self.snapshot_quietly(entry)

    def cost(self, entry: CachedLearner, now: float) -> LogCost:
        """What ``entry``'s log since its last snapshot costs, and what a snapshot of it would."""
        return LogCost(rounds_behind=entry.version - entry.snap_version, log_bytes=entry.log_bytes,
                       round_seconds=entry.round_seconds, snapshot_bytes=entry.nbytes,
                       write_seconds=entry.nbytes * self._seconds_per_byte,
                       since_snapshot=now - entry.last_snapshot)

    def _due(self, entry: CachedLearner, now: float) -> bool:
        settings = self.settings
        return entry.learner is not None and snapshot_due(
            self.cost(entry, now), floor_seconds=settings.snapshot_min_seconds,
            every_rounds=settings.snapshot_every_rounds, interval_seconds=settings.snapshot_interval_seconds)

    async def _loop(self, cache: LearnerCache) -> None:
        settings = self.settings
        tick = max(0.05, min(1.0, settings.snapshot_interval_seconds / 2, settings.snapshot_min_seconds / 2))
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

    async def snapshot_quietly(self, entry: CachedLearner) -> None:
        """:meth:`snapshot`, counting and logging a failure instead of raising it."""
        try:
            await self.snapshot(entry)
        except StoreUnavailableError as exc:
            self.metrics.snapshots.labels("error").inc()
            log.warning("snapshot of %s failed: %s", entry.ref, exc)
        except Exception:
            self.metrics.snapshots.labels("error").inc()
            log.exception("snapshot of %s failed", entry.ref)

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
            keep = await self.keep_policy(ref, len(blob), covered_bytes)
            published = await self.store.snapshots.publish(
                ref, head, blob, self.settings.snapshot_chunk_bytes, keep, covered_bytes)
            self.metrics.snapshot_bytes.inc(len(blob))
            seconds_per_byte = (time.perf_counter() - started) / max(len(blob), 1)
            self._seconds_per_byte += _WRITE_SPEED_WEIGHT * (seconds_per_byte - self._seconds_per_byte)
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
