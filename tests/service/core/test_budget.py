"""The tenant budget (:class:`kons_service.core.budget.TenantBudget`) against the store: reservations
within the tenant's bytes and learner count, a quarter of headroom for a growing learner (and no Redis call
while it stays within its reservation), reclaiming what a create that died left behind, and the
reservations of remembered ids against the same total."""

from __future__ import annotations

import pytest

from kons_service.core import budget as budget_module
from kons_service.core.errors import ResourceLimitError
from kons_service.store import LearnerRef
from tests.service.core.conftest import Core, CoreFactory, recorded_calls

pytestmark = pytest.mark.anyio

KIB = 1024


def _ref(name: str, tenant: str = "t") -> LearnerRef:
    return LearnerRef(tenant, name)


async def _learners(core: Core, *names: str, tenant: str = "t") -> list[LearnerRef]:
    refs = [_ref(name, tenant) for name in names]
    for ref in refs:
        await core.create(ref)
    return refs


async def test_reservations_stay_within_the_tenant_s_bytes_and_free_them_on_delete(
    make_core: CoreFactory,
) -> None:
    core = await make_core(tenant_max_bytes=10 * KIB)
    a, b = await _learners(core, "a", "b")
    assert await core.budget.reserve(a, 6 * KIB, "it was not created") == 6 * KIB
    with pytest.raises(ResourceLimitError, match=r"needs 5120 bytes.* hold 6144 of its budget of 10240 "
                                                 r"bytes \(KONS_TENANT_MAX_BYTES\): it was not created"):
        await core.budget.reserve(b, 5 * KIB, "it was not created")
    (other,) = await _learners(core, "b", tenant="u")  # another tenant's budget is its own
    assert await core.budget.reserve(other, 10 * KIB, "it was not created") == 10 * KIB
    await core.store.delete(a)  # unreserves
    assert await core.budget.reserve(b, 5 * KIB, "it was not created") == 5 * KIB


async def test_a_reservation_never_shrinks(core: Core) -> None:
    (a,) = await _learners(core, "a")
    assert await core.budget.reserve(a, 4 * KIB, "") == 4 * KIB
    assert await core.budget.reserve(a, 1 * KIB, "") == 4 * KIB


async def test_the_learner_count_is_capped_but_a_counted_learner_may_grow(make_core: CoreFactory) -> None:
    core = await make_core(tenant_max_learners=2)
    a, b, c = await _learners(core, "a", "b", "c")
    await core.budget.reserve(a, 0, "")  # a learner of unknown size is counted with 0 bytes
    await core.budget.reserve(b, KIB, "")
    with pytest.raises(ResourceLimitError, match=r"already has 2 learners.*KONS_TENANT_MAX_LEARNERS"):
        await core.budget.reserve(c, 0, "it was not created")
    assert await core.budget.reserve(a, 2 * KIB, "") == 2 * KIB


async def test_what_a_create_that_died_reserved_is_reclaimed_once_old_enough(
    make_core: CoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = await make_core(tenant_max_bytes=10 * KIB)
    (b,) = await _learners(core, "b")
    ghost = _ref("ghost")  # reserved, then its process died before creating it
    await core.budget.reserve(ghost, 8 * KIB, "")
    with pytest.raises(ResourceLimitError):  # a young reservation may be a create in progress
        await core.budget.reserve(b, 4 * KIB, "")
    monkeypatch.setattr(budget_module, "RECLAIM_MIN_AGE_MS", 0)
    assert await core.budget.reserve(b, 4 * KIB, "") == 4 * KIB


async def test_a_growing_learner_reserves_a_quarter_ahead_and_asks_nothing_within_it(
    make_core: CoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = await make_core(tenant_max_bytes=20 * KIB)
    a, b = await _learners(core, "a", "b")
    asked = recorded_calls(monkeypatch, core.store.budget, "reserve")
    reserved = await core.budget.try_cover(a, 4 * KIB, 0)
    assert reserved == 5 * KIB and len(asked) == 1  # 4 KiB and a quarter of headroom
    assert await core.budget.try_cover(a, 5 * KIB, reserved) == 5 * KIB and len(asked) == 1
    await core.budget.reserve(b, 12 * KIB, "")  # 17 KiB of 20 taken
    assert await core.budget.try_cover(a, 7 * KIB, 5 * KIB) == 7 * KIB  # no room for the quarter: need alone
    assert await core.budget.try_cover(a, 9 * KIB, 7 * KIB) is None  # no room at all: the caller decides
    with pytest.raises(ResourceLimitError, match="it takes no more feedback"):
        await core.budget.cover(a, 9 * KIB, 7 * KIB)


async def test_the_headroom_stops_at_the_learner_s_own_cap(make_core: CoreFactory) -> None:
    core = await make_core(learner_max_bytes=4 * KIB)
    (a,) = await _learners(core, "a")
    assert await core.budget.try_cover(a, 3 * KIB + 512, 0) == 4 * KIB


async def test_remembered_ids_count_against_the_same_total(make_core: CoreFactory) -> None:
    core = await make_core(tenant_max_bytes=10 * KIB)
    a, b = await _learners(core, "a", "b")
    await core.budget.reserve(a, 6 * KIB, "")
    await core.budget.reserve_ids(a, 3 * KIB)
    with pytest.raises(ResourceLimitError, match="nothing was predicted"):
        await core.budget.reserve_ids(b, 2 * KIB)
    with pytest.raises(ResourceLimitError):
        await core.budget.reserve(b, 2 * KIB, "")
    await core.budget.reserve(b, 1 * KIB, "")
