"""The Redis client the store's rooms share: connected once, with every Lua script registered on it, and
the few ways a room sends commands (a script on a learner's keys, a pipeline pinned to its slot's primary
followed by ``WAIT``).

The client is a :class:`redis.asyncio.cluster.RedisCluster` for a ``redis+cluster://`` (or
``rediss+cluster://``) URL: it routes each command and script to the primary owning its slot and follows
MOVED and ASK redirections.
"""

from __future__ import annotations

import functools
import uuid
from importlib import resources
from typing import Any

import redis.exceptions
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry  # the asyncio one: a sync Retry never retries here
from redis.backoff import ExponentialBackoff
from redis.commands.core import AsyncScript

from kons_service.store import keys
from kons_service.store.errors import StoreError
from kons_service.store.records import LearnerRef

__all__ = ["NAMED", "Connection", "connect_client", "number", "script_text", "text"]

_SCRIPTS = ("create", "decide", "acquire", "release", "renew", "append", "remember", "recall",
            "commit_snapshot", "replace_state", "rollback", "fork", "promote", "delete", "history", "reserve",
            "unreserve", "shrink", "retain")
#: The shared Lua a script needs prepended (Redis scripts cannot load one another), from ``lua/lib``.
_LIBRARIES = {"commit_snapshot": "versions", "replace_state": "versions", "rollback": "versions",
              "fork": "versions", "promote": "versions", "retain": "versions", "append": "history",
              "history": "history"}
_REDIRECTS = 3  # tries of commands pinned to a slot's primary while the cluster moves that slot
_REDIRECTED = (redis.exceptions.AskError, redis.exceptions.TryAgainError)  # (MovedError is an AskError)
#: URL schemes that ask for a cluster-aware client, and the scheme redis-py is given instead.
_CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
#: The prefix of the names of a process's Redis connections, followed by its process id.
NAMED = "kons:"


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def number(value: bytes | str | None) -> int:
    """A number field that the scripts always write together with the one checked before it."""
    if value is None:
        raise StoreError("a learner's metadata lacks a field its scripts always write")
    return int(value)


@functools.cache
def script_text(name: str) -> str:
    """The text of the Lua script ``name`` as Redis runs it: ``lua/<name>.lua`` after the shared library
    it needs (Redis scripts cannot load one another)."""
    lua = resources.files("kons_service") / "lua"
    library = _LIBRARIES.get(name)
    return ("" if library is None else (lua / "lib" / f"{library}.lua").read_text()) + (
        lua / f"{name}.lua").read_text()


def connect_client(url: str, timeout_seconds: float, named: bool = True, *,
                   cluster: bool = False) -> tuple[Redis | RedisCluster, str | None]:
    """A client of the Redis at ``url`` (a Redis Cluster if ``cluster`` or if the scheme is
    ``redis+cluster``/``rediss+cluster``), and the name of its connections: every command times out after
    ``timeout_seconds`` and is re-sent twice after a lost connection (which is why every script is
    idempotent). ``named``: each connection is named ``kons:<process id>`` (``CLIENT SETNAME``, see
    :meth:`.Leases.holder_connected`), else the name is None."""
    scheme, sep, rest = url.partition("://")
    if scheme in _CLUSTER_SCHEMES:
        url, cluster = f"{_CLUSTER_SCHEMES[scheme]}{sep}{rest}", True
    name = f"{NAMED}{uuid.uuid4().hex}" if named else None
    options: dict[str, Any] = {
        "decode_responses": False, "socket_timeout": timeout_seconds,
        "socket_connect_timeout": timeout_seconds, "client_name": name,
        "retry": Retry(ExponentialBackoff(cap=0.2, base=0.01), retries=2), "health_check_interval": 15}
    client = RedisCluster.from_url(url, **options) if cluster else Redis.from_url(url, **options)
    return client, name


class Connection:
    """A ``redis.asyncio.Redis`` or ``RedisCluster`` (``decode_responses=False``), its scripts, and the
    replication it waits for (``wait_replicas`` replicas, at most ``wait_timeout_ms``)."""

    def __init__(self, client: Redis | RedisCluster, connection_name: str | None = None, *,
                 wait_replicas: int = 0, wait_timeout_ms: int = 1000) -> None:
        self.client = client
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        #: The prefix of this process's writer tokens: the name of its Redis connections when they are
        #: named (``kons:<process id>``, see :func:`connect_client`), so that another process can tell from a
        #: lease's token whether its holder still has a connection; else just a process id.
        self.process_name = connection_name or uuid.uuid4().hex
        self.scripts: dict[str, AsyncScript] = {name: client.register_script(script_text(name))
                                                for name in _SCRIPTS}

    async def run(self, script: str, ref: LearnerRef, parts: tuple[str, ...], args: list[Any]) -> Any:
        """The reply of ``script`` run on the learner's keys of ``parts``."""
        return await self.scripts[script](keys=keys.learner_keys(ref, parts), args=args)

    async def pinned(self, ref: LearnerRef, commands: list[tuple[Any, ...]],
                     script: AsyncScript | None = None) -> list[Any]:
        """The replies of ``commands``, sent back to back on one connection to the primary owning
        ``ref``'s slot, so that a trailing ``WAIT`` counts the replicas holding the writes before it
        (Redis tracks the replication offset per connection). If the first command is ``script``'s
        EVALSHA and the server lacks it, it is loaded and everything is sent again; in a cluster, a moved
        slot is looked up again through the client, which follows the redirection (a slot being migrated,
        ASK, is answered with the error after a few tries: the caller's 503 is retried)."""
        meta = keys.learner_key(ref, "meta")
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

    async def run_replicated(self, script: str, ref: LearnerRef, parts: tuple[str, ...],
                             args: list[Any]) -> tuple[Any, bool]:
        """Run a script, then ``WAIT`` on its connection: its reply, and whether enough replicas confirmed
        every write of that connection in time."""
        learner_keys = keys.learner_keys(ref, parts)
        code = self.scripts[script]
        reply, replicas = await self.pinned(
            ref, [("EVALSHA", code.sha, len(learner_keys), *learner_keys, *args),
                  ("WAIT", self.wait_replicas, self.wait_timeout_ms)], code)
        return reply, int(replicas) >= self.wait_replicas
