"""A learner's past versions: which can be restored, and a rollback to one of them.

Every version from the learner's oldest kept base on can be rebuilt exactly: that base (a snapshot kept
by the retention policy, or the learner as its config builds it) and the logged rounds after it, replayed
as every replica replays them (kons is deterministic). Snapshots keep the older bases
(``lib/versions.lua``): at most ``keep_versions`` of them, every version of the last
``keep_versions_seconds`` restorable, and what the older bases and the log after them hold counted in the
tenant's byte budget (beyond it the oldest go first, never an error).

A rollback to version ``N`` rebuilds the state after ``N`` and logs it as a change one past the head
(``rollback.lua``: a log entry, the new newest snapshot and base, an event in the learner's history), in
one script, so a feedback racing it is logged before or after it, and every replica, seeing the head move
past a rollback entry, rebuilds from that snapshot. The rounds after ``N`` stay in the log, rolled back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

import anyio.to_thread

import kons
from kons_service.core.budget import TenantBudget
from kons_service.core.cache import CachedLearner, LearnerCache, not_found
from kons_service.core.errors import BusyError, VersionNotKeptError
from kons_service.core.history import HistoryRecorder
from kons_service.core.learning import build, canonical
from kons_service.core.metrics import Metrics
from kons_service.settings import Settings
from kons_service.store import (
    Base,
    Head,
    KeepPolicy,
    LearnerRef,
    RollbackStatus,
    Store,
    StoreUnavailableError,
)

__all__ = ["RolledBack", "Versions", "VersionsReport", "kept_cost"]

log = logging.getLogger("kons_service.versions")

#: The rollback events a learner's history keeps (the newest).
ROLLBACK_EVENTS = 64
_ATTEMPTS = 5  # rebuilds of a version whose bases or log changed meanwhile, before answering 503
_PAGE = 512
_SWEEP_PAGE = 100  # learners a sweep asks for at a time


@dataclass(frozen=True, slots=True)
class RolledBack:
    """A rollback's answer: the learner's new version, the version it is the state of, and its rounds."""

    version: int
    restored: int
    rounds: int


@dataclass(frozen=True, slots=True)
class VersionsReport:
    """The versions a learner can be restored to: every one from ``oldest`` to ``newest``; ``versions``
    are its history's points and its kept bases among them, with their time, rounds and error;
    ``rollbacks`` the rollbacks it went through (newest :data:`ROLLBACK_EVENTS`)."""

    oldest: int
    newest: int
    versions: list[dict[str, Any]]
    rollbacks: list[dict[str, Any]]
    kept_bytes: int


def kept_cost(bases: list[Base]) -> int:
    """What the learner's older bases cost: their bytes and the log after each up to the next."""
    return sum(b.nbytes + after.log_bytes for b, after in itertools.pairwise(bases))


class Versions:
    """List a learner's restorable versions, roll it back to one of them, and age out the older ones of
    idle learners (:meth:`sweep`)."""

    def __init__(self, store: Store, settings: Settings, metrics: Metrics, cache: LearnerCache,
                 budget: TenantBudget, history: HistoryRecorder) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.cache = cache
        self.budget = budget
        self.history = history
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._sweeps(), name="kons-versions-sweep")

    async def close(self) -> None:
        self._closing = True  # (a cancel can be lost on Python 3.11: see Snapshotter._stop_loop)
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=5.0)

    async def _sweeps(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.settings.keep_versions_sweep_seconds)
            try:
                await self.sweep()
                await self.budget.sweep_records()
            except StoreUnavailableError as exc:
                log.warning("the sweep of kept versions failed: %s", exc)
            except Exception:
                log.exception("the sweep of kept versions failed")

    async def sweep(self) -> int:
        """Apply the retention policy to every learner whose oldest kept version may have aged out by now
        (a learner applies it whenever it publishes a state, but an idle one would keep its versions for
        ever); returns how many learners it visited."""
        visited = 0
        while not self._closing:
            due = await self.store.snapshots.due_for_retention(_SWEEP_PAGE)
            for ref in due:
                # within the reservation it holds (asking would confirm it), which then comes down to
                # what is still kept (publications only grow it); without one, as a publication asks. The
                # bases are read first: a base kept after this read is a publication's, which applied the
                # byte rule itself, perhaps within an allowance granted after the one read here, so the
                # script then leaves that rule to it (``granted_for``)
                bases = await self.store.snapshots.bases(ref)
                held = await self.store.budget.kept(ref)
                keep = dataclasses.replace(self._policy(held or await self._allowance(ref, bases, 0)),
                                           granted_for=bases[-1].key if bases else "")
                cost = await self.store.snapshots.retain(ref, keep)
                if cost is not None and cost < held and not await self.budget.give_back_kept(ref, cost):
                    # asked for lately: given back at a later sweep
                    await self.store.snapshots.due_again(ref, self.budget.shrink_min_age_ms)
            visited += len(due)
            self.metrics.retention_sweeps.inc(len(due))
            if len(due) < _SWEEP_PAGE:
                break
        return visited

    async def retention(self, ref: LearnerRef, new_bytes: int, log_bytes: int) -> KeepPolicy:
        """The retention policy of a publication of ``new_bytes`` after ``log_bytes`` of logged rounds:
        the older bases may cost what the tenant's budget grants for keeping all of them."""
        return self._policy(await self._allowance(ref, await self.store.snapshots.bases(ref), log_bytes))

    async def _allowance(self, ref: LearnerRef, bases: list[Base], log_bytes: int) -> int:
        """What the older bases may cost once ``bases``' newest is one of them, ``log_bytes`` of rounds
        logged after it (the tenant's budget asked: see :meth:`.TenantBudget.allow_kept`)."""
        need = kept_cost(bases) + (bases[-1].nbytes if bases else 0) + log_bytes
        return await self.budget.allow_kept(ref, need) if need else 0

    def _policy(self, allowance: int) -> KeepPolicy:
        """The retention policy with the older bases' cost within ``allowance``."""
        return KeepPolicy(self.settings.keep_versions, int(self.settings.keep_versions_seconds * 1000),
                          allowance)

    async def report(self, ref: LearnerRef) -> VersionsReport:
        found = await self.store.snapshots.kept_range(ref)
        if found is None:
            raise not_found(ref)
        oldest, newest = found
        bases = await self.store.snapshots.bases(ref)
        history = await self.history.read(ref)
        events = [{"version": e.version, "to": e.to, "time": e.time} for e in history.rollbacks]
        rows: dict[int, dict[str, Any]] = {}
        previous: dict[str, Any] | None = None
        for point in history.points:
            if oldest <= point["version"] <= newest:
                rows[point["version"]] = {"version": point["version"], "time": point.get("time"),
                                          "rounds": point["totals"]["rounds"], "base": False,
                                          **_window_error(point, previous)}
            previous = point
        for base in bases:
            row = rows.setdefault(base.version, {"version": base.version, "rounds": None, "error": None,
                                                 "error_name": None, "window_rounds": 0})
            row.update(base=True, time=row.get("time") or base.time_ms / 1000)
        for row in rows.values():
            row["rolled_back"] = any(e["to"] < row["version"] < e["version"] for e in events)
        return VersionsReport(oldest, newest, [rows[v] for v in sorted(rows)], events, kept_cost(bases))

    async def rollback(self, ref: LearnerRef, target: int) -> RolledBack:
        """Make the learner its state after version ``target`` (see the module's docstring)."""
        for _ in range(_ATTEMPTS):
            head = await self.cache.head(ref)
            state = await self.state_at(ref, head, target)
            if state is None:
                continue
            learner, tip, config = state
            blob = await anyio.to_thread.run_sync(learner.to_bytes)
            keep = await self.retention(ref, len(blob), 0)
            outcome = await self.store.snapshots.rollback(
                ref, head.incarnation, target, tip, uuid.uuid4().hex, blob,
                self.settings.snapshot_chunk_bytes, keep, ROLLBACK_EVENTS, config)
            if outcome.status is RollbackStatus.APPLIED:
                self.metrics.version_rollbacks.inc()
                return RolledBack(outcome.version, target, int(learner.stats()["rounds"]))
            if outcome.status is RollbackStatus.GONE and await self.store.head(ref) is None:
                raise not_found(ref)  # (else replaced meanwhile by a state upload: retried on the new one)
            if outcome.status is RollbackStatus.NOT_KEPT:
                raise _not_kept(ref, target, outcome.keep_from, outcome.version)
        raise BusyError(f"Learner {ref.name!r} kept changing while version {target} was rebuilt; retry.")

    async def copy(self, ref: LearnerRef, version: int | None) -> tuple[kons.Learner, str]:
        """The learner's state after ``version`` (None: its newest) and its stored config (for a fork)."""
        if version is None:
            async with self.cache.current(ref) as (entry, learner):
                blob = await anyio.to_thread.run_sync(learner.to_bytes)
                config = canonical(entry.config)
            return await anyio.to_thread.run_sync(kons.load, blob), config
        for _ in range(_ATTEMPTS):
            head = await self.cache.head(ref)
            state = await self.state_at(ref, head, version)
            if state is not None:
                return state[0], state[2]
        raise BusyError(f"Learner {ref.name!r} kept changing while it was copied; retry.")

    async def state_at(self, ref: LearnerRef, head: Head,
                       target: int) -> tuple[kons.Learner, str, str] | None:
        """The learner's state after version ``target`` of ``head``'s incarnation, the id of that round and
        the config in force then (a promotion changes it); None if its bases or log changed while it was
        rebuilt (the caller retries)."""
        current = await self.store.config(ref)
        if current is None:
            raise not_found(ref)
        bases = await self.store.snapshots.bases(ref)
        oldest = bases[0].version if bases else head.snap_version
        if not bases or not oldest <= target <= head.version:
            raise _not_kept(ref, target, oldest, head.version)
        configs = await self.store.snapshots.configs(ref)
        first = json.loads(_config_at(configs, current, 0))  # (what the learner as created is built from)
        state = await self._rebuild(ref, first, head.incarnation, bases, target)
        return None if state is None else (*state, _config_at(configs, current, target))

    async def _rebuild(self, ref: LearnerRef, config: dict[str, Any], incarnation: str, bases: list[Base],
                       target: int) -> tuple[kons.Learner, str] | None:
        base = max((b for b in bases if b.version <= target), key=lambda b: b.version)
        if base.token == "-":
            learner = build(config)
        else:
            blob = await self.store.snapshots.read_base(ref, base)
            if blob is None:
                return None
            learner = await anyio.to_thread.run_sync(kons.load, blob)
        entry = CachedLearner(ref)  # a learner of its own, outside the cache
        entry.adopt(learner, config, Head(incarnation, base.version, base.version, base.tip))
        while entry.version < target:
            rows = await self.store.log.read(ref, entry.version, min(_PAGE, target - entry.version))
            if not rows or rows[0].version != entry.version + 1 or rows[0].parent != entry.tip:
                return None  # trimmed or replaced meanwhile
            if not await self._play(ref, config, incarnation, bases, entry, rows):
                return None
        return entry.loaded(), entry.tip

    async def _play(self, ref: LearnerRef, config: dict[str, Any], incarnation: str, bases: list[Base],
                    entry: CachedLearner, rows: list[Any]) -> bool:
        """Play logged rows on ``entry``: rounds by replay, a rollback by rebuilding the state it restored."""
        for start, row in enumerate(rows):
            if row.rollback_to < 0:
                continue
            if row.rollback_to == row.version and all(b.version != row.version for b in bases):
                # a promotion's state is its kept base only
                raise VersionNotKeptError(f"Learner {ref.name!r} no longer keeps the state a promotion gave "
                                          f"it at version {row.version}, nor any after it that is needed.")
            if start:
                await self.cache.replay(entry, rows[:start])
            restored = await self._rebuild(ref, config, incarnation, bases, row.rollback_to)
            if restored is None:
                return False
            entry.learner, entry.version, entry.tip = restored[0], row.version, row.tip
            return await self._play(ref, config, incarnation, bases, entry, rows[start + 1:]) if (
                start + 1 < len(rows)) else True
        await self.cache.replay(entry, rows)
        return True


def _config_at(configs: dict[int, str], current: str, version: int) -> str:
    """The config in force at ``version``: the newest change at or before it (none: the current one)."""
    changes = [v for v in configs if v <= version]
    return configs[max(changes)] if changes else current


def _not_kept(ref: LearnerRef, target: int, oldest: int, newest: int) -> VersionNotKeptError:
    return VersionNotKeptError(
        f"Learner {ref.name!r} keeps versions {oldest} to {newest}, not {target} (see GET "
        f"/v1/learners/{ref.name}/versions; KONS_KEEP_VERSIONS, KONS_KEEP_VERSIONS_SECONDS).")


def _window_error(point: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
    """The error of the rounds between the previous point of the history and ``point``, in the user's
    units: the mean absolute error for numbers, the accuracy for labels."""
    totals = point["totals"]
    before = previous["totals"] if previous is not None else dict.fromkeys(totals, 0)
    rounds = totals["rounds"] - before["rounds"]
    if point.get("task") == "classification":
        name, value = "accuracy", totals["correct"] - before["correct"]
    else:
        name, value = "mae", totals["abs_error"] - before["abs_error"]
    return {"error_name": name, "error": value / rounds if rounds else None, "window_rounds": rounds}
