"""The writer lease: one writer at a time per learner, across processes, when a write cannot be optimistic.

A writer that takes the lease is handed the learner's head with it, and holds it (renewed in the background)
until its append, which releases it in the same script, or until the block ends. Its TTL only bounds how long
a crashed writer blocks the learner: a holder known to be gone (a process with no connection to Redis, or a
token of this process that none of its writers holds) has its lease taken over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from kons_service.core.cache import not_found
from kons_service.core.errors import BusyError
from kons_service.core.metrics import Metrics
from kons_service.settings import Settings
from kons_service.store import Head, LearnerRef, Store, StoreUnavailableError, process_of

__all__ = ["Lease", "WriterLeases"]

log = logging.getLogger("kons_service.feedback")

_RELEASE_RETRY_SECONDS = 0.05
_RECHECK_SECONDS = 0.1  # how often a waiting writer asks whether the lease's holder is still connected


@dataclass(slots=True)
class Lease:
    """The writer lease of one attempt: its token, the head it was taken at, whether an append used it."""

    ref: LearnerRef
    token: str
    head: Head
    consumed: bool = False


class WriterLeases:
    """This process's writer leases: taken, renewed, released (late if Redis is away), taken over."""

    def __init__(self, store: Store, settings: Settings, metrics: Metrics) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self._tokens = (store.leases.writer_token(i) for i in itertools.count())
        self._held: set[str] = set()  # tokens of the leases this process's writers hold (or wait for)
        self._background: set[asyncio.Task[None]] = set()  # late releases, renewals told to stop

    def token(self) -> str:
        """A fresh writer token (an optimistic append names one too, to check that no lease is held)."""
        return next(self._tokens)

    @contextlib.asynccontextmanager
    async def hold(self, ref: LearnerRef) -> AsyncIterator[Lease]:
        """Hold the learner's writer lease for the block; given back at its end unless an append used it
        (a successful append releases it in the same script)."""
        token = self.token()
        self._held.add(token)
        try:
            try:
                lease = Lease(ref, token, await self._acquire(ref, token))
            except StoreUnavailableError:
                await self._release(ref, token)  # Redis may have applied the acquire and lost its reply
                raise
            ended = asyncio.Event()
            renewal = asyncio.create_task(self._renew(ref, token, ended))
            try:
                yield lease
            finally:
                # The writer does not wait for its renewal to end: on Python 3.11 the cancel can be lost in a
                # Redis call (redis-py's asyncio.wait_for, CPython gh-86296; see Snapshotter._stop_loop), and
                # a renewal that carried on renewed the lease for ever while its writer waited for it: the
                # request hung and the learner stayed locked. ``ended`` stops it after the call under way.
                ended.set()
                renewal.cancel()
                self._keep(renewal)
                if not lease.consumed:
                    await self._release(ref, token)
        finally:
            self._held.discard(token)

    async def close(self) -> None:
        """Stop the background releases and renewals (their leases expire on their own)."""
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    def _keep(self, task: asyncio.Task[None]) -> None:
        """Hold a reference to a background task until it ends (the event loop keeps only weak ones)."""
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _release(self, ref: LearnerRef, token: str) -> None:
        """Give the lease back; if Redis does not answer (restarting), keep trying in the background
        until it does or the lease has expired: another process cannot tell that a live process's lease
        is left over, and would wait for its TTL."""
        try:
            await self.store.leases.release(ref, token)
        except StoreUnavailableError:
            self._keep(asyncio.create_task(self._release_when_back(ref, token)))

    async def _release_when_back(self, ref: LearnerRef, token: str) -> None:
        deadline = time.monotonic() + self.settings.lease_ttl_ms / 1000
        while time.monotonic() < deadline:
            await asyncio.sleep(_RELEASE_RETRY_SECONDS)
            with contextlib.suppress(StoreUnavailableError):
                await self.store.leases.release(ref, token)
                return

    async def _renew(self, ref: LearnerRef, token: str, ended: asyncio.Event) -> None:
        """Keep the lease while the writer works (a long batch, a slow replay), so that its TTL can be
        short: it only bounds how long a crashed writer blocks the learner. Stops once the lease is lost
        or the writer has ``ended`` (checked too, since a cancel can be lost: see :meth:`hold`)."""
        ttl = self.settings.lease_ttl_ms
        while not ended.is_set():
            await asyncio.sleep(ttl / 3000)
            if ended.is_set():
                return
            try:
                if not await self.store.leases.renew(ref, token, ttl):
                    return
            except StoreUnavailableError:
                continue  # the append's own check decides; try again next period

    async def _acquire(self, ref: LearnerRef, token: str) -> Head:
        """Wait for the writer lease (bounded), returning the head it was taken at. A holder found gone
        (see :meth:`_gone`) has its lease taken over at once instead of waiting for its TTL."""
        deadline = time.monotonic() + self.settings.lease_wait_seconds
        delay = 0.001
        gone, next_check = "", dict[str, float]()  # holder -> when to ask about it again
        while True:
            got = await self.store.leases.acquire(ref, token, self.settings.lease_ttl_ms, gone)
            if got is None:
                raise not_found(ref)
            if isinstance(got, Head):
                if gone:
                    self.metrics.takeovers.inc()
                    log.warning("took over the writer lease of %s from %s, whose process is gone", ref, gone)
                return got
            now = time.monotonic()
            if now >= next_check.get(got.holder, now):
                # asked again now and then, not every poll (CLIENT LIST costs Redis a walk of its clients):
                # a live holder may die while we wait, and Redis may not yet have seen a dead one's
                # sockets close when first asked
                next_check[got.holder] = now + _RECHECK_SECONDS
                if await self._gone(got.holder):
                    gone = got.holder
                    continue
            if time.monotonic() + delay > deadline:
                raise BusyError(f"Learner {ref.name!r} is busy with another writer; retry.")
            self.metrics.lease_waits.inc()
            await asyncio.sleep(min(delay, got.wait_ms / 1000))
            delay = min(delay * 2, 0.05)

    async def _gone(self, holder: str) -> bool:
        """Whether the writer holding the lease token ``holder`` is known to be gone: a token of this
        process that none of its writers holds (left by a write whose release failed, e.g. during a Redis
        restart), or one of a process with no connection to Redis (SIGKILLed, crashed). Unknown (an
        unnamed process, a Redis refusing CLIENT LIST) is not gone: the lease's TTL decides."""
        if not self.settings.lease_takeover or not holder:
            return False
        if process_of(holder) == self.store.process_name:
            return holder not in self._held
        return await self.store.leases.holder_connected(holder) is False
