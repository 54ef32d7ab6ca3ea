"""The feedback write protocol: every feedback round of a learner goes through one total order, its log.

A feedback is played on the process's cached learner and acknowledged only once its rounds are appended to
the log by a compare-and-append (``append.lua``): it succeeds only if the learner's head is still the one the
rounds were computed on (the fence), so a 2xx is durable (with ``KONS_REDIS_WAIT_REPLICAS``, only once that
many replicas confirm the append too: else the answer is 503 ``not_replicated``, and a retry with the same
``request_id`` waits for them again). Two ways to get there:

* **optimistic** (the common case, one Redis call): the cached learner is at the head this process last
  appended, so the rounds are played at once and appended with the fence (and a check that no other writer
  holds the lease);
* **leased** (a learner just loaded, or after a conflict): the process takes the learner's writer lease
  (:mod:`.lease`), which returns the head, brings its cached learner to that head (:meth:`LearnerCache.sync`),
  plays and appends; other processes wait for the lease instead of computing on a head that is about to move.

Before the rounds are played, the learner's growth in them is covered by its budget or held (:mod:`.growth`).

If an append loses (another writer moved the head, the learner was deleted or replaced), the cached learner
is dropped, since it holds rounds that are not in the log, and the attempt is made again, leased, on a rebuilt
one; after such a conflict the learner stays on the leased path for a while (longer after each conflict), so
that several processes writing one learner take turns instead of rebuilding it again and again.

**Group commit.** Feedbacks to one learner that arrive while its writer is busy queue behind it; the next
writer takes every queued request (up to ``max_batch`` rounds) and plays and appends them as one group, in
arrival order, in one script call; each request is answered with its own predictions, losses and version.
A request of the group that would fail on its own (bad input, an unknown id, a request id already applied)
makes the group fall back to writing its requests one by one, so each gets its own answer.

Every feedback request is applied at most once: a client's ``request_id`` is remembered with a record of its
answer, and a repeat is answered from that record instead of appended again (asked before anything is
played when the process remembers appending that id, so a retry does not cost a rebuild of the learner);
redis-py re-sending the append after a lost reply finds its own rounds in the log and answers as the first
run did.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import kons
from kons_service.core import codec
from kons_service.core.budget import TenantBudget
from kons_service.core.cache import CachedLearner, LearnerCache, logged_bytes, not_found
from kons_service.core.errors import (
    AlreadyAppliedError,
    BatchTooLargeError,
    BusyError,
    RequestIdConflictError,
    ResourceLimitError,
    UnknownIdError,
)
from kons_service.core.growth import GrowthBudget
from kons_service.core.history import Covered, HistoryRecorder
from kons_service.core.learning import (
    REGRESSION,
    SHADOW_REQUEST,
    ConformalAnswers,
    Distribution,
    asked_coverage,
    build,
    canonical,
    check_labels,
    check_rows,
    check_shadow_writer,
    check_work,
    classifier,
    conformal_answers,
    decided,
    finite,
    new_class_keys,
    numerics,
    offload,
    task_of,
    task_of_label,
    timed,
    track_coverage,
    undecided,
)
from kons_service.core.lease import Lease, WriterLeases
from kons_service.core.metrics import Metrics
from kons_service.settings import Settings
from kons_service.store import (
    AppendOutcome,
    AppendStatus,
    AppliedRequest,
    Head,
    LearnerRef,
    LogEntry,
    NotReplicatedError,
    RequestRetention,
    RequestTag,
    Store,
)

__all__ = ["Feedback", "FeedbackResult", "FeedbackWriter"]

log = logging.getLogger("kons_service.feedback")

_ATTEMPTS = 5  # compare-and-append attempts before answering 503
#: After a conflict a learner's writes take the lease for this long, doubling with each further conflict
#: up to the maximum (each conflict of an optimistic write costs a rebuild of the learner).
_LEASED_SECONDS, _LEASED_SECONDS_MAX = 1.0, 60.0


@dataclass(frozen=True, slots=True)
class Feedback:
    """One feedback item: features ``x`` (or the ``id`` of a remembered predict) and the label ``y`` (a
    number, string or boolean, as the client sent it)."""

    y: Any
    x: Any = None
    id: str | None = None
    #: The coverage of the interval or set the round answers (None: none asked).
    coverage: float | None = None


@dataclass(frozen=True, slots=True)
class FeedbackResult:
    """The predictions played, their losses and the learner's version once the rounds are logged; for a
    classifier that gives class probabilities, the distribution each round played (else None); with a
    coverage asked, each round's conformal answer (:func:`.learning.conformal_answers`, else None)."""

    predictions: list[float]
    losses: list[float]
    version: int
    distributions: list[Distribution] | None = None
    #: The class each round predicted (:attr:`kons.Round.predicted`), with the distributions; None for an
    #: answer kept from before the rounds said it.
    labels: list[Any] | None = None
    conformal: ConformalAnswers | None = None


@dataclass(eq=False, slots=True)
class _Request:
    """A feedback request waiting for its writer: its items, its client's id and the digest of its body
    (None without an id), the newest version its client was answered (None: not sent), and, once
    written, its answer or error."""

    items: Sequence[Feedback]
    id: str | None
    fingerprint: str | None
    seen: int | None = None
    result: FeedbackResult | None = None
    error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self.result is not None or self.error is not None

    def answer(self) -> FeedbackResult:
        if self.error is not None:
            raise self.error
        if self.result is None:  # pragma: no cover - a programming error
            raise RuntimeError("a feedback request was not written")
        return self.result


@dataclass(slots=True)
class _Played:
    """A group's rounds as played: each request's rows, labels, predictions and losses, in order."""

    xs: list[list[Any]] = field(default_factory=list)
    ys: list[list[Any]] = field(default_factory=list)  # as logged (see :func:`.learning.check_rows`)
    #: The labels as the learner learnt them: a classifier's own classes (see :class:`.learning.Round`).
    learned: list[list[Any]] = field(default_factory=list)
    plays: list[list[float]] = field(default_factory=list)
    losses: list[list[float]] = field(default_factory=list)
    #: A probabilistic classifier's played distributions (see :meth:`kons.Learner.learn_round`), else None.
    distributions: list[list[Distribution] | None] = field(default_factory=list)
    #: The class each round predicted (:attr:`kons.Round.predicted`), per request.
    predicted: list[list[Any]] = field(default_factory=list)
    coverages: list[float | None] = field(default_factory=list)  # each request's asked (None: none)
    #: Each round, in order over the requests, if answered with a coverage: it, whether the answer held the
    #: label, its width (an interval's) or size (a set's); else None.
    covered: list[Covered | None] = field(default_factory=list)
    #: Each request's rounds' intervals or sets, if it asked a coverage (else None).
    conformal: list[ConformalAnswers | None] = field(default_factory=list)
    #: Whether each round predicted its label (None: regression), in order over the requests.
    correct: list[bool | None] = field(default_factory=list)
    #: Whether the learner's growth is held in these rounds (see :meth:`.growth.GrowthBudget.held`).
    held: bool = False
    #: How many classes the group's labels add (a classifier's; see :meth:`FeedbackWriter._checked`).
    new_classes: int = 0
    seconds: float = 0.0  # the time they took to play
    cpu_seconds: float = 0.0  # ... on a core
    stats: dict[str, Any] = field(default_factory=dict)  # the learner's, after them
    state_bytes: int = 0  # the learner's :meth:`~kons.Learner.state_nbytes`, after them
    changes: int = 0  # of the data, that the learner's change detector declared in them
    logged_bytes: int = 0  # of the log entries that carry them
    entries: list[LogEntry] = field(default_factory=list)  # as appended


class _RegroupError(Exception):
    """A request of a group would fail on its own: write the group's requests one by one."""


def _fingerprint(items: Sequence[Feedback], request_id: str) -> str:
    """A digest of a feedback body, so that a request_id reused for another body is caught. Dense
    features go in as their float64 bytes (the log's encoding), not as text: a large batch is hashed
    without turning its arrays back into Python floats. A shadow challenger's catch-up names its body
    by its id (its champion's versions, see :mod:`.shadows`), so that id is its digest. The coverage
    asked is part of the body (a retry asking another gets a 409, not the intervals of the first),
    digested only when asked, so that a body without one keeps its digest of before."""
    digest = hashlib.sha256()
    if request_id.startswith(SHADOW_REQUEST):
        digest.update(request_id.encode())
        return digest.hexdigest()[:32]
    if items and items[0].coverage is not None:
        digest.update(b"coverage " + float(items[0].coverage).hex().encode())
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
        self.settings = settings
        self.metrics = metrics
        self.cache = cache
        self.history = history
        self.leases = WriterLeases(store, settings, metrics)
        self.growth = GrowthBudget(settings, metrics, budget)
        self.budget = budget
        self._retention = RequestRetention(settings.request_id_ttl_seconds * 1000, settings.request_ids_max)
        #: Told of every group of rounds logged and acknowledged here: the learner, the head they were
        #: appended after, the writer token that appended them and their entries (the service sets
        #: :meth:`.Shadows.logged`, which hands them to the learner's challengers without a log read).
        self.on_logged: Callable[[LearnerRef, Head, str, list[LogEntry]], None] | None = None

    async def write(
        self, ref: LearnerRef, items: Sequence[Feedback], request_id: str | None, seen: int | None = None
    ) -> FeedbackResult:
        """Apply the rounds in order, once; a ``request_id`` already applied gets that request's answer.
        ``seen``: the newest version the client was answered; the head the rounds are appended to must
        not be below it (else a rollback is reported: :mod:`.rollbacks`)."""
        ids = [it.id for it in items if it.id is not None]
        if len(set(ids)) != len(ids):
            raise kons.InvalidInputError("a batch must not name the same id twice.")
        request = _Request(items, request_id, _fingerprint(items, request_id) if request_id else None, seen)
        entry = self.cache.entry(ref)
        entry.queue.append(request)
        try:
            async with self.cache.locked(entry):
                while not request.done:  # an earlier writer may have written it with its own group
                    await self._commit(entry, self._group(entry))
        finally:
            if not request.done and request in entry.queue:  # (it waited too long for the lock)
                entry.queue.remove(request)
        return request.answer()

    def _group(self, entry: CachedLearner) -> list[_Request]:
        """The queued requests the writer takes (lock held): the oldest, and with group commit those after
        it while their rounds fit in one batch."""
        queue = entry.queue
        group = [queue.pop(0)]
        rows = len(group[0].items)
        # a group is bounded like one batch: in rows, and in work (rows x the learner's state bytes)
        most = min(self.settings.max_batch, self.settings.batch_max_work_bytes // max(entry.nbytes, 1))
        while self.settings.group_commit and queue and rows + len(queue[0].items) <= most:
            rows += len(queue[0].items)
            group.append(queue.pop(0))
        return group

    async def _commit(self, entry: CachedLearner, group: list[_Request]) -> None:
        """Write a group (lock held) and settle each of its requests."""
        try:
            try:
                results = await self._attempts(entry, group)
            except _RegroupError:
                for request in group:
                    await self._commit(entry, [request])
                return
        except Exception as exc:  # every request of the group gets the group's error
            for request in group:
                request.error = exc
            return
        except BaseException:  # this writer's task is cancelled: the others cannot know what happened
            for request in group:
                if not request.done:
                    request.error = BusyError(f"Learner {entry.ref.name!r}'s writer was interrupted; retry "
                                              "(with a request_id, a retry is applied at most once).")
            raise
        for request, result in zip(group, results, strict=True):
            request.result = result

    async def _attempts(self, entry: CachedLearner, group: list[_Request]) -> list[FeedbackResult]:
        for _ in range(_ATTEMPTS):
            if entry.optimistic and entry.learner is not None and time.monotonic() >= entry.leased_until:
                results = await self._attempt(entry, group, None)
            else:
                async with self.leases.hold(entry.ref) as lease:
                    results = await self._attempt(entry, group, lease)
            if results is not None:
                return results
            self.metrics.conflicts.inc()
        raise BusyError(f"Learner {entry.ref.name!r} kept changing under this request; retry.")

    async def _attempt(self, entry: CachedLearner, group: list[_Request],
                       lease: Lease | None) -> list[FeedbackResult] | None:
        """One try, under the writer lease or optimistic; None if the learner moved meanwhile (the caller
        tries again)."""
        ref = entry.ref
        # A retry is answered before anything is played. Optimistic writes leave that to the append
        # (one call), unless the request names remembered ids, which its first run has used up, or this
        # process appended its id (its rounds would be played, refused by the append, and the learner
        # rebuilt from its snapshot and log: the cost of a retry would be the learner's whole state).
        with_id = [request for request in group if request.fingerprint]
        recalls = any(it.x is None for request in with_id for it in request.items)
        asked = lease is not None or recalls or any(entry.appended_before(request.id) for request in with_id)
        if asked:
            answered = await self._applied_before(ref, group)
            if answered is not None:
                return answered
        if lease is None:
            head = Head(entry.incarnation, entry.version, entry.snap_version, entry.tip)
        else:
            head = lease.head
            await self.cache.sync(entry, head)
            if not entry.at(head):
                return None
        if undecided(entry.config):  # this learner's first feedback decides its task
            await self._decide_task(entry, group)
            await self.cache.sync(entry, head)
            if not entry.at(head):
                return None
        check_shadow_writer(entry.config, (request.id for request in group))
        learner = entry.loaded()
        try:
            played = await self._checked(entry, learner, group)
        except BatchTooLargeError:
            # A retry of a batch applied whole while the learner was smaller gets its answer, not a 413:
            # a client that splits refused batches (kons_service.client) would apply its rows again.
            answered = None if asked else await self._applied_before(ref, group)
            if answered is not None:
                return answered
            raise
        rows = sum(len(xs) for xs in played.xs)
        first = played.xs[0][0]
        played.held = await self.growth.held(entry, learner, first, rows)
        await self.growth.cover_new_classes(entry, learner, played.new_classes, first, played.held, rows)
        token = lease.token if lease is not None else self.leases.token()
        try:
            await self._play(learner, played, entry)
            outcome = await self._append(entry, head, token, group, played, leased=lease is not None)
            if outcome.reason is AppendStatus.APPLIED and outcome.replicated and self.on_logged is not None:
                self.on_logged(ref, head, token, played.entries)
        except BaseException:
            entry.drop_played()  # it may hold (parts of) rounds the log does not
            raise
        if lease is not None:
            lease.consumed = outcome.ok
        if not outcome.ok:  # not logged: the rounds it played must go as well
            entry.drop_played()
            if lease is None:
                entry.conflicted(_LEASED_SECONDS, _LEASED_SECONDS_MAX)
        return await self._conclude(entry, head, group, outcome, played)

    async def _decide_task(self, entry: CachedLearner, group: list[_Request]) -> None:
        """Record the task the group's first label decides in the learner's config, unless another writer
        decided it first (a compare-and-set in the store), and drop the cached learner, built for no task:
        the caller rebuilds it from the config now stored, whose task then checks every label. The group
        is checked first by a learner of that task: a request it refuses decides nothing."""
        config = decided(entry.config, task_of_label(group[0].items[0].y))
        await self._checked(entry, build(config), group, config)
        stored = await self.store.decide_config(entry.ref, entry.incarnation, canonical(entry.config),
                                                canonical(config))
        if stored is None:
            raise not_found(entry.ref)
        log.info("learner %s does %s (decided by its first feedback)", entry.ref,
                 json.loads(stored)["params"].get("task"))
        entry.invalidate()

    async def close(self) -> None:
        """Stop the background work of this process's writer leases."""
        await self.leases.close()

    async def _applied_before(self, ref: LearnerRef, group: list[_Request]) -> list[FeedbackResult] | None:
        """The earlier answer of a request id already applied (one request), else None."""
        for request in group:
            if request.fingerprint is None or request.id is None:
                continue
            earlier = await self.store.log.applied(ref, request.id)
            if earlier is not None:
                if len(group) > 1:
                    raise _RegroupError
                return [self._answered(earlier, request.fingerprint, ref)]
        return None

    async def _checked(self, entry: CachedLearner, learner: kons.Learner, group: list[_Request],
                       config: dict[str, Any] | None = None) -> _Played:
        """Each request's rows (features fetched for ids) and labels, checked by kons before any round is
        played, so that bad input changes nothing; ``learner`` is of ``config`` (default: the entry's). A
        request of a group that fails raises :class:`_RegroupError`."""
        task = task_of(config or entry.config, learner) or REGRESSION
        wanted = [it.id for request in group for it in request.items if it.x is None and it.id is not None]
        recalled = {}
        if wanted:
            recalled = dict(zip(wanted, await self.store.ids.recall(entry.ref, wanted), strict=True))
        played = _Played()
        for request in group:
            try:
                check_work(entry.recent_nbytes(), len(request.items), self.settings.batch_max_work_bytes)
                xs = [self._features(it, recalled) for it in request.items]
                check_labels(task, [it.y for it in request.items])
                coverage = asked_coverage(config or entry.config, request.items[0].coverage)
                played.ys.append(check_rows(learner, xs, [it.y for it in request.items]))
            except (kons.KonsError, UnknownIdError, BatchTooLargeError):
                if len(group) > 1:
                    raise _RegroupError from None
                raise
            played.xs.append(xs)
            played.coverages.append(coverage)
        if len(group) > 1 and learner.input_dim is None and len({len(xs[0]) for xs in played.xs}) > 1:
            raise _RegroupError  # the first row fixes the dimension: each request is checked against it alone
        if classifier(learner):
            try:  # the whole group's labels at once (two requests may each pass alone with "1" and 1)
                played.new_classes = len(new_class_keys(
                    learner.classes, [learner.class_of(y) for ys in played.ys for y in ys]))
            except kons.InvalidInputError:
                if len(group) > 1:
                    raise _RegroupError from None
                raise
        return played

    @staticmethod
    def _features(item: Feedback, recalled: dict[str, bytes | None]) -> Any:
        if item.x is not None:
            return codec.to_kons(item.x)
        payload = recalled.get(item.id) if item.id is not None else None
        if payload is None:
            raise UnknownIdError(f"No remembered features for id {item.id!r} (unknown, used or expired).")
        return codec.decode_features(payload)

    @staticmethod
    async def _play(learner: kons.Learner, played: _Played, entry: CachedLearner) -> None:
        """Play the group's rounds on ``learner`` (``entry``'s), request after request (all predictions and
        losses finite, else the round is refused)."""
        rows = [(x, y, coverage)
                for xs, ys, coverage in zip(played.xs, played.ys, played.coverages, strict=True)
                for x, y in zip(xs, ys, strict=True)]
        if learner.grows:
            learner.hold_growth(played.held)
        changes_before = learner.changes_detected
        with numerics():
            track_coverage(learner, entry.config)
            rounds, played.seconds, played.cpu_seconds = await offload(
                timed(lambda: [learner.learn_round(x, y, coverage, track=False) for x, y, coverage in rows]),
                len(rows), entry.recent_nbytes(), entry.round_cpu_seconds)
            losses = cast(list[float], [r.loss for r in rounds])  # a learnt round has its loss
            played.correct = [r.correct for r in rounds]
        plays = [r.value for r in rounds]
        learned = [y if r.label is None else r.label for r, (_, y, _) in zip(rounds, rows, strict=True)]
        played.stats = learner.stats()
        played.state_bytes = learner.state_nbytes()
        played.changes = learner.changes_detected - changes_before
        if not finite(plays, losses, played.stats):
            raise kons.NumericalError("the round would put a non-finite number into the learner's state.")
        start = 0
        for xs in played.xs:
            played.plays.append(plays[start : start + len(xs)])
            played.losses.append(losses[start : start + len(xs)])
            played.learned.append(learned[start : start + len(xs)])
            played.predicted.append([r.predicted for r in rounds[start : start + len(xs)]])
            distributions = [r.distribution for r in rounds[start : start + len(xs)]]
            played.distributions.append(
                None if any(d is None for d in distributions) else cast(list[Distribution], distributions))
            played.conformal.append(conformal_answers(rounds[start : start + len(xs)]))
            played.covered += [None if r.coverage is None else Covered(
                r.coverage, bool(r.covered), r.interval[1] - r.interval[0] if r.interval
                else float(len(r.prediction_set or ()))) for r in rounds[start : start + len(xs)]]
            start += len(xs)

    async def _append(self, entry: CachedLearner, head: Head, token: str, group: list[_Request],
                      played: _Played, *, leased: bool) -> AppendOutcome:
        """Compare-and-append the group's played rounds after ``head``, with their errors for the history."""
        # (a classifier that plays class probabilities logs whether each round predicted its label too)
        corrects = iter(played.correct)
        entries = []
        for request, xs, ys, plays, losses, distributions in zip(
                group, played.xs, played.ys, played.plays, played.losses, played.distributions, strict=True):
            for x, y, p, loss, it in zip(xs, ys, plays, losses, request.items, strict=True):
                correct = next(corrects)
                scored = None if distributions is None else (loss, bool(correct))
                entries.append(LogEntry(codec.encode_features(x), codec.encode_label(y),
                                        codec.pack_play(p, scored), it.id or "", played.held))
        played.entries = entries
        played.logged_bytes = logged_bytes(entries)
        tags = []
        for request, plays, losses, distributions, labels, conformal in zip(
                group, played.plays, played.losses, played.distributions, played.predicted, played.conformal,
                strict=True):
            record = "" if request.fingerprint is None else codec.encode_answer(
                request.fingerprint, plays, losses, distributions, labels, conformal)
            tags.append(RequestTag(request.id or "", record, len(request.items), request.fingerprint or ""))
        errors = self.history.due(entry, head.version, played.learned, played.plays, played.distributions,
                                  played.correct, played.covered, played.stats, played.state_bytes)
        history = (errors, self.settings.history_points)
        held = entry.record_bytes
        for _ in range(2):
            room = await self._record_room(entry, held, tags, head.version + len(entries))
            outcome = await self.store.log.append(entry.ref, token, head, entries, tags, leased=leased,
                                                  retention=self._retention, history=history,
                                                  record_room=room)
            if outcome.reason is not AppendStatus.NO_RECORD_ROOM or int(outcome.detail) <= held:
                break
            held = int(outcome.detail)  # (this process had heard of less: other replicas' ids count too)
        if outcome.record_bytes >= 0:
            entry.record_bytes = outcome.record_bytes
        return outcome

    async def _record_room(self, entry: CachedLearner, held: int, tags: list[RequestTag],
                           version: int) -> int:
        """The bytes the learner's request ids and answers kept for retries may hold once ``tags``' are
        added to the ``held`` ones (counted as ``append.lua`` counts them, for versions at most
        ``version``): its reservation in the tenant's budget, grown to cover them if the budget has room."""
        new = sum(2 * len(tag.id) + len(str(version)) + 1 + len(tag.fingerprint) + 8  # the id's marker
                  + 2 * len(tag.id) + 1 + len(tag.record)  # and its answer's record
                  for tag in tags if tag.id)
        if new or held > entry.record_room:
            now = time.monotonic()
            # a room last heard of long ago is asked again (confirmed): the sweep may have given part back
            stale = now - entry.record_room_at >= self.budget.records_fresh_seconds
            if stale or held + new > entry.record_room:
                entry.record_room = await self.budget.allow_records(entry.ref, held + new,
                                                                    0 if stale else entry.record_room)
                entry.record_room_at = now
        return entry.record_room

    async def _conclude(self, entry: CachedLearner, head: Head, group: list[_Request],
                        outcome: AppendOutcome, played: _Played) -> list[FeedbackResult] | None:
        """The answers of an attempt whose append ended with ``outcome`` (None: try again)."""
        ref = entry.ref
        match outcome.reason:
            case AppendStatus.APPLIED:
                entry.appended(outcome.version, outcome.tip, outcome.stride, played.state_bytes)
                entry.remember_ids(request.id for request in group if request.id)
                if self.cache.marks is not None:  # (a retry's earlier answer was marked when it was given)
                    self.cache.marks.acknowledged(ref, Head(entry.incarnation, entry.version, 0, entry.tip))
                learner = entry.loaded()
                losses = [loss for request_losses in played.losses for loss in request_losses]
                entry.count_rounds(len(losses), played.logged_bytes, played.seconds, played.cpu_seconds)
                self.metrics.count_learner_cpu("feedback", played.cpu_seconds)
                self.metrics.log_bytes.inc(played.logged_bytes)
                correct = None if None in played.correct else [bool(c) for c in played.correct]
                self.metrics.count_rounds(ref, learner.loss, losses, correct)
                covered = [c for c in played.covered if c is not None]
                if covered:
                    self.metrics.count_covered(ref, covered)
                self.metrics.observe_learner(ref, entry.version, played.stats, played.state_bytes)
                if played.changes:
                    self.metrics.count_changes(ref, played.changes)
                for request in group:  # the head appended to is the store's: no client saw beyond it
                    if request.seen is not None:
                        await self.cache.rollbacks.seen(ref, request.seen, head.incarnation, head.version)
                if not outcome.replicated:
                    raise self._unconfirmed(ref, outcome.version)
                results, version = [], head.version
                for plays, request_losses, distributions, labels, conformal in zip(
                        played.plays, played.losses, played.distributions, played.predicted, played.conformal,
                        strict=True):
                    version += len(plays)
                    results.append(FeedbackResult(plays, request_losses, version, distributions,
                                                  None if distributions is None else labels, conformal))
                return results
            case AppendStatus.GONE:
                raise not_found(ref)
            case AppendStatus.NO_RECORD_ROOM:
                if len(group) > 1:
                    raise _RegroupError
                raise ResourceLimitError(
                    f"Remembering this feedback's request_id for its retries takes room that learner "
                    f"{ref.name!r} does not have: the ids of its last "
                    f"{self.settings.request_id_ttl_seconds} s would need {outcome.detail} bytes, more than "
                    "it may hold (at most "
                    f"{self.settings.request_ids_max_bytes} bytes, KONS_REQUEST_IDS_MAX_BYTES, within what "
                    f"tenant {ref.tenant!r} has left of its {self.settings.tenant_max_bytes} bytes, "
                    "KONS_TENANT_MAX_BYTES): nothing was applied. Send larger batches under fewer ids, "
                    "send without a request_id, or delete learners.")
            case AppendStatus.UNKNOWN_ID:
                if len(group) > 1:
                    raise _RegroupError
                raise UnknownIdError(
                    f"The id {outcome.detail!r} was used by another feedback or has expired.")
            case AppendStatus.ALREADY_APPLIED if len(group) > 1:
                raise _RegroupError
            case AppendStatus.ALREADY_APPLIED if group[0].fingerprint is not None:
                return [self._answered(AppliedRequest(outcome.version, outcome.detail, outcome.replicated,
                                                      outcome.fingerprint), group[0].fingerprint, ref)]
            case _:
                return None

    def _unconfirmed(self, ref: LearnerRef, version: int) -> NotReplicatedError:
        wanted, ms = self.settings.redis_wait_replicas, self.settings.redis_wait_timeout_ms
        return NotReplicatedError(
            f"The feedback is logged on Redis's primary as version {version} of learner {ref.name!r}, but "
            f"fewer than {wanted} replica(s) confirmed it within {ms} ms, so a failover could lose it: it "
            "is not acknowledged. Retry with the same request_id (it is applied at most once).")

    def _answered(self, earlier: AppliedRequest, fingerprint: str, ref: LearnerRef) -> FeedbackResult:
        """The original answer of an applied request_id (409 if the id came with another body, or if the
        answer is no longer kept; 503 if the replicas required do not hold it yet)."""
        answer, played = codec.decode_answer(earlier.record) if earlier.record else ({}, None)
        if answer.get("body", earlier.fingerprint) != fingerprint:
            raise RequestIdConflictError("This request_id was already used for a different feedback body.")
        if not earlier.replicated:
            raise self._unconfirmed(ref, earlier.version)
        self.metrics.deduplicated.inc()
        if not earlier.record:
            raise AlreadyAppliedError(
                f"This request was applied before, as version {earlier.version} of learner {ref.name!r}; its "
                "answer (predictions and losses) is no longer kept for retries (the oldest go first when "
                f"the learner's share of tenant {ref.tenant!r}'s byte budget is full), only its id. "
                "Nothing was applied again.")
        kept = answer.get("conformal", {})
        conformal = kept.get("sets") or [tuple(pair) for pair in kept.get("intervals", [])] or None
        return FeedbackResult(answer["predictions"], answer["losses"], earlier.version, played,
                              answer.get("labels"), conformal)
