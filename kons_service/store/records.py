"""The values the store gives and takes: a learner's identity and head, logged rounds, outcomes of its
scripts, reservations. Plain frozen records: nothing here talks to Redis."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

__all__ = [
    "AppendOutcome",
    "AppendStatus",
    "AppliedRequest",
    "Base",
    "Head",
    "KeepPolicy",
    "LearnerRef",
    "LeaseBusy",
    "ListedLearner",
    "LogEntry",
    "LoggedRound",
    "Persistence",
    "Publication",
    "RequestRetention",
    "RequestTag",
    "Reservation",
    "RollbackOutcome",
    "RollbackStatus",
    "ShadowLink",
    "StoredState",
]


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
    (``""`` in logs written before rounds had ids); ``rollback_to`` >= 0: not a round but a rollback to
    that version (``rollback.lua``; its entry is empty)."""

    version: int
    entry: LogEntry
    tip: str = ""
    parent: str = ""
    rollback_to: int = -1


@dataclass(frozen=True, slots=True)
class Base:
    """A kept state a past version is rebuilt from (``lib/versions.lua``): its version, its snapshot's
    chunks (token ``"-"``: none, the learner as its config builds it), when it was kept (ms), the bytes of
    the rounds logged between the previous base and it, and the id of its round."""

    version: int
    token: str
    chunks: int
    nbytes: int
    time_ms: int
    log_bytes: int
    tip: str

    @property
    def key(self) -> str:
        """What tells this base from any other of its learner: its version and its chunks' token."""
        return f"{self.version} {self.token}"


@dataclass(frozen=True, slots=True)
class ShadowLink:
    """A shadow challenger's champion (its name, of the same tenant), the champion's incarnation it
    follows and the champion version it started after: its version ``v`` is the champion's ``start + v``;
    a stalled one learns no more."""

    champion: str
    incarnation: str
    start: int
    #: Why it stopped following for good (too far behind: see :meth:`.Shadows.catch_up`); "" while it follows.
    stalled: str = ""


@dataclass(frozen=True, slots=True)
class KeepPolicy:
    """Which bases a publication keeps (``lib/versions.lua``): at most ``count``, none older than needed
    to restore every version of the last ``max_age_ms``, the older ones within ``allowance`` bytes."""

    count: int
    max_age_ms: int
    allowance: int
    #: For a retention of the bases as they are (the sweep's): the newest base when ``allowance`` was read
    #: or granted (:meth:`Base.key`); if another is newest by the time it is applied, a publication since
    #: kept its bases within an allowance of its own, granted later, and none is dropped for its bytes.
    #: "": applied whatever the bases.
    granted_for: str = ""


class RollbackStatus(StrEnum):
    """How a rollback ended (the codes of ``rollback.lua``)."""

    APPLIED = "applied"
    GONE = "gone"  # deleted or replaced
    NOT_KEPT = "not_kept"  # the target is older than the oldest kept base, or newer than the head
    CHANGED = "changed"  # the round at the target is not the one the state was rebuilt to
    INCOMPLETE = "incomplete"


@dataclass(frozen=True, slots=True)
class RollbackOutcome:
    """A rollback's result: the new version when applied; the kept range when the target is not in it."""

    status: RollbackStatus
    version: int = 0
    keep_from: int = 0


@dataclass(frozen=True, slots=True)
class RequestTag:
    """One feedback request of an append: its client's id (``""``: none), the record of its answer kept
    under that id, how many of the append's rounds are its own (in order), and the fingerprint of its body
    (kept with the id for as long as the id is, also when the answer's record is no longer)."""

    id: str
    record: str
    rounds: int
    fingerprint: str = ""


@dataclass(frozen=True, slots=True)
class RequestRetention:
    """How long (ms) client request ids are remembered, and how many answers (per learner) are kept for
    their retries."""

    ttl_ms: int
    max_answers: int


@dataclass(frozen=True, slots=True)
class AppliedRequest:
    """A feedback request id already applied: the version it produced, the record of its answer (``""``:
    no longer kept, only the id and ``fingerprint`` of its body are)."""

    version: int
    record: str
    replicated: bool = True  # False: fewer replicas than required confirmed it in time
    fingerprint: str = ""


@dataclass(frozen=True, slots=True)
class StoredState:
    """What a process needs to rebuild a learner: its config, head and newest snapshot (or None), the id
    of the snapshot's last round, and ``restored_at``: the version of its latest rollback or promotion
    (0: none in this history)."""

    config: str
    head: Head
    snapshot: bytes | None
    snap_tip: str
    restored_at: int = 0


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
    NO_RECORD_ROOM = "record_room"  # the request ids to remember need more than the learner's reservation


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
    #: What the learner's request records hold after an applied append (-1: not read).
    record_bytes: int = -1
    #: ``ALREADY_APPLIED`` without the earlier answer's record (``detail`` empty): its body's fingerprint.
    fingerprint: str = ""

    @property
    def ok(self) -> bool:
        return self.reason is AppendStatus.APPLIED


class Publication(StrEnum):
    """How publishing a snapshot or replacing a state ended (the codes of its script)."""

    PUBLISHED = "published"
    GONE = "gone"  # the learner was deleted (or, for a snapshot, replaced)
    STALE = "stale"  # a snapshot: not newer than the published one; a replacement: the config changed
    INCOMPLETE = "incomplete"  # a chunk went missing before the commit

