"""The eviction guard: writes are acknowledged only while Redis cannot evict keys.

The service refuses to start on a Redis whose ``maxmemory-policy`` is not ``noeviction``, but the policy
can be switched at run time (``CONFIG SET maxmemory-policy allkeys-lru``): an audit then saw 3,397
feedbacks acknowledged while Redis deleted learners and request ids, and nothing was logged. So the
policy is checked again every ``KONS_EVICTION_CHECK_SECONDS`` (2 s), and at once after an error that
looks like memory pressure (an ``OOM`` reply); while Redis may evict, a feedback, a create or a state
upload is refused with 503 ``store_may_evict`` and ``Retry-After`` before anything is written, one log
line says so when it starts (and one when it ends), and ``kons_store_may_evict`` is 1.

What it cannot see: keys evicted between a policy change and the next check (at most one period), and a
Redis that hides ``CONFIG`` (``KONS_REDIS_REQUIRE_NOEVICTION=false`` turns the guard off with the
start-up check).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable

from kons_service.errors import StoreMayEvictError
from kons_service.metrics import Metrics
from kons_service.settings import Settings
from kons_service.store import StoreUnavailableError

__all__ = ["EvictionGuard"]

log = logging.getLogger("kons_service.eviction")


class EvictionGuard:
    """Keeps ``problem``, why Redis may evict keys now (None: it cannot), fresh; :meth:`check` refuses a
    write while there is one. ``find_problem`` asks Redis (``LearnerService.store_problem``)."""

    def __init__(self, find_problem: Callable[[], Awaitable[str | None]], settings: Settings,
                 metrics: Metrics) -> None:
        self.find_problem = find_problem
        self.settings = settings
        self.metrics = metrics
        self.problem: str | None = None
        self._suspected = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def check(self) -> None:
        """Raise 503 ``store_may_evict`` if Redis may evict keys (the one hook in each write path)."""
        if self.problem is not None:
            self.metrics.refused_may_evict.inc()
            retry = str(math.ceil(self.settings.eviction_check_seconds))
            raise StoreMayEvictError(f"Not acknowledged, nothing written: {self.problem}", retry)

    def suspect(self) -> None:
        """An error that looks like memory pressure: check the policy now, not at the next period."""
        self._suspected.set()

    def start(self) -> None:
        if self.settings.redis_require_noeviction:
            self._task = asyncio.create_task(self._loop())

    async def close(self) -> None:
        self._closing = True  # (a cancel can be lost on Python 3.11: see Snapshotter._stop_loop)
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=5.0)

    async def refresh(self) -> None:
        """Ask Redis now; a Redis that does not answer leaves the flag as it was."""
        try:
            problem = await self.find_problem()
        except StoreUnavailableError:
            return
        if (problem is None) != (self.problem is None):
            if problem is not None:
                log.error("Redis may evict keys, so writes are refused (503 store_may_evict) until it "
                          "cannot: %s", problem)
            else:
                log.warning("Redis cannot evict keys any more: writes are acknowledged again")
        self.problem = problem
        self.metrics.store_may_evict.set(0 if problem is None else 1)

    async def _loop(self) -> None:
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.eviction_check_seconds):
                    await self._suspected.wait()
            self._suspected.clear()
            await self.refresh()
