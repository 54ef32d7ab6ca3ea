"""A learner's snapshot: its state blob in binary chunks under a fresh token, published by
``commit_snapshot.lua`` (or made the whole state of a new incarnation by ``replace_state.lua``, or the
state of a rollback by ``rollback.lua``) once every chunk is written, and read back consistently. Each
publication is also a kept base (``lib/versions.lua``): the older ones the retention policy keeps, with the
log after the oldest, are what a past version is rebuilt from."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from kons_service.store import keys
from kons_service.store.connection import Connection, number, text
from kons_service.store.errors import SnapshotUnstableError, translated
from kons_service.store.records import (
    Base,
    Head,
    KeepPolicy,
    LearnerRef,
    Publication,
    RollbackOutcome,
    RollbackStatus,
    StoredState,
)

__all__ = ["Snapshots"]

_CHUNK_RETRIES = 5
_PUBLISH_CODES = {1: Publication.PUBLISHED, -1: Publication.GONE, -2: Publication.STALE,
                  -3: Publication.INCOMPLETE}
_ROLLBACK_CODES = {1: RollbackStatus.APPLIED, -1: RollbackStatus.GONE, -2: RollbackStatus.NOT_KEPT,
                   -3: RollbackStatus.CHANGED, -4: RollbackStatus.INCOMPLETE}
#: Keep the newest base only (no older version restorable before it): the policy of a caller that sets none.
NEWEST_ONLY = KeepPolicy(1, 0, 0)


def _base(member: Any) -> Base:
    version, token, chunks, nbytes, time_ms, log_bytes, tip = text(member).split(" ", 6)
    return Base(int(version), token, int(chunks), int(nbytes), int(time_ms), int(log_bytes), tip)


class Snapshots:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    @translated
    async def lock(self, ref: LearnerRef, token: str, ttl_ms: int) -> bool:
        return bool(await self.connection.client.set(keys.learner_key(ref, "snaplock"), token, nx=True,
                                                     px=ttl_ms))

    @translated
    async def unlock(self, ref: LearnerRef, token: str) -> None:
        await self.connection.run("release", ref, ("snaplock",), [token])

    @translated
    async def publish(self, ref: LearnerRef, head: Head, blob: bytes, chunk_bytes: int,
                      keep: KeepPolicy = NEWEST_ONLY, log_bytes: int = 0) -> Publication:
        """Write ``blob`` as the snapshot at ``head.version`` unless a newer one is published; it becomes
        the newest kept base, and ``keep`` says which older ones stay (``log_bytes``: of the rounds logged
        since the previous base)."""
        token, n_chunks = await self._write_chunks(ref, blob, chunk_bytes)
        args = [head.incarnation, head.version, token, n_chunks, len(blob), head.tip, keep.count,
                keep.max_age_ms, keep.allowance, log_bytes]
        reply = await self.connection.run("commit_snapshot", ref, ("meta", "snap", "log", "kept", "shadows"),
                                          args)
        return await self._settle(ref, token, n_chunks, _PUBLISH_CODES[int(reply[0])], keep)

    @translated
    async def replace_state(self, ref: LearnerRef, config: str, head: Head, blob: bytes,
                            chunk_bytes: int) -> Publication:
        """Make ``blob`` the whole state of a new incarnation at ``head``, iff the learner still has
        ``config`` (``STALE`` otherwise)."""
        token, n_chunks = await self._write_chunks(ref, blob, chunk_bytes)
        args = [config, head.incarnation, head.version, token, n_chunks, len(blob)]
        reply = await self.connection.run("replace_state", ref, ("meta", "snap", "log", "kept"), args)
        return await self._settle(ref, token, n_chunks, _PUBLISH_CODES[int(reply[0])])

    @translated
    async def create_with_state(self, ref: LearnerRef, config: str, head: Head, blob: bytes, chunk_bytes: int,
                                now_ms: int) -> tuple[Publication, str]:
        """Create the learner with ``blob`` as its state at ``head`` (a new incarnation, an empty log of its
        own) unless the name exists (see ``fork.lua``); returns (PUBLISHED, config) when created,
        (STALE, the existing config) otherwise."""
        await self.connection.client.zadd(keys.tenant_index(ref.tenant), {ref.name: 0})
        token, n_chunks = await self._write_chunks(ref, blob, chunk_bytes)
        args = [config, head.incarnation, head.version, token, n_chunks, len(blob), now_ms]
        reply = await self.connection.run("fork", ref, ("meta", "snap", "log", "kept"), args)
        outcome = {1: Publication.PUBLISHED, 0: Publication.STALE, -3: Publication.INCOMPLETE}[int(reply[0])]
        await self._settle(ref, token, n_chunks, outcome)
        return outcome, text(reply[1]) if len(reply) > 1 else ""

    @translated
    async def rollback(self, ref: LearnerRef, incarnation: str, target: int, target_tip: str, token: str,
                       blob: bytes, chunk_bytes: int, keep: KeepPolicy, keep_events: int,
                       config: str) -> RollbackOutcome:
        """Make ``blob`` (the learner's state after round ``target``, whose id is ``target_tip``) its
        state at a new version past the head, atomically with the appends (see ``rollback.lua``);
        ``token``: this rollback's own, fresh; ``config``: the config in force at ``target``, which the
        script makes the learner's if it is not (a rollback past a promotion)."""
        chunks, n_chunks = await self._write_chunks(ref, blob, chunk_bytes)
        args = [incarnation, target, target_tip, token, chunks, n_chunks, len(blob), keep.count,
                keep.max_age_ms, keep.allowance, keep_events, config]
        parts = ("meta", "snap", "log", "kept", "shadows", "configs")
        reply = await self.connection.run("rollback", ref, parts, args)
        status = _ROLLBACK_CODES[int(reply[0])]
        published = Publication.PUBLISHED if status is RollbackStatus.APPLIED else Publication.STALE
        await self._settle(ref, chunks, n_chunks, published, keep)
        if status is RollbackStatus.NOT_KEPT:
            return RollbackOutcome(status, int(reply[2]), int(reply[1]))
        return RollbackOutcome(status, int(reply[1]) if status is RollbackStatus.APPLIED else 0)

    @translated
    async def promote(self, ref: LearnerRef, lease: str, head: Head, config: str, blob: bytes,
                      chunk_bytes: int, token: str, keep: KeepPolicy, challenger: str) -> Publication:
        """Make ``blob`` and ``config`` (a shadow challenger's) the learner's at a new version past
        ``head``, iff the caller still holds its writer lease under ``lease`` and the head is still
        ``head`` (see ``promote.lua``): ``PUBLISHED``, else ``GONE`` or ``STALE`` (the lease or the
        head moved)."""
        chunks, n_chunks = await self._write_chunks(ref, blob, chunk_bytes)
        args = [lease, head.incarnation, head.version, head.tip, config, chunks, n_chunks, len(blob), token,
                keep.count, keep.max_age_ms, keep.allowance, challenger]
        reply = await self.connection.run(
            "promote", ref, ("meta", "snap", "log", "kept", "shadows", "lease", "configs"), args)
        outcome = {1: Publication.PUBLISHED, -1: Publication.GONE, -2: Publication.STALE,
                   -3: Publication.STALE, -4: Publication.INCOMPLETE}[int(reply[0])]
        return await self._settle(ref, chunks, n_chunks, outcome, keep)

    @translated
    async def configs(self, ref: LearnerRef) -> dict[int, str]:
        """The config in force from each version a promotion or a rollback past one changed it (empty:
        the learner's config has been the same since it was created)."""
        found = await self.connection.client.hgetall(keys.learner_key(ref, "configs"))
        return {int(text(version)): text(config) for version, config in found.items()}

    @translated
    async def bases(self, ref: LearnerRef) -> list[Base]:
        """The learner's kept bases, oldest first (empty for a learner kept before bases were)."""
        return [_base(m) for m in await self.connection.client.zrange(keys.learner_key(ref, "kept"), 0, -1)]

    @translated
    async def read_base(self, ref: LearnerRef, base: Base) -> bytes | None:
        """The state blob of a kept base (None: it was dropped meanwhile, or it has none)."""
        if base.chunks == 0:
            return None
        pipe = self.connection.client.pipeline(transaction=False)
        for i in range(base.chunks):
            pipe.hget(keys.learner_key(ref, "snap"), f"{base.token}:{i}")
        chunks = await pipe.execute()
        if any(c is None for c in chunks):
            return None
        blob = b"".join(chunks)
        return blob if len(blob) == base.nbytes else None

    @translated
    async def due_for_retention(self, count: int) -> list[LearnerRef]:
        """Up to ``count`` learners whose oldest kept base may have aged out by now."""
        found = await self.connection.client.zrangebyscore(keys.RETAIN, "-inf", _now_ms(), start=0, num=count)
        return [keys.of_member(text(m)) for m in found]

    @translated
    async def due_again(self, ref: LearnerRef, delay_ms: int) -> None:
        """List the learner for a sweep in ``delay_ms`` (sooner if it is listed sooner)."""
        await self.connection.client.zadd(keys.RETAIN, {keys.member(ref): _now_ms() + delay_ms}, lt=True)

    @translated
    async def retain(self, ref: LearnerRef, keep: KeepPolicy) -> int | None:
        """Apply ``keep`` to the learner's kept bases as they are (``retain.lua``) and list it for its next
        sweep, when its oldest base next ages out (none if only its newest is left, until it publishes
        another); the older bases' cost in bytes, None if there is no such learner."""
        reply = await self.connection.run("retain", ref, ("meta", "snap", "log", "kept", "shadows"),
                                          [keep.count, keep.max_age_ms, keep.allowance, keep.granted_for])
        client, member = self.connection.client, keys.member(ref)
        if int(reply[0]) == 1 and int(reply[2]) > 0:
            await client.zadd(keys.RETAIN, {member: int(reply[2])})
        else:
            await client.zrem(keys.RETAIN, member)
            # A publication since the script may have listed it already (``_settle`` lists it only if it is
            # not): its bases, counted after the unlisting, say whether it has to stay listed.
            if await client.zcard(keys.learner_key(ref, "kept")) > 1:
                await client.zadd(keys.RETAIN, {member: _now_ms()}, nx=True)
        return int(reply[1]) if int(reply[0]) == 1 else (0 if int(reply[0]) == 0 else None)

    @translated
    async def kept_range(self, ref: LearnerRef) -> tuple[int, int] | None:
        """The learner's oldest restorable version and its version; None if there is no such learner."""
        keep_from, snap, version = await self.connection.client.hmget(
            keys.learner_key(ref, "meta"), ["keep_from", "snap_version", "version"])
        if version is None:
            return None
        return number(keep_from or snap), number(version)

    async def _write_chunks(self, ref: LearnerRef, blob: bytes, chunk_bytes: int) -> tuple[str, int]:
        """Write ``blob`` as binary chunks ``<token>:<i>`` of the snapshot hash under a fresh token, which
        starts with the time (ms) it was made: until they are published, the retention of another
        publication or of the sweep leaves them alone (``lib/versions.lua``)."""
        token = f"{_now_ms()}-{uuid.uuid4().hex}"
        view = memoryview(blob)
        key = keys.learner_key(ref, "snap")
        n = 0
        for start in range(0, max(len(blob), 1), chunk_bytes):
            await self.connection.client.hset(key, f"{token}:{n}", bytes(view[start : start + chunk_bytes]))
            n += 1
        return token, n

    async def _settle(self, ref: LearnerRef, token: str, n_chunks: int, outcome: Publication,
                      keep: KeepPolicy = NEWEST_ONLY) -> Publication:
        """Drop the chunks of a state that was not published; a learner that published one under a policy
        that keeps older ones is listed for the retention sweep (:meth:`retain`), unless it is already."""
        if outcome is Publication.PUBLISHED and keep.count > 1:
            await self.connection.client.zadd(keys.RETAIN, {keys.member(ref): _now_ms()}, nx=True)
        if outcome is not Publication.PUBLISHED:
            await self.connection.client.hdel(keys.learner_key(ref, "snap"),
                                              *[f"{token}:{i}" for i in range(n_chunks)])
        return outcome

    @translated
    async def read_state(self, ref: LearnerRef) -> StoredState | None:
        """The config, head and newest snapshot, read consistently (retried if a snapshot replaces it)."""
        client = self.connection.client
        meta_key, snap_key = keys.learner_key(ref, "meta"), keys.learner_key(ref, "snap")
        for _ in range(_CHUNK_RETRIES):
            fields = ["config", "incarnation", "version", "snap_version", "snap_token", "snap_chunks",
                      "snap_bytes", "tip", "snap_tip", "rollbacks", "promotions"]
            (config, inc, version, snap_v, token, n_chunks, n_bytes, tip, snap_tip, rollbacks,
             promotions) = await client.hmget(meta_key, fields)
            if config is None:
                return None
            head = Head(text(inc), number(version), number(snap_v), text(tip or b""))
            restored_at = _latest_event(rollbacks, promotions)
            if not token:
                return StoredState(text(config), head, None, text(snap_tip or b""), restored_at)
            pipe = client.pipeline(transaction=False)
            for i in range(number(n_chunks)):
                pipe.hget(snap_key, f"{text(token)}:{i}")
            chunks = await pipe.execute()
            if all(c is not None for c in chunks):
                blob = b"".join(chunks)
                if len(blob) == number(n_bytes):
                    return StoredState(text(config), head, blob, text(snap_tip or b""), restored_at)
        raise SnapshotUnstableError(
            f"The snapshot of learner {ref.name!r} kept changing while being read; retry.")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _latest_event(*events: bytes | str | None) -> int:
    """The newest version among meta's event lists (``rollbacks``, ``promotions``: JSON lists whose
    entries start with the version they made), 0 without any."""
    return max((int(event[0]) for listed in events if listed for event in json.loads(listed)), default=0)
