"""Shadow challengers' links: a challenger's meta field ``shadow`` (its champion, the champion's incarnation
and the champion version it started after), the champion's hash of its challengers' cursors (the champion's
log is kept after the smallest, but for a stalled challenger: ``lib/versions.lua``), the set of every
challenger (:data:`.keys.SHADOWS`) that each process's shadow task catches up, and the lock of the process
catching one up. A challenger's rounds are its own log's, appended like any feedback: nothing here is atomic
with them; a cursor is written after the rounds it covers, so it may lag (the champion then keeps more log),
never lead."""

from __future__ import annotations

import json

from kons_service.store import keys
from kons_service.store.connection import Connection, text
from kons_service.store.errors import translated
from kons_service.store.records import LearnerRef, ShadowLink

__all__ = ["STALLED", "ShadowLinks"]

#: The cursor of a stalled challenger (``lib/versions.lua`` keeps no log for a negative one).
STALLED = -1


class ShadowLinks:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    @staticmethod
    def link_text(link: ShadowLink) -> str:
        fields: dict[str, object] = {"of": link.champion, "incarnation": link.incarnation, "from": link.start}
        if link.stalled:
            fields["stalled"] = link.stalled
        return json.dumps(fields)

    @translated
    async def link(self, ref: LearnerRef) -> ShadowLink | None:
        """The challenger's link to its champion; None for a learner that is no challenger (or none)."""
        value = await self.connection.client.hget(keys.learner_key(ref, "meta"), "shadow")
        if value is None:
            return None
        fields = json.loads(text(value))
        return ShadowLink(fields["of"], fields["incarnation"], int(fields["from"]), fields.get("stalled", ""))

    @translated
    async def follow(self, champion: LearnerRef, challenger: str, cursor: int, *,
                     first: bool = False) -> None:
        """Record that ``challenger`` has learnt ``champion``'s log up to version ``cursor`` (so that the
        champion keeps its log after it), and list the challenger among those to catch up. ``first``: its
        registration, before it is created, which leaves a cursor it has as it is (a challenger of that
        name exists: the create will find it, and it has learnt only up to its own cursor)."""
        pipe = self.connection.client.pipeline(transaction=False)  # (one round trip; two slots)
        if first:
            pipe.hsetnx(keys.learner_key(champion, "shadows"), challenger, cursor)
        else:
            pipe.hset(keys.learner_key(champion, "shadows"), challenger, cursor)
        pipe.sadd(keys.SHADOWS, keys.member(LearnerRef(champion.tenant, challenger)))
        await pipe.execute()

    @translated
    async def stall(self, ref: LearnerRef, link: ShadowLink) -> None:
        """The challenger ``ref`` follows no more (``link`` says why): it keeps its place among its
        champion's challengers with the cursor :data:`STALLED`, which holds no log, and it is no longer
        caught up. (Written under the challenger's catch-up lock, whose holder alone moves its cursor.)"""
        champion = LearnerRef(ref.tenant, link.champion)
        pipe = self.connection.client.pipeline(transaction=False)
        pipe.hset(keys.learner_key(ref, "meta"), "shadow", self.link_text(link))
        pipe.hset(keys.learner_key(champion, "shadows"), ref.name, STALLED)
        pipe.srem(keys.SHADOWS, keys.member(ref))
        await pipe.execute()

    @translated
    async def cursors(self, champion: LearnerRef) -> dict[str, int]:
        """The champion's challengers and how far each has learnt its log (:data:`STALLED`: stalled)."""
        found = await self.connection.client.hgetall(keys.learner_key(champion, "shadows"))
        return {text(name): int(cursor) for name, cursor in found.items()}

    @translated
    async def forget(self, champion: LearnerRef, challenger: str) -> None:
        """The challenger is gone: it holds the champion's log no more, nor is it caught up."""
        await self.connection.client.hdel(keys.learner_key(champion, "shadows"), challenger)
        await self.connection.client.srem(keys.SHADOWS, keys.member(LearnerRef(champion.tenant, challenger)))

    @translated
    async def all(self) -> list[LearnerRef]:
        """Every challenger to catch up."""
        return [keys.of_member(text(m)) for m in await self.connection.client.smembers(keys.SHADOWS)]

    @translated
    async def lock(self, ref: LearnerRef, token: str, ttl_ms: int) -> bool:
        return bool(await self.connection.client.set(keys.learner_key(ref, "shadowlock"), token, nx=True,
                                                     px=ttl_ms))

    @translated
    async def holder(self, ref: LearnerRef) -> str | None:
        """The token of the catch-up lock's holder; None if it is free."""
        value = await self.connection.client.get(keys.learner_key(ref, "shadowlock"))
        return None if value is None else text(value)

    @translated
    async def lock_renewed(self, ref: LearnerRef, token: str, ttl_ms: int) -> bool:
        """Extend the lock if ``token`` still holds it."""
        return bool(await self.connection.run("renew", ref, ("shadowlock",), [token, ttl_ms]))

    @translated
    async def unlock(self, ref: LearnerRef, token: str) -> None:
        await self.connection.run("release", ref, ("shadowlock",), [token])
