"""Fair sharing between tenants: per-tenant limits on requests, body bytes and requests in flight.

One process serves every tenant, so a tenant that sends as fast as it can takes the event loop, the
parser and the worker threads from everyone else (an audit put a victim's p99 at 9x idle with four tenants
sending 60 KiB bodies). With API keys configured, each tenant gets, before a byte of its body is read:

* a token bucket of requests (``KONS_TENANT_RATE`` a second, bursts of ``KONS_TENANT_BURST``) and one of
  body bytes (``KONS_TENANT_BYTES_RATE`` a second, bursts of ``KONS_TENANT_BYTES_BURST``; a body of unknown
  size counts as ``KONS_MAX_REQUEST_BYTES``), and
* at most ``KONS_TENANT_CONCURRENCY`` requests in flight, and
* a bucket of learner work (``KONS_TENANT_WORK_RATE`` a second, bursts of ``KONS_TENANT_WORK_BURST``), in
  the unit of ``KONS_BATCH_MAX_WORK_BYTES``: a batch's rows times its learner's state bytes (about 0.5 ns
  of a core a byte). It is charged once the batch is done (the size of a learner is known only then), so
  a neighbour training a large exact learner takes its share of the CPU, and then waits;

beyond them a request is answered 429 ``too_many_requests`` with ``Retry-After`` (the seconds until the
bucket holds enough). A single-tenant service (no keys) has nobody else to protect and applies none. The
limits are per process (a tenant reaching several replicas gets each one's share).

A refusal is cheap, but not free: accepting the connection, routing and answering took 1.3-1.6 ms of the
serving process's CPU per refused request on this 2-core machine, so two senders that retried at once,
ignoring ``Retry-After``, made about 450 refused requests a second and kept the event loop busy most of the
time (the victim's p99 went to 3.4-3.8x idle). :class:`RefusalPause` therefore answers such refusals after a
short pause (``KONS_REFUSAL_PAUSE_MS``), which costs the process nothing while it lasts, for a few requests
per tenant at once: a sender that waits for its answers is slowed to a few requests a second; one that opens
more connections than that gets its extra refusals at once, as before.

Limits bound what each tenant takes, not how long the others wait: four tenants each posting 60 KiB bodies
within their limits kept about 0.7 of the event loop busy, and a light request waited behind the ready
steps of every heavy request in progress (the victim's p99 at 3.5-4.5x idle). :class:`HeavyTurns` makes
requests with a body over 16 KiB take turns once their body is read (``KONS_HEAVY_TURNS`` at once, one
tenant after another), so that a light request waits behind at most that many (1.7-2.5x idle, measured
side by side; the heavy requests' throughput fell by 15%). Turns alone still gave the heavy requests of
several tenants most of the loop (with them parsed out of process, 2 ms of the serving process each, 0.85
of a core: the victim's p99 up to 3.2x idle), so the turns are also paced, all tenants' together, to
``KONS_HEAVY_BYTES_RATE`` body bytes a second, each counting at least 64 KiB (1.3-2.0x idle side by side).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

from kons_service.core.errors import TooManyRequestsError
from kons_service.settings import Settings

__all__ = ["HeavyTurns", "RefusalPause", "TenantLimiter"]


@dataclass(slots=True)
class _Tenant:
    requests: float
    body_bytes: float
    work: float
    refilled: float
    in_flight: int = 0


class TenantLimiter:
    """The per-tenant limits of one process (see the module's docstring)."""

    def __init__(self, settings: Settings) -> None:
        self.rate, self.burst = settings.tenant_rate, settings.tenant_burst
        self.bytes_rate, self.bytes_burst = settings.tenant_bytes_rate, settings.tenant_bytes_burst
        self.work_rate, self.work_burst = settings.tenant_work_rate, settings.tenant_work_burst
        self.concurrency = settings.tenant_concurrency
        self._tenants: dict[str, _Tenant] = {}

    @contextlib.contextmanager
    def admit(self, tenant: str, body_bytes: int) -> Iterator[None]:
        """Hold one of the tenant's requests in flight for the block, or raise 429."""
        state = self._refilled(tenant)
        if state.in_flight >= self.concurrency:
            raise TooManyRequestsError(
                f"At most {self.concurrency} requests per tenant may be in flight (KONS_TENANT_CONCURRENCY); "
                "retry when one is answered.")
        wait = max((1 - state.requests) / self.rate, (min(body_bytes, self.bytes_burst) - state.body_bytes)
                   / self.bytes_rate, -state.work / self.work_rate)
        if wait > 0:
            raise TooManyRequestsError(
                f"Tenant {tenant!r} is over its rate ({self.rate:g} requests, {self.bytes_rate:g} body bytes "
                f"and {self.work_rate:g} bytes of learner work a second: KONS_TENANT_RATE, "
                "KONS_TENANT_BYTES_RATE, KONS_TENANT_WORK_RATE); retry later.", retry_after=math.ceil(wait))
        state.requests -= 1
        state.body_bytes -= body_bytes
        state.in_flight += 1
        try:
            yield
        finally:
            state.in_flight -= 1

    def charge_work(self, tenant: str, work: int) -> None:
        """The tenant's batch just did ``work`` (rows x state bytes): its next requests wait it off."""
        self._refilled(tenant).work -= work

    def _refilled(self, tenant: str) -> _Tenant:
        now = time.monotonic()
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = _Tenant(self.burst, self.bytes_burst, self.work_burst, now)
        elapsed, state.refilled = now - state.refilled, now
        state.requests = min(self.burst, state.requests + elapsed * self.rate)
        state.body_bytes = min(self.bytes_burst, state.body_bytes + elapsed * self.bytes_rate)
        state.work = min(self.work_burst, state.work + elapsed * self.work_rate)
        return state


class RefusalPause:
    """Pauses before answering a refused request, at most ``slots`` at once per tenant (``None``: the
    senders without a valid key, together), so that the pauses themselves are bounded."""

    def __init__(self, seconds: float, slots: int) -> None:
        self.seconds = seconds
        self.slots = slots
        self._pausing: dict[str | None, int] = {}

    async def pause(self, tenant: str | None) -> None:
        """Wait ``seconds`` before the refusal is answered, unless ``slots`` of the tenant's already do."""
        count = self._pausing.get(tenant, 0)
        if self.seconds <= 0 or count >= self.slots:
            return
        self._pausing[tenant] = count + 1
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self._pausing[tenant] -= 1
            if not self._pausing[tenant]:
                del self._pausing[tenant]


class HeavyTurns:
    """Turns for heavy requests (a body over a few KiB): at most ``concurrent`` in progress at once in the
    process, the others waiting in turn, one tenant after another (round robin over the tenants waiting,
    each tenant's own requests in order), and all of them together paced to ``bytes_rate`` body bytes a
    second, each counting at least ``least_bytes`` and at most an eighth of a second's worth (the bucket's
    size: a large body, whose bytes mostly cost the loop before its turn, is read outside the turns and
    parsed in the parser process, so it does not stop every other tenant's heavy requests for a second).

    The event loop serves every request's steps in the order they become ready, so a light request (a
    victim's predict) waits behind the ready steps of every heavy request in progress. With the heavy
    requests taking turns, a light request waits behind at most ``concurrent`` of them, and the heavy ones
    share the loop time they get, tenant by tenant. The pace bounds that time, whatever the number of
    tenants: a heavy request costs the serving process up to about 2 ms per 64 KiB of body, so 8 MiB a
    second of them, each counting at least 64 KiB, is about a quarter of a core (figures in the module's
    docstring).
    """

    def __init__(self, concurrent: int, bytes_rate: float, least_bytes: int,
                 waited: Callable[[float], None] = lambda seconds: None) -> None:
        self.concurrent = concurrent
        self.waited = waited  # told how long each turn was waited for
        self.bytes_rate = bytes_rate
        self.least_bytes = least_bytes
        self.bytes_burst = max(bytes_rate / 8, least_bytes)
        self._credit = self.bytes_burst
        self._refilled = time.monotonic()
        self._running = 0
        # in round-robin order of tenants: each waiting request's future and the bytes it counts
        self._waiting: dict[str, deque[tuple[asyncio.Future[None], float]]] = {}
        self._refill_timer: asyncio.TimerHandle | None = None

    @contextlib.asynccontextmanager
    async def turn(self, tenant: str, body_bytes: int) -> AsyncIterator[None]:
        """Hold one of the turns for the block, waiting for it in the tenant's turn."""
        cost = min(max(body_bytes, self.least_bytes), self.bytes_burst)
        if self._running < self.concurrent and not self._waiting and self._paid(cost):
            self._running += 1
            self.waited(0.0)
        else:
            asked = time.monotonic()
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.setdefault(tenant, deque()).append((future, cost))
            self._hand_on()
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():  # the turn came with the cancellation
                    self._release()
                else:
                    self._forget(tenant, future)
                raise
            self.waited(time.monotonic() - asked)
        try:
            yield
        finally:
            self._release()

    def _paid(self, cost: float) -> bool:
        """Take ``cost`` bytes from the pace's bucket if it holds them."""
        now = time.monotonic()
        self._credit = min(self.bytes_burst, self._credit + (now - self._refilled) * self.bytes_rate)
        self._refilled = now
        if self._credit < cost:
            return False
        self._credit -= cost
        return True

    def _release(self) -> None:
        self._running -= 1
        self._hand_on()

    def _hand_on(self) -> None:
        """Give free turns to the tenants waiting, first come first served, each tenant's place moving to
        the end of the round; when the pace's bucket is short, again once it has refilled."""
        while self._running < self.concurrent and self._waiting:
            tenant = next(iter(self._waiting))
            queue = self._waiting[tenant]
            future, cost = queue[0]
            if future.done():  # (cancelled while it waited, its task not yet run to forget it)
                queue.popleft()
                if not queue:
                    del self._waiting[tenant]
                continue
            if self._paid(cost):
                queue.popleft()
                future.set_result(None)
                self._running += 1
            else:
                if self._refill_timer is None:
                    wait = (cost - self._credit) / self.bytes_rate
                    self._refill_timer = asyncio.get_running_loop().call_later(wait, self._refilled_hand_on)
                return
            del self._waiting[tenant]
            if queue:
                self._waiting[tenant] = queue

    def _refilled_hand_on(self) -> None:
        self._refill_timer = None
        self._hand_on()

    def _forget(self, tenant: str, future: asyncio.Future[None]) -> None:
        queue = self._waiting.get(tenant)
        if queue is not None:
            for entry in queue:
                if entry[0] is future:
                    queue.remove(entry)
                    break
            if not queue:
                del self._waiting[tenant]
