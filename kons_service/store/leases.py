"""The writer lease of a learner (``acquire.lua``, ``renew.lua``, ``release.lua``): one writer at a time
appends to its log, and a lease whose holder's process is gone can be taken over."""

from __future__ import annotations

from typing import Any

import redis.exceptions
from redis.asyncio.cluster import RedisCluster

from kons_service.store.connection import NAMED, Connection, text
from kons_service.store.errors import translated
from kons_service.store.records import Head, LearnerRef, LeaseBusy

__all__ = ["Leases", "process_of"]


def process_of(token: str) -> str:
    """The name of the process that made a lease token (see :meth:`Leases.writer_token`)."""
    return token.rpartition(":")[0]


class Leases:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._client_list_refused = False

    def writer_token(self, serial: int) -> str:
        """A lease token of this process: ``<process name>:<serial>`` (see :func:`process_of`)."""
        return f"{self.connection.process_name}:{serial}"

    @translated
    async def acquire(self, ref: LearnerRef, token: str, ttl_ms: int,
                      gone: str = "") -> Head | LeaseBusy | None:
        """Take the writer lease: the head if taken, who holds it and how long to wait if busy, None if the
        learner is gone. A lease still held by the token ``gone`` (a writer known to be dead) is taken."""
        reply = await self.connection.run("acquire", ref, ("meta", "lease"), [token, ttl_ms, gone])
        if reply[0] == -1:
            return None
        if reply[0] == 0:
            return LeaseBusy(max(int(reply[1]), 1), text(reply[2]))
        return Head(text(reply[1]), int(reply[2]), int(reply[3]), text(reply[4]))

    @translated
    async def holder_connected(self, token: str) -> bool | None:
        """Whether the process that took the lease token ``token`` has a connection to Redis; None when
        that cannot be told (a token of an unnamed process, or a Redis that refuses ``CLIENT LIST``, as
        some managed ones do). A SIGKILLed process's connections close with it, and Redis sees that at
        once; a host that vanished leaves them open until TCP keepalive notices (then: True)."""
        name = process_of(token)
        if not name.startswith(NAMED) or self._client_list_refused:
            return None
        client = self.connection.client
        try:
            if isinstance(client, RedisCluster):  # the holder talked to its slot's primary at least
                by_node: Any = await client.client_list(_type="normal", target_nodes=RedisCluster.PRIMARIES)
                clients = [c for listed in by_node.values() for c in listed]
            else:
                clients = await client.client_list(_type="normal")
        except redis.exceptions.ResponseError:
            self._client_list_refused = True
            return None
        return any(text(c.get("name", "")) == name for c in clients)

    @translated
    async def release(self, ref: LearnerRef, token: str) -> None:
        await self.connection.run("release", ref, ("lease",), [token])

    @translated
    async def renew(self, ref: LearnerRef, token: str, ttl_ms: int) -> bool:
        """Extend the lease by ``ttl_ms`` from now if ``token`` still holds it."""
        return bool(await self.connection.run("renew", ref, ("lease",), [token, ttl_ms]))
