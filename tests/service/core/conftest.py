"""The service core driven without the app: its rooms built by hand on a real Redis (the shared server of
``tests/conftest.py``, emptied for each test), as a process of the service builds them, so that a test can
run two "processes" on one store, reach inside a room, and read the store back directly."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import kons
from kons_service.core import codec
from kons_service.core.budget import TenantBudget
from kons_service.core.cache import CachedLearner, LearnerCache
from kons_service.core.feedback import Feedback, FeedbackWriter
from kons_service.core.history import HistoryRecorder
from kons_service.core.learning import build, canonical
from kons_service.core.metrics import Metrics
from kons_service.core.snapshots import Snapshotter
from kons_service.settings import Settings
from kons_service.store import Head, LearnerRef, LogEntry, Store

#: A learner of fixed size (no growth to reserve), and rows for it.
CONFIG: dict[str, Any] = {"algorithm": "ons", "dim": 3, "params": {"loss": "squared"}}
ROWS = np.random.default_rng(7).normal(size=(64, 3))
REF = LearnerRef("t", "m")


def row(i: int) -> tuple[np.ndarray, float]:
    """Row ``i`` of :data:`ROWS` and its label (a function of it)."""
    x = ROWS[i]
    return x, float(x[0] - 0.5 * x[1])


def fed(rows: int) -> kons.Learner:
    """A fresh learner of :data:`CONFIG` after rows ``0`` to ``rows - 1`` (what :meth:`Core.feed` sends)."""
    learner = build(CONFIG)
    for i in range(rows):
        learner.learn_one(*row(i))
    return learner


def item(i: int) -> Feedback:
    """Feedback ``i``: :func:`row` ``i`` as the service receives it."""
    x, y = row(i)
    return Feedback(y=y, x=x.tolist())


@dataclass
class Core:
    """The core's rooms of one process, wired as :class:`~kons_service.core.service.LearnerService`
    wires them; ``evicted`` collects what the cache hands to ``on_evict``."""

    store: Store
    settings: Settings
    metrics: Metrics
    cache: LearnerCache
    budget: TenantBudget
    writer: FeedbackWriter
    snapshots: Snapshotter
    evicted: list[CachedLearner] = field(default_factory=list)

    def sample(self, name: str, **labels: str) -> float:
        """A metric's current value (0.0 before its first count); a name the registry lacks fails, so
        that a misspelt one cannot pass for a count of 0."""
        registry = self.metrics.registry
        assert name.removesuffix("_total") in {family.name for family in registry.collect()}, name
        return registry.get_sample_value(name, labels) or 0.0

    async def create(self, ref: LearnerRef = REF, config: dict[str, Any] | None = None,
                     incarnation: str | None = None) -> str:
        """Create a learner (its config text stored as the service stores it); returns its incarnation."""
        incarnation = incarnation or uuid.uuid4().hex
        created, _ = await self.store.create(ref, canonical(config or CONFIG), incarnation,
                                             int(time.time() * 1000))
        assert created
        return incarnation

    async def feed(self, start: int, stop: int, ref: LearnerRef = REF) -> list[float]:
        """Write feedbacks ``start`` to ``stop - 1``, one request each; their predictions."""
        return [(await self.writer.write(ref, [item(i)], None)).predictions[0] for i in range(start, stop)]

    async def append_raw(self, token: str, items: list[int], ref: LearnerRef = REF) -> Head:
        """Append rows as another writer would (``token``'s rounds, played on a replay of the log), without
        this process's cache; returns the new head."""
        head = await self.store.head(ref)
        assert head is not None
        local = (await replay(self.store, ref)).learner
        entries = []
        for i in items:
            x, y = row(i)
            played = local.learn_one(x, y)
            entries.append(LogEntry(codec.encode_features(x), codec.pack_float(y), codec.pack_float(played)))
        outcome = await self.store.log.append(ref, token, head, entries, leased=False)
        assert outcome.ok, outcome
        after = await self.store.head(ref)
        assert after is not None
        return after


@dataclass(frozen=True)
class Replay:
    """A fresh learner of a learner's config after every round of its log, and what it played."""

    learner: kons.Learner
    plays: list[float]  # plays[v - 1]: the prediction of the round that made version v


async def replay(store: Store, ref: LearnerRef = REF) -> Replay:
    """An independent replay of the learner's whole log (which must still hold every round): what every
    process must hold at the store's head, and what it must have answered."""
    config = await store.config(ref)
    assert config is not None
    learner = build(json.loads(config))
    rows = await store.log.read(ref, 0, 10_000)
    assert [r.version for r in rows] == list(range(1, len(rows) + 1))
    plays = [learner.learn_one(codec.decode_features(r.entry.x), codec.unpack_float(r.entry.y)) for r in rows]
    return Replay(learner, plays)


async def lose_and_retake(core: Core, keep: int, retaken: int) -> None:
    """The store loses every round after ``keep`` (a Redis restarted from an older append-only file, a
    failover) and another writer appends ``retaken`` rounds after them: the same incarnation, another
    history from version ``keep + 1`` on."""
    head = await core.store.head(REF)
    assert head is not None
    rows = await core.store.log.read(REF, 0, 10_000)
    await core.store.delete(REF)
    await core.create(incarnation=head.incarnation)
    if keep:  # the common history: the same rounds under the ids they had (their writer's token)
        token = rows[0].tip.rsplit("/", 1)[0]
        start = Head(head.incarnation, 0, 0, head.incarnation)
        outcome = await core.store.log.append(REF, token, start, [r.entry for r in rows[:keep]], leased=False)
        assert outcome.ok
    await core.append_raw("usurper", list(range(40, 40 + retaken)))


def recorded_calls(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[tuple[Any, ...]]:
    """The arguments of every call of the coroutine method ``owner.name`` from now on (still made)."""
    calls: list[tuple[Any, ...]] = []
    method = getattr(owner, name)

    async def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return await method(*args, **kwargs)

    monkeypatch.setattr(owner, name, recorded)
    return calls


CoreFactory = Callable[..., Awaitable[Core]]


@pytest.fixture
async def make_core(redis_url: str) -> AsyncIterator[CoreFactory]:
    """``await make_core(**settings)``: one more process's core on the test's Redis (its own connections,
    so its own writer tokens); stores closed at the end."""
    async with AsyncExitStack() as stack:

        async def factory(**overrides: Any) -> Core:
            settings = Settings(**{"redis_url": redis_url, "snapshot_interval_seconds": 3600.0, **overrides})
            store = Store.connect(redis_url, settings.redis_timeout_seconds)
            stack.push_async_callback(store.close)
            metrics = Metrics(per_learner=False)
            snapshots = Snapshotter(store, settings, metrics)
            evicted: list[CachedLearner] = []
            cache = LearnerCache(store, settings, metrics, on_evict=evicted.append)
            budget = TenantBudget(store, settings)
            writer = FeedbackWriter(store, settings, metrics, cache, HistoryRecorder(store, settings), budget)
            stack.push_async_callback(writer.close)
            return Core(store, settings, metrics, cache, budget, writer, snapshots, evicted)

        yield factory


@pytest.fixture
async def core(make_core: CoreFactory) -> Core:
    return await make_core()
