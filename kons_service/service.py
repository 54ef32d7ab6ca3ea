"""The learner service: a per-process cache of kons learners kept in step with the ordered log in Redis.

Every feedback round of a learner goes through one total order, the learner's log in Redis:

1. the process takes the learner's writer lease (``acquire.lua``), which also returns the head
   ``(incarnation, version)``; it brings its cached learner to that head (replaying logged rounds it has
   not seen, or rebuilding from the newest snapshot plus the log after it);
2. it plays the round(s) on the cached learner (``learn_one``: one kernel row per round);
3. it appends them with a compare-and-append (``append.lua``): only if the head is still the one it
   computed on and the lease is still its own. Only then is the answer sent, so a 2xx is durable.

Every feedback request is applied at most once: the same script remembers the request's id (the client's
``request_id``, else a private one) with a record of its answer, and answers a repeat from that record
instead of appending again. A client retries with its ``request_id`` after a timeout or a crash; the
private id covers redis-py re-sending the script after a lost reply (a dropped connection or a timeout).

If the append loses (lease expired, learner deleted or replaced) the cached learner is dropped, since it
holds rounds that are not in the log, and rebuilt. Since kons is deterministic, every process that
replays the same log reaches a bit-identical learner. Snapshots are written by a background task.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import logging
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio.to_thread
import numpy as np
import redis.exceptions

import kons
from kons.losses import get_loss
from kons_service import codec
from kons_service.errors import (
    BatchTooLargeError,
    BusyError,
    ConfigConflictError,
    LearnerNotFoundError,
    RequestIdConflictError,
    StateMismatchError,
    UnknownIdError,
)
from kons_service.metrics import Metrics
from kons_service.settings import Settings
from kons_service.store import AppendOutcome, Head, LearnerRef, LogEntry, RequestTag, Store

__all__ = ["Feedback", "LearnerService"]

log = logging.getLogger("kons_service.service")

T = TypeVar("T")
_ATTEMPTS = 5  # compare-and-append attempts before answering 503
_REPLAY_PAGE = 512
_INLINE_ROWS = 1  # more rows than this run in a worker thread
_SNAPSHOT_LOCK_MS = 120_000


@dataclass(frozen=True, slots=True)
class Feedback:
    """One feedback item: features ``x`` (or the ``id`` of a remembered predict) and the label ``y``."""

    y: float
    x: Any = None
    id: str | None = None


@dataclass(eq=False)
class _Cached:
    """A learner held by this process, at ``version`` of ``incarnation``; guarded by ``lock``."""

    ref: LearnerRef
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    learner: kons.Learner | None = None
    config: dict[str, Any] = field(default_factory=dict)
    incarnation: str = ""
    version: int = 0
    snap_version: int = 0
    last_snapshot: float = field(default_factory=time.monotonic)

    def invalidate(self) -> None:
        self.learner, self.incarnation, self.version = None, "", 0

    def at(self, head: Head) -> bool:
        here = (self.incarnation, self.version)
        return self.learner is not None and here == (head.incarnation, head.version)


def canonical(config: dict[str, Any]) -> str:
    """The stored text of a config: two configs are the same iff their texts are equal."""
    try:
        return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise kons.InvalidParameterError(f"parameters must be finite JSON values: {exc}") from None


def _config_of(learner: kons.Learner) -> dict[str, Any]:
    params = learner.get_params()
    dim = params.pop("dim", None)
    if isinstance(learner, kons.Preprocessed):  # shown as the base algorithm it wraps
        return {"algorithm": learner.algorithm, "dim": dim, "params": {**learner.params, "preprocess": True}}
    if not learner.preprocesses:  # the paper-exact learner, asked for with "preprocess": false
        params["preprocess"] = False
    return {"algorithm": learner.name, "dim": dim, "params": params}


def _fingerprint(items: Sequence[Feedback]) -> str:
    """A digest of a feedback body, so that a request_id reused for another body is caught."""
    text = json.dumps([[it.x, it.id, it.y] for it in items], separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@contextlib.contextmanager
def _numerics() -> Iterator[None]:
    """kons's own errors pass; any other arithmetic failure inside a learner rejects the round (422)."""
    try:
        yield
    except kons.KonsError:
        raise
    except (ArithmeticError, ValueError) as exc:
        log.warning("a learner failed with %s; the round is rejected", type(exc).__name__)
        raise kons.NumericalError(f"the round overflowed float64 ({type(exc).__name__}).") from None


def _finite(plays: Sequence[float], losses: Sequence[float], stats: dict[str, Any]) -> bool:
    numbers = [*plays, *losses, *(v for v in stats.values() if isinstance(v, float))]
    return all(math.isfinite(v) for v in numbers)


def _finite_loss(loss: Any, C: float, y: float) -> bool:
    """Whether the loss of ``y`` stays finite for every prediction in [-C, C] (it is convex in it)."""
    try:
        return math.isfinite(loss.value(C, y)) and math.isfinite(loss.value(-C, y))
    except OverflowError:
        return False


def _build(config: dict[str, Any]) -> kons.Learner:
    return kons.learner_from_params(config["algorithm"], {**config["params"], "dim": config["dim"]})


async def _run(fn: Callable[[], T], rows: int) -> T:
    """Run learner numerics inline when small, else in a worker thread (never abandoned mid-way)."""
    if rows <= _INLINE_ROWS:
        return fn()
    return await anyio.to_thread.run_sync(fn)


class LearnerService:
    """Create, query, train and persist the learners of every tenant."""

    def __init__(self, store: Store, settings: Settings, metrics: Metrics) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self._cache: OrderedDict[LearnerRef, _Cached] = OrderedDict()
        self._tokens = (f"{uuid.uuid4().hex}:{i}" for i in itertools.count())
        self._tasks: set[asyncio.Task[None]] = set()
        self._snapshotter: asyncio.Task[None] | None = None
        self._closing = False

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._snapshotter = asyncio.create_task(self._snapshot_loop(), name="kons-snapshotter")

    async def close(self, timeout: float = 60.0) -> None:
        """Stop the background task and snapshot every learner with unsnapshotted rounds (all within
        ``timeout`` seconds)."""
        deadline = asyncio.get_running_loop().time() + timeout
        self._closing = True
        if self._snapshotter is not None:
            await self._stop_snapshotter(deadline)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline):
                if self._tasks:
                    await asyncio.gather(*self._tasks, return_exceptions=True)
                for entry in list(self._cache.values()):
                    await self._snapshot_quietly(entry)

    # ------------------------------------------------------------------ learners
    async def create(
        self, ref: LearnerRef, algorithm: str, dim: int, params: dict[str, Any]
    ) -> tuple[bool, dict[str, Any]]:
        """Create the learner: (created, summary); not created if this very config exists, 409 if another."""
        if "dim" in params:
            raise kons.InvalidParameterError("give 'dim' at the top level of the body, not in 'params'.")
        config = _config_of(kons.learner_from_params(algorithm, {**params, "dim": dim}))
        text = canonical(config)
        created, stored = await self.store.create(ref, text, uuid.uuid4().hex, int(time.time() * 1000))
        if not created and stored != text:
            raise ConfigConflictError(
                f"Learner {ref.name!r} exists with another configuration: {stored}. Delete it first."
            )
        version = 0 if created else (await self._head(ref)).version
        return created, {"name": ref.name, "config": json.loads(text), "version": version}

    async def describe(self, ref: LearnerRef) -> dict[str, Any]:
        entry = self._entry(ref)
        async with self._locked(entry):
            await self._sync(entry, await self._head(ref))
            return {"name": ref.name, "config": entry.config, "version": entry.version,
                    "stats": entry.learner.stats()}

    async def list(self, tenant: str, cursor: str | None, limit: int) -> tuple[list[dict], str | None]:
        rows, more = await self.store.list(tenant, cursor, limit)
        items = [{"name": name, "config": json.loads(config), "version": version}
                 for name, config, version in rows]
        return items, (items[-1]["name"] if more and items else None)

    async def delete(self, ref: LearnerRef) -> None:
        existed = await self.store.delete(ref)
        self._cache.pop(ref, None)  # a request still using it fails its compare-and-append
        self.metrics.forget_learner(ref)
        self.metrics.cached.set(len(self._cache))
        if not existed:
            raise LearnerNotFoundError(f"No learner named {ref.name!r}.")

    # ------------------------------------------------------------------ rounds
    async def predict(
        self, ref: LearnerRef, xs: Sequence[Any], ids: Sequence[str] | None
    ) -> tuple[list[float], int]:
        """Predictions on the learner's newest state; remembers features under ``ids`` if given."""
        self._check_batch(len(xs))
        rows = [codec.to_kons(x) for x in xs]
        entry = self._entry(ref)
        async with self._locked(entry):
            await self._sync(entry, await self._head(ref))
            learner = entry.learner
            with _numerics():
                predictions = await _run(lambda: [learner.predict_one(x) for x in rows], len(rows))
            version = entry.version
        if ids:
            payloads = [(i, codec.encode_features(x)) for i, x in zip(ids, rows, strict=True)]
            if not await self.store.remember(ref, payloads, self.settings.id_ttl_seconds * 1000):
                raise LearnerNotFoundError(f"No learner named {ref.name!r}.")
        self.metrics.predictions.inc(len(rows))
        return predictions, version

    async def feedback(
        self, ref: LearnerRef, items: Sequence[Feedback], request_id: str | None = None
    ) -> tuple[list, list, int]:
        """Apply the rounds in order; returns (played predictions, losses, new version) once logged.

        A ``request_id`` that was already applied returns that request's answer and changes nothing.
        """
        self._check_batch(len(items))
        ids = [it.id for it in items if it.id is not None]
        if len(set(ids)) != len(ids):
            raise kons.InvalidInputError("a batch must not name the same id twice.")
        # A private id ('~' is not allowed in a client's) makes redis-py's re-sent script harmless.
        rid, fingerprint = (request_id, _fingerprint(items)) if request_id else (f"~{uuid.uuid4().hex}", None)
        entry = self._entry(ref)
        async with self._locked(entry):
            for _ in range(_ATTEMPTS):
                result = await self._feedback_attempt(entry, items, rid, fingerprint)
                if result is not None:
                    return result
                self.metrics.conflicts.inc()
        raise BusyError(f"Learner {ref.name!r} kept changing under this request; retry.")

    async def _feedback_attempt(
        self, entry: _Cached, items: Sequence[Feedback], rid: str, fingerprint: str | None
    ) -> tuple[list[float], list[float], int] | None:
        ref = entry.ref
        token = next(self._tokens)
        head = await self._acquire(ref, token)
        plays: list[float] = []
        appended = touched = False
        try:
            if fingerprint is not None:
                done = await self.store.applied(ref, rid)
                if done is not None:  # a retry: answer it before playing anything
                    return self._answered(*done, fingerprint)
            await self._sync(entry, head)
            if not entry.at(head):
                return None
            xs = await self._features(ref, items)
            learner = entry.learner
            ys = self._labels(learner, items)
            self._prevalidate(learner, xs, ys)
            touched = True
            with _numerics():
                await _run(lambda: plays.extend(learner.learn_one(x, y) for x, y in zip(xs, ys, strict=True)),
                           len(items))
            entries = [
                LogEntry(codec.encode_features(x), codec.pack_float(y), codec.pack_float(p), it.id or "")
                for x, y, p, it in zip(xs, ys, plays, items, strict=True)
            ]
            loss = get_loss(learner.loss)
            with _numerics():
                losses = [loss.value(p, y) for p, y in zip(plays, ys, strict=True)]
            if not _finite(plays, losses, learner.stats()):
                raise kons.NumericalError("the round would put a non-finite number into the learner's state.")
            record = {"token": token} if fingerprint is None else {
                "token": token, "body": fingerprint, "predictions": plays, "losses": losses}
            tag = RequestTag(rid, json.dumps(record), self._request_ttl_ms(fingerprint),
                             self.settings.request_ids_max)
            outcome = await self.store.append(ref, token, head, entries, tag)
            if outcome.reason == "done" and json.loads(outcome.detail)["token"] == token:
                # our own script, re-sent by redis-py after its reply was lost: it was applied
                outcome = AppendOutcome(True, outcome.version)
            appended = outcome.ok
        finally:
            if touched and not appended:
                entry.invalidate()  # it may hold (parts of) rounds the log does not
            if not appended:
                with contextlib.suppress(redis.exceptions.RedisError):
                    await self.store.release_lease(ref, token)
        if outcome.reason == "gone":
            raise LearnerNotFoundError(f"No learner named {ref.name!r}.")
        if outcome.reason == "id":
            raise UnknownIdError(f"The id {outcome.detail!r} was used by another feedback or has expired.")
        if outcome.reason == "done" and fingerprint is not None:
            return self._answered(outcome.version, outcome.detail, fingerprint)
        if not outcome.ok:
            return None
        entry.version = outcome.version
        self.metrics.rounds.inc(len(plays))
        self.metrics.loss.inc(sum(losses))
        self.metrics.observe_learner(ref, entry.version, learner.stats())
        return plays, losses, entry.version

    def _request_ttl_ms(self, fingerprint: str | None) -> int:
        if fingerprint is not None:
            return self.settings.request_id_ttl_seconds * 1000
        # a private id only has to outlive redis-py's retries of one script call
        return int(max(60.0, 10 * self.settings.redis_timeout_seconds) * 1000)

    def _answered(self, version: int, record: str, fingerprint: str) -> tuple[list[float], list[float], int]:
        """The original answer of an applied request_id (409 if the id came with another body)."""
        answer = json.loads(record)
        if answer.get("body") != fingerprint:
            raise RequestIdConflictError("This request_id was already used for a different feedback body.")
        self.metrics.deduplicated.inc()
        return answer["predictions"], answer["losses"], version

    async def _acquire(self, ref: LearnerRef, token: str) -> Head:
        """Wait for the writer lease (bounded), returning the head it was taken at."""
        deadline = time.monotonic() + self.settings.lease_wait_seconds
        delay = 0.001
        while True:
            got = await self.store.acquire_lease(ref, token, self.settings.lease_ttl_ms)
            if got is None:
                raise LearnerNotFoundError(f"No learner named {ref.name!r}.")
            if isinstance(got, Head):
                return got
            if time.monotonic() + delay > deadline:
                raise BusyError(f"Learner {ref.name!r} is busy with another writer; retry.")
            self.metrics.lease_waits.inc()
            await asyncio.sleep(min(delay, got / 1000))
            delay = min(delay * 2, 0.05)

    async def _features(self, ref: LearnerRef, items: Sequence[Feedback]) -> list[Any]:
        """Each item's features, fetching those remembered under an id."""
        wanted = [it.id for it in items if it.x is None]
        recalled = dict(zip(wanted, await self.store.recall(ref, wanted), strict=True)) if wanted else {}
        xs = []
        for it in items:
            if it.x is not None:
                xs.append(codec.to_kons(it.x))
            elif recalled[it.id] is None:
                raise UnknownIdError(f"No remembered features for id {it.id!r} (unknown, used or expired).")
            else:
                xs.append(codec.decode_features(recalled[it.id]))
        return xs

    @staticmethod
    def _labels(learner: kons.Learner, items: Sequence[Feedback]) -> list[float]:
        """The labels as floats; a preprocessing learner maps {0, 1} and booleans of a binary loss to
        {-1, +1} (and rejects a boolean regression target)."""
        if not learner.preprocesses:
            return [float(it.y) for it in items]
        ys = []
        for i, it in enumerate(items):
            try:
                ys.append(learner.check_label(it.y))
            except kons.InvalidInputError as exc:
                raise kons.InvalidInputError(f"{f'item {i}: ' if len(items) > 1 else ''}{exc}") from None
        return ys

    @staticmethod
    def _prevalidate(learner: kons.Learner, xs: Sequence[Any], ys: Sequence[float]) -> None:
        """Reject a batch before any of its rounds is played, so that bad input changes nothing."""
        loss = get_loss(learner.loss)
        for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
            where = f"item {i}: " if len(xs) > 1 else ""
            if isinstance(x, np.ndarray) and x.shape != (learner.dim,):
                raise kons.InvalidInputError(f"{where}x must have dimension {learner.dim}; got {x.shape[0]}.")
            try:
                loss.check_label(y)
            except kons.InvalidInputError as exc:
                raise kons.InvalidInputError(f"{where}{exc}") from None
            values = np.asarray(x["values"] if isinstance(x, dict) else x, dtype=np.float64)
            with np.errstate(over="ignore"):
                norm = float(np.dot(values, values))
            if not math.isfinite(norm):
                raise kons.NumericalError(f"{where}x is too large: its squared norm overflows float64.")
            if not _finite_loss(loss, learner.C, y):
                raise kons.NumericalError(f"{where}y = {y!r} is too far from [-C, C]: its loss overflows.")

    def _check_batch(self, rows: int) -> None:
        if rows > self.settings.max_batch:
            raise BatchTooLargeError(f"A batch may hold at most {self.settings.max_batch} rows; got {rows}.")

    # ------------------------------------------------------------------ state blobs
    async def export_state(self, ref: LearnerRef) -> tuple[bytes, int]:
        entry = self._entry(ref)
        async with self._locked(entry):
            await self._sync(entry, await self._head(ref))
            return await anyio.to_thread.run_sync(entry.learner.to_bytes), entry.version

    async def import_state(self, ref: LearnerRef, blob: bytes) -> int:
        """Replace the learner's state by a kons blob of the same configuration; returns the version."""
        stored = await self.store.config(ref)
        if stored is None:
            raise LearnerNotFoundError(f"No learner named {ref.name!r}.")
        learner = await anyio.to_thread.run_sync(kons.load, blob)
        config = json.loads(stored)
        theirs = canonical(_config_of(learner))
        if theirs != stored:
            raise StateMismatchError(f"The state is for {theirs}, not this learner's configuration {stored}.")
        version = int(learner.stats()["rounds"])
        head = Head(uuid.uuid4().hex, version, version)
        token = uuid.uuid4().hex
        n_chunks = await self.store.write_chunks(ref, token, blob, self.settings.snapshot_chunk_bytes)
        code = await self.store.replace_state(ref, stored, head, token, n_chunks, len(blob))
        if code != 1:
            await self.store.discard_chunks(ref, token, n_chunks)
            if code == -1:
                raise LearnerNotFoundError(f"No learner named {ref.name!r}.")
            raise StateMismatchError(f"Learner {ref.name!r} was re-created meanwhile; retry.")
        entry = self._entry(ref)
        async with entry.lock:
            self._adopt(entry, learner, config, head)
        self.metrics.observe_learner(ref, version, learner.stats())
        return version

    # ------------------------------------------------------------------ cache and replay
    @contextlib.asynccontextmanager
    async def _locked(self, entry: _Cached) -> AsyncIterator[None]:
        """Hold the learner's lock, waiting at most ``lease_wait_seconds`` (then 503 learner_busy): a
        request queued behind others that each wait for a frozen Redis must not hang without bound."""
        try:
            async with asyncio.timeout(self.settings.lease_wait_seconds):
                await entry.lock.acquire()
        except TimeoutError:
            raise BusyError(f"Learner {entry.ref.name!r} is busy in this process; retry.") from None
        try:
            yield
        finally:
            entry.lock.release()

    def _entry(self, ref: LearnerRef) -> _Cached:
        entry = self._cache.get(ref)
        if entry is None:
            entry = self._cache[ref] = _Cached(ref)
            self._evict()
        self._cache.move_to_end(ref)
        return entry

    def _evict(self) -> None:
        for ref, entry in list(self._cache.items()):
            if len(self._cache) <= self.settings.cache_size:
                break
            if entry.lock.locked():
                continue
            del self._cache[ref]
            if entry.learner is not None and entry.version > entry.snap_version:
                task = asyncio.create_task(self._snapshot_quietly(entry))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        self.metrics.cached.set(len(self._cache))

    async def _head(self, ref: LearnerRef) -> Head:
        head = await self.store.head(ref)
        if head is None:
            raise LearnerNotFoundError(f"No learner named {ref.name!r}.")
        return head

    @staticmethod
    def _adopt(entry: _Cached, learner: kons.Learner, config: dict[str, Any], head: Head) -> None:
        entry.learner, entry.config = learner, config
        entry.incarnation, entry.version = head.incarnation, head.version
        entry.snap_version = head.snap_version
        entry.last_snapshot = time.monotonic()

    async def _sync(self, entry: _Cached, head: Head) -> None:
        """Bring the cached learner (lock held) to at least ``head``: replay the log, or rebuild."""
        same = entry.learner is not None and entry.incarnation == head.incarnation
        if same and entry.version <= head.version and await self._catch_up(entry, head.version):
            entry.snap_version = max(entry.snap_version, head.snap_version)
            return
        for _ in range(_ATTEMPTS):
            entry.invalidate()
            stored = await self.store.read_state(entry.ref)
            if stored is None:
                raise LearnerNotFoundError(f"No learner named {entry.ref.name!r}.")
            config = json.loads(stored.config)
            if stored.snapshot is None:
                learner = _build(config)
            else:
                learner = await anyio.to_thread.run_sync(kons.load, stored.snapshot)
            snap = stored.head.snap_version
            self._adopt(entry, learner, config, Head(stored.head.incarnation, snap, snap))
            if await self._catch_up(entry, stored.head.version):
                return
        entry.invalidate()
        raise BusyError(f"Learner {entry.ref.name!r} could not be loaded consistently; retry.")

    async def _catch_up(self, entry: _Cached, target: int) -> bool:
        """Replay logged rounds up to ``target``; False if the log no longer holds the next one."""
        while entry.version < target:
            rows = await self.store.read_log(entry.ref, entry.version, _REPLAY_PAGE)
            expected = list(range(entry.version + 1, entry.version + 1 + len(rows)))
            if not rows or [v for v, _ in rows] != expected:
                return False  # trimmed behind a newer snapshot: rebuild from it
            await _run(lambda rows=rows: self._replay(entry, rows), len(rows))
        return True

    def _replay(self, entry: _Cached, rows: list[tuple[int, dict[bytes, bytes]]]) -> None:
        learner = entry.learner
        for version, fields in rows:
            x = codec.decode_features(fields[b"x"])
            played = learner.learn_one(x, codec.unpack_float(fields[b"y"]))
            entry.version = version
            if played != codec.unpack_float(fields[b"p"]):
                self.metrics.divergence.inc()
                log.error("replay of %s round %d played %r, the log says %r (non-deterministic numerics?)",
                          entry.ref, version, played, codec.unpack_float(fields[b"p"]))
        self.metrics.replayed.inc(len(rows))

    # ------------------------------------------------------------------ snapshots
    def _snapshot_due(self, entry: _Cached, now: float) -> bool:
        behind = entry.version - entry.snap_version
        return entry.learner is not None and behind > 0 and (
            behind >= self.settings.snapshot_every_rounds
            or now - entry.last_snapshot >= self.settings.snapshot_interval_seconds
        )

    async def _snapshot_loop(self) -> None:
        tick = max(0.05, min(1.0, self.settings.snapshot_interval_seconds / 2))
        while not self._closing:  # checked too, since a cancel can be lost (see _stop_snapshotter)
            await asyncio.sleep(tick)
            now = time.monotonic()
            for entry in list(self._cache.values()):
                if self._closing:
                    return
                if self._snapshot_due(entry, now):
                    await self._snapshot_quietly(entry)

    async def _stop_snapshotter(self, deadline: float) -> None:
        """Cancel the snapshot loop and wait for it, at most until ``deadline`` (loop time).

        One cancel is not enough on Python 3.11: redis-py sends every command through
        ``asyncio.wait_for(..., socket_timeout)``, which swallows a cancel that lands just as the send
        completes (CPython gh-86296, fixed in 3.12); the loop then carried on for ever and a graceful
        shutdown hung. So the loop also stops on ``_closing``, and the wait is bounded and re-cancels.
        """
        task = self._snapshotter
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

    async def _snapshot_quietly(self, entry: _Cached) -> None:
        try:
            await self.snapshot(entry)
        except redis.exceptions.RedisError as exc:
            self.metrics.snapshots.labels("error").inc()
            log.warning("snapshot of %s failed: %s", entry.ref, type(exc).__name__)
        except Exception:
            self.metrics.snapshots.labels("error").inc()
            log.exception("snapshot of %s failed", entry.ref)

    async def snapshot(self, entry: _Cached) -> bool:
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
                head = Head(entry.incarnation, entry.version, entry.snap_version)
                blob = await anyio.to_thread.run_sync(entry.learner.to_bytes)
            token = uuid.uuid4().hex
            n_chunks = await self.store.write_chunks(ref, token, blob, self.settings.snapshot_chunk_bytes)
            code = await self.store.commit_snapshot(ref, head, token, n_chunks, len(blob))
            if code != 1:
                await self.store.discard_chunks(ref, token, n_chunks)
        finally:
            entry.last_snapshot = time.monotonic()
            with contextlib.suppress(redis.exceptions.RedisError):
                await self.store.unlock_snapshot(ref, lock)
        if code == 1 and entry.incarnation == head.incarnation:
            entry.snap_version = max(entry.snap_version, head.version)
        self.metrics.snapshots.labels("written" if code == 1 else "skipped").inc()
        self.metrics.snapshot_seconds.observe(time.perf_counter() - started)
        return code == 1
