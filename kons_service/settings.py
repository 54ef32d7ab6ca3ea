"""Service settings, read from the environment with the ``KONS_`` prefix (pydantic-settings)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, JsonValue, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["DEFAULT_TENANT", "NAME_PATTERN", "NAME_RULE", "SECRET", "Settings", "valid_name"]

#: Learner and tenant names: safe inside a Redis hash tag, a URL path segment and a metric label. Matched
#: whole (a ``$`` would also match before a final newline); only dots (``.``, ``..``) is refused, as
#: browsers and HTTP clients resolve such a path segment instead of sending it.
NAME_PATTERN = r"(?!\.+\Z)[A-Za-z0-9_.-]{1,64}"
NAME_RULE = "1 to 64 letters, digits, '_', '.' or '-', not only dots"
#: The tenant of every learner when no API key is configured.
DEFAULT_TENANT = "default"
_NAME = re.compile(NAME_PATTERN)


def valid_name(name: str) -> bool:
    """Whether ``name`` is a valid learner or tenant name (:data:`NAME_PATTERN`, matched whole)."""
    return _NAME.fullmatch(name) is not None
#: Marks a setting whose value is a credential: read from the environment, .env or a file, never
#: offered as a command-line flag (every user of the machine can read a process's arguments in ps).
SECRET: dict[str, JsonValue] = {"secret": True}


class Settings(BaseSettings):
    """Every knob of the service; ``Settings()`` reads ``KONS_*`` variables (and a ``.env`` file)."""

    model_config = SettingsConfigDict(env_prefix="KONS_", env_file=".env", extra="ignore")

    # Store
    redis_url: str | None = Field(
        None, description="redis://, rediss:// or unix:// URL; redis+cluster:// (rediss+cluster://) for a "
        "Redis Cluster, given any one of its nodes; unset = an embedded Redis server under data_dir."
    )
    redis_cluster: bool = Field(
        False, description="Use a cluster-aware client (as a redis+cluster:// URL does): commands and "
        "scripts go to the primary owning each learner's slot, MOVED and ASK redirections are followed.")
    redis_wait_replicas: int = Field(
        0, ge=0, description="Acknowledge a feedback only once this many replicas of the learner's primary "
        "hold it (Redis WAIT); otherwise answer 503 not_replicated (a retry with the same request_id is "
        "applied at most once). 0 = acknowledge once the primary has it.")
    redis_wait_timeout_ms: int = Field(
        500, ge=1, description="How long a feedback waits for KONS_REDIS_WAIT_REPLICAS replicas; must be "
        "shorter than KONS_REDIS_TIMEOUT_SECONDS.")
    data_dir: Path = Field(Path("data"), description="Directory of the embedded Redis server's files.")
    redis_timeout_seconds: float = Field(2.0, gt=0, description="Socket timeout of Redis commands.")
    redis_require_noeviction: bool = Field(
        True, description="Refuse to start (and report not ready) unless Redis's maxmemory-policy is "
        "noeviction: any other policy deletes learners and request ids silently when memory runs short. Set "
        "false only for a managed Redis that hides CONFIG and is known to be configured noeviction.")
    eviction_check_seconds: float = Field(
        2.0, gt=0, description="How often Redis's maxmemory-policy is checked again while the service runs "
        "(and at once after an OOM error): while it is not noeviction, feedback, creates and state uploads "
        "are refused with 503 store_may_evict.")

    # Auth
    api_keys: str | None = Field(None, description='"tenantA:keyA,tenantB:keyB"; unset = single-tenant.',
                                 json_schema_extra=SECRET)
    api_keys_file: Path | None = Field(None, description="File of tenant:key lines (# comments allowed).")

    # Server (python -m kons_service)
    host: str | None = Field(None, description="Bind address; default 127.0.0.1 single-tenant, else 0.0.0.0.")
    port: int = Field(8000, ge=0, le=65535)
    workers: int = Field(1, ge=1)
    blas_threads: int = Field(
        1, ge=1, description="BLAS threads per process: a round is a small matrix-vector product, where a "
        "thread pool costs more than it saves; scale with KONS_WORKERS instead.")
    keep_alive_seconds: int = Field(
        75, ge=1, description="How long an idle keep-alive connection stays open (uvicorn's "
        "--timeout-keep-alive, whose default, 5 s, is shorter than a load balancer's or a pooled client's "
        "idle time, often 60 s: they then send a request on a connection the service is closing, and get a "
        "reset).")
    log_level: str = "info"
    log_format: Literal["text", "json"] = Field("text", description="text, or json: one JSON object a line.")

    # Durability and background work
    snapshot_min_seconds: float = Field(
        30.0, ge=0, description="A learner is snapshotted at most this often (capped at "
        "snapshot_interval_seconds; but for snapshot_max_replay_seconds, the bound on a rebuild), and, past "
        "it, once its log since the last snapshot holds more bytes than the snapshot would ...")
    snapshot_every_rounds: int = Field(
        1000, ge=1, description="... or once it is this many rounds behind and its log holds a third of the "
        "snapshot's bytes (snapshot bytes stay within 3x of the log's) ...")
    snapshot_max_replay_seconds: float = Field(
        10.0, gt=0, description="... or, whatever the bytes, once its log would take this long to replay "
        "(the rounds behind times the seconds one takes to read back from the store, as measured by this "
        "process's replays, and to play, as this learner's rounds were timed), even within "
        "snapshot_min_seconds: the bound on a rebuild after a crash or a takeover ...")
    snapshot_interval_seconds: float | None = Field(
        None, gt=0, description="... and, if set, at the latest this long after the last one if it has new "
        "rounds (by default never by the clock: a slowly fed learner's snapshots would cost far more bytes "
        "than its log).")
    snapshot_chunk_bytes: int = Field(8 * 2**20, ge=1024, description="Size of one snapshot chunk value.")
    keep_versions: int = Field(
        8, ge=1, description="Most kept states (bases) per learner: every version from the oldest on can be "
        "restored (GET /v1/learners/{name}/versions, POST .../rollback). 1 keeps only the newest snapshot.")
    shadow_compare_rounds: int = Field(
        10_000, ge=1, description="A champion and its shadow challengers are compared on at most this many "
        "of the newest rounds both have learnt (GET /v1/learners/{name}/challengers).")
    shadow_window_rounds: int = Field(1000, ge=1, description="... in windows of this many rounds.")
    shadow_max_lag_rounds: int = Field(
        50_000, ge=1, description="A shadow challenger this many rounds behind its champion is marked "
        "stalled: it learns no more, and its champion's log is no longer kept for it (GET .../challengers "
        "says so).")
    keep_versions_seconds: float = Field(
        3600.0, ge=0, description="Every version of the last this many seconds stays restorable (within "
        "keep_versions and the tenant's byte budget, which counts the older bases and the log after them).")
    keep_versions_sweep_seconds: float = Field(
        60.0, gt=0, description="How often each process applies the retention of kept versions to the "
        "learners whose oldest kept version may have aged out, idle ones included (a snapshot applies it "
        "too).")
    id_ttl_seconds: int = Field(3600, ge=1, description="How long a predict's features wait for feedback.")
    ids_max: int = Field(
        100_000, ge=1, description="Most predict ids remembered per learner (the oldest are dropped first).")
    ids_max_bytes: int = Field(
        8 * 2**20, ge=1024, description="Most bytes of features one learner keeps under predict ids (the "
        "oldest are dropped first). A learner's first predict with an id reserves that much of its tenant's "
        "KONS_TENANT_MAX_BYTES (less if ids_max ids of its rows take less), or is refused with 422 "
        "resource_limit: what a tenant makes Redis hold stays within its budget.")
    request_id_ttl_seconds: int = Field(
        3600, ge=1, description="How long a feedback request_id is remembered (a retry is applied once)."
    )
    request_ids_max: int = Field(
        10_000, ge=1, description="Most answers kept per learner for retries of its request_ids (the "
        "oldest answers are dropped first; the ids themselves are remembered for request_id_ttl_seconds, "
        "so a retry whose answer was dropped is refused 409 already_applied, never applied twice)."
    )
    request_ids_max_bytes: int = Field(
        64 * 2**20, ge=1024, description="Most bytes one learner's request_ids and the answers kept for "
        "their retries may hold together, counted in KONS_TENANT_MAX_BYTES (the reservation grows at most to "
        "this, and the periodic sweep gives back what expired ids no longer hold): the oldest answers are "
        "dropped to fit, and a feedback with a request_id is refused 422 resource_limit when the ids of the "
        "last request_id_ttl_seconds alone would not fit.")
    lease_ttl_ms: int = Field(
        2_000, ge=100, description="Per-learner writer lease, renewed every third of it while its writer "
        "works: a crashed writer blocks its learner at most this long. Correctness does not depend on it "
        "(appends are fenced by the head).")
    lease_takeover: bool = Field(
        True, description="Name this process's Redis connections (CLIENT SETNAME) and take a writer lease "
        "over at once when its holder has no connection left (a SIGKILLed or crashed process; checked once "
        "with CLIENT LIST), instead of waiting for lease_ttl_ms. Set false for a Redis that refuses CLIENT "
        "SETNAME; a Redis that refuses CLIENT LIST just falls back to the TTL.")
    lease_wait_seconds: float = Field(10.0, gt=0, description="How long a write waits for the lease.")
    ack_marks_dir: Path | None = Field(
        None, description="A local directory where each process keeps the newest acknowledged version of "
        "each learner, outside Redis, so that a process started after a host reboot reports the rounds "
        "Redis lost with it (see docs/reliability.md). Unset: no marks (rollbacks are still seen by a "
        "process that held the rounds, and from a client's Kons-Seen-Version).")
    ack_marks_fsync_seconds: float = Field(
        0.1, gt=0, description="How often the marks are flushed to disk (fsync): a host crash loses at "
        "most the marks of this last stretch.")
    group_commit: bool = Field(
        True, description="Feedbacks to one learner that arrive while its writer is busy are played and "
        "appended together, in arrival order, in one Redis call (each answered with its own rounds); false: "
        "one request per append.")
    cache_size: int = Field(256, ge=1, description="Learners kept in memory per process ...")
    history_points: int = Field(
        512, ge=16, description="Most points of a learner's history (then every other one is dropped).")
    cache_bytes: int = Field(
        2**30, ge=0, description="... and about this many bytes of their learned state (per process).")

    # Limits
    max_request_bytes: int = Field(8 * 2**20, ge=1024, description="Largest JSON body.")
    learner_max_bytes: int = Field(
        256 * 2**20, ge=1024, description="Most bytes one learner's state may take, from its config "
        "(kons's Learner.state_bytes: d^2 for ONS, m*d for the sketches, the first stored points for the "
        "kernel learners); a larger config is refused at PUT. A round and a snapshot briefly need up to "
        "about twice that again.")
    tenant_max_bytes: int = Field(
        2**30, ge=1024, description="Most bytes the states of one tenant's learners may take together "
        "(each counted as in learner_max_bytes, a kernel learner at its actual size as it grows); a create, "
        "a state upload or a feedback that would go over it is refused with 422 resource_limit. Kept in "
        "Redis, so it holds across replicas.")
    tenant_max_learners: int = Field(
        10_000, ge=1, description="Most learners one tenant may have; a create beyond it is refused with 422 "
        "resource_limit. Counted in Redis with the byte budget, so it holds across replicas.")
    max_state_bytes: int = Field(
        257 * 2**20, ge=1024, description="Largest state blob accepted by PUT /state (the state budget "
        "plus room for the header); a larger upload is refused as it streams in.")
    tenant_large_bodies: int = Field(
        1, ge=1, description="Requests with a body over 64 KiB (or of unknown size) one tenant may have in "
        "flight when API keys are configured; more are answered 429 with Retry-After.")
    tenant_rate: float = Field(
        1000.0, gt=0, description="Requests a second one tenant may make, per process, when API keys are "
        "configured (a token bucket; more are answered 429 with Retry-After) ...")
    tenant_burst: float = Field(2000.0, ge=1, description="... in bursts of up to this many.")
    tenant_bytes_rate: float = Field(
        8 * 2**20, gt=0, description="Body bytes a second one tenant may send, per process, when API keys "
        "are configured (a token bucket; a body of unknown size counts as max_request_bytes) ...")
    tenant_bytes_burst: float = Field(16 * 2**20, ge=1024, description="... in bursts of up to this many.")
    tenant_work_rate: float = Field(
        512 * 2**20, gt=0, description="Learner work one tenant may have done a second, per process, when "
        "API keys are configured, in batch rows times the learner's state bytes (as batch_max_work_bytes; "
        "512 MiB is about a quarter of a core): past it, its requests get 429 with Retry-After ...")
    tenant_work_burst: float = Field(2**30, ge=1, description="... once more than this is owed.")
    tenant_contention_seconds: float = Field(
        1.0, gt=0, description="The rate, byte and work limits above apply to a tenant only while another "
        "tenant contends for the process: has a request in flight, or made one within this many seconds. A "
        "tenant alone uses the whole process.")
    tenant_concurrency: int = Field(
        32, ge=1, description="Requests one tenant may have in flight, per process, when API keys are "
        "configured; more are answered 429 with Retry-After.")
    refusal_pause_ms: float = Field(
        250.0, ge=0, description="A request refused before its body is read (401: no valid key; 429: over "
        "a tenant limit) is answered after this pause, for up to tenant_large_bodies + 1 such requests per "
        "tenant (and as many without a valid key) at once: a sender that retries at once, ignoring "
        "Retry-After, costs the process a few requests a second instead of hundreds. 0 answers at once.")
    heavy_turns: int = Field(
        1, ge=1, description="Requests with a body over 16 KiB served at once per process when API keys are "
        "configured; the others wait their turn once their body is read, one tenant after another, so "
        "that the light requests of every tenant are not held behind many heavy ones.")
    heavy_bytes_rate: float = Field(
        8 * 2**20, gt=0, description="Body bytes a second at which the heavy requests (bodies over 16 KiB) "
        "of all tenants together are served, per process, when API keys are configured, each counting at "
        "least 64 KiB and at most an eighth of this: past it they wait for their turn, so that they take "
        "at most about a quarter of a core, however many tenants send them.")
    heavy_turn_max_wait_seconds: float = Field(
        10.0, gt=0, description="Longest a heavy request (a body over 16 KiB) may expect to wait for its "
        "turn at heavy_bytes_rate, estimated from the bodies waiting ahead of it in the round of tenants; "
        "one that would wait longer is answered 429 with Retry-After at once instead of queued.")
    heap_trim_seconds: float = Field(
        30.0, ge=0, description="How often the process gives the memory it freed back to the system "
        "(glibc's malloc_trim; 0: never), so that its resident memory follows what it holds.")
    heap_arenas: int = Field(
        2, ge=0, description="Most malloc heaps (glibc's arenas) the process's threads share (0: glibc's "
        "default, 8 per core): fewer heaps hold less freed memory.")
    parse_workers: int = Field(
        1, ge=1, description="Processes (per server process) that parse and validate bodies over 64 KiB, "
        "so that a large body never holds the serving process's GIL.")
    max_batch: int = Field(1000, ge=1, description="Most rows in one predict or feedback batch.")
    batch_max_work_bytes: int = Field(
        512 * 2**20, ge=1, description="Most work of one predict or feedback batch, as its rows times the "
        "learner's state bytes (about 0.5 ns a byte per round: 512 MiB is about a quarter of a second); a "
        "larger batch is refused with 413 batch_too_large, naming the rows allowed. Bounds how long one "
        "request of a large learner (exact KONS, ONS at a large dim) holds the process.")
    page_size_max: int = Field(1000, ge=1)

    # Metrics
    metrics_per_learner: bool = Field(True, description="Per-learner labels on /metrics (cardinality).")
    metrics_key: str | None = Field(
        None, description="Bearer key that shows /metrics whole when API keys are set (without it, series "
        "naming a tenant or learner are left out).", json_schema_extra=SECRET)

    @model_validator(mode="after")
    def _wait_within_timeout(self) -> Settings:
        if self.redis_wait_replicas and self.redis_wait_timeout_ms >= self.redis_timeout_seconds * 1000:
            raise ValueError("KONS_REDIS_WAIT_TIMEOUT_MS must be shorter than KONS_REDIS_TIMEOUT_SECONDS: a "
                             "WAIT outlasting the socket timeout would be cut off and re-sent.")
        return self

    @field_validator("api_keys", "redis_url", "metrics_key", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    def tenant_keys(self) -> dict[str, str]:
        """API key -> tenant, from ``api_keys`` and ``api_keys_file``; raises ValueError if malformed."""
        entries: list[str] = []
        if self.api_keys:
            entries += self.api_keys.split(",")
        if self.api_keys_file is not None:
            lines = self.api_keys_file.read_text().splitlines()
            entries += [line for line in lines if not line.lstrip().startswith("#")]
        keys: dict[str, str] = {}
        for number, entry in enumerate(e.strip() for e in entries):
            if not entry:
                continue
            tenant, sep, key = entry.partition(":")
            tenant, key = tenant.strip(), key.strip()
            if not sep or not key or not valid_name(tenant):
                raise ValueError(
                    f"API key entry #{number + 1} must be 'tenant:key' with a tenant of {NAME_RULE}.")
            if keys.get(key, tenant) != tenant:
                raise ValueError(f"API key entry #{number + 1} reuses another tenant's key.")
            keys[key] = tenant
        return keys

    def bind_host(self) -> str:
        """The address to bind: explicit ``host``, else loopback when single-tenant."""
        if self.host:
            return self.host
        return "0.0.0.0" if self.tenant_keys() else "127.0.0.1"
