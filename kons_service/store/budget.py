"""The tenant's byte budget (``reserve.lua``, ``unreserve.lua``): bytes reserved for each learner's state,
for the features it keeps under prediction ids, for its kept versions and for the request ids (with the
answers) it keeps for retries, against one total per tenant.

The reservations live in the tenant's slot, the learner in its own, so the two cannot change in one
atomic step: a create reserves first and a delete unreserves last. Concurrent creates (on any replica)
therefore never take the tenant over its budget; a process that dies between the two steps leaves a
reservation without a learner, which only refuses early until :meth:`TenantBytes.reclaim` drops it.
Those tenant keys are updated with their own idempotent commands, never inside a learner's script.
"""

from __future__ import annotations

from kons_service.store import keys
from kons_service.store.connection import Connection, text
from kons_service.store.errors import translated
from kons_service.store.records import LearnerRef, Reservation

__all__ = ["TenantBytes"]


class TenantBytes:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    @translated
    async def reserve(self, ref: LearnerRef, nbytes: int, budget: int, max_learners: int) -> Reservation:
        """Grow the learner's reservation to at least ``nbytes`` unless the tenant's total would exceed
        ``budget``, or, for a learner without one yet, the tenant would hold more than ``max_learners``
        reservations (see ``reserve.lua``: a reservation is what counts a tenant's learners)."""
        return await self._reserve(ref, keys.tenant_bytes(ref.tenant), nbytes, budget, max_learners)

    @translated
    async def reserve_ids(self, ref: LearnerRef, nbytes: int, budget: int) -> Reservation:
        """Grow the reservation for the features the learner keeps under prediction ids to at least
        ``nbytes``, against the same tenant budget as its state (``reserve.lua``)."""
        return await self._reserve(ref, keys.tenant_id_bytes(ref.tenant), nbytes, budget, 0)

    @translated
    async def reserve_kept(self, ref: LearnerRef, nbytes: int, budget: int) -> Reservation:
        """Grow the reservation for the learner's kept versions (its older bases and the log after them)
        to at least ``nbytes``, against the same tenant budget (``reserve.lua``)."""
        return await self._reserve(ref, keys.tenant_kept_bytes(ref.tenant), nbytes, budget, 0)

    @translated
    async def reserve_records(self, ref: LearnerRef, nbytes: int, budget: int) -> Reservation:
        """Grow the reservation for the learner's request ids and the answers kept for their retries
        (``append.lua`` keeps them within it) to at least ``nbytes``, against the same tenant budget."""
        return await self._reserve(ref, keys.tenant_record_bytes(ref.tenant), nbytes, budget, 0)

    @translated
    async def kept(self, ref: LearnerRef) -> int:
        """The learner's kept-versions reservation's bytes (0: none), as it is: not confirmed, not grown."""
        entry = await self.connection.client.hget(keys.tenant_kept_bytes(ref.tenant), ref.name)
        return 0 if entry is None else int(text(entry).split(" ", 1)[0])

    @translated
    async def shrink_kept(self, ref: LearnerRef, nbytes: int, min_age_ms: int) -> int:
        """Lower the learner's kept-versions reservation to ``nbytes`` if it is larger and was not granted
        or confirmed in the last ``min_age_ms`` (``shrink.lua``); its bytes after, -1 if it has none."""
        return await self._shrink(ref, keys.tenant_kept_bytes(ref.tenant), nbytes, min_age_ms)

    @translated
    async def shrink_records(self, ref: LearnerRef, nbytes: int, min_age_ms: int) -> int:
        """:meth:`shrink_kept` for the reservation of its request ids and the answers kept for them."""
        return await self._shrink(ref, keys.tenant_record_bytes(ref.tenant), nbytes, min_age_ms)

    @translated
    async def records_held(self, ref: LearnerRef) -> int:
        """What the learner's request ids and kept answers hold now, as ``append.lua`` counts them (0 once
        they all expired)."""
        marks, answers = await self.connection.client.hmget(keys.learner_key(ref, "reqs"),
                                                            ["*marks", "*answers"])
        return int(marks or 0) + int(answers or 0)

    @translated
    async def list_records(self, ref: LearnerRef, at_ms: int) -> None:
        """List the learner for a look at its records' reservation at ``at_ms`` (epoch ms), unless it is
        listed sooner."""
        await self.connection.client.zadd(keys.RECORDS, {keys.member(ref): at_ms}, lt=True)

    @translated
    async def records_due(self, now_ms: int, count: int) -> list[LearnerRef]:
        """Up to ``count`` learners listed for a look at their records' reservation by ``now_ms``; each is
        taken off the list (listed again if still needed)."""
        found = await self.connection.client.zrangebyscore(keys.RECORDS, "-inf", now_ms, start=0, num=count)
        if found:
            await self.connection.client.zrem(keys.RECORDS, *found)
        return [keys.of_member(text(m)) for m in found]

    async def _shrink(self, ref: LearnerRef, entries: str, nbytes: int, min_age_ms: int) -> int:
        return int(await self.connection.scripts["shrink"](keys=[keys.tenant_bytes(ref.tenant), entries],
                                                           args=[ref.name, nbytes, min_age_ms]))

    async def _reserve(self, ref: LearnerRef, entries: str, nbytes: int, budget: int,
                       max_learners: int) -> Reservation:
        code, held, tenant_bytes, learners = await self.connection.scripts["reserve"](
            keys=[keys.tenant_bytes(ref.tenant), entries], args=[ref.name, nbytes, budget, max_learners])
        return Reservation(int(code) == 1, int(held), int(tenant_bytes), int(learners),
                           too_many=int(code) == -1)

    @translated
    async def unreserve(self, ref: LearnerRef) -> None:
        await self.connection.scripts["unreserve"](keys=keys.tenant_budget_keys(ref.tenant),
                                                   args=[0, ref.name])

    @translated
    async def reclaim(self, tenant: str, min_age_ms: int) -> int:
        """Drop the reservations, older than ``min_age_ms``, of names that have no learner (left by a
        process that died between the two steps of a create or a delete); returns how many."""
        client = self.connection.client
        budget_keys = keys.tenant_budget_keys(tenant)
        listed = [text(n) for key in budget_keys for n in await client.hkeys(key)]
        names = sorted({name for name in listed if not name.startswith("*")})
        if not names:
            return 0
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.exists(keys.learner_key(LearnerRef(tenant, name), "meta"))
        missing = [name for name, exists in zip(names, await pipe.execute(), strict=True) if not exists]
        if not missing:
            return 0
        return int(await self.connection.scripts["unreserve"](keys=budget_keys, args=[min_age_ms, *missing]))
