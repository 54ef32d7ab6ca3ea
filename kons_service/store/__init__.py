"""The learner store: the only package that talks to Redis (the layering test,
``tests/service/test_layers.py``, holds it to that). Lua scripts live in ``kons_service/lua``.

:class:`Store` (:mod:`.facade`) is what the core holds; it gives every reply back as a typed value
(:mod:`.records`), and every failure of the Redis client, whatever its type, comes out as
:class:`StoreUnavailableError` (:mod:`.errors`; the HTTP answers are chosen at the edge). The key names
are pure functions of :mod:`.keys`, where their layout is described; each concern has its module:
:mod:`.leases`, :mod:`.log`, :mod:`.ids`, :mod:`.history`, :mod:`.snapshots`, :mod:`.budget` (the
tenant's bytes) and :mod:`.server` (checks of Redis itself), all sharing one :mod:`.connection`; and
:mod:`.tracking`, on a connection of its own (whether a learner's head moved since it was read).
"""

from __future__ import annotations

from kons_service.store.connection import script_text
from kons_service.store.errors import (
    NotReplicatedError,
    SnapshotUnstableError,
    StoreError,
    StoreFullError,
    StoreUnavailableError,
)
from kons_service.store.facade import Store
from kons_service.store.leases import process_of
from kons_service.store.log import round_id
from kons_service.store.records import (
    AppendOutcome,
    AppendStatus,
    AppliedRequest,
    Base,
    Head,
    KeepPolicy,
    LearnerRef,
    LeaseBusy,
    ListedLearner,
    LogEntry,
    LoggedRound,
    Persistence,
    Publication,
    RequestRetention,
    RequestTag,
    Reservation,
    RollbackOutcome,
    RollbackStatus,
    ShadowLink,
    StoredState,
)
from kons_service.store.server import answers_ping
from kons_service.store.tracking import HeadMark

__all__ = [
    "AppendOutcome",
    "AppendStatus",
    "AppliedRequest",
    "Base",
    "Head",
    "HeadMark",
    "KeepPolicy",
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
    "RollbackOutcome",
    "RollbackStatus",
    "ShadowLink",
    "SnapshotUnstableError",
    "Store",
    "StoreError",
    "StoreFullError",
    "StoreUnavailableError",
    "StoredState",
    "answers_ping",
    "process_of",
    "round_id",
    "script_text",
]
