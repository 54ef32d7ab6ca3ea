"""Fair sharing between tenants: per-tenant limits on requests, body bytes and requests in flight.

One process serves every tenant, so a tenant that sends as fast as it can takes the event loop, the
parser and the worker threads from everyone else (an audit put a victim's p99 at 9x idle with four tenants
sending 60 KiB bodies). With API keys configured, each tenant gets, before a byte of its body is read:

* a token bucket of requests (``KONS_TENANT_RATE`` a second, bursts of ``KONS_TENANT_BURST``) and one of
  body bytes (``KONS_TENANT_BYTES_RATE`` a second, bursts of ``KONS_TENANT_BYTES_BURST``): a request waits
  until it holds the size its headers announce (a body of unknown size: ``KONS_MAX_REQUEST_BYTES``; at most
  a full bucket), and is charged the bytes it is read, as they are read (a body refused unread for its
  ``Content-Length`` costs none), and
* at most ``KONS_TENANT_CONCURRENCY`` requests in flight, and
* a bucket of learner work (``KONS_TENANT_WORK_RATE`` a second, bursts of ``KONS_TENANT_WORK_BURST``), in
  the unit of ``KONS_BATCH_MAX_WORK_BYTES``: a batch's rows times its learner's state bytes (about 0.5 ns
  of a core a byte). It is charged once the batch is done (the size of a learner is known only then), so
  a neighbour training a large exact learner takes its share of the CPU, and then waits;

beyond them a request is answered 429 ``too_many_requests`` with ``Retry-After`` (the seconds until the
bucket holds enough). A single-tenant service (no keys) has nobody else to protect and applies none. The
limits are per process (a tenant reaching several replicas gets each one's share).

The three buckets are shares, and a share wastes nothing: they bite only while another tenant contends
for the process, that is has a request in flight or made one within ``KONS_TENANT_CONTENTION_SECONDS``.
A tenant alone is admitted whatever its buckets hold (an audit found one tenant capped at about 100
``auto`` rounds a second on an otherwise idle process, a quarter of a core, by its work bucket alone); its
takes still drain them, down to empty but never into debt, so that the moment another tenant shows up
the busy one is held to its rate at once instead of spending a full burst first. The bound on requests in
flight holds always: it bounds memory (bodies held), not a share of the time.

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
``KONS_HEAVY_BYTES_RATE`` body bytes a second, each counting at least 64 KiB (the victim's p99 against
idle with them: ``benchmarks/results/hostile_fairness.md``, its 60 KiB phase). A heavy request whose
turn would come later than ``KONS_HEAVY_TURN_MAX_WAIT_SECONDS``, at that pace, is answered 429 at once
rather than queued for ever (from its ``Content-Length``, before its body is read, and again in turn).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

from kons_service.core.errors import TooManyRequestsError
from kons_service.settings import Settings

__all__ = ["HeavyTurns", "RefusalPause", "TenantLimiter"]


@dataclass(frozen=True, slots=True)
class _Rate:
    """``rate`` tokens a second, in bursts of up to ``burst``: one limit, shared by the buckets under it."""

    rate: float
    burst: float


@dataclass(slots=True)
class _TokenBucket:
    """``level`` tokens, refilled at its ``limit``'s rate up to its burst; a take may leave it in debt
    (below zero), which the refills pay off first."""

    limit: _Rate
    level: float
    refilled_at: float

    @classmethod
    def full(cls, limit: _Rate, now: float) -> _TokenBucket:
        return cls(limit, limit.burst, now)

    def refill(self, now: float) -> None:
        self.level = min(self.limit.burst, self.level + (now - self.refilled_at) * self.limit.rate)
        self.refilled_at = now

    def take(self, cost: float, contended: bool = True) -> None:
        """Take ``cost`` tokens; uncontended (the tenant alone), down to empty but not into (more) debt."""
        self.level = self.level - cost if contended else max(self.level - cost, min(self.level, 0.0))

    def wait_for(self, cost: float) -> float:
        """Seconds until the bucket holds ``cost`` (0 if it does), as of its last refill."""
        return max(0.0, (cost - self.level) / self.limit.rate)


@dataclass(slots=True)
class _Tenant:
    requests: _TokenBucket
    body_bytes: _TokenBucket
    work: _TokenBucket
    in_flight: int = 0


class TenantLimiter:
    """The per-tenant limits of one process (see the module's docstring)."""

    def __init__(self, settings: Settings) -> None:
        self.requests = _Rate(settings.tenant_rate, settings.tenant_burst)
        self.body_bytes = _Rate(settings.tenant_bytes_rate, settings.tenant_bytes_burst)
        self.work = _Rate(settings.tenant_work_rate, settings.tenant_work_burst)
        self.concurrency = settings.tenant_concurrency
        self.contention_seconds = settings.tenant_contention_seconds
        self._tenants: dict[str, _Tenant] = {}
        self._busy: set[str] = set()  # the tenants with a request in flight
        #: When each tenant was last admitted or answered (monotonic), the longest ago first; only those
        #: within ``contention_seconds`` are kept.
        self._seen: OrderedDict[str, float] = OrderedDict()

    @contextlib.contextmanager
    def admit(self, tenant: str, body_bytes: int) -> Iterator[None]:
        """Hold one of the tenant's requests in flight for the block, or raise 429; ``body_bytes``: the size
        its headers announce (what is read is charged: :meth:`charge_bytes`)."""
        state, now = self._refilled(tenant)
        if state.in_flight >= self.concurrency:
            raise TooManyRequestsError(
                f"At most {self.concurrency} requests per tenant may be in flight (KONS_TENANT_CONCURRENCY); "
                "retry when one is answered.")
        contended = self.contended(tenant, now)
        # (a body larger than the bucket waits for a full bucket, then leaves it in debt)
        wait = max(state.requests.wait_for(1),
                   state.body_bytes.wait_for(min(body_bytes, self.body_bytes.burst)), state.work.wait_for(0))
        if contended and wait > 0:
            raise TooManyRequestsError(
                f"Tenant {tenant!r} is over its rate ({self.requests.rate:g} requests, "
                f"{self.body_bytes.rate:g} body bytes and {self.work.rate:g} bytes of learner work a second: "
                "KONS_TENANT_RATE, KONS_TENANT_BYTES_RATE, KONS_TENANT_WORK_RATE) while other tenants use "
                "this process; retry later.",
                retry_after=math.ceil(wait))
        state.requests.take(1, contended)
        state.in_flight += 1
        self._busy.add(tenant)
        self._saw(tenant, now)
        try:
            yield
        finally:
            state.in_flight -= 1
            if not state.in_flight:
                self._busy.discard(tenant)
            self._saw(tenant, time.monotonic())

    def charge_bytes(self, tenant: str, body_bytes: int) -> None:
        """The tenant's request just read ``body_bytes`` more bytes of its body: its next requests wait them
        off, if another tenant contends for the process."""
        state, now = self._refilled(tenant)
        state.body_bytes.take(body_bytes, self.contended(tenant, now))

    def charge_work(self, tenant: str, work: int) -> None:
        """The tenant's batch just did ``work`` (rows x state bytes): its next requests wait it off, if
        another tenant contends for the process."""
        state, now = self._refilled(tenant)
        state.work.take(work, self.contended(tenant, now))

    def contended(self, tenant: str, now: float | None = None) -> bool:
        """Whether another tenant than ``tenant`` has a request in flight, or was admitted or answered
        within ``contention_seconds`` of ``now`` (default: now): then the shares apply."""
        now = time.monotonic() if now is None else now
        while self._seen:
            oldest, at = next(iter(self._seen.items()))
            if at >= now - self.contention_seconds:
                break
            del self._seen[oldest]
        busy_others = len(self._busy) - (tenant in self._busy)
        return busy_others > 0 or any(other != tenant for other in itertools.islice(self._seen, 2))

    def _saw(self, tenant: str, now: float) -> None:
        self._seen[tenant] = now
        self._seen.move_to_end(tenant)

    def _refilled(self, tenant: str) -> tuple[_Tenant, float]:
        now = time.monotonic()
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = _Tenant(
                _TokenBucket.full(self.requests, now), _TokenBucket.full(self.body_bytes, now),
                _TokenBucket.full(self.work, now))
        for bucket in (state.requests, state.body_bytes, state.work):
            bucket.refill(now)
        return state, now


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


@dataclass(slots=True, eq=False)
class _Waiter:
    future: asyncio.Future[None]
    cost: float


@dataclass(slots=True, eq=False)
class _TenantQueue:
    """One tenant's heavy requests waiting, in order. A cancelled one stays until it comes first (and is
    then skipped), so that a cancellation costs O(1); ``live`` and ``live_bytes`` count the others."""

    waiters: deque[_Waiter] = field(default_factory=deque)
    live: int = 0
    live_bytes: float = 0.0


class HeavyTurns:
    """Turns for heavy requests (a body over a few KiB): at most ``concurrent`` in progress at once in the
    process, the others waiting in turn, one tenant after another (round robin over the tenants waiting,
    each tenant's own requests in order), and all of them together paced to ``bytes_rate`` body bytes a
    second, each counting at least ``least_bytes`` and at most an eighth of a second's worth (the bucket's
    size: a large body, whose bytes mostly cost the loop before its turn, is read outside the turns and
    parsed in the parser process, so it does not stop every other tenant's heavy requests for a second).
    A request whose turn would come, at that pace, more than ``max_wait`` seconds from now is refused
    (429, ``refused`` is told) instead of queued: the pace is a bound, and a queue growing faster than it
    would otherwise make every heavy request wait without end.

    The event loop serves every request's steps in the order they become ready, so a light request (a
    victim's predict) waits behind the ready steps of every heavy request in progress. With the heavy
    requests taking turns, a light request waits behind at most ``concurrent`` of them, and the heavy ones
    share the loop time they get, tenant by tenant. The pace bounds that time, whatever the number of
    tenants: a heavy request costs the serving process up to about 2 ms per 64 KiB of body, so 8 MiB a
    second of them, each counting at least 64 KiB, is about a quarter of a core (figures in the module's
    docstring).

    Like the tenants' shares, the turns and the pace waste nothing: a tenant whose heavy request finds no
    other tenant contending for the process (``contended``, :meth:`TenantLimiter.contended`) and none
    waiting for a turn goes on at once, without a turn (its bytes still drain the pace, down to empty).
    """

    def __init__(self, concurrent: int, bytes_rate: float, least_bytes: int, max_wait: float = math.inf,
                 waited: Callable[[float], None] = lambda seconds: None,
                 refused: Callable[[], None] = lambda: None,
                 contended: Callable[[str], bool] = lambda tenant: True) -> None:
        self.concurrent = concurrent
        self.contended = contended  # whether another tenant than this one contends for the process
        self.max_wait = max_wait
        self.waited = waited  # told how long each turn was waited for
        self.refused = refused  # told of each request refused for waiting longer than max_wait
        self.least_bytes = least_bytes
        self._pace = _TokenBucket.full(_Rate(bytes_rate, max(bytes_rate / 8, least_bytes)), time.monotonic())
        self._running = 0
        self._waiting: dict[str, _TenantQueue] = {}  # in round-robin order of the tenants
        self._refill_timer: asyncio.TimerHandle | None = None

    @contextlib.asynccontextmanager
    async def turn(self, tenant: str, body_bytes: int) -> AsyncIterator[None]:
        """Hold one of the turns for the block, waiting for it in the tenant's turn; raise 429 if that wait
        would be longer than ``max_wait``."""
        cost = self._cost(body_bytes)
        if not self._waiting and not self.contended(tenant):  # alone: nobody else's requests to keep
            self._pace.refill(time.monotonic())
            self._pace.take(cost, contended=False)
            self.waited(0.0)
            yield
            return
        if not self._waiting and self._granted(cost):
            self.waited(0.0)
        else:
            self._refuse_a_long_wait(tenant, cost)
            asked = time.monotonic()
            queue = self._waiting.setdefault(tenant, _TenantQueue())
            waiter = _Waiter(asyncio.get_running_loop().create_future(), cost)
            queue.waiters.append(waiter)
            queue.live += 1
            queue.live_bytes += cost
            self._hand_on()
            try:
                await waiter.future
            except asyncio.CancelledError:
                if waiter.future.done() and not waiter.future.cancelled():  # the turn came with it
                    self._release()
                else:
                    waiter.future.cancel()  # (if it was not: so that _hand_on skips it)
                    self._left(tenant, queue, waiter)
                raise
            self.waited(time.monotonic() - asked)
        try:
            yield
        finally:
            self._release()

    def refuse_a_long_wait(self, tenant: str, body_bytes: int) -> None:
        """Raise 429 now if a heavy request of ``body_bytes`` (the size it announces) would wait over
        ``max_wait`` for its turn: :meth:`turn`'s refusal, decided before the body is read and parsed (which
        is then wasted); :meth:`turn` checks again, the round having moved while the body came in."""
        self._refuse_a_long_wait(tenant, self._cost(body_bytes))

    def _cost(self, body_bytes: int) -> float:
        """The bytes of the pace a body of ``body_bytes`` takes."""
        return min(max(body_bytes, self.least_bytes), self._pace.limit.burst)

    def _granted(self, cost: float) -> bool:
        """Take a turn, and ``cost`` bytes of the pace, if both are free."""
        if self._running >= self.concurrent:
            return False
        self._pace.refill(time.monotonic())
        if self._pace.wait_for(cost) > 0:
            return False
        self._pace.take(cost)
        self._running += 1
        return True

    def _refuse_a_long_wait(self, tenant: str, cost: float) -> None:
        """Raise 429 if, at the pace, the request would wait over ``max_wait``: behind it in the round
        robin are all of its tenant's requests waiting and, of each other tenant's, as many plus one (the
        bytes of each tenant's counted at their mean). O(tenants waiting)."""
        own = self._waiting.get(tenant)
        place = 1 + (own.live if own is not None else 0)
        ahead = sum(queue.live_bytes * min(1.0, place / queue.live) for queue in self._waiting.values())
        self._pace.refill(time.monotonic())
        wait = self._pace.wait_for(ahead + cost)
        if wait > self.max_wait:
            self.refused()
            raise TooManyRequestsError(
                f"The heavy requests (bodies over 16 KiB) waiting would keep this one waiting about "
                f"{wait:.0f} s at the pace of {self._pace.limit.rate:g} body bytes a second "
                f"(KONS_HEAVY_BYTES_RATE), over {self.max_wait:g} s (KONS_HEAVY_TURN_MAX_WAIT_SECONDS); "
                "retry later.",
                retry_after=math.ceil(wait - self.max_wait))

    def _release(self) -> None:
        self._running -= 1
        self._hand_on()

    def _hand_on(self) -> None:
        """Give free turns to the tenants waiting, first come first served, each tenant's place moving to
        the end of the round; when the pace's bucket is short, again once it has refilled."""
        while self._waiting and self._running < self.concurrent:
            tenant, queue = next(iter(self._waiting.items()))
            waiter = queue.waiters[0]
            if waiter.future.cancelled():  # (its task has called _left, or is about to)
                queue.waiters.popleft()
                if not queue.waiters:  # (its last: the round goes on without the tenant)
                    del self._waiting[tenant]
                continue
            if not self._granted(waiter.cost):
                if self._refill_timer is None:
                    self._refill_timer = asyncio.get_running_loop().call_later(
                        self._pace.wait_for(waiter.cost), self._refilled_hand_on)
                return
            queue.waiters.popleft()
            waiter.future.set_result(None)
            self._left(tenant, queue, waiter)
            if tenant in self._waiting:  # to the end of the round
                self._waiting[tenant] = self._waiting.pop(tenant)

    def _refilled_hand_on(self) -> None:
        self._refill_timer = None
        self._hand_on()

    def _left(self, tenant: str, queue: _TenantQueue, waiter: _Waiter) -> None:
        """``waiter`` no longer waits (given its turn, or cancelled): its tenant leaves the round once none
        of its requests waits (the cancelled ones left in its queue go with it)."""
        queue.live -= 1
        queue.live_bytes -= waiter.cost
        if not queue.live and self._waiting.get(tenant) is queue:
            del self._waiting[tenant]
