"""A learner's snapshot: its state blob in binary chunks under a fresh token, published by
``commit_snapshot.lua`` (or made the whole state of a new incarnation by ``replace_state.lua``) once every
chunk is written, and read back consistently."""

from __future__ import annotations

import uuid

from kons_service.store import keys
from kons_service.store.connection import Connection, number, text
from kons_service.store.errors import SnapshotUnstableError, translated
from kons_service.store.records import Head, LearnerRef, Publication, StoredState

__all__ = ["Snapshots"]

_CHUNK_RETRIES = 5
_PUBLISH_CODES = {1: Publication.PUBLISHED, -1: Publication.GONE, -2: Publication.STALE,
                  -3: Publication.INCOMPLETE}


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
    async def publish(self, ref: LearnerRef, head: Head, blob: bytes, chunk_bytes: int) -> Publication:
        """Write ``blob`` as the snapshot at ``head.version`` unless a newer one is published."""
        token, n_chunks = await self._write_chunks(ref, blob, chunk_bytes)
        args = [head.incarnation, head.version, token, n_chunks, len(blob), head.tip]
        reply = await self.connection.run("commit_snapshot", ref, ("meta", "snap", "log"), args)
        return await self._settle(ref, token, n_chunks, _PUBLISH_CODES[int(reply[0])])

    @translated
    async def replace_state(self, ref: LearnerRef, config: str, head: Head, blob: bytes,
                            chunk_bytes: int) -> Publication:
        """Make ``blob`` the whole state of a new incarnation at ``head``, iff the learner still has
        ``config`` (``STALE`` otherwise)."""
        token, n_chunks = await self._write_chunks(ref, blob, chunk_bytes)
        args = [config, head.incarnation, head.version, token, n_chunks, len(blob)]
        reply = await self.connection.run("replace_state", ref, ("meta", "snap", "log"), args)
        return await self._settle(ref, token, n_chunks, _PUBLISH_CODES[int(reply[0])])

    async def _write_chunks(self, ref: LearnerRef, blob: bytes, chunk_bytes: int) -> tuple[str, int]:
        """Write ``blob`` as binary chunks ``<token>:<i>`` of the snapshot hash under a fresh token."""
        token = uuid.uuid4().hex
        view = memoryview(blob)
        key = keys.learner_key(ref, "snap")
        n = 0
        for start in range(0, max(len(blob), 1), chunk_bytes):
            await self.connection.client.hset(key, f"{token}:{n}", bytes(view[start : start + chunk_bytes]))
            n += 1
        return token, n

    async def _settle(self, ref: LearnerRef, token: str, n_chunks: int, outcome: Publication) -> Publication:
        """Drop the chunks of a state that was not published."""
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
                      "snap_bytes", "tip", "snap_tip"]
            config, inc, version, snap_v, token, n_chunks, n_bytes, tip, snap_tip = await client.hmget(
                meta_key, fields)
            if config is None:
                return None
            head = Head(text(inc), number(version), number(snap_v), text(tip or b""))
            if not token:
                return StoredState(text(config), head, None, text(snap_tip or b""))
            pipe = client.pipeline(transaction=False)
            for i in range(number(n_chunks)):
                pipe.hget(snap_key, f"{text(token)}:{i}")
            chunks = await pipe.execute()
            if all(c is not None for c in chunks):
                blob = b"".join(chunks)
                if len(blob) == number(n_bytes):
                    return StoredState(text(config), head, blob, text(snap_tip or b""))
        raise SnapshotUnstableError(
            f"The snapshot of learner {ref.name!r} kept changing while being read; retry.")
