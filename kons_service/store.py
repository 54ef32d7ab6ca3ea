"""The learner store: the only module that knows Redis key names. Lua scripts live in ``kons_service/lua``.

Every key of one learner carries the hash tag ``{tenant/name}`` so that they share a Redis Cluster slot
and every script touches only keys of one slot, all declared in ``KEYS``::

    kons:{t/n}:meta      hash: config (JSON), incarnation, version, snap_version, snap_token, ...
    kons:{t/n}:log       stream: one entry per feedback round, id "<version>-0" (x, y, played, request id)
    kons:{t/n}:snap      hash: "<token>:<i>" -> i-th binary chunk of the newest snapshot
    kons:{t/n}:ids       hash: client id -> remembered features;  kons:{t/n}:ids_exp  zset: id -> expiry
    kons:{t/n}:reqs      hash: feedback request id -> "<version>:<record of the answer>" (at most once)
    kons:{t/n}:reqs_exp  zset: request id -> expiry (ms); trimmed by ``append.lua`` (TTL and a count cap)
    kons:{t/n}:lease     string: the writer lease token;  kons:{t/n}:snaplock  string: snapshot lock

Each tenant also has an index ``kons:tenant:{t}:learners`` (sorted set of names, for listing); it is
a superset of the tenant's learners (names are added before and removed after the learner's keys).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from kons_service.errors import BusyError

__all__ = ["AppendOutcome", "Head", "LearnerRef", "LogEntry", "RequestTag", "Store", "StoredState"]

_SCRIPTS = ("create", "acquire", "release", "append", "remember", "recall", "commit_snapshot",
            "replace_state", "delete")
_CHUNK_RETRIES = 5


@dataclass(frozen=True, slots=True)
class LearnerRef:
    """A learner's identity: its tenant and its name."""

    tenant: str
    name: str


@dataclass(frozen=True, slots=True)
class Head:
    """Where a learner's history stands: which incarnation, how many rounds, the newest snapshot."""

    incarnation: str
    version: int
    snap_version: int


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One feedback round as logged: encoded features, label and played prediction; consumed id."""

    x: bytes
    y: bytes
    played: bytes
    id: str = ""


@dataclass(frozen=True, slots=True)
class RequestTag:
    """A feedback request's id, the record of its answer, and how long (and how many) ids are kept."""

    id: str
    record: str
    ttl_ms: int
    max_records: int


@dataclass(frozen=True, slots=True)
class StoredState:
    """What a process needs to rebuild a learner: its config, head and newest snapshot (or None)."""

    config: str
    head: Head
    snapshot: bytes | None


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """Result of a compare-and-append: ``ok``, else why not (``gone``, ``lease_lost``, ``moved``, ``id``,
    or ``done``: the request id was applied before, at ``version``, and ``detail`` is its record)."""

    ok: bool
    version: int = 0
    reason: str = ""
    detail: str = ""


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Store:
    """Typed access to learners in Redis (a ``redis.asyncio.Redis`` with ``decode_responses=False``)."""

    def __init__(self, client: Redis) -> None:
        self.client = client
        lua = resources.files("kons_service") / "lua"
        self._scripts: dict[str, AsyncScript] = {
            name: client.register_script((lua / f"{name}.lua").read_text()) for name in _SCRIPTS
        }

    # ------------------------------------------------------------------ key names
    @staticmethod
    def _key(ref: LearnerRef, part: str) -> str:
        return f"kons:{{{ref.tenant}/{ref.name}}}:{part}"

    @staticmethod
    def _index(tenant: str) -> str:
        return f"kons:tenant:{{{tenant}}}:learners"

    def keys_of(self, ref: LearnerRef) -> list[str]:
        """Every key one learner may own (meta first)."""
        parts = ("meta", "log", "snap", "ids", "ids_exp", "reqs", "reqs_exp", "lease", "snaplock")
        return [self._key(ref, p) for p in parts]

    # ------------------------------------------------------------------ lifecycle
    async def ping(self) -> bool:
        return bool(await self.client.ping())

    async def create(self, ref: LearnerRef, config: str, incarnation: str, now_ms: int) -> tuple[bool, str]:
        """Create the learner unless it exists; returns (created, the stored config)."""
        await self.client.zadd(self._index(ref.tenant), {ref.name: 0})
        created, stored = await self._scripts["create"](
            keys=[self._key(ref, "meta")], args=[config, incarnation, now_ms]
        )
        return bool(created), _s(stored)

    async def delete(self, ref: LearnerRef) -> bool:
        existed = await self._scripts["delete"](keys=self.keys_of(ref))
        await self.client.zrem(self._index(ref.tenant), ref.name)
        return bool(existed)

    async def config(self, ref: LearnerRef) -> str | None:
        value = await self.client.hget(self._key(ref, "meta"), "config")
        return None if value is None else _s(value)

    async def head(self, ref: LearnerRef) -> Head | None:
        inc, version, snap = await self.client.hmget(
            self._key(ref, "meta"), ["incarnation", "version", "snap_version"]
        )
        return None if inc is None else Head(_s(inc), int(version), int(snap))

    async def list(
        self, tenant: str, after: str | None, limit: int
    ) -> tuple[list[tuple[str, str, int]], bool]:
        """Up to ``limit`` learners named after ``after`` (name, config, version); and whether more exist."""
        start = f"({after}" if after else "-"
        names = await self.client.zrange(self._index(tenant), start, "+", bylex=True, offset=0, num=limit + 1)
        more = len(names) > limit
        pipe = self.client.pipeline(transaction=False)
        for raw in names[:limit]:
            pipe.hmget(self._key(LearnerRef(tenant, _s(raw)), "meta"), ["config", "version"])
        rows = []
        for raw, (config, version) in zip(names[:limit], await pipe.execute(), strict=True):
            if config is not None:  # the index may briefly name a learner being created or deleted
                rows.append((_s(raw), _s(config), int(version)))
        return rows, more

    # ------------------------------------------------------------------ ordered log
    async def acquire_lease(self, ref: LearnerRef, token: str, ttl_ms: int) -> Head | int | None:
        """Take the writer lease: the head if taken, the holder's remaining ms if busy, None if gone."""
        reply = await self._scripts["acquire"](
            keys=[self._key(ref, "meta"), self._key(ref, "lease")], args=[token, ttl_ms]
        )
        if reply[0] == -1:
            return None
        if reply[0] == 0:
            return max(int(reply[1]), 1)
        return Head(_s(reply[1]), int(reply[2]), int(reply[3]))

    async def release_lease(self, ref: LearnerRef, token: str) -> None:
        await self._scripts["release"](keys=[self._key(ref, "lease")], args=[token])

    async def append(
        self, ref: LearnerRef, token: str, head: Head, entries: list[LogEntry],
        request: RequestTag | None = None,
    ) -> AppendOutcome:
        """Append rounds after ``head`` iff the learner is still there, at most once per request id
        (see ``append.lua``)."""
        tag = request or RequestTag("", "", 0, 0)
        args: list[Any] = [token, head.incarnation, str(head.version), tag.id, tag.record, tag.ttl_ms,
                           tag.max_records]
        for e in entries:
            args += [e.x, e.y, e.played, e.id]
        keys = [self._key(ref, p) for p in ("meta", "lease", "log", "ids", "ids_exp", "reqs", "reqs_exp")]
        reply = await self._scripts["append"](keys=keys, args=args)
        code = int(reply[0])
        if code == 1:
            return AppendOutcome(True, int(reply[1]))
        if code == 2:
            version, _, record = _s(reply[1]).partition(":")
            return AppendOutcome(False, int(version), "done", record)
        reason = {-1: "gone", -2: "lease_lost", -3: "moved", -4: "id"}[code]
        return AppendOutcome(False, reason=reason, detail=_s(reply[1]) if len(reply) > 1 else "")

    async def read_log(self, ref: LearnerRef, after: int, count: int) -> list[tuple[int, dict[bytes, bytes]]]:
        """Up to ``count`` logged rounds with version > ``after``, in order, as (version, fields)."""
        rows = await self.client.xrange(self._key(ref, "log"), min=f"{after + 1}-0", max="+", count=count)
        return [(int(_s(entry_id).split("-", 1)[0]), fields) for entry_id, fields in rows]

    async def applied(self, ref: LearnerRef, request_id: str) -> tuple[int, str] | None:
        """(version, record) of a request id already applied (see ``append.lua``), else None."""
        value = await self.client.hget(self._key(ref, "reqs"), request_id)
        if value is None:
            return None
        version, _, record = _s(value).partition(":")
        return int(version), record

    # ------------------------------------------------------------------ ids
    async def remember(self, ref: LearnerRef, items: list[tuple[str, bytes]], ttl_ms: int) -> bool:
        args: list[Any] = [ttl_ms]
        for id_, payload in items:
            args += [id_, payload]
        keys = [self._key(ref, p) for p in ("meta", "ids", "ids_exp")]
        return bool(await self._scripts["remember"](keys=keys, args=args))

    async def recall(self, ref: LearnerRef, ids: list[str]) -> list[bytes | None]:
        keys = [self._key(ref, "ids"), self._key(ref, "ids_exp")]
        reply = await self._scripts["recall"](keys=keys, args=ids)
        return [bytes(v) if v else None for v in reply]

    # ------------------------------------------------------------------ snapshots
    async def lock_snapshot(self, ref: LearnerRef, token: str, ttl_ms: int) -> bool:
        return bool(await self.client.set(self._key(ref, "snaplock"), token, nx=True, px=ttl_ms))

    async def unlock_snapshot(self, ref: LearnerRef, token: str) -> None:
        await self._scripts["release"](keys=[self._key(ref, "snaplock")], args=[token])

    async def write_chunks(self, ref: LearnerRef, token: str, blob: bytes, chunk_bytes: int) -> int:
        """Write ``blob`` as binary chunks ``<token>:<i>`` of the snapshot hash; returns the chunk count."""
        view = memoryview(blob)
        key = self._key(ref, "snap")
        n = 0
        for start in range(0, max(len(blob), 1), chunk_bytes):
            await self.client.hset(key, f"{token}:{n}", bytes(view[start : start + chunk_bytes]))
            n += 1
        return n

    async def discard_chunks(self, ref: LearnerRef, token: str, n_chunks: int) -> None:
        await self.client.hdel(self._key(ref, "snap"), *[f"{token}:{i}" for i in range(n_chunks)])

    async def commit_snapshot(
        self, ref: LearnerRef, head: Head, token: str, n_chunks: int, n_bytes: int
    ) -> int:
        """Publish chunks as the snapshot at ``head.version``; 1 if done, else a negative code."""
        reply = await self._scripts["commit_snapshot"](
            keys=[self._key(ref, p) for p in ("meta", "snap", "log")],
            args=[head.incarnation, head.version, token, n_chunks, n_bytes],
        )
        return int(reply[0])

    async def replace_state(
        self, ref: LearnerRef, config: str, head: Head, token: str, n_chunks: int, n_bytes: int
    ) -> int:
        """Make written chunks the whole state of a new incarnation at ``head``; 1 if done, else < 0."""
        reply = await self._scripts["replace_state"](
            keys=[self._key(ref, p) for p in ("meta", "snap", "log")],
            args=[config, head.incarnation, head.version, token, n_chunks, n_bytes],
        )
        return int(reply[0])

    async def read_state(self, ref: LearnerRef) -> StoredState | None:
        """The config, head and newest snapshot, read consistently (retried if a snapshot replaces it)."""
        meta_key, snap_key = self._key(ref, "meta"), self._key(ref, "snap")
        for _ in range(_CHUNK_RETRIES):
            fields = ["config", "incarnation", "version", "snap_version", "snap_token", "snap_chunks",
                      "snap_bytes"]
            config, inc, version, snap_v, token, n_chunks, n_bytes = await self.client.hmget(meta_key, fields)
            if config is None:
                return None
            head = Head(_s(inc), int(version), int(snap_v))
            if not token:
                return StoredState(_s(config), head, None)
            pipe = self.client.pipeline(transaction=False)
            for i in range(int(n_chunks)):
                pipe.hget(snap_key, f"{_s(token)}:{i}")
            chunks = await pipe.execute()
            if all(c is not None for c in chunks):
                blob = b"".join(chunks)
                if len(blob) == int(n_bytes):
                    return StoredState(_s(config), head, blob)
        raise BusyError(f"The snapshot of learner {ref.name!r} kept changing while being read; retry.")
