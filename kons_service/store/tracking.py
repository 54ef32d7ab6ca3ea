"""Whether a learner's head may have moved since this process last read it, without asking Redis.

A process reads a learner's head (its ``meta`` hash) before every use, so that it serves what another
process appended, rolled back, promoted, imported or deleted. :class:`HeadWatch` spares that read while
nothing changed, with Redis's server-assisted client-side caching: one connection of the process
(RESP3, ``CLIENT TRACKING ON BCAST PREFIX <meta key>`` for each learner it holds) receives an
``invalidate`` push whenever one of those keys is written, by any client, before Redis answers that
write. A :class:`HeadMark`, taken after the key is tracked and before the head is read, stays
:meth:`~HeadWatch.unchanged` until then. Everything else makes every mark stale, so that the caller reads
the head as it would without the watch:

* the tracking connection lost, reconnected or failing, or not proven alive by a ``PING`` lately (a
  silently broken connection would deliver nothing): pushes may have been missed;
* a ``FLUSHALL``/``FLUSHDB`` (an ``invalidate`` without keys), and a restarted Redis (its connections
  close, so this one too): a new incarnation;
* bytes of the connection not parsed yet (buffered, or still in the socket): the pushes already delivered
  are parsed first, without waiting; those still arriving make the mark stale.

A Redis Cluster is not watched (each primary would need a tracking connection of its own, moved slots
their keys' prefixes again): every mark there is stale, which is the head read as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import select
import time
from dataclasses import dataclass
from typing import Any

import redis._parsers
import redis.exceptions
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from kons_service.shutdown import within
from kons_service.store import keys
from kons_service.store.records import LearnerRef

__all__ = ["HeadMark", "HeadWatch"]

log = logging.getLogger("kons_service.store")

#: How often the tracking connection is proven alive (a ``PING`` answered on it, which also comes after
#: every push Redis sent it before).
_PROOF_SECONDS = 0.25
#: A mark is trusted only this long after the last proof: a connection that stopped delivering without
#: closing (a network partition) makes every mark stale within it.
_TRUST_SECONDS = 1.0
#: How long after a failure of the tracking connection no other is tried (the heads are read meanwhile).
_RETRY_SECONDS = 1.0
#: How long :meth:`HeadWatch.close` waits for the ``PING`` task to stop, and then for the connection to
#: close, before it abandons them (a Redis paused or gone answers neither; the process is exiting): within
#: :data:`kons_service.shutdown.STORE_CLOSE_SECONDS`.
_CLOSE_SECONDS = 1.0
#: Prefixes tracked on one connection, per learner the process may hold, before it is opened again (a
#: prefix cannot be untracked alone): an evicted learner's would otherwise keep sending pushes, and Redis
#: keep the prefix, forever; a few times the cache's size, so that a full cache turning over is seldom
#: tracked anew.
_PREFIXES_PER_HELD = 4


def _push_parser() -> type | None:
    """redis-py's own async RESP3 parser (a private name), if it hands the invalidation pushes to a handler
    and its connections parse the pushes already received on demand; else None. redis-py 5.0's takes them
    in silently, with the reply after them (a watch on it would miss every write)."""
    parser: type | None = getattr(redis._parsers, "_AsyncRESP3Parser", None)
    if (parser is None or not hasattr(parser, "set_invalidation_push_handler")
            or not hasattr(AbstractConnection, "process_invalidation_messages")):
        return None
    return parser


@dataclass(frozen=True, slots=True)
class HeadMark:
    """What :meth:`HeadWatch.unchanged` compares: the tracking connection's epoch and the pushes its key had
    received when the mark was taken."""

    epoch: int
    key: str
    pushes: int


class HeadWatch:
    """Tracks the ``meta`` keys of the learners this process holds (see the module's docstring)."""

    def __init__(self, client: Any, held: int = 1024) -> None:
        """``held``: how many learners the process may hold at once (its cache's size)."""
        self._client = client if isinstance(client, Redis) else None  # (a RedisCluster: not watched)
        self._parser = _push_parser()
        if self._client is not None and self._parser is None:
            log.info("redis-py %s hands no invalidation push over: every read reads the head",
                     redis.__version__)
            self._client = None
        self._prefixes_max = _PREFIXES_PER_HELD * held
        self._connection: AbstractConnection | None = None
        self._lock = asyncio.Lock()  # one reader of the connection at a time
        #: Bumped whenever pushes may have been missed: every mark of an older epoch is stale.
        self._epoch = 0
        self._pushes: dict[str, int] = {}  # meta key -> the invalidations received since it was tracked
        self._proven_at = -math.inf  # when (monotonic) the last PING answered on the connection was sent
        self._prover: asyncio.Task[None] | None = None
        self._retry_at = -math.inf  # no connection is tried before (monotonic), after a failure
        self._poll: select.poll | None = None  # of the connection's socket
        self._closing = False

    async def mark(self, ref: LearnerRef) -> HeadMark | None:
        """A mark of the learner's head, to take BEFORE reading the head (None: not watched). Tracks its
        key first, connecting if need be."""
        key = keys.learner_key(ref, "meta")
        if self._client is None or self._closing or time.monotonic() < self._retry_at:
            return None
        try:
            async with self._lock:
                connection = await self._connected()
                if key not in self._pushes:
                    if len(self._pushes) >= self._prefixes_max:
                        await self._lose(connection)
                        connection = await self._connected()
                    sent = time.monotonic()
                    await connection.send_command("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", key)
                    try:
                        await connection.read_response()
                    except redis.exceptions.ResponseError as refusal:  # (an ACL without CLIENT, say)
                        # (no two learners' meta keys overlap: names hold neither '}' nor ':')
                        log.warning("Redis refuses CLIENT TRACKING (%s): every read reads the head", refusal)
                        self._client = None
                        await self._lose(connection)  # (nor is it proven alive any more)
                        return None
                    self._pushes[key] = 0
                    self._proven_at = max(self._proven_at, sent)  # (an answer proves it alive too)
                return HeadMark(self._epoch, key, self._pushes[key])
        except Exception as error:  # whatever redis-py lets out (see .errors.translated)
            # (the head read that follows answers the failure; the next tries wait a while, so that a Redis
            # refusing this connection costs no request more than a head read)
            log.debug("not watching %s: %s", key, error)
            self._retry_at = time.monotonic() + _RETRY_SECONDS
            if self._connection is not None:
                await self._lose(self._connection)
            return None

    async def unchanged(self, mark: HeadMark | None) -> bool:
        """Whether the head is surely where it was when ``mark`` was taken (False: read it)."""
        connection = self._connection
        if (mark is None or connection is None or mark.epoch != self._epoch
                or time.monotonic() - self._proven_at > _TRUST_SECONDS):
            return False
        try:
            if not await self._drained(connection):
                return False
        except Exception as error:  # whatever redis-py's internals let out: the caller reads the head
            log.debug("the head watch failed (%r): the head is read", error)
            self._epoch += 1  # (pushes may have been lost with it)
            with contextlib.suppress(Exception):
                if not self._lock.locked():  # (else its holder, which meets the same failure, drops it)
                    async with self._lock:
                        await self._lose(connection)
            return False
        return mark.epoch == self._epoch and self._pushes.get(mark.key, -1) == mark.pushes

    async def close(self) -> None:
        """Stop the ``PING`` task and close the connection, waiting for neither longer than
        :data:`_CLOSE_SECONDS` (a ``PING`` unanswered, or a cancel lost in redis-py, is abandoned)."""
        self._closing = True  # (the task stops on it too: a cancel can be lost, see _prove)
        self._epoch += 1
        prover, self._prover = self._prover, None
        if prover is not None:
            prover.cancel()
            await within(prover, _CLOSE_SECONDS, "the head watch's PING task")
        connection, self._connection = self._connection, None
        if connection is not None:
            # (nowait: no waiting for the socket's close to be acknowledged by a Redis that may not answer)
            await within(connection.disconnect(nowait=True), _CLOSE_SECONDS,
                         "the close of the head watch's connection")

    # ------------------------------------------------------------------ the connection
    async def _connected(self) -> AbstractConnection:
        """The tracking connection (lock held), opened if need be."""
        if self._connection is not None and self._connection.is_connected:
            return self._connection
        assert self._client is not None
        pool = self._client.connection_pool
        # No retries: a silent reconnection would lose the tracking while the marks stayed trusted (a
        # reconnection made anyway, by redis-py, is counted by _on_connect). redis-py's own RESP3 parser even
        # with hiredis installed: it takes from the stream only the bytes of the reply it parses, so that
        # any other is still there for _drained to see (hiredis's reads whole chunks into its own buffer).
        options = {**pool.connection_kwargs, "protocol": 3, "retry": Retry(NoBackoff(), 0),
                   "parser_class": self._parser}
        connection = self._connection
        if connection is None:
            connection = pool.connection_class(**options)
            connection.register_connect_callback(self._on_connect)  # type: ignore[no-untyped-call]
            self._connection = connection
        await connection.connect()  # type: ignore[no-untyped-call]
        if self._prover is None:
            self._prover = asyncio.get_running_loop().create_task(self._prove())
        return connection

    async def _on_connect(self, connection: AbstractConnection) -> None:
        """A new connection tracks nothing yet: every mark made before is stale. Its parser gets the handler
        of the pushes on every connection (a connection without it is never left behind by a failure)."""
        self._epoch += 1
        self._pushes.clear()
        # (redis-py has no public setter of a connection's push handler)
        connection._parser.set_invalidation_push_handler(self._invalidated)  # type: ignore[attr-defined]
        # (redis-py has no public view of a connection's socket)
        writer = getattr(connection, "_writer", None)
        sock = None if writer is None else writer.transport.get_extra_info("socket")
        self._poll = None
        if sock is not None:
            self._poll = select.poll()  # (not select.select: it fails on descriptors above 1023)
            self._poll.register(sock.fileno(), select.POLLIN | select.POLLPRI)

    async def _lose(self, connection: AbstractConnection) -> None:
        """Pushes may have been missed on ``connection`` (lock held): drop it; every mark is stale."""
        self._epoch += 1
        self._pushes.clear()
        self._proven_at = -math.inf
        self._poll = None
        with contextlib.suppress(Exception):
            await connection.disconnect(nowait=True)

    async def _invalidated(self, push: list[Any]) -> None:
        keys_written = push[1] if len(push) > 1 else None
        if keys_written is None:  # a FLUSHALL or FLUSHDB: every key
            self._epoch += 1
            self._pushes = dict.fromkeys(self._pushes, 0)
            return
        for raw in keys_written:
            key = raw.decode() if isinstance(raw, bytes) else str(raw)
            if key in self._pushes:
                self._pushes[key] += 1

    async def _drained(self, connection: AbstractConnection) -> bool:
        """Parse the pushes already received on the connection, without waiting for more: False if some
        are still arriving (or being read), or the connection is gone."""
        if self._lock.locked():
            return False
        # (redis-py has no public view of a connection's unread bytes: its StreamReader and socket)
        reader = getattr(connection, "_reader", None)
        writer = getattr(connection, "_writer", None)
        if reader is None or writer is None:
            return False
        if reader.at_eof() or reader.exception() is not None or writer.transport.is_closing():
            async with self._lock:
                await self._lose(connection)
            return False
        if len(reader._buffer):
            async with self._lock:
                try:
                    await connection.process_invalidation_messages()  # type: ignore[no-untyped-call]
                except Exception:  # whatever redis-py lets out (see .errors.translated)
                    await self._lose(connection)
                    return False
        return self._poll is not None and not self._poll.poll(0)  # (nothing readable: no push on its way)

    async def _prove(self) -> None:
        """Every :data:`_PROOF_SECONDS`, a ``PING`` on the connection (the pushes before its answer are
        parsed first), which proves it alive since the ping was sent; until Redis refuses the tracking or
        the watch closes. The flag is checked too: on Python 3.11 a cancel can be lost in redis-py's send
        (its ``asyncio.wait_for``, CPython gh-86296), and this loop would then ping for ever while
        :meth:`close` waited for it (a SIGTERMed process that never exited)."""
        while self._client is not None and not self._closing:
            await asyncio.sleep(_PROOF_SECONDS)
            connection = self._connection
            if connection is None or not connection.is_connected:
                continue
            async with self._lock:
                sent = time.monotonic()
                try:
                    await connection.send_command("PING")
                    await connection.read_response()
                except Exception:  # whatever redis-py lets out (see .errors.translated)
                    await self._lose(connection)
                    continue
                self._proven_at = sent

