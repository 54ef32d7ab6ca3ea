"""The learner cache (:mod:`kons_service.core.cache`) without the app: loading a learner from its config,
snapshot and log; catching up by replay; rebuilding after a trim or a replacement; noticing a store that
lost rounds this process held (held, or dropped after a lost append); and eviction."""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import pytest

from kons_service.core.errors import LearnerNotFoundError
from kons_service.core.learning import build
from kons_service.store import Head, LearnerRef, Publication
from tests.service.core.conftest import CONFIG, REF, Core, CoreFactory, lose_and_retake, replay, row

pytestmark = pytest.mark.anyio


async def test_a_learner_is_loaded_from_its_log_to_the_bits_of_a_replay(core: Core) -> None:
    await core.create()
    head = await core.append_raw("other", list(range(5)))
    async with core.cache.current(REF) as (entry, learner):
        assert entry.at(head) and entry.version == 5 and entry.tip == head.tip
        assert learner.to_bytes() == (await replay(core.store)).learner.to_bytes()
    assert core.sample("kons_replayed_rounds_total") == 5
    assert core.sample("kons_learner_loads_total", reason="cold") == 1


async def test_a_learner_behind_the_head_replays_only_the_rounds_it_lacks(core: Core) -> None:
    await core.create()
    await core.append_raw("other", [0, 1, 2])
    async with core.cache.current(REF) as (_, loaded):
        pass
    head = await core.append_raw("other", [3, 4])
    async with core.cache.current(REF) as (entry, learner):
        assert learner is loaded  # caught up in place, not rebuilt
        assert entry.at(head)
        assert learner.to_bytes() == (await replay(core.store)).learner.to_bytes()
    assert core.sample("kons_replayed_rounds_total") == 3 + 2
    assert core.sample("kons_history_rollbacks_total") == 0
    assert core.sample("kons_learner_loads_total", reason="cold") == 1  # once, then caught up
    assert core.sample("kons_learner_loads_total", reason="behind") == 0


async def test_a_learner_whose_rounds_were_trimmed_is_rebuilt_from_the_snapshot(
    make_core: CoreFactory,
) -> None:
    a, b = await make_core(), await make_core()
    await a.create()
    await a.append_raw("other", [0, 1])
    async with a.cache.current(REF) as (_, stale):
        pass
    await b.append_raw("other", [2, 3, 4, 5])
    expected = (await replay(b.store)).learner.to_bytes()
    async with b.cache.current(REF) as (entry, _):
        pass
    assert await b.snapshots.snapshot(entry)  # publishing trims the log behind version 6
    assert await a.store.log.read(REF, 2, 10) == []
    replays = a.sample("kons_replayed_rounds_total")
    async with a.cache.current(REF) as (entry, learner):
        assert learner is not stale and entry.version == entry.snap_version == 6
        assert learner.to_bytes() == expected
    assert a.sample("kons_replayed_rounds_total") == replays  # the snapshot was the whole state
    assert a.sample("kons_history_rollbacks_total") == 0
    assert a.sample("kons_learner_loads_total", reason="behind") == 1


async def test_a_replaced_learner_is_rebuilt_from_its_new_state(core: Core) -> None:
    await core.create()
    await core.append_raw("other", [0, 1, 2])
    async with core.cache.current(REF) as (entry, _):
        old = entry.incarnation
    upload = build(CONFIG)
    for i in range(10, 14):  # another history: 4 rounds the log never saw
        upload.learn_one(*row(i))
    stored = await core.store.config(REF)
    assert stored is not None
    incarnation = uuid.uuid4().hex
    replaced = await core.store.snapshots.replace_state(REF, stored, Head(incarnation, 4, 4, incarnation),
                                                        upload.to_bytes(), 1 << 20)
    assert replaced is Publication.PUBLISHED
    async with core.cache.current(REF) as (entry, learner):
        assert entry.incarnation == incarnation != old and entry.version == 4
        assert learner.to_bytes() == upload.to_bytes()
    assert core.sample("kons_history_rollbacks_total") == 0  # a replacement is not a lost history


async def test_an_unknown_learner_is_not_found_and_leaves_no_entry(core: Core) -> None:
    with pytest.raises(LearnerNotFoundError):
        async with core.cache.current(LearnerRef("t", "nobody")):
            pass
    assert core.cache.entries() == []


@pytest.mark.parametrize(("keep", "retaken"), [(0, 5), (3, 1), (3, 4)],
                         ids=["same-version", "store-behind", "store-ahead"])
async def test_a_held_learner_whose_history_the_store_lost_is_rebuilt_and_reported(
    core: Core, keep: int, retaken: int
) -> None:
    await core.create()
    await core.feed(0, 5)  # this process holds versions 1-5 (its own rounds)
    await lose_and_retake(core, keep, retaken)
    async with core.cache.current(REF) as (entry, learner):
        assert entry.version == keep + retaken and entry.tip.startswith("usurper/")
        assert learner.to_bytes() == (await replay(core.store)).learner.to_bytes()
    assert core.sample("kons_history_rollbacks_total") == 1


async def test_a_dropped_learner_reports_a_lost_history_at_its_next_sync_but_not_a_conflict(
    core: Core,
) -> None:
    await core.create()
    await core.feed(0, 4)
    entry = core.cache.entry(REF)
    entry.drop_played()  # as after an append that lost: it remembers the head it was at
    assert entry.learner is None and entry.held is not None and entry.held.version == 4
    await core.append_raw("other", [4, 5])  # others wrote after it: its rounds are still the store's
    async with core.cache.current(REF) as (entry, learner):
        assert entry.held is None and entry.version == 6
        assert learner.to_bytes() == (await replay(core.store)).learner.to_bytes()
    assert core.sample("kons_history_rollbacks_total") == 0
    core.cache.entry(REF).drop_played()  # held at version 6
    await lose_and_retake(core, keep=2, retaken=5)  # the store lost 3-6, then others went on to 7
    async with core.cache.current(REF):
        pass
    assert core.sample("kons_history_rollbacks_total") == 1


async def _created(core: Core, learners: int) -> list[LearnerRef]:
    """Learners m0, m1, ... created in the store (none loaded)."""
    refs = [LearnerRef("t", f"m{i}") for i in range(learners)]
    for ref in refs:
        await core.create(ref)
    return refs


async def test_the_least_recently_used_learner_is_evicted_and_handed_over_if_it_has_new_rounds(
    make_core: CoreFactory,
) -> None:
    core = await make_core(cache_size=2)
    refs = await _created(core, 4)
    await core.feed(0, 2, refs[0])  # m0 has unsnapshotted rounds; m1 has none
    for ref in refs[1:3]:
        async with core.cache.current(ref):
            pass
    assert [e.ref for e in core.cache.entries()] == refs[1:3]
    assert [e.ref for e in core.evicted] == [refs[0]]  # its log is left to the snapshot policy
    async with core.cache.current(refs[3]):
        pass
    assert [e.ref for e in core.cache.entries()] == refs[2:4]
    assert [e.ref for e in core.evicted] == [refs[0]]  # m1 had nothing to snapshot
    assert core.sample("kons_cache_evictions_total", budget="count") == 2


async def test_a_learner_in_use_is_never_evicted(make_core: CoreFactory) -> None:
    core = await make_core(cache_size=1)
    first, second = LearnerRef("t", "a"), LearnerRef("t", "b")
    await core.create(first)
    await core.create(second)
    async with core.cache.current(first) as (_, held):
        async with core.cache.current(second):
            pass
        assert core.cache.held(first) is held and core.cache.held(second) is not None  # over, but in use
    assert core.cache.held(first) is None  # left alone now: the least recently used goes
    assert core.cache.held(second) is not None
    assert core.sample("kons_cache_evictions_total", budget="count") == 1


async def test_over_the_byte_budget_only_the_most_recent_learner_stays(make_core: CoreFactory) -> None:
    core = await make_core(cache_bytes=1)  # smaller than any learner
    refs = [LearnerRef("t", f"m{i}") for i in range(3)]
    for ref in refs:
        await core.create(ref)
        await core.feed(0, 1, ref)
    assert [e.ref for e in core.cache.entries()] == refs[-1:]
    assert core.sample("kons_cache_evictions_total", budget="bytes") == 2
    assert core.sample("kons_cached_learners") == 1


class _Looked(OrderedDict[Any, Any]):
    """The cache's entries, counting how many a walk through them looks at."""

    looked = 0

    def values(self) -> Iterator[Any]:  # type: ignore[override]
        for value in super().values():
            self.looked += 1
            yield value


async def test_a_full_cache_of_many_learners_evicts_the_least_recently_used_looking_at_few(
    make_core: CoreFactory,
) -> None:
    core = await make_core(cache_size=40)
    refs = await _created(core, 70)
    entries = core.cache._entries = _Looked()
    looked = []
    for ref in refs[:60]:
        before = entries.looked
        await core.feed(0, 1, ref)
        looked.append(entries.looked - before)
    assert [e.ref for e in core.cache.entries()] == refs[20:60]
    assert max(looked) <= 2  # the one it evicts, and where it stops (it looked at all 40 before)
    async with core.cache.current(refs[20]):  # the least recently used becomes the most
        pass
    for ref in refs[60:70]:
        async with core.cache.current(ref):
            pass
    assert [e.ref for e in core.cache.entries()] == [*refs[31:60], refs[20], *refs[60:70]]
    assert [e.ref for e in core.evicted] == refs[:20] + refs[21:31]  # each with a round to snapshot
    assert core.sample("kons_cache_evictions_total", budget="count") == 30
    assert core.sample("kons_cached_learners") == 40
    assert core.sample("kons_cached_bytes") == sum(e.nbytes for e in core.cache.entries()) > 0
