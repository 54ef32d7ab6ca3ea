"""The feedback write protocol: every feedback round of a learner goes through one total order, its log.

1. the process takes the learner's writer lease, which also returns the head ``(incarnation, version)``,
   and brings its cached learner to that head (:meth:`LearnerCache.sync`);
2. it checks every round of the batch (kons's :meth:`~kons.Learner.check_round`) and plays them on the
   cached learner (``learn_one``: one kernel row per round);
3. it appends them with a compare-and-append: only if the head is still the one it computed on and the
   lease is still its own. Only then is the answer sent, so a 2xx is durable (with
   ``KONS_REDIS_WAIT_REPLICAS``, only once that many replicas confirm the append too: else the answer
   is 503 ``not_replicated``, and a retry with the same ``request_id`` waits for them again).

Every feedback request is applied at most once: the append remembers the request's id (the client's
``request_id``, else a private one) with a record of its answer, and answers a repeat from that record
instead of appending again. A client retries with its ``request_id`` after a timeout or a crash; the
private id covers redis-py re-sending the script after a lost reply (a dropped connection or a timeout).

If the append loses (lease expired, learner deleted or replaced) the cached learner is dropped, since it
holds rounds that are not in the log, and the attempt is made again on a rebuilt one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import kons
from kons.losses import get_loss
from kons_service import codec
from kons_service.budget import TenantBudget
from kons_service.cache import CachedLearner, LearnerCache, not_found
from kons_service.errors import BusyError, RequestIdConflictError, ResourceLimitError, UnknownIdError
from kons_service.history import HistoryRecorder
from kons_service.learning import check_budget, check_rows, check_work, finite, numerics, offload
from kons_service.metrics import Metrics
from kons_service.settings import Settings
from kons_service.store import (
    AppendOutcome,
    AppendStatus,
    AppliedRequest,
    Head,
    LearnerRef,
    LogEntry,
    NotReplicatedError,
    RequestTag,
    Store,
    StoreUnavailableError,
    process_of,
    round_id,
)

__all__ = ["Feedback", "FeedbackResult", "FeedbackWriter"]

log = logging.getLogger("kons_service.feedback")

_ATTEMPTS = 5  # compare-and-append attempts before answering 503
_RELEASE_RETRY_SECONDS = 0.05
_RECHECK_SECONDS = 0.1  # how often a waiting writer asks whether the lease's holder is still connected


@dataclass(frozen=True, slots=True)
class Feedback:
    """One feedback item: features ``x`` (or the ``id`` of a remembered predict) and the label ``y``."""

    y: float
    x: Any = None
    id: str | None = None


@dataclass(frozen=True, slots=True)
class FeedbackResult:
    """The predictions played, their losses and the learner's version once the rounds are logged."""

    predictions: list[float]
    losses: list[float]
    version: int


@dataclass(frozen=True, slots=True)
class _Request:
    """A feedback request: its items, its id (a private one if the client gave none) and, for a client's
    id, the digest of its body."""

    items: Sequence[Feedback]
    id: str
    fingerprint: str | None


@dataclass(slots=True)
class _Lease:
    """The writer lease of one attempt: its token, the head it was taken at, whether an append used it."""

    ref: LearnerRef
    token: str
    head: Head
    consumed: bool = False


def _fingerprint(items: Sequence[Feedback]) -> str:
    """A digest of a feedback body, so that a request_id reused for another body is caught. Dense
    features go in as their float64 bytes (the log's encoding), not as text: a large batch is hashed
    without turning its arrays back into Python floats."""
    digest = hashlib.sha256()
    for it in items:
        x = b"" if it.x is None else codec.encode_features(codec.to_kons(it.x))
        head = json.dumps([it.id, it.y, len(x)], separators=(",", ":"), allow_nan=False).encode()
        digest.update(len(head).to_bytes(4, "little") + head + x)
    return digest.hexdigest()[:32]


class FeedbackWriter:
    """Play feedback rounds on the cached learner and append them to its log, at most once per request."""

    def __init__(self, store: Store, settings: Settings, metrics: Metrics, cache: LearnerCache,
                 history: HistoryRecorder, budget: TenantBudget) -> None:
        self.store = store
        self.budget = budget
        self.settings = settings
        self.metrics = metrics
        self.cache = cache
        self.history = history
        self._tokens = (store.writer_token(i) for i in itertools.count())
        self._held: set[str] = set()  # tokens of the leases this process's writers hold (or wait for)
        self._late_releases: set[asyncio.Task[None]] = set()

    async def write(
        self, ref: LearnerRef, items: Sequence[Feedback], request_id: str | None
    ) -> FeedbackResult:
        """Apply the rounds in order, once; a ``request_id`` already applied gets that request's answer."""
        ids = [it.id for it in items if it.id is not None]
        if len(set(ids)) != len(ids):
            raise kons.InvalidInputError("a batch must not name the same id twice.")
        # A private id ('~' is not allowed in a client's) makes redis-py's re-sent script harmless.
        request = (_Request(items, request_id, _fingerprint(items)) if request_id
                   else _Request(items, f"~{uuid.uuid4().hex}", None))
        async with self.cache.locked(self.cache.entry(ref)) as entry:
            for _ in range(_ATTEMPTS):
                result = await self._attempt(entry, request)
                if result is not None:
                    return result
                self.metrics.conflicts.inc()
        raise BusyError(f"Learner {ref.name!r} kept changing under this request; retry.")

    async def _attempt(self, entry: CachedLearner, request: _Request) -> FeedbackResult | None:
        """One try under the writer lease; None if the learner moved meanwhile (the caller tries again)."""
        ref = entry.ref
        async with self._lease(ref) as lease:
            if request.fingerprint is not None:
                earlier = await self.store.applied(ref, request.id)
                if earlier is not None:  # a retry: answer it before playing anything
                    return self._answered(earlier, request.fingerprint, ref)
            await self.cache.sync(entry, lease.head)
            if not entry.at(lease.head):
                return None
            learner = entry.loaded()
            check_work(learner, len(request.items), self.settings.batch_max_work_bytes)
            await self._check_budget(entry, learner)
            xs = await self._features(ref, request.items)
            ys = check_rows(learner, xs, [it.y for it in request.items])
            if learner.input_dim is None:  # created without dim: this batch's first row fixes it
                sized = check_budget(learner, len(xs[0]), self.settings.learner_max_bytes)
                entry.reserved_bytes = await self.budget.cover(ref, sized, entry.reserved_bytes)
            try:
                plays, losses = await self._play(learner, xs, ys)
                outcome = await self._append(lease, request, xs, ys, plays, losses)
            except BaseException:
                entry.invalidate()  # it may hold (parts of) rounds the log does not
                raise
            if not outcome.ok:  # not logged: the rounds it played must go as well
                entry.invalidate()
        result = self._conclude(entry, request, outcome, plays, losses)
        if outcome.ok:
            await self.history.offer(entry, lease.head.version)
            if not outcome.replicated:
                raise self._unconfirmed(ref, outcome.version)
        return result

    @contextlib.asynccontextmanager
    async def _lease(self, ref: LearnerRef) -> AsyncIterator[_Lease]:
        """Hold the learner's writer lease for the block; given back at its end unless an append used it
        (a successful append releases it in the same script)."""
        token = next(self._tokens)
        self._held.add(token)
        try:
            try:
                lease = _Lease(ref, token, await self._acquire(ref, token))
            except StoreUnavailableError:
                await self._release(ref, token)  # Redis may have applied the acquire and lost its reply
                raise
            renewal = asyncio.create_task(self._renew(ref, token))
            try:
                yield lease
            finally:
                renewal.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await renewal
                if not lease.consumed:
                    await self._release(ref, token)
        finally:
            self._held.discard(token)

    async def _release(self, ref: LearnerRef, token: str) -> None:
        """Give the lease back; if Redis does not answer (restarting), keep trying in the background
        until it does or the lease has expired: another process cannot tell that a live process's lease
        is left over, and would wait for its TTL."""
        try:
            await self.store.release_lease(ref, token)
        except StoreUnavailableError:
            task = asyncio.create_task(self._release_when_back(ref, token))
            self._late_releases.add(task)
            task.add_done_callback(self._late_releases.discard)

    async def _release_when_back(self, ref: LearnerRef, token: str) -> None:
        deadline = time.monotonic() + self.settings.lease_ttl_ms / 1000
        while time.monotonic() < deadline:
            await asyncio.sleep(_RELEASE_RETRY_SECONDS)
            with contextlib.suppress(StoreUnavailableError):
                await self.store.release_lease(ref, token)
                return

    async def close(self) -> None:
        """Stop the background releases (their leases expire on their own)."""
        for task in list(self._late_releases):
            task.cancel()
        await asyncio.gather(*self._late_releases, return_exceptions=True)

    async def _renew(self, ref: LearnerRef, token: str) -> None:
        """Keep the lease while the writer works (a long batch, a slow replay), so that its TTL can be
        short: it only bounds how long a crashed writer blocks the learner. Stops once the lease is lost."""
        ttl = self.settings.lease_ttl_ms
        while True:
            await asyncio.sleep(ttl / 3000)
            try:
                if not await self.store.renew_lease(ref, token, ttl):
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
            got = await self.store.acquire_lease(ref, token, self.settings.lease_ttl_ms, gone)
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
        return await self.store.holder_connected(holder) is False

    async def _check_budget(self, entry: CachedLearner, learner: kons.Learner) -> None:
        """Refuse more rounds to a learner (a kernel one: its state grows with them) that holds more than
        its budget, or than its tenant's budget has room for; it still predicts. Checked before a batch,
        which may overshoot the budget once."""
        ref, held, budget = entry.ref, learner.state_nbytes(), self.settings.learner_max_bytes
        if held > budget:
            raise ResourceLimitError(
                f"Learner {ref.name!r} holds {held} bytes, over the budget of {budget} per learner: it takes "
                "no more feedback (it still predicts). Export it and start a bounded learner (e.g. "
                "sketched_kons or nystrom_kons)."
            )
        entry.reserved_bytes = await self.budget.cover(ref, held, entry.reserved_bytes)

    async def _features(self, ref: LearnerRef, items: Sequence[Feedback]) -> list[Any]:
        """Each item's features, fetching those remembered under an id."""
        wanted = [it.id for it in items if it.x is None and it.id is not None]
        recalled = dict(zip(wanted, await self.store.recall(ref, wanted), strict=True)) if wanted else {}
        xs = []
        for it in items:
            if it.x is not None:
                xs.append(codec.to_kons(it.x))
                continue
            payload = recalled.get(it.id) if it.id is not None else None
            if payload is None:
                raise UnknownIdError(f"No remembered features for id {it.id!r} (unknown, used or expired).")
            xs.append(codec.decode_features(payload))
        return xs

    @staticmethod
    async def _play(learner: kons.Learner, xs: list[Any], ys: list[float]) -> tuple[list[float], list[float]]:
        """Play the rounds on ``learner``: the predictions played and their losses (all finite)."""
        plays: list[float] = []
        with numerics():
            await offload(lambda: plays.extend(learner.learn_one(x, y) for x, y in zip(xs, ys, strict=True)),
                          len(xs))
            loss = get_loss(learner.loss)
            losses = [loss.value(p, y) for p, y in zip(plays, ys, strict=True)]
        if not finite(plays, losses, learner.stats()):
            raise kons.NumericalError("the round would put a non-finite number into the learner's state.")
        return plays, losses

    async def _append(self, lease: _Lease, request: _Request, xs: list[Any], ys: list[float],
                      plays: list[float], losses: list[float]) -> AppendOutcome:
        """Compare-and-append the played rounds after the lease's head."""
        entries = [
            LogEntry(codec.encode_features(x), codec.pack_float(y), codec.pack_float(p), it.id or "")
            for x, y, p, it in zip(xs, ys, plays, request.items, strict=True)
        ]
        record: dict[str, Any] = {"token": lease.token}
        if request.fingerprint is not None:
            record |= {"body": request.fingerprint, "predictions": plays, "losses": losses}
        tag = RequestTag(request.id, json.dumps(record), self._request_ttl_ms(request),
                         self.settings.request_ids_max)
        outcome = await self.store.append(lease.ref, lease.token, lease.head, entries, tag)
        done = outcome.reason is AppendStatus.ALREADY_APPLIED
        if done and json.loads(outcome.detail)["token"] == lease.token:
            # our own script, re-sent by redis-py after its reply was lost: it was applied
            outcome = AppendOutcome(AppendStatus.APPLIED, outcome.version,
                                    tip=round_id(lease.token, outcome.version), replicated=outcome.replicated)
        lease.consumed = outcome.ok
        return outcome

    def _conclude(self, entry: CachedLearner, request: _Request, outcome: AppendOutcome,
                  plays: list[float], losses: list[float]) -> FeedbackResult | None:
        """The answer to an attempt whose append ended with ``outcome`` (None: try again)."""
        ref = entry.ref
        match outcome.reason:
            case AppendStatus.APPLIED:
                entry.version, entry.tip = outcome.version, outcome.tip
                learner = entry.loaded()
                self.metrics.count_rounds(ref, learner.loss, losses)
                self.metrics.observe_learner(ref, entry.version, learner.stats(), learner.state_nbytes())
                return FeedbackResult(plays, losses, entry.version)
            case AppendStatus.GONE:
                raise not_found(ref)
            case AppendStatus.UNKNOWN_ID:
                raise UnknownIdError(
                    f"The id {outcome.detail!r} was used by another feedback or has expired.")
            case AppendStatus.ALREADY_APPLIED if request.fingerprint is not None:
                return self._answered(AppliedRequest(outcome.version, outcome.detail, outcome.replicated),
                                      request.fingerprint, ref)
            case _:
                return None

    def _unconfirmed(self, ref: LearnerRef, version: int) -> NotReplicatedError:
        wanted, ms = self.settings.redis_wait_replicas, self.settings.redis_wait_timeout_ms
        return NotReplicatedError(
            f"The feedback is logged on Redis's primary as version {version} of learner {ref.name!r}, but "
            f"fewer than {wanted} replica(s) confirmed it within {ms} ms, so a failover could lose it: it "
            "is not acknowledged. Retry with the same request_id (it is applied at most once).")

    def _request_ttl_ms(self, request: _Request) -> int:
        if request.fingerprint is not None:
            return self.settings.request_id_ttl_seconds * 1000
        # a private id only has to outlive redis-py's retries of one script call
        return int(max(60.0, 10 * self.settings.redis_timeout_seconds) * 1000)

    def _answered(self, earlier: AppliedRequest, fingerprint: str, ref: LearnerRef) -> FeedbackResult:
        """The original answer of an applied request_id (409 if the id came with another body; 503 if
        the replicas required do not hold it yet)."""
        answer = json.loads(earlier.record)
        if answer.get("body") != fingerprint:
            raise RequestIdConflictError("This request_id was already used for a different feedback body.")
        if not earlier.replicated:
            raise self._unconfirmed(ref, earlier.version)
        self.metrics.deduplicated.inc()
        return FeedbackResult(answer["predictions"], answer["losses"], earlier.version)
