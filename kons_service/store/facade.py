"""The :class:`Store`: the one object the core holds to reach Redis. It owns a learner's lifecycle
(create, delete, list, config, head) and one room per concern, each in its module and sharing one
:class:`.Connection`: ``server`` (:mod:`.server`), ``leases`` (:mod:`.leases`), ``log`` (:mod:`.log`),
``ids`` (:mod:`.ids`), ``history`` (:mod:`.history`), ``snapshots`` (:mod:`.snapshots`) and ``budget``
(:mod:`.budget`).
"""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from kons_service.store import keys
from kons_service.store.budget import TenantBytes
from kons_service.store.connection import Connection, connect_client, number, text
from kons_service.store.errors import translated
from kons_service.store.history import HistorySeries
from kons_service.store.ids import RememberedIds
from kons_service.store.leases import Leases
from kons_service.store.log import Log
from kons_service.store.records import Head, LearnerRef, ListedLearner
from kons_service.store.server import ServerChecks
from kons_service.store.shadows import ShadowLinks
from kons_service.store.snapshots import Snapshots
from kons_service.store.tracking import HeadWatch

__all__ = ["Store"]


class Store:
    """Typed access to learners in Redis (a ``redis.asyncio.Redis`` or ``RedisCluster`` with
    ``decode_responses=False``).

    Every coroutine, its own or its rooms', raises :class:`.StoreUnavailableError` when Redis fails;
    nothing Redis-specific leaves it. With ``wait_replicas`` > 0 an append is confirmed only once that
    many replicas have it (``WAIT``, at most ``wait_timeout_ms``), else :class:`.NotReplicatedError` is
    the caller's to raise.
    """

    def __init__(self, client: Redis | RedisCluster, connection_name: str | None = None, *,
                 wait_replicas: int = 0, wait_timeout_ms: int = 1000, held: int = 1024) -> None:
        connection = Connection(client, connection_name, wait_replicas=wait_replicas,
                                wait_timeout_ms=wait_timeout_ms)
        self.connection = connection
        self.client = client
        #: The prefix of this process's writer tokens (see :meth:`.Leases.writer_token`).
        self.process_name = connection.process_name
        self.server = ServerChecks(connection)
        self.leases = Leases(connection)
        self.log = Log(connection)
        self.ids = RememberedIds(connection)
        self.history = HistorySeries(connection)
        self.snapshots = Snapshots(connection)
        self.budget = TenantBytes(connection)
        self.shadows = ShadowLinks(connection)
        #: Whether a learner's head may have moved since it was last read (see :mod:`.tracking`).
        self.heads = HeadWatch(client, held)

    @classmethod
    def connect(cls, url: str, timeout_seconds: float, named: bool = True, *, cluster: bool = False,
                wait_replicas: int = 0, wait_timeout_ms: int = 1000, held: int = 1024) -> Store:
        """A store on the Redis at ``url`` (see :func:`.connect_client`); ``held``: how many learners the
        process may hold at once (see :class:`.HeadWatch`)."""
        client, name = connect_client(url, timeout_seconds, named, cluster=cluster)
        return cls(client, name, wait_replicas=wait_replicas, wait_timeout_ms=wait_timeout_ms, held=held)

    async def close(self) -> None:
        await self.heads.close()
        await self.client.aclose()

    @translated
    async def create(self, ref: LearnerRef, config: str, incarnation: str, now_ms: int,
                     shadow: str = "") -> tuple[bool, str]:
        """Create the learner unless it exists; returns (created, the stored config). ``shadow``: a shadow
        challenger's link to its champion (see :mod:`.shadows`)."""
        await self.client.zadd(keys.tenant_index(ref.tenant), {ref.name: 0})
        created, stored = await self.connection.run("create", ref, ("meta", "kept"),
                                                    [config, incarnation, now_ms, shadow])
        return bool(created), text(stored)

    @translated
    async def decide_config(self, ref: LearnerRef, incarnation: str, undecided: str,
                            decided: str) -> str | None:
        """Replace the config ``undecided`` of the learner's ``incarnation`` by ``decided`` unless another
        writer replaced it first (see ``decide.lua``); returns the config now stored (None: no learner)."""
        stored = await self.connection.run("decide", ref, ("meta",), [incarnation, undecided, decided])
        return None if stored is None else text(stored)

    @translated
    async def delete(self, ref: LearnerRef) -> bool:
        existed = await self.connection.scripts["delete"](keys=keys.learner_keys(ref))
        await self.client.zrem(keys.tenant_index(ref.tenant), ref.name)
        await self.budget.unreserve(ref)  # last: see kons_service.store.budget
        return bool(existed)

    @translated
    async def config(self, ref: LearnerRef) -> str | None:
        value = await self.client.hget(keys.learner_key(ref, "meta"), "config")
        return None if value is None else text(value)

    @translated
    async def head(self, ref: LearnerRef) -> Head | None:
        inc, version, snap, tip = await self.client.hmget(
            keys.learner_key(ref, "meta"), ["incarnation", "version", "snap_version", "tip"]
        )
        return None if inc is None else Head(text(inc), number(version), number(snap), text(tip or b""))

    @translated
    async def learners(self, tenant: str, after: str | None, limit: int) -> tuple[list[ListedLearner], bool]:
        """Up to ``limit`` learners named after ``after``; and whether more exist."""
        start = f"({after}" if after else "-"
        names = await self.client.zrange(keys.tenant_index(tenant), start, "+", bylex=True, offset=0,
                                         num=limit + 1)
        more = len(names) > limit
        pipe = self.client.pipeline(transaction=False)
        for raw in names[:limit]:
            pipe.hmget(keys.learner_key(LearnerRef(tenant, text(raw)), "meta"), ["config", "version"])
        rows = []
        for raw, (config, version) in zip(names[:limit], await pipe.execute(), strict=True):
            if config is not None:  # the index may briefly name a learner being created or deleted
                rows.append(ListedLearner(text(raw), text(config), int(version)))
        return rows, more
