"""Snapshots: a cached learner's full state written to the store, so that a rebuild replays a short log.

A background task snapshots every cached learner that is ``snapshot_every_rounds`` rounds or
``snapshot_interval_seconds`` behind its last snapshot; an evicted learner with unsnapshotted rounds is
snapshotted at once, and :meth:`Snapshotter.close` snapshots every learner that still needs it. One process
writes a learner's snapshot at a time (a lock in the store); publishing it trims the log behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid

import anyio.to_thread

from kons_service.cache import CachedLearner, LearnerCache
from kons_service.metrics import Metrics
from kons_service.settings import Settings
from kons_service.store import Head, Publication, Store, StoreUnavailableError

__all__ = ["Snapshotter"]

log = logging.getLogger("kons_service.snapshots")

_SNAPSHOT_LOCK_MS = 120_000


class Snapshotter:
    """Write the cached learners' snapshots: periodically, on eviction and at shutdown."""

    def __init__(self, store: Store, settings: Settings, metrics: Metrics) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.task: asyncio.Task[None] | None = None  # the periodic loop, once started
        self._pending: set[asyncio.Task[None]] = set()  # snapshots of evicted learners
        self._closing = False

    def start(self, cache: LearnerCache) -> None:
        self.task = asyncio.create_task(self._loop(cache), name="kons-snapshotter")

    def schedule(self, entry: CachedLearner) -> None:
        """Snapshot ``entry`` in the background (it has just left the cache)."""
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

    def _due(self, entry: CachedLearner, now: float) -> bool:
        behind = entry.version - entry.snap_version
        return entry.learner is not None and behind > 0 and (
            behind >= self.settings.snapshot_every_rounds
            or now - entry.last_snapshot >= self.settings.snapshot_interval_seconds
        )

    async def _loop(self, cache: LearnerCache) -> None:
        tick = max(0.05, min(1.0, self.settings.snapshot_interval_seconds / 2))
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
        if not await self.store.lock_snapshot(ref, lock, _SNAPSHOT_LOCK_MS):
            return False  # another process is writing one
        started = time.perf_counter()
        try:
            async with entry.lock:
                if entry.learner is None or entry.version <= entry.snap_version:
                    return False
                head = Head(entry.incarnation, entry.version, entry.snap_version, entry.tip)
                blob = await anyio.to_thread.run_sync(entry.learner.to_bytes)
            published = await self.store.publish_snapshot(ref, head, blob, self.settings.snapshot_chunk_bytes)
        finally:
            entry.last_snapshot = time.monotonic()
            with contextlib.suppress(StoreUnavailableError):
                await self.store.unlock_snapshot(ref, lock)
        done = published is Publication.PUBLISHED
        if done and entry.incarnation == head.incarnation:
            entry.snap_version = max(entry.snap_version, head.version)
        self.metrics.snapshots.labels("written" if done else "skipped").inc()
        self.metrics.snapshot_seconds.observe(time.perf_counter() - started)
        return done
