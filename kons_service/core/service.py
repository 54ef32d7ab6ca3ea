"""The learner service the routers call: one method per operation, each returning a typed result.

The work is done in rooms of its own: :mod:`.cache` (the learners this process holds and their replay
from the log), :mod:`.feedback` (the durable write protocol of feedback rounds), :mod:`.snapshots`
(snapshot writing), :mod:`.eviction` (no write acknowledged while Redis may evict keys) and
:mod:`kons_service.store` (every Redis call).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import anyio.to_thread

import kons
from kons_service.core import codec
from kons_service.core.budget import TenantBudget
from kons_service.core.cache import LearnerCache, not_found
from kons_service.core.errors import (
    BatchTooLargeError,
    BusyError,
    ConfigConflictError,
    InvalidNameError,
    StateMismatchError,
)
from kons_service.core.eviction import EvictionGuard
from kons_service.core.fairness import TenantLimiter
from kons_service.core.feedback import Feedback, FeedbackResult, FeedbackWriter
from kons_service.core.history import History, HistoryRecorder
from kons_service.core.learning import (
    CLASSIFICATION,
    ConformalAnswers,
    Distribution,
    asked_coverage,
    canonical,
    check_budget,
    check_config_coverage,
    check_rows,
    check_work,
    classifier,
    config_of,
    conformal_answers,
    decided,
    numerics,
    offload,
    task_of,
    timed,
    undecided,
    undecided_config,
)
from kons_service.core.marks import AckMarks
from kons_service.core.metrics import Metrics
from kons_service.core.shadows import ChallengerReport, Promoted, Shadows
from kons_service.core.snapshots import Snapshotter
from kons_service.core.streams import read_limited
from kons_service.core.versions import RolledBack, Versions, VersionsReport
from kons_service.settings import NAME_RULE, Settings, valid_name
from kons_service.shutdown import LAST_STEP_SECONDS, SERVICE_SECONDS, within
from kons_service.store import Head, LearnerRef, Publication, Store

__all__ = [
    "Created",
    "ExportedState",
    "Feedback",
    "FeedbackResult",
    "History",
    "LearnerDetails",
    "LearnerPage",
    "LearnerService",
    "LearnerSummary",
    "Predictions",
    "RolledBack",
    "VersionsReport",
]


#: What Redis spends on one remembered id besides its id and features (a hash field and a sorted-set
#: member with its score, and their share of the hash tables as they grow: about 130 to 170 bytes measured
#: with MEMORY USAGE), rounded up so that a learner's ids stay within their share.
_ID_OVERHEAD_BYTES = 192
#: How long the background tasks have to stop at shutdown: at once at their cancel, or, a cancel lost in a
#: Redis call (Python 3.11), at their closing flag after that call (a socket timeout and its two re-sends).
_STOP_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class LearnerSummary:
    """A learner as listed: its name, config (``{"algorithm", "dim", "params"}``) and version."""

    name: str
    config: dict[str, Any]
    version: int


@dataclass(frozen=True, slots=True)
class LearnerDetails(LearnerSummary):
    """A learner as described: its summary and the counters of its run (``Learner.stats``)."""

    stats: dict[str, Any]
    #: The input dimension: the config's, else the one the first feedback row fixed (None before it).
    input_dim: int | None
    #: regression or classification; None while the first feedback's label has not decided it.
    task: str | None
    #: A classifier's classes (with their JSON types) in the learner's order; None for other learners.
    classes: list[Any] | None
    #: How it encodes records (:meth:`kons.Learner.encoding`); None for a learner of arrays.
    encoding: dict[str, Any] | None
    #: The version of its latest rollback or promotion (0: none).
    restored_at: int = 0


@dataclass(frozen=True, slots=True)
class Created:
    """A create's answer: ``created`` is False when this very config already existed."""

    created: bool
    learner: LearnerSummary


@dataclass(frozen=True, slots=True)
class LearnerPage:
    """A page of a tenant's learners, in name order; ``next_cursor`` continues it (None: the last)."""

    learners: list[LearnerSummary]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Predictions:
    predictions: list[float]
    version: int
    #: The learner's configuration (``{"algorithm", "dim", "params"}``) that made them.
    config: dict[str, Any]
    #: A classifier's class probabilities for each row (see :meth:`kons.Learner.predict_round`), else None.
    distributions: list[Distribution] | None = None
    #: The class a classifier predicts for each row (:attr:`kons.Round.predicted`), else None.
    labels: list[Any] | None = None
    #: The version of the learner's latest rollback or promotion (0: none).
    restored_at: int = 0
    #: With a coverage asked, each row's interval or set (:func:`.learning.conformal_answers`).
    conformal: ConformalAnswers | None = None


@dataclass(frozen=True, slots=True)
class ExportedState:
    blob: bytes
    version: int


class LearnerService:
    """Create, query, train and persist the learners of every tenant."""

    def __init__(self, store: Store, settings: Settings, metrics: Metrics) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.snapshots = Snapshotter(store, settings, metrics)
        marks = None
        if settings.ack_marks_dir is not None:
            marks = AckMarks(settings.ack_marks_dir, store.process_name, settings.ack_marks_fsync_seconds)
        self.cache = LearnerCache(store, settings, metrics, on_evict=self.snapshots.schedule, marks=marks)
        self._marks_task: asyncio.Task[None] | None = None
        self.history_recorder = HistoryRecorder(store, settings)
        self.budget = TenantBudget(store, settings)
        self.writer = FeedbackWriter(store, settings, metrics, self.cache, self.history_recorder, self.budget)
        self.eviction = EvictionGuard(self.store_problem, settings, metrics)
        self.limiter = TenantLimiter(settings)
        self.kept_versions = Versions(store, settings, metrics, self.cache, self.budget,
                                      self.history_recorder)
        self.snapshots.retention = self.kept_versions.retention
        self.shadows = Shadows(store, settings, metrics, self.cache, self.writer, self.kept_versions)
        self.writer.on_logged = self.shadows.logged

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self.cache.marks is not None:
            self.cache.marks.open()
            self._marks_task = asyncio.create_task(self.cache.marks.run())
        self.snapshots.start(self.cache)
        self.eviction.start()
        self.shadows.start()
        self.kept_versions.start()

    async def close(self, timeout: float = SERVICE_SECONDS) -> None:
        """Stop the background tasks, then snapshot every learner with unsnapshotted rounds, all within
        ``timeout`` seconds (and :data:`LAST_STEP_SECONDS` for the acknowledged marks): a step past its time
        is abandoned with a WARNING and the shutdown goes on. Nothing acknowledged is lost with it: a
        feedback is answered only once its rounds are in Redis's log (:meth:`.FeedbackWriter.write`); a
        snapshot only shortens the replay at the learner's next load."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        stops = min(timeout, _STOP_SECONDS)
        # (at once: each stops at its cancel, unless the cancel is lost in a Redis call; then after it)
        await asyncio.gather(within(self.eviction.close(), stops, "the eviction check"),
                             within(self.shadows.close(), stops, "the shadows' catch-up"),
                             within(self.kept_versions.close(), stops, "the sweep of kept versions"),
                             within(self.writer.close(), stops, "the writer leases' background work"))
        await within(self.snapshots.close(deadline), deadline - loop.time() + LAST_STEP_SECONDS,
                     "the snapshots")
        if self._marks_task is not None:
            self._marks_task.cancel()
            await within(self._marks_task, LAST_STEP_SECONDS, "the fsync of the acknowledged marks")
        if self.cache.marks is not None:
            self.cache.marks.close()

    async def store_problem(self) -> str | None:
        """Why the store could silently lose acknowledged rounds or learners (None: no known reason)."""
        if not self.settings.redis_require_noeviction:
            return None
        policy = await self.store.server.eviction_policy()
        if policy is None:
            return ("Redis refuses CONFIG GET, so its maxmemory-policy cannot be checked; if it is "
                    "noeviction, set KONS_REDIS_REQUIRE_NOEVICTION=false.")
        if policy != "noeviction":
            return (f"Redis's maxmemory-policy is {policy!r}: under memory pressure it deletes learners and "
                    "request ids without an error. Set it to 'noeviction' (writes then fail with an error "
                    "instead).")
        return None

    async def durability(self) -> tuple[dict[str, Any], str]:
        """How an acknowledged feedback is kept, as Redis runs (for ``/readyz``), and what it survives in
        plain words (logged at start-up); see docs/reliability.md, "What each durability setting
        promises"."""
        persistence = await self.store.server.persistence()
        replicas = self.settings.redis_wait_replicas
        waited = f"; every feedback waits for {replicas} replica(s) (WAIT)" if replicas else ""
        if persistence is None:
            return ({"appendonly": None, "appendfsync": None, "wait_replicas": replicas},
                    f"Redis refuses CONFIG GET: its persistence cannot be reported{waited}.")
        report = {"appendonly": persistence.appendonly, "appendfsync": persistence.appendfsync,
                  "wait_replicas": replicas}
        if not persistence.appendonly:
            return report, ("Redis runs without its append-only file (appendonly no): a restart of Redis "
                            "loses every acknowledged round since its last RDB snapshot. Run it with "
                            f"appendonly yes{waited}.")
        host_crash = {"always": "survives a crash of Redis's host too",
                      "everysec": "may lose about the last second in a crash of Redis's host",
                      "no": "may lose tens of seconds in a crash of Redis's host"}[persistence.appendfsync]
        return report, (f"Redis appendonly yes, appendfsync {persistence.appendfsync}: an acknowledged "
                        f"feedback survives a crash of the service or of Redis, and {host_crash}{waited}.")

    # ------------------------------------------------------------------ learners
    async def create(
        self, ref: LearnerRef, algorithm: str, dim: int | None, params: dict[str, Any],
        task: str | None = None, shadow: str | None = None, coverage: float | None = None,
    ) -> Created:
        """Create the learner; not created if this very config exists, 409 if another does. Without
        ``dim``, the first feedback row fixes it (and the budget is checked then: :mod:`.feedback`); without
        ``task``, the learner's parameters (or, for ``auto``, its first feedback's label) decide it.
        ``shadow``: a shadow challenger of that learner (:mod:`.shadows`), of its task unless given.
        ``coverage``: the one its rounds calibrate and its answers give unless asked another."""
        if "dim" in params:
            raise kons.InvalidParameterError("give 'dim' at the top level of the body, not in 'params'.")
        if shadow is not None and not valid_name(shadow):
            raise InvalidNameError(f"Invalid learner name {shadow[:80]!r}: a name is {NAME_RULE}.")
        link, champion_task = await self.shadows.link(ref, shadow) if shadow is not None else (None, None)
        params = _with_task(algorithm, params, task or champion_task)
        unsized = kons.learner_from_params(algorithm, {**params, "dim": None})
        text, estimate = self._sized_config(unsized, dim)
        if "task" in unsized.get_params() and "task" not in params:  # decided by the first feedback's label
            text = canonical(undecided_config(json.loads(text)))
        if shadow is not None:
            text = canonical({**json.loads(text), "shadow": shadow})
        if coverage is not None:  # (only then: the config of a learner without is as it was)
            check_config_coverage(unsized, coverage)
            text = canonical({**json.loads(text), "coverage": coverage})
        if unsized.grows and unsized.can_hold_growth:
            # it reserves what it holds, then its growth before each batch, and is held when there is no
            # room: not the worst case of its config, which may be 30x what it ends up using
            sized = None if dim is None else kons.learner_from_params(algorithm, {**params, "dim": dim})
            estimate = 0 if sized is None else sized.state_nbytes()
        self.eviction.check()
        if await self.store.config(ref) is None:  # a new learner: its bytes are reserved before it exists
            await self.budget.reserve(ref, estimate, "it was not created")
        if link is not None:  # (registered before it exists, so that its champion keeps the log it needs)
            link = await self.shadows.register(ref, link)
        try:
            created, stored = await self.store.create(
                ref, text, uuid.uuid4().hex, int(time.time() * 1000),
                "" if link is None else self.store.shadows.link_text(link))
        finally:
            if link is not None:
                await self.shadows.settle(ref, link)
        if not created and not _same_learner(json.loads(text), json.loads(stored)):
            raise ConfigConflictError(
                f"Learner {ref.name!r} exists with another configuration: {stored}. Delete it first."
            )
        version = 0 if created else (await self.cache.head(ref)).version
        return Created(created, LearnerSummary(ref.name, json.loads(stored), version))

    async def fork(self, ref: LearnerRef, source: str, version: int | None) -> Created:
        """Create the learner as a copy of learner ``source``'s state at ``version`` (its newest: None),
        with its config and a log of its own; not created if the name exists with that config, 409 if
        with another."""
        if not valid_name(source):
            raise InvalidNameError(f"Invalid learner name {source[:80]!r}: a name is {NAME_RULE}.")
        self.eviction.check()
        origin = LearnerRef(ref.tenant, source)
        learner, config = await self.kept_versions.copy(origin, version)
        stored = await self.store.config(ref)
        if stored is None:
            await self.budget.reserve(ref, learner.state_nbytes(), "it was not forked")
            blob = await anyio.to_thread.run_sync(learner.to_bytes)
            incarnation = uuid.uuid4().hex
            rounds = int(learner.stats()["rounds"])
            head = Head(incarnation, rounds, rounds, incarnation)  # a new history: its tip is its incarnation
            outcome, stored = await self.store.snapshots.create_with_state(
                ref, config, head, blob, self.settings.snapshot_chunk_bytes, int(time.time() * 1000))
            if outcome is Publication.INCOMPLETE:
                raise BusyError(f"Learner {ref.name!r} was being written by another request; retry.")
            if outcome is Publication.PUBLISHED:
                async with self.cache.locked(self.cache.entry(ref)) as entry:
                    entry.adopt(learner, json.loads(config), head)
                    await self.history_recorder.offer(entry, before=-1)
                return Created(True, LearnerSummary(ref.name, json.loads(config), rounds))
        if stored != config:
            raise ConfigConflictError(
                f"Learner {ref.name!r} exists with another configuration: {stored}. Delete it first.")
        head = await self.cache.head(ref)
        return Created(False, LearnerSummary(ref.name, json.loads(stored), head.version))

    async def describe(self, ref: LearnerRef, seen: int | None = None) -> LearnerDetails:
        """The learner's summary and stats; ``seen``: the newest version the caller was answered, if it
        sent it back (a head below it is a rollback: :mod:`.rollbacks`)."""
        async with self.cache.current(ref, seen or 0) as (entry, learner):
            await self._check_seen(ref, seen, entry.incarnation, entry.version)
            stats = learner.stats()
            # also here, so that after a restart the gauges are there before the next feedback
            self.metrics.observe_learner(ref, entry.version, stats, entry.state_nbytes())  # (once a version)
            classes = list(learner.classes) if classifier(learner) else None
            return LearnerDetails(ref.name, entry.config, entry.version, stats, learner.input_dim,
                                  task_of(entry.config, learner), classes, learner.encoding(),
                                  entry.restored_at)

    async def history(self, ref: LearnerRef) -> History:
        """The learner's recorded history (see :mod:`kons_service.core.history`)."""
        return await self.history_recorder.read(ref)

    async def versions(self, ref: LearnerRef) -> VersionsReport:
        """The versions the learner can be restored to (see :mod:`kons_service.core.versions`)."""
        return await self.kept_versions.report(ref)

    async def rollback(self, ref: LearnerRef, version: int) -> RolledBack:
        """Make the learner exactly its state after ``version``, as a new version every replica sees."""
        self.eviction.check()
        rolled = await self.kept_versions.rollback(ref, version)
        self.cache.drop(ref)  # (the next request rebuilds it from the rollback's state)
        return rolled

    async def promote(self, ref: LearnerRef, challenger: str) -> Promoted:
        """Make the learner serve its shadow challenger's state and config from the next request on."""
        if not valid_name(challenger):
            raise InvalidNameError(f"Invalid learner name {challenger[:80]!r}: a name is {NAME_RULE}.")
        self.eviction.check()
        return await self.shadows.promote(ref, challenger)

    async def challengers(self, ref: LearnerRef) -> tuple[int, list[ChallengerReport]]:
        """The learner's version and its shadow challengers compared with it (:mod:`.shadows`)."""
        return await self.shadows.compare(ref)

    async def list_learners(self, tenant: str, cursor: str | None, limit: int) -> LearnerPage:
        rows, more = await self.store.learners(tenant, cursor, limit)
        items = [LearnerSummary(row.name, json.loads(row.config), row.version) for row in rows]
        return LearnerPage(items, items[-1].name if more and items else None)

    async def delete(self, ref: LearnerRef) -> None:
        link = await self.store.shadows.link(ref)
        existed = await self.store.delete(ref)
        await self.shadows.deleted(ref, link)
        self.cache.drop(ref)
        if self.cache.marks is not None:
            self.cache.marks.forget(ref)
        self.metrics.forget_learner(ref)
        if not existed:
            raise not_found(ref)

    # ------------------------------------------------------------------ rounds
    async def predict(self, ref: LearnerRef, xs: Sequence[Any], ids: Sequence[str] | None,
                      seen: int | None = None, coverage: float | None = None) -> Predictions:
        """Predictions on the learner's newest state; remembers features under ``ids`` if given; ``seen``
        as for :meth:`describe`; with ``coverage``, each row's interval or set (nothing changes)."""
        self._check_batch(len(xs))
        rows = [codec.to_kons(x) for x in xs]
        async with self.cache.current(ref, seen or 0) as (entry, learner):
            await self._check_seen(ref, seen, entry.incarnation, entry.version)
            # A lone row without a coverage is checked by its round, first thing, with kons's same check and
            # words (kons.Learner.check_round); a batch is checked whole before any row is predicted, and a
            # row with a coverage before the coverage is.
            if len(rows) > 1 or coverage is not None or entry.config.get("coverage") is not None:
                check_rows(learner, rows)
            coverage = asked_coverage(entry.config, coverage)
            check_work(entry.state_nbytes(), len(rows), self.settings.batch_max_work_bytes)
            with numerics():
                rounds, _, cpu_seconds = await offload(
                    timed(lambda: [learner.predict_round(x, coverage) for x in rows]), len(rows),
                    entry.state_nbytes(), entry.round_cpu_seconds)
            version, config, restored_at = entry.version, entry.config, entry.restored_at
            self.limiter.charge_work(ref.tenant, len(rows) * entry.state_nbytes())
        if ids:
            await self._remember(ref, [(i, codec.encode_features(x)) for i, x in zip(ids, rows, strict=True)])
        self.metrics.predictions.inc(len(rows))
        self.metrics.count_learner_cpu("predict", cpu_seconds)
        distributions = [r.distribution for r in rounds]
        classified = None not in distributions
        return Predictions([r.value for r in rounds], version, config,
                           cast(list[Distribution], distributions) if classified else None,
                           [r.predicted for r in rounds] if classified else None, restored_at,
                           conformal_answers(rounds))

    async def _remember(self, ref: LearnerRef, payloads: Sequence[tuple[str, bytes]]) -> None:
        """Keep features under their ids, within the learner's share of its tenant's budget: as many ids
        of rows of this size as ``ids_max_bytes`` holds (at most ``ids_max``), reserved first."""
        per_id = max(len(i) + len(payload) for i, payload in payloads) + _ID_OVERHEAD_BYTES
        share = max(min(self.settings.ids_max_bytes, self.settings.ids_max * per_id), len(payloads) * per_id)
        await self.budget.reserve_ids(ref, share)
        ttl_ms = self.settings.id_ttl_seconds * 1000
        if not await self.store.ids.remember(ref, payloads, ttl_ms, share // per_id):
            raise not_found(ref)

    async def feedback(
        self, ref: LearnerRef, items: Sequence[Feedback], request_id: str | None = None,
        seen: int | None = None
    ) -> FeedbackResult:
        """Apply the rounds in order once logged (see :mod:`kons_service.core.feedback`).

        A ``request_id`` that was already applied returns that request's answer and changes nothing.
        ``seen`` as for :meth:`describe`, checked against the head the rounds are appended to.
        """
        self._check_batch(len(items))
        self.eviction.check()
        result = await self.writer.write(ref, items, request_id, seen)
        self.shadows.nudge()
        if (state_nbytes := self.cache.held_nbytes(ref)) is not None:
            self.limiter.charge_work(ref.tenant, len(items) * state_nbytes)
        return result

    def _sized_config(self, unsized: kons.Learner, dim: int | None) -> tuple[str, int]:
        """The stored text of the config of ``unsized`` (a learner built without its dimension, so that
        nothing of its state is allocated) at ``dim``, and kons's size of that state, once it fits the
        per-learner budget."""
        estimate = check_budget(unsized, dim, self.settings.learner_max_bytes)
        return canonical({**config_of(unsized), "dim": dim}), estimate

    async def _check_seen(self, ref: LearnerRef, seen: int | None, incarnation: str, version: int) -> None:
        if seen is not None:
            await self.cache.rollbacks.seen(ref, seen, incarnation, version)

    def _check_batch(self, rows: int) -> None:
        if rows > self.settings.max_batch:
            raise BatchTooLargeError(f"A batch may hold at most {self.settings.max_batch} rows; got {rows}.")

    # ------------------------------------------------------------------ state blobs
    async def export_state(self, ref: LearnerRef) -> ExportedState:
        async with self.cache.current(ref) as (entry, learner):
            return ExportedState(await anyio.to_thread.run_sync(learner.to_bytes), entry.version)

    async def import_state(self, ref: LearnerRef, body: AsyncIterator[bytes], length: str | None) -> int:
        """Replace the learner's state by a kons blob of the same configuration; returns the version.

        The body is read only for an existing learner and only up to ``max_state_bytes``; the blob's
        header is compared with the stored config before any of its arrays or its learner is built.
        """
        self.eviction.check()
        stored = await self.store.config(ref)
        if stored is None:
            raise not_found(ref)
        blob = await read_limited(body, length, self.settings.max_state_bytes)
        algorithm, params = await anyio.to_thread.run_sync(kons.peek, blob)
        try:
            unsized = kons.learner_class(algorithm).from_params({**params, "dim": None})
        except kons.InvalidParameterError as exc:
            raise kons.StateFormatError(f"the state's parameters are invalid: {exc}") from None
        theirs, _ = self._sized_config(unsized, params.get("dim"))
        our_config = json.loads(stored)
        # The config's coverage is the service's, not the blob's (a state plays the same whatever coverage
        # it tracks, and the learner tracks its config's from its next round on): the learner's is kept.
        if "coverage" in our_config:
            theirs = canonical({**json.loads(theirs), "coverage": our_config["coverage"]})
        # A learner whose first feedback has not decided its task yet takes a state of either task (one
        # exported from a learner created with the very same body): the state's decides it, below.
        their_config = json.loads(theirs)
        deciding = (theirs != stored and undecided(our_config) and not undecided(their_config)
                    and canonical(undecided_config(their_config)) == stored)
        if theirs != stored and not deciding:
            raise StateMismatchError(f"The state is for {theirs}, not this learner's configuration {stored}.")
        # The stored config may leave the dimension to the first row: the blob's own is checked here.
        budget = self.settings.learner_max_bytes
        learner = await anyio.to_thread.run_sync(lambda: kons.load(blob, max_bytes=budget))
        nbytes = learner.state_nbytes()  # (measured once: the learner is not played before it is cached)
        reserved = await self.budget.reserve(ref, nbytes, "the state was not installed")
        if deciding:
            stored = await self._decide_for_state(ref, stored, theirs)
        stats = learner.stats()  # (once: the learner is not played before the gauges take them)
        version = int(stats["rounds"])
        incarnation = uuid.uuid4().hex
        head = Head(incarnation, version, version, incarnation)  # a new history: its tip is its incarnation
        replaced = await self.store.snapshots.replace_state(ref, stored, head, blob,
                                                            self.settings.snapshot_chunk_bytes)
        if replaced is Publication.GONE:
            raise not_found(ref)
        if replaced is not Publication.PUBLISHED:
            raise StateMismatchError(f"Learner {ref.name!r} was re-created meanwhile; retry.")
        async with self.cache.locked(self.cache.entry(ref)) as entry:
            entry.adopt(learner, json.loads(stored), head)
            entry.reserved_bytes = reserved
            await self.history_recorder.offer(entry, before=-1)
        self.metrics.observe_learner(ref, version, stats, nbytes)
        return version

    async def _decide_for_state(self, ref: LearnerRef, undecided_text: str, theirs: str) -> str:
        """Decide the task of an undecided learner as the state's config ``theirs`` does (a compare-and-set,
        as a first feedback decides it); raises 409 when its first feedback decided another meanwhile."""
        head = await self.cache.head(ref)
        now = await self.store.decide_config(ref, head.incarnation, undecided_text, theirs)
        if now is None:
            raise not_found(ref)
        if now != theirs:
            raise StateMismatchError(f"The state is for {theirs}, not this learner's configuration {now}.")
        return now


def _with_task(algorithm: str, params: dict[str, Any], task: str | None) -> dict[str, Any]:
    """The parameters of a learner of ``algorithm`` asked for with the top-level ``task`` (None: not
    given): ``auto``'s own ``task`` parameter, else the loss must do it (classification: a binary loss;
    ``logistic`` when no loss is given)."""
    if task is None:
        return params
    if "task" in params and params["task"] != task:
        raise kons.InvalidParameterError(
            f"'task' is {task!r} at the top level of the body but {params['task']!r} in 'params'.")
    learner = kons.learner_from_params(algorithm, {**params, "dim": None})
    if "task" in learner.get_params():
        return {**params, "task": task}
    if task_of({"params": params}, learner) == task:
        return params
    if task == CLASSIFICATION and "loss" not in params:
        return {**params, "loss": "logistic"}
    raise kons.InvalidParameterError(
        f"{algorithm!r} with the loss {learner.loss!r} does not do {task}; give a "
        f"{'binary loss (logistic, hinge, squared_hinge)' if task == CLASSIFICATION else 'regression loss'}.")


def _same_learner(requested: dict[str, Any], stored: dict[str, Any]) -> bool:
    """Whether a create of ``requested`` asks for the learner ``stored``: the same config, or one that
    left the task to the first feedback, which ``stored`` has since decided."""
    if requested == stored:
        return True
    task = stored["params"].get("task")
    return undecided(requested) and task is not None and decided(requested, task) == stored
