"""Every Redis key name of the service, as pure functions (the scripts in ``kons_service/lua`` get them
in ``KEYS``, never build one).

Every key of one learner carries the hash tag ``{tenant/name}`` so that they share a Redis Cluster slot
and every script touches only keys of one slot::

    kons:{t/n}:meta      hash: config (JSON), incarnation, version, snap_version, snap_token, ...
    kons:{t/n}:log       stream: one entry per feedback round, id "<version>-0" (x, y, played, request id,
                         whether the learner's growth was held)
    kons:{t/n}:snap      hash: "<token>:<i>" -> i-th binary chunk of the newest snapshot
    kons:{t/n}:ids       hash: client id -> remembered features;  kons:{t/n}:ids_exp  zset: id -> expiry
    kons:{t/n}:reqs      hash: feedback request id -> "<version>:<fingerprint of its body>" (at most once,
                         kept for its TTL), '=<request id>' -> the record of its answer (while it fits), and
                         '*marks', '*answers' -> the bytes of both kinds (see ``append.lua``)
    kons:{t/n}:reqs_exp  zset: request id -> expiry (ms); trimmed by ``append.lua`` (TTL)
    kons:{t/n}:reqs_kept list: the request ids whose answers are kept, oldest first (``append.lua`` drops
                         the oldest answers to fit the learner's reservation and a count cap)
    kons:{t/n}:lease     string: the writer lease token;  kons:{t/n}:snaplock  string: snapshot lock
    kons:{t/n}:hist      list: the learner's history, one JSON point per entry (``history.lua``)
    kons:{t/n}:ack       string, short-lived: written just before a ``WAIT`` that confirms earlier writes
    kons:{t/n}:kept      zset: the kept bases a past version is rebuilt from, scored by version
                         (``lib/versions.lua``); the log is kept from the oldest on
    kons:{t/n}:shadows   hash: challenger name -> the version of this learner up to which it has learnt
                         (the log is kept after the smallest);  kons:{t/n}:shadowlock  string: the lock of
                         the process catching this challenger up
    kons:{t/n}:configs   hash: version -> the config in force from it (written by a promotion)

``kons:shadows`` (every shadow challenger) and ``kons:retain`` (the learners keeping older versions, by when
the oldest ages out) list learners service-wide.

Each tenant also has an index ``kons:tenant:{t}:learners`` (sorted set of names, for listing); it is
a superset of the tenant's learners (names are added before and removed after the learner's keys).
And ``kons:tenant:{t}:bytes`` (hash: learner name -> reserved state bytes, and the total of both
hashes; see ``reserve.lua``), ``kons:tenant:{t}:id_bytes`` (learner name -> bytes reserved for the
features it keeps under prediction ids) and ``kons:tenant:{t}:kept_bytes`` (learner name -> bytes reserved
for its kept versions) and ``kons:tenant:{t}:record_bytes`` (learner name -> bytes reserved for its
request ids and the answers kept for their retries, ``reqs``) hold the tenant's byte budget. All five are
in the tenant's
slot, not in its learners' ones, so no script touches them together with a learner's keys (see
:mod:`.budget`).
"""

from __future__ import annotations

from kons_service.store.records import LearnerRef

__all__ = ["LEARNER_PARTS", "RECORDS", "RETAIN", "SHADOWS", "learner_key", "learner_keys", "member",
           "of_member", "tenant_budget_keys", "tenant_bytes", "tenant_id_bytes", "tenant_index",
           "tenant_kept_bytes", "tenant_record_bytes"]

#: The keys one learner may own, by the part that ends their name (meta first).
LEARNER_PARTS = ("meta", "log", "snap", "ids", "ids_exp", "reqs", "reqs_exp", "lease", "snaplock", "hist",
                 "ack", "kept", "shadows", "shadowlock", "configs", "reqs_kept")


def learner_key(ref: LearnerRef, part: str) -> str:
    return f"kons:{{{ref.tenant}/{ref.name}}}:{part}"


def learner_keys(ref: LearnerRef, parts: tuple[str, ...] = LEARNER_PARTS) -> list[str]:
    """The learner's keys of ``parts`` (default: every key it may own), in that order."""
    return [learner_key(ref, part) for part in parts]


def tenant_index(tenant: str) -> str:
    return f"kons:tenant:{{{tenant}}}:learners"


def tenant_bytes(tenant: str) -> str:
    return f"kons:tenant:{{{tenant}}}:bytes"


def tenant_id_bytes(tenant: str) -> str:
    return f"kons:tenant:{{{tenant}}}:id_bytes"


#: The set of every shadow challenger, as "tenant/name" (:func:`member`): what each process's shadow task
#: catches up.
SHADOWS = "kons:shadows"
#: The learners that keep older versions, as "tenant/name", scored by when (ms) the oldest next ages out:
#: what the periodic retention sweep visits (``retain.lua``).
RETAIN = "kons:retain"
#: Learners whose reservation for request ids and kept answers may outlast what they hold, scored by when
#: the sweep looks again (epoch ms): ``<tenant>/<name>`` members (see :func:`member`).
RECORDS = "kons:records"


def member(ref: LearnerRef) -> str:
    """The learner as a member of the service-wide sets (:data:`SHADOWS`, :data:`RETAIN`)."""
    return f"{ref.tenant}/{ref.name}"


def of_member(value: str) -> LearnerRef:
    tenant, name = value.split("/", 1)
    return LearnerRef(tenant, name)


def tenant_kept_bytes(tenant: str) -> str:
    return f"kons:tenant:{{{tenant}}}:kept_bytes"


def tenant_record_bytes(tenant: str) -> str:
    return f"kons:tenant:{{{tenant}}}:record_bytes"


def tenant_budget_keys(tenant: str) -> list[str]:
    """The hashes of the tenant's byte budget (state bytes first, then ids, kept versions, request ids)."""
    return [tenant_bytes(tenant), tenant_id_bytes(tenant), tenant_kept_bytes(tenant),
            tenant_record_bytes(tenant)]
