"""A learner's ordered log of feedback rounds (``append.lua``): compare-and-append after a known head, at
most once per client request id, and the rounds read back for a replay.

With ``wait_replicas`` set, every append is followed by ``WAIT`` on the very connection that ran it (see
:meth:`.Connection.run_replicated`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from kons_service.store import keys
from kons_service.store.connection import Connection, text
from kons_service.store.errors import translated
from kons_service.store.records import (
    AppendOutcome,
    AppendStatus,
    AppliedRequest,
    Head,
    LearnerRef,
    LogEntry,
    LoggedRound,
    RequestRetention,
    RequestTag,
)

__all__ = ["Log", "round_id"]

_APPEND_CODES = {-1: AppendStatus.GONE, -2: AppendStatus.LEASE_LOST, -3: AppendStatus.MOVED,
                 -4: AppendStatus.UNKNOWN_ID, -5: AppendStatus.NO_RECORD_ROOM}
_NO_RETENTION = RequestRetention(0, 0)
_APPEND_PARTS = ("meta", "lease", "log", "ids", "ids_exp", "reqs", "reqs_exp", "hist", "reqs_kept")


def round_id(token: str, version: int) -> str:
    """The id ``append.lua`` gives the round that a writer holding ``token`` logged as ``version``."""
    return f"{token}/{version}"


def _logged(version: int, fields: dict[bytes, bytes]) -> LoggedRound:
    """A log entry as ``append.lua`` (a round) or ``rollback.lua`` (field ``o``) wrote it."""
    tip, parent = text(fields.get(b"h", b"")), text(fields.get(b"b", b""))
    if b"o" in fields:
        return LoggedRound(version, LogEntry(b"", b"", b""), tip, parent, int(fields[b"o"]))
    return LoggedRound(version, LogEntry(fields[b"x"], fields[b"y"], fields[b"p"], held=b"g" in fields),
                       tip, parent)


def _applied(marker: Any, record: Any, replicated: bool = True) -> AppliedRequest:
    """A request id's marker (``<version>:<fingerprint>``) and the record of its answer (empty: no longer
    kept) as ``append.lua`` stores them; a marker written before the records were kept apart holds the
    record itself (``<version>:<record>``)."""
    version, _, rest = text(marker).partition(":")
    if rest.startswith("{"):
        return AppliedRequest(int(version), rest, replicated)
    return AppliedRequest(int(version), text(record or b""), replicated, fingerprint=rest)


class Log:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    @translated
    async def append(
        self, ref: LearnerRef, token: str, head: Head, entries: list[LogEntry],
        requests: list[RequestTag] | None = None, *, leased: bool = True,
        retention: RequestRetention = _NO_RETENTION, history: tuple[str, int] | None = None,
        record_room: int = 0,
    ) -> AppendOutcome:
        """Append rounds after ``head`` iff the learner is still there, at most once per client request id,
        in one script call (see ``append.lua``). ``requests`` split the rounds among the requests they
        answer (default: one request without a client id); ``leased``: the writer holds the lease under
        ``token`` (released by the append), else nobody may hold it; ``history``: a point of the learner's
        history at the new version and the series' cap, offered in the same call; ``record_room``: the
        bytes the learner's request records may hold (its reservation in its tenant's budget: the oldest
        answers are dropped to fit, and if the ids alone do not fit nothing is appended)."""
        tags = requests if requests is not None else [RequestTag("", "", len(entries))]
        point, cap = history or ("", 0)
        args: list[Any] = [token, head.incarnation, str(head.version), head.tip, "1" if leased else "0",
                           retention.ttl_ms, retention.max_answers, point, cap, record_room, len(tags)]
        for tag in tags:
            args += [tag.id, tag.fingerprint, tag.record, tag.rounds]
        for e in entries:
            args += [e.x, e.y, e.played, e.id, "1" if e.held else ""]
        if self.connection.wait_replicas:
            reply, replicated = await self.connection.run_replicated("append", ref, _APPEND_PARTS, args)
        else:
            reply, replicated = await self.connection.run("append", ref, _APPEND_PARTS, args), True
        code = int(reply[0])
        if code == 1:
            version = int(reply[1])
            return AppendOutcome(AppendStatus.APPLIED, version, tip=round_id(token, version),
                                 replicated=replicated, stride=int(reply[2]),
                                 record_bytes=int(reply[3]) if len(reply) > 3 else -1)
        if code == 2:  # applied earlier, maybe through another connection: confirm what the primary holds
            index = int(reply[1]) - 1
            earlier = _applied(reply[2], reply[3])
            if self.connection.wait_replicas:
                now, replicated = await self._confirmed(ref, tags[index].id)
                replicated = replicated and now is not None and now.version == earlier.version
            return AppendOutcome(AppendStatus.ALREADY_APPLIED, earlier.version, earlier.record,
                                 replicated=replicated, request=index, fingerprint=earlier.fingerprint)
        return AppendOutcome(_APPEND_CODES[code], detail=text(reply[1]) if len(reply) > 1 else "")

    @translated
    async def read(self, ref: LearnerRef, after: int, count: int) -> list[LoggedRound]:
        """Up to ``count`` logged rounds with version > ``after``, in order."""
        rows: list[tuple[bytes, dict[bytes, bytes]]] = cast(Any, await self.connection.client.xrange(
            keys.learner_key(ref, "log"), min=f"{after + 1}-0", max="+", count=count))
        return [_logged(int(text(entry_id).split("-", 1)[0]), fields) for entry_id, fields in rows]

    @translated
    async def applied(self, ref: LearnerRef, request_id: str) -> AppliedRequest | None:
        """The earlier application of a request id (see ``append.lua``), else None; with
        ``wait_replicas``, ``replicated`` says whether enough replicas hold it (a failover may lose it)."""
        marker, record = await self.connection.client.hmget(keys.learner_key(ref, "reqs"), request_id,
                                                            "=" + request_id)
        if marker is None or not self.connection.wait_replicas:
            return None if marker is None else _applied(marker, record)
        earlier, replicated = await self._confirmed(ref, request_id)
        if earlier is None:  # (a failover in between: the primary now serving has no such request)
            return None
        return dataclasses.replace(earlier, replicated=replicated)

    async def _confirmed(self, ref: LearnerRef, request_id: str) -> tuple[AppliedRequest | None, bool]:
        """A request id's record as the primary of ``ref``'s slot has it, and whether enough replicas
        hold it (at most ``wait_timeout_ms``). The read and the ``WAIT`` go together on one connection:
        after a reconnection (a failover) both are sent again, so the answer is about one server's data.
        A connection that wrote nothing has nothing for ``WAIT`` to count: a short-lived key is written
        between them."""
        connection = self.connection
        (marker, record), _, replicas = await connection.pinned(ref, [
            ("HMGET", keys.learner_key(ref, "reqs"), request_id, "=" + request_id),
            ("SET", keys.learner_key(ref, "ack"), b"1", "PX", 60_000),
            ("WAIT", connection.wait_replicas, connection.wait_timeout_ms)])
        earlier = None if marker is None else _applied(marker, record)
        return earlier, int(replicas) >= connection.wait_replicas
