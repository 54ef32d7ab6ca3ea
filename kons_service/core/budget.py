"""The per-tenant budget: the summed state bytes of a tenant's learners, with the features they keep under
prediction ids, their kept versions and the request ids (with answers) they keep for retries, stay within
``tenant_max_bytes``, and their number within ``tenant_max_learners``, whichever replica creates, grows or
replaces them.

Each learner holds a reservation in Redis (:meth:`.TenantBytes.reserve`): its estimated
state size from its config when it is created, grown to its actual size when it outgrows that (a kernel
learner storing points, an uploaded state) and dropped when it is deleted. A reservation is granted
atomically against the tenant's total, so concurrent creates on several replicas cannot overshoot; since
it cannot be made in the same atomic step as the learner itself (another Redis Cluster slot), a create
reserves first and a delete unreserves last: a process dying in between leaves a reservation without a
learner, which over-counts (refuses early) until a refused reservation reclaims it. Every learner has a
reservation (one of 0 bytes for a config whose size is not known yet), so their number is the tenant's
count of learners, capped in the same atomic step.
"""

from __future__ import annotations

import time

from kons_service.core.errors import ResourceLimitError
from kons_service.settings import Settings
from kons_service.store import LearnerRef, Reservation, Store

__all__ = ["TenantBudget"]

#: A reservation younger than this may belong to a create in progress, so it is never reclaimed.
RECLAIM_MIN_AGE_MS = 60_000
#: A reservation (kept versions, request ids) granted or confirmed more recently than this is not shrunk by
#: the sweep: it may be in use.
SHRINK_MIN_AGE_MS = 30_000
_SWEEP_PAGE = 100  # learners the records' sweep asks for at a time


def _now_ms() -> int:
    return int(time.time() * 1000)


class TenantBudget:
    """Reserve learners' state bytes against their tenant's budget."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.shrink_min_age_ms = SHRINK_MIN_AGE_MS

    async def reserve(self, ref: LearnerRef, nbytes: int, refused: str) -> int:
        """Make the learner's reservation at least ``nbytes``; returns it. Raises 422 ``resource_limit``
        (``refused`` says what was not done) when the tenant's total would go over its budget, once the
        reservations of learners that no longer exist are reclaimed."""
        budget = self.settings.tenant_max_bytes
        got = await self._reserve(ref, nbytes)
        if not got.granted and await self.store.budget.reclaim(ref.tenant, RECLAIM_MIN_AGE_MS):
            got = await self._reserve(ref, nbytes)
        if got.too_many:
            raise ResourceLimitError(
                f"Tenant {ref.tenant!r} already has {got.tenant_learners} learners, the most it may have "
                f"(KONS_TENANT_MAX_LEARNERS): {refused}. Delete learners first.")
        if not got.granted:
            raise ResourceLimitError(
                f"Learner {ref.name!r} needs {nbytes} bytes of state, and the other learners of tenant "
                f"{ref.tenant!r} already hold {got.tenant_bytes - got.learner_bytes} of its budget of "
                f"{budget} bytes (KONS_TENANT_MAX_BYTES): {refused}. Delete learners, or use smaller ones.")
        return got.learner_bytes

    async def cover(self, ref: LearnerRef, need: int, reserved: int,
                    refused: str = "it takes no more feedback (it still predicts)") -> int:
        """:meth:`try_cover`, raising 422 when the tenant's budget cannot cover ``need`` (``refused``: what
        is not done)."""
        got = await self.try_cover(ref, need, reserved)
        if got is None:
            return await self.reserve(ref, need, refused)
        return got

    async def try_cover(self, ref: LearnerRef, need: int, reserved: int) -> int | None:
        """The reservation of a learner that needs ``need`` bytes and had ``reserved``, or None if the
        tenant's budget cannot cover ``need``. Asks Redis only when the learner has outgrown its reservation,
        then with a quarter of headroom (so a growing kernel learner asks once per quarter of growth, not
        every round), and for ``need`` alone if that is refused."""
        if need <= reserved:
            return reserved
        roomy = max(need, min(need + need // 4, self.settings.learner_max_bytes))
        got = await self._reserve(ref, roomy)
        if not got.granted and not got.too_many:
            got = await self._reserve(ref, need)
            if not got.granted and await self.store.budget.reclaim(ref.tenant, RECLAIM_MIN_AGE_MS):
                got = await self._reserve(ref, need)
        return got.learner_bytes if got.granted else None

    async def reserve_ids(self, ref: LearnerRef, nbytes: int) -> None:
        """Make the reservation for the features the learner keeps under prediction ids at least
        ``nbytes``; raises 422 ``resource_limit`` when the tenant's budget cannot cover it."""
        budget = self.settings.tenant_max_bytes
        got = await self.store.budget.reserve_ids(ref, nbytes, budget)
        if not got.granted and await self.store.budget.reclaim(ref.tenant, RECLAIM_MIN_AGE_MS):
            got = await self.store.budget.reserve_ids(ref, nbytes, budget)
        if not got.granted:
            raise ResourceLimitError(
                f"Keeping the features of learner {ref.name!r}'s predictions under ids needs {nbytes} bytes, "
                f"and tenant {ref.tenant!r} already holds {got.tenant_bytes - got.learner_bytes} of its "
                f"budget of {budget} bytes (KONS_TENANT_MAX_BYTES): nothing was predicted. Predict without "
                "ids (send x with the feedback), or delete learners.")

    async def allow_kept(self, ref: LearnerRef, nbytes: int) -> int:
        """What the learner's kept versions may cost: ``nbytes`` if the tenant's budget covers it, else
        the reservation it holds (the oldest versions are then dropped to fit: never an error)."""
        budget = self.settings.tenant_max_bytes
        got = await self.store.budget.reserve_kept(ref, nbytes, budget)
        if not got.granted and await self.store.budget.reclaim(ref.tenant, RECLAIM_MIN_AGE_MS):
            got = await self.store.budget.reserve_kept(ref, nbytes, budget)
        return got.learner_bytes

    async def give_back_kept(self, ref: LearnerRef, cost: int) -> bool:
        """The learner's kept versions now cost ``cost`` (some aged out): its reservation comes down to it,
        unless a publication asked for it in the last ``shrink_min_age_ms`` (it may be keeping versions
        within the larger one; one that takes longer over-counts until the next sweep or publication).
        Whether it came down."""
        return await self.store.budget.shrink_kept(ref, cost, self.shrink_min_age_ms) <= cost

    async def allow_records(self, ref: LearnerRef, need: int, reserved: int) -> int:
        """What the learner's request ids and the answers kept for their retries may hold together, for
        ``need`` bytes when it had ``reserved``: asks Redis only when ``need`` outgrows that (then with a
        quarter of headroom), never beyond ``request_ids_max_bytes``; short of that, the reservation it
        holds (``append.lua`` then drops the oldest answers, never an id, to fit it)."""
        cap = self.settings.request_ids_max_bytes
        need = min(need, cap)
        if need <= reserved:
            return reserved
        budget = self.settings.tenant_max_bytes
        got = await self.store.budget.reserve_records(ref, min(need + need // 4, cap), budget)
        if not got.granted:
            got = await self.store.budget.reserve_records(ref, need, budget)
        if not got.granted and await self.store.budget.reclaim(ref.tenant, RECLAIM_MIN_AGE_MS):
            got = await self.store.budget.reserve_records(ref, need, budget)
        # (what it holds expires an hour after the newest id: then the sweep gives the rest back)
        await self.store.budget.list_records(ref, _now_ms() + self.settings.request_id_ttl_seconds * 1000)
        return got.learner_bytes

    @property
    def records_fresh_seconds(self) -> float:
        """How long a process may append within the records' reservation it was last told of before it
        asks again: well within ``shrink_min_age_ms``, so that the sweep never shrinks one in use."""
        return self.shrink_min_age_ms / 3000

    async def sweep_records(self) -> int:
        """Give back what learners' request ids and kept answers no longer hold (they expire after
        ``request_id_ttl_seconds``; their reservation only grows as they come): each listed learner due,
        its reservation brought down to what it holds, unless a process asked for it in the last
        ``shrink_min_age_ms``, and listed again while it holds any. Returns how many it looked at."""
        visited, now, ttl_ms = 0, _now_ms(), self.settings.request_id_ttl_seconds * 1000
        while True:
            due = await self.store.budget.records_due(now, _SWEEP_PAGE)
            for ref in due:
                held = await self.store.budget.records_held(ref)
                after = await self.store.budget.shrink_records(ref, held, self.shrink_min_age_ms)
                if after > held:  # asked for lately
                    await self.store.budget.list_records(ref, now + self.shrink_min_age_ms)
                elif after > 0:
                    await self.store.budget.list_records(ref, now + ttl_ms)
            visited += len(due)
            if len(due) < _SWEEP_PAGE:
                return visited

    async def _reserve(self, ref: LearnerRef, nbytes: int) -> Reservation:
        return await self.store.budget.reserve(ref, nbytes, self.settings.tenant_max_bytes,
                                              self.settings.tenant_max_learners)
