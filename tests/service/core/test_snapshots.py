"""The snapshot writer (:class:`kons_service.core.snapshots.Snapshotter`) against the store: what a
published snapshot holds and trims, when none is written (nothing new, another writer's lock, a history the
store lost), rounds that arrive while one is written, and the snapshots of eviction and shutdown. The
policy itself, a pure function, is pinned in ``tests/service/test_snapshot_policy.py``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from kons_service.core.cache import CachedLearner
from kons_service.core.history import HistoryRecorder
from kons_service.core.versions import Versions
from kons_service.store import KeepPolicy, LearnerRef, Publication, keys
from kons_service.store.connection import text
from tests.service.core.conftest import REF, Core, CoreFactory, fed, item, lose_and_retake

pytestmark = pytest.mark.anyio


async def _held(core: Core, ref: LearnerRef = REF) -> CachedLearner:
    async with core.cache.current(ref) as (entry, _):
        return entry


async def _fed(core: Core, rounds: int) -> CachedLearner:
    """The learner created and fed its first ``rounds`` rounds here, as this process holds it."""
    await core.create()
    await core.feed(0, rounds)
    return await _held(core)


async def test_a_snapshot_holds_the_learner_at_its_version_and_trims_the_log(make_core: CoreFactory) -> None:
    core = await make_core()
    entry = await _fed(core, 6)
    assert entry.log_bytes > 0
    assert await core.snapshots.snapshot(entry)
    stored = await core.store.snapshots.read_state(REF)
    assert stored is not None and stored.head.snap_version == 6 and stored.snap_tip == entry.tip
    assert stored.snapshot == fed(6).to_bytes() == entry.loaded().to_bytes()
    assert entry.snap_version == 6 and entry.log_bytes == 0
    assert await core.store.log.read(REF, 0, 100) == []
    assert core.sample("kons_snapshots_total", outcome="written") == 1
    assert core.sample("kons_snapshot_bytes_total") == len(stored.snapshot)
    fresh = await make_core()  # another process starts from it, replaying nothing
    async with fresh.cache.current(REF) as (_, learner):
        assert learner.to_bytes() == stored.snapshot
    assert fresh.sample("kons_replayed_rounds_total") == 0


async def test_no_snapshot_without_new_rounds_or_under_another_writer_s_lock(core: Core) -> None:
    await core.create()
    entry = await _held(core)
    assert not await core.snapshots.snapshot(entry)  # version 0: nothing to write
    await core.feed(0, 2)
    assert await core.store.snapshots.lock(REF, "another process", 60_000)
    assert not await core.snapshots.snapshot(entry)
    stored = await core.store.snapshots.read_state(REF)
    assert stored is not None and stored.snapshot is None and entry.snap_version == 0
    await core.store.snapshots.unlock(REF, "another process")
    assert await core.snapshots.snapshot(entry)
    assert not await core.snapshots.snapshot(entry)  # (and now nothing new again)
    assert core.sample("kons_snapshots_total", outcome="written") == 1


async def test_a_history_the_store_lost_is_never_published(core: Core) -> None:
    entry = await _fed(core, 5)
    await lose_and_retake(core, keep=2, retaken=3)  # the store: our 1-2, then another writer's 3-5
    assert not await core.snapshots.snapshot(entry)  # same incarnation and version, not the same rounds
    stored = await core.store.snapshots.read_state(REF)
    assert stored is not None and stored.snapshot is None
    assert entry.snap_version == 0
    assert core.sample("kons_snapshots_total", outcome="skipped") == 1


async def test_rounds_logged_while_a_snapshot_is_written_stay_behind_it(
    core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = await _fed(core, 4)
    publish = core.store.snapshots.publish
    during: list[int] = []

    async def publish_after_a_feedback(*args: Any, **kwargs: Any) -> Publication:
        # the learner's lock is free while the blob is written: a feedback gets in
        during.append((await core.writer.write(REF, [item(4)], None)).version)
        return await publish(*args, **kwargs)

    monkeypatch.setattr(core.store.snapshots, "publish", publish_after_a_feedback)
    log_bytes_before = entry.log_bytes
    assert await core.snapshots.snapshot(entry)
    assert during == [5]
    assert entry.version == 5 and entry.snap_version == 4  # the snapshot holds 4 rounds, not 5
    assert 0 < entry.log_bytes < log_bytes_before  # the bytes of round 5 alone: its cost still counts
    assert entry.log_bytes == log_bytes_before / 4  # (rows of one size: each round logs as many bytes)
    rows = await core.store.log.read(REF, 0, 100)
    assert [r.version for r in rows] == [5]
    stored = await core.store.snapshots.read_state(REF)
    assert stored is not None and stored.head.snap_version == 4 and stored.head.version == 5


async def test_a_retention_sweep_while_a_snapshot_is_written_leaves_its_chunks_alone(
    core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (CI once lost a snapshot so: the sweep dropped the chunks of every token no kept base named, those
    # of a publication under way included, which then failed as incomplete)
    entry = await _fed(core, 4)
    write_chunks = core.store.snapshots._write_chunks
    keep = KeepPolicy(4, 60_000, 1 << 30)

    async def swept_after_writing(*args: Any) -> tuple[str, int]:
        written = await write_chunks(*args)
        assert await core.store.snapshots.retain(REF, keep) is not None
        return written

    monkeypatch.setattr(core.store.snapshots, "_write_chunks", swept_after_writing)
    assert await core.snapshots.snapshot(entry)
    stored = await core.store.snapshots.read_state(REF)
    assert stored is not None and stored.snapshot == fed(4).to_bytes()


async def test_retention_drops_the_chunks_a_dead_writer_left_once_they_are_old(core: Core) -> None:
    assert await core.snapshots.snapshot(await _fed(core, 4))
    client, snap = core.store.connection.client, keys.learner_key(REF, "snap")
    now_ms = int(time.time() * 1000)
    for field in (f"{now_ms - 11 * 60_000}-dead:0", "deadwriterbeforetimedtokens:0", f"{now_ms}-writing:0"):
        await client.hset(snap, field, b"x")
    assert await core.store.snapshots.retain(REF, KeepPolicy(4, 60_000, 1 << 30)) is not None
    fields = {text(field) for field in await client.hkeys(snap)}
    assert f"{now_ms}-writing:0" in fields  # a writer's, perhaps under way
    assert not fields & {f"{now_ms - 11 * 60_000}-dead:0", "deadwriterbeforetimedtokens:0"}
    stored = await core.store.snapshots.read_state(REF)
    assert stored is not None and stored.snapshot == fed(4).to_bytes()


async def test_a_publication_while_the_sweep_unlists_a_learner_leaves_it_listed(
    core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (the sweep takes a learner left with only its newest base off its list; a publication listing it
    # just before, once its retention had run, was undone so, and its older base then never aged out)
    entry = await _fed(core, 4)
    keep = KeepPolicy(4, 60_000, 1 << 30)

    async def keeping(ref: LearnerRef, new_bytes: int, log_bytes: int) -> KeepPolicy:
        return keep

    core.snapshots.retention = keeping
    run = core.store.connection.run

    async def published_after_retaining(script: str, *args: Any) -> Any:
        reply = await run(script, *args)
        if script == "retain":  # the learner as created: its one base, so it is to be unlisted
            assert await core.snapshots.snapshot(entry)
        return reply

    monkeypatch.setattr(core.store.connection, "run", published_after_retaining)
    assert await core.store.snapshots.retain(REF, keep) is not None
    assert len(await core.store.snapshots.bases(REF)) == 2
    assert await core.store.snapshots.due_for_retention(10) == [REF]


@pytest.mark.parametrize("reserved", [True, False])
async def test_a_sweep_racing_a_publication_keeps_the_versions_the_publication_kept(
    core: Core, monkeypatch: pytest.MonkeyPatch, reserved: bool
) -> None:
    # (the sweep read the learner's kept-versions reservation, or asked for one without it, a publication
    # then grew it and kept a new base within it, and the sweep applied the allowance it had: older bases
    # the publication kept went)
    versions = Versions(core.store, core.settings, core.metrics, core.cache, core.budget,
                        HistoryRecorder(core.store, core.settings))
    core.snapshots.retention = versions.retention
    assert await core.snapshots.snapshot(await _fed(core, 4))  # kept beside the learner as created; listed
    if not reserved:  # (as a learner kept before reservations were: the sweep asks for one)
        assert await core.store.budget.shrink_kept(REF, 0, 0) == 0
    await core.feed(4, 8)
    racing = [await _held(core)]
    owner, name = (core.store.budget, "kept") if reserved else (core.budget, "allow_kept")
    allowance_of = getattr(owner, name)

    async def published_after_reading(*args: Any) -> int:
        allowance: int = await allowance_of(*args)
        while racing:  # (the publication asks for its own allowance too)
            assert await core.snapshots.snapshot(racing.pop())
        return allowance

    monkeypatch.setattr(owner, name, published_after_reading)
    assert await versions.sweep() == 1
    assert [base.version for base in await core.store.snapshots.bases(REF)] == [0, 4, 8]


async def test_shutdown_snapshots_every_learner_with_new_rounds_and_waits_for_the_evicted_ones(
    make_core: CoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = await make_core(cache_size=2)
    refs = [LearnerRef("t", f"m{i}") for i in range(3)]
    for ref, rounds in zip(refs, [12, 2, 1], strict=True):
        await core.create(ref)
        await core.feed(0, rounds, ref)
    assert [e.ref for e in core.evicted] == refs[:1]  # m0 left the cache with its 12 rounds unsnapshotted
    publish = core.store.snapshots.publish

    async def slow_publish(ref: LearnerRef, *args: Any) -> Publication:
        if ref == refs[0]:  # still being written when the shutdown begins
            await asyncio.sleep(0.3)
        return await publish(ref, *args)

    monkeypatch.setattr(core.store.snapshots, "publish", slow_publish)
    # due as it leaves: its log holds more bytes than its snapshot (the floor is waived for it)
    assert core.evicted[0].log_bytes >= core.evicted[0].nbytes
    core.snapshots.schedule(core.evicted[0])
    core.snapshots.start(core.cache)
    await core.snapshots.close(asyncio.get_running_loop().time() + 30)
    assert core.snapshots.task is not None and core.snapshots.task.done()
    for ref, rounds in zip(refs, [12, 2, 1], strict=True):
        stored = await core.store.snapshots.read_state(ref)
        assert stored is not None and stored.head.snap_version == rounds, ref
        assert stored.snapshot == fed(rounds).to_bytes()
    assert core.sample("kons_snapshots_total", outcome="written") == 3
