"""Reliability scenarios of the service and the audit of a feedback storm.

Every scenario runs real processes on loopback (``redis-server`` and ``python -m kons_service``, see
:mod:`testkit.processes`), is bounded in count and time, and returns a plain dict of figures. The tests in
``tests/reliability`` run them with small numbers; ``python -m benchmarks.reliability`` runs them with the
big ones and writes the report.

How a storm is audited: every client sends single-round feedback with a unique ``request_id`` and
retries the *same* body and id after a transport error or a 503 until it is acknowledged, so every
request ends acknowledged (``unresolved`` counts those that did not, within the time bound). After the
storm, with ``V`` the learner's version and the acknowledgements' versions ``v_1..v_A``:

* ``lost``: acknowledged rounds that have no slot of their own in ``1..V`` (a version above ``V``, or
  claimed by two acknowledgements);
* ``duplicated``: slots of ``1..V`` that no acknowledgement claims (a round applied that no request
  owns: a retry applied twice);
* ``state_equals_replay``: the exported state is byte-identical to one kons learner that replays the
  acknowledged rounds of versions ``1..V`` in version order, in this process (of two acknowledged at one
  version, the later: after a Redis rollback only it can be in the log; one acknowledged above ``V`` was
  lost by a rollback that the rounds after it did not make up for, so it is not replayed). With
  ``lost = duplicated = 0`` this proves the service holds exactly the acknowledged rounds, each once, in
  the acknowledged order;
* ``log_mismatches``: log entries still in Redis (the tail after the newest snapshot) whose request id is
  not the one acknowledged at that version.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import math
import random
import re
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import numpy as np
import redis

import kons
from kons_service.settings import Settings
from kons_service.store import LearnerRef
from kons_service.store.keys import learner_key, learner_keys
from testkit import scrape
from testkit.processes import (
    SPEC,
    LocalCluster,
    RedisServer,
    ReplicatedRedis,
    ServiceProcess,
    services_on_redis,
    sync_client,
    vm_rss_kib,
)

__all__ = [
    "HEADERS",
    "TENANT_KEYS",
    "Ledger",
    "audit",
    "cluster_failover_scenario",
    "cluster_outage_scenario",
    "crash_scenario",
    "eviction_scenario",
    "failover_scenario",
    "local_replay",
    "redis_fault_scenario",
    "replica_scenario",
    "restart_rollback_scenario",
    "rollback_scenario",
    "round_body",
    "shown",
    "soak_scenario",
    "storm",
    "surviving",
]

NAME = "storm"
TENANT_KEYS = "alpha:alpha-key,beta:beta-key"
HEADERS = {"Authorization": "Bearer alpha-key"}
PROBES = [[0.0, 0.0, 0.0], [0.5, -0.5, 0.25], [-1.0, 1.0, 0.9], [3.0, 0.1, -2.0]]
_BACKOFF = (0.02, 0.25)

#: The soak shortens the lives of predict ids and request ids, and snapshots more often, so that the id
#: stores and the logs are seen to shrink back within the run.
_SOAK_SETTINGS = {"id_ttl_seconds": 5, "request_id_ttl_seconds": 5, "request_ids_max": 2000,
                  "snapshot_every_rounds": 150, "snapshot_interval_seconds": 2.0, "keep_versions": 1}
_SOAK_SETTINGS_WHY = ("ids expire and snapshots trim the logs within the run (no older versions kept), so "
                      "that the id stores and the logs are seen to shrink back")


def round_body(client: int, seq: int) -> dict[str, Any]:
    """The ``seq``-th feedback of client ``client``: a deterministic round with a unique request_id."""
    rng = random.Random(client * 1_000_003 + seq)
    x = [rng.uniform(-1.5, 1.5) for _ in range(3)]
    return {"x": x, "y": math.sin(x[0]) + 0.5 * x[1], "request_id": f"c{client}-{seq}"}


@dataclass
class Ledger:
    """What the clients saw: acknowledgements by request_id, every status and transport error."""

    acked: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)  # id -> (version, body)
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> first answer
    statuses: Counter[int] = field(default_factory=Counter)
    codes_503: Counter[str] = field(default_factory=Counter)  # the error codes of the 503 answers
    retry_after_missing: int = 0  # 503 answers without a Retry-After header
    transport_errors: Counter[str] = field(default_factory=Counter)
    rejected: list[tuple[int, str]] = field(default_factory=list)  # non-retryable answers
    unresolved: int = 0
    requests: int = 0
    retries: int = 0
    inconsistent_retries: int = 0  # a retry answered differently from the first answer
    max_latency: float = 0.0
    events: list[tuple[float, float, int]] = field(default_factory=list)  # (sent, answered, status or 0)

    def summary(self) -> dict[str, Any]:
        return {
            "requests_sent": self.requests,
            "acknowledged": len(self.acked),
            "retries": self.retries,
            "unresolved": self.unresolved,
            "rejected_4xx": len(self.rejected),
            "status_500": self.statuses[500],
            "status_5xx_other_than_503": sum(n for s, n in self.statuses.items() if s >= 500 and s != 503),
            "status_503": self.statuses[503],
            "codes_503": dict(self.codes_503),
            "retry_after_missing": self.retry_after_missing,
            "transport_errors": dict(self.transport_errors),
            "inconsistent_retries": self.inconsistent_retries,
            "max_latency_s": round(self.max_latency, 3),
        }


async def _send_until_acked(
    http: httpx.AsyncClient, urls: Sequence[str], body: dict[str, Any], ledger: Ledger, give_up: float,
    rng: random.Random,
) -> None:
    rid = body["request_id"]
    attempt = 0
    while True:
        url = urls[(attempt + rng.randrange(len(urls))) % len(urls)]
        attempt += 1
        ledger.requests += 1
        if attempt > 1:
            ledger.retries += 1
        started = time.monotonic()
        try:
            response = await http.post(f"{url}/v1/learners/{NAME}/feedback", json=body, headers=HEADERS)
        except httpx.HTTPError as exc:
            ledger.transport_errors[type(exc).__name__] += 1
            ledger.events.append((started, time.monotonic(), 0))
        else:
            ledger.max_latency = max(ledger.max_latency, time.monotonic() - started)
            ledger.statuses[response.status_code] += 1
            ledger.events.append((started, time.monotonic(), response.status_code))
            if response.status_code == 200:
                answer = response.json()
                first = ledger.answers.setdefault(rid, answer)
                if first != answer:
                    ledger.inconsistent_retries += 1
                ledger.acked[rid] = (answer["version"], body)
                return
            if response.status_code != 503:
                ledger.rejected.append((response.status_code, response.text[:200]))
                return
            ledger.codes_503[response.json().get("error", {}).get("code", "?")] += 1
            ledger.retry_after_missing += "retry-after" not in response.headers
        if time.monotonic() > give_up:
            ledger.unresolved += 1
            return
        await asyncio.sleep(rng.uniform(*_BACKOFF))


async def storm(
    urls: Sequence[str], ledger: Ledger, clients: int, stop: asyncio.Event, *, request_timeout: float = 20.0,
    resolve_seconds: float = 90.0, seed: int = 0,
) -> None:
    """``clients`` concurrent clients, each sending one round at a time (retried until acknowledged),
    until ``stop`` is set; a request in flight then has ``resolve_seconds`` to be acknowledged."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=request_timeout, limits=limits) as http:

        async def client(c: int) -> None:
            rng = random.Random(seed * 7919 + c)
            seq = 0
            while not stop.is_set():
                body = round_body(c, seq)
                await _send_until_acked(http, urls, body, ledger, time.monotonic() + 3600, rng)
                seq += 1
                if stop.is_set():
                    break

        tasks = [asyncio.create_task(client(c)) for c in range(clients)]
        await stop.wait()
        done, pending = await asyncio.wait(tasks, timeout=resolve_seconds)
        for task in pending:
            task.cancel()
            ledger.unresolved += 1
        for task in done:
            task.result()


def surviving(ledger: Ledger, version: int) -> dict[int, dict[str, Any]]:
    """Version -> the body of the round acknowledged last at that version, for the versions up to the
    learner's ``version`` (``acked`` is in the order of the acknowledgements): a round acknowledged before
    a Redis rollback is overwritten by the one acknowledged after it at its version, and one above the
    learner's version was lost with nothing after it at its version."""
    return {v: body for v, body in ledger.acked.values() if v <= version}


def local_replay(spec: dict[str, Any], ledger: Ledger, version: int) -> kons.Learner:
    """One kons learner fed the surviving acknowledged rounds up to ``version`` in version order, in this
    process."""
    learner = kons.learner_from_params(spec["algorithm"], {**spec["params"], "dim": spec["dim"]})
    for _, body in sorted(surviving(ledger, version).items()):
        learner.learn_one(np.asarray(body["x"], dtype=np.float64), body["y"])
    return learner


def audit(urls: Sequence[str], redis_url: str, ledger: Ledger, spec: dict[str, Any] = SPEC) -> dict[str, Any]:
    """Count lost and duplicated rounds; compare the state with a serial replay (see the module doc)."""
    with httpx.Client(timeout=60, headers=HEADERS) as http:
        version = http.get(f"{urls[0]}/v1/learners/{NAME}").json()["version"]
        blobs = [http.get(f"{u}/v1/learners/{NAME}/state").content for u in urls]
        probes = [[http.post(f"{u}/v1/learners/{NAME}/predict", json={"x": x}).json()["prediction"]
                   for x in PROBES] for u in urls]
    claimed = Counter(v for v, _ in ledger.acked.values())
    lost = sum(n for v, n in claimed.items() if v > version) + sum(n - 1 for n in claimed.values() if n > 1)
    duplicated = sum(1 for v in range(1, version + 1) if v not in claimed)
    local = local_replay(spec, ledger, version)
    by_version = {v: rid for rid, (v, _) in ledger.acked.items()}
    client = sync_client(redis_url)
    try:
        log_key = next(k for k in learner_keys(LearnerRef("alpha", NAME)) if k.endswith(":log"))
        # entry ids and fields as bytes: the client does not decode responses
        tail = cast(list[tuple[bytes, dict[bytes, bytes]]], client.xrange(log_key))
    finally:
        client.close()
    mismatches = sum(1 for entry_id, fields in tail
                     if by_version.get(int(entry_id.split(b"-")[0])) != fields.get(b"r", b"").decode())
    return {
        "final_version": version,
        "acknowledged_rounds": len(ledger.acked),
        "lost": lost,
        "duplicated": duplicated,
        "state_equals_replay": all(b == local.to_bytes() for b in blobs),
        "replicas_agree_on_probes": all(p == probes[0] for p in probes),
        "probes_equal_replay": probes[0] == [local.predict_one(np.asarray(x)) for x in PROBES],
        "log_tail_checked": len(tail),
        "log_mismatches": mismatches,
    }


def shown(result: dict[str, Any]) -> str:
    """A scenario's whole result, for a failed assertion's message (pytest cuts a dict's repr to a line)."""
    return json.dumps(result, sort_keys=True, default=str)


def _create(url: str, spec: dict[str, Any] = SPEC) -> None:
    response = httpx.put(f"{url}/v1/learners/{NAME}", json=spec, headers=HEADERS, timeout=30)
    response.raise_for_status()


def _store(cluster: bool) -> Callable[[Path], Any]:
    """The Redis deployment of a scenario: one redis-server, or a Redis Cluster of 3 primaries."""
    return LocalCluster if cluster else RedisServer


def _service_settings(**overrides: Any) -> dict[str, Any]:
    """The settings of a scenario's service processes: the defaults of :class:`Settings` (what an operator
    gets), two tenants' keys, and the caller's ``overrides`` (reported with the scenario's figures)."""
    return {"api_keys": TENANT_KEYS, **overrides}


def _effective(overrides: Mapping[str, object] | None, name: str) -> Any:
    """The value of setting ``name`` in a service run with ``overrides``."""
    return (overrides or {}).get(name, Settings.model_fields[name].default)


async def _run_storm(
    urls: Sequence[str], clients: int, disturb: Callable[[], Awaitable[None]], seed: int
) -> Ledger:
    ledger = Ledger()
    stop = asyncio.Event()
    task = asyncio.create_task(storm(urls, ledger, clients, stop, seed=seed))
    try:
        await disturb()
    finally:
        stop.set()
        await task
    return ledger


async def crash_scenario(
    workdir: Path, *, kills: int, clients: int = 4, gap: tuple[float, float] = (0.3, 1.5), seed: int = 0,
    spec: dict[str, Any] = SPEC, settings: Mapping[str, object] | None = None, cluster: bool = False,
) -> dict[str, Any]:
    """A feedback storm against one learner of ``spec`` in a service process that is SIGKILLed ``kills``
    times and restarted (on one redis-server, or on a Redis Cluster of 3 primaries if ``cluster``).
    ``write_stall_s``: for each kill, how long until the first round sent after it
    was acknowledged (``from_kill``), and how much of that was the restart until /healthz answered
    (``restart``); the killed writer's lease (``lease_ttl_ms``) runs out meanwhile."""
    rng = random.Random(seed)
    kills_and_restarts: list[tuple[float, float]] = []
    with services_on_redis(workdir, store=_store(cluster), **_service_settings(**(settings or {}))) as (
            server, [service]):
        started = time.monotonic()
        _create(service.url, spec)

        async def disturb() -> None:
            for _ in range(kills):
                await asyncio.sleep(rng.uniform(*gap))
                killed = time.monotonic()
                service.kill()
                await asyncio.to_thread(service.start)
                kills_and_restarts.append((killed, time.monotonic()))

        ledger = await _run_storm([service.url], clients, disturb, seed)
        stalls = [_first_ack_after(ledger, killed) for killed, _ in kills_and_restarts]
        return {"kills": kills, "clients": clients, "settings": dict(settings or {}), **ledger.summary(),
                **audit([service.url], server.url, ledger, spec),
                "lease_ttl_ms": _effective(settings, "lease_ttl_ms"),
                "write_stall_s": {
                    "from_kill": _spread([s for s in stalls if s is not None]),
                    "restart": _spread([ready - killed for killed, ready in kills_and_restarts]),
                    "kills_without_an_ack_after": stalls.count(None)},
                "seconds": round(time.monotonic() - started, 1)}


def _spread(values: Sequence[float]) -> dict[str, float | None]:
    return {"median": round(statistics.median(values), 3) if values else None,
            "max": round(max(values), 3) if values else None}


def _first_ack_after(ledger: Ledger, moment: float) -> float | None:
    """Seconds from ``moment`` to the first acknowledgement of a request sent after it (None: none)."""
    answered = [end for sent, end, status in ledger.events if sent >= moment and status == 200]
    return min(answered) - moment if answered else None


async def redis_fault_scenario(
    workdir: Path, *, clients: int = 4, outage_seconds: float = 3.0, pause_seconds: float = 3.0,
    calm_seconds: float = 2.0, kill_redis: bool = False, seed: int = 0,
    settings: Mapping[str, object] | None = None,
) -> dict[str, Any]:
    """A storm through a restart of Redis (SIGTERM, AOF replayed), an outage (stopped for
    ``outage_seconds``) and a freeze (SIGSTOP for ``pause_seconds``); optionally a SIGKILL of Redis."""
    phases: list[tuple[str, float, float]] = []

    async def phase(name: str, down: Callable[[], None], seconds: float, up: Callable[[], Any]) -> None:
        await asyncio.sleep(calm_seconds)
        t0 = time.monotonic()
        await asyncio.to_thread(down)
        await asyncio.sleep(seconds)
        await asyncio.to_thread(up)
        phases.append((name, t0, time.monotonic()))

    with services_on_redis(workdir, **_service_settings(**(settings or {}))) as (server, [service]):
        started = time.monotonic()
        _create(service.url)

        async def disturb() -> None:
            await phase("restart", server.stop, 0.0, server.start)
            await phase("outage", server.stop, outage_seconds, server.start)
            await phase("freeze", server.pause, pause_seconds, server.resume)
            if kill_redis:
                await phase("sigkill", server.kill, 0.5, server.start)
            # Keep the storm going long enough after the last fault to observe recovery even when a lease
            # taken just before it must expire first (a short calm period made the measurement flaky).
            await asyncio.sleep(max(calm_seconds, 12.0))

        ledger = await _run_storm([service.url], clients, disturb, seed)
        per_phase = {}
        for name, t0, t1 in phases:
            during = [(b, e, s) for b, e, s in ledger.events if t0 <= b <= t1]  # sent while Redis was down
            after = [e for b, e, s in ledger.events if b >= t1 and s == 200]
            per_phase[name] = {
                "statuses_of_requests_sent_meanwhile": dict(Counter(str(s) for _, _, s in during)),
                "slowest_answer_s": round(max((e - b for b, e, _ in during), default=0.0), 3),
                "seconds_down": round(t1 - t0, 2),
                "first_200_after_s": round(min(after) - t1, 3) if after else None,
            }
        return {"clients": clients, "settings": dict(settings or {}),
                "redis_timeout_s": _effective(settings, "redis_timeout_seconds"),
                "lease_wait_s": _effective(settings, "lease_wait_seconds"), **ledger.summary(),
                **audit([service.url], server.url, ledger), "phases": per_phase,
                "service_restarted": service.starts - 1, "seconds": round(time.monotonic() - started, 1)}


async def replica_scenario(
    workdir: Path, *, replicas: int = 2, clients: int = 6, seconds: float = 5.0, seed: int = 0,
    spec: dict[str, Any] = SPEC, settings: Mapping[str, object] | None = None, cluster: bool = False,
) -> dict[str, Any]:
    """Clients send feedback to one learner of ``spec`` through ``replicas`` service processes on one
    Redis (a Redis Cluster of 3 primaries if ``cluster``)."""
    options = _service_settings(**(settings or {}))
    with services_on_redis(workdir, replicas, store=_store(cluster), **options) as (server, services):
        started = time.monotonic()
        urls = [s.url for s in services]
        _create(urls[0], spec)
        ledger = await _run_storm(urls, clients, lambda: asyncio.sleep(seconds), seed)
        return {"replicas": replicas, "clients": clients, "settings": dict(settings or {}),
                **ledger.summary(),
                **audit(urls, server.url, ledger, spec), "seconds": round(time.monotonic() - started, 1)}


#: The line a service process logs when it finds that Redis lost rounds it held (kons_service.core.cache).
ROLLBACK_LOG = "the store lost rounds of"
#: The counter of those findings, where the service has it.
ROLLBACK_METRIC = "kons_history_rollbacks_total"


async def failover_scenario(
    workdir: Path, *, wait: bool, replicas: int = 2, clients: int = 4, calm_seconds: float = 2.0,
    lag_seconds: float = 1.5, after_seconds: float = 4.0, wait_timeout_ms: int = 250, seed: int = 0,
) -> dict[str, Any]:
    """A storm through ``replicas`` service processes on a primary + replica pair behind a movable
    endpoint (:class:`~testkit.processes.ReplicatedRedis`, the model of a managed Redis): after
    ``calm_seconds`` the replication link is cut for ``lag_seconds``, then the primary's host is lost and
    the replica is promoted with what it has; the old host rejoins as a replica. With ``wait``,
    acknowledgements wait for one replica (``KONS_REDIS_WAIT_REPLICAS=1``).

    Besides the audit: ``rollbacks_reported``, the service log lines reporting a history Redis lost;
    ``acknowledged_during_lag``, acknowledgements received while the link was cut; ``failover_s``, from
    the primary's loss to the rejoined replica; ``longest_ack_gap_s``, the longest time without an
    acknowledgement after the link was cut."""

    async def fail(pair: ReplicatedRedis, marks: dict[str, float]) -> None:
        await asyncio.to_thread(pair.partition)  # rounds now reach the primary only
        marks["lag"] = time.monotonic()
        await asyncio.sleep(lag_seconds)
        marks["lost"] = time.monotonic()
        await asyncio.to_thread(pair.fail_over)

    return await _failover_storm(workdir, ReplicatedRedis, fail, wait=wait, replicas=replicas,
                                 clients=clients, calm_seconds=calm_seconds, after_seconds=after_seconds,
                                 wait_timeout_ms=wait_timeout_ms, seed=seed)


async def cluster_failover_scenario(
    workdir: Path, *, wait: bool = True, replicas: int = 2, clients: int = 4, calm_seconds: float = 2.0,
    after_seconds: float = 4.0, wait_timeout_ms: int = 250, seed: int = 0,
) -> dict[str, Any]:
    """A storm through ``replicas`` service processes on a Redis Cluster of 3 primaries with a replica
    each: after ``calm_seconds`` the host of the primary serving the learner is lost (SIGKILL) and its
    replica takes over (``CLUSTER FAILOVER TAKEOVER``); the lost node comes back as a replica. The
    service follows the slot to its new primary. Same figures as :func:`failover_scenario`."""

    async def fail(cluster: LocalCluster, marks: dict[str, float]) -> None:
        marks["lag"] = marks["lost"] = time.monotonic()
        key = learner_keys(LearnerRef("alpha", NAME))[0]
        lost = cluster.primary_of(key)
        await asyncio.to_thread(cluster.fail_over, key)
        if cluster.primary_of(key) is lost:
            raise RuntimeError("the learner's slot is still served by the node that was lost")

    return await _failover_storm(workdir, functools.partial(LocalCluster, replicas_each=1), fail, wait=wait,
                                 replicas=replicas, clients=clients, calm_seconds=calm_seconds,
                                 after_seconds=after_seconds, wait_timeout_ms=wait_timeout_ms, seed=seed)


#: The failures :func:`cluster_outage_scenario` inflicts on the shard serving the learner.
CLUSTER_OUTAGES = ("killed_primary", "lagging_replica", "shard_down")


async def cluster_outage_scenario(
    workdir: Path, *, outage: str, wait: bool, replicas: int = 2, clients: int = 4, calm_seconds: float = 2.0,
    lag_seconds: float = 1.5, down_seconds: float = 3.0, rejoin_after_s: float = 0.0,
    after_seconds: float = 3.0, wait_timeout_ms: int = 250, node_timeout_ms: int = 1000, seed: int = 0,
) -> dict[str, Any]:
    """A storm through ``replicas`` service processes on a Redis Cluster of 3 primaries with a replica each
    (``cluster-node-timeout`` ``node_timeout_ms``) while the shard serving the learner fails for real,
    with no forced takeover: Redis Cluster detects the failure and elects the replica by itself.

    * ``killed_primary``: the primary is SIGKILLed; ``rejoin_after_s`` after its replica is promoted the
      node restarts and rejoins as the new primary's replica (until then the shard has no replica);
    * ``lagging_replica``: the replica is frozen (SIGSTOP) and its replication link dropped for
      ``lag_seconds``, so it misses what the primary acknowledges meanwhile (a SIGKILL alone would not
      lose it: the kernel still delivers a killed process's socket buffers on loopback); then the primary
      is SIGKILLed and the replica thawed, and promoted with what it has; the old primary restarts and
      rejoins as above;
    * ``shard_down``: the primary and its replica are both SIGKILLed, for ``down_seconds``, then both
      restart (from their append-only files) and the cluster settles again.

    With ``wait``, acknowledgements wait for one replica (``KONS_REDIS_WAIT_REPLICAS=1``). Figures besides
    the audit (:func:`audit`): ``promote_s`` (from the kill until the replica says it is primary),
    ``rejoined_s`` (until every node agrees again with the restarted node in sync), ``writes_resumed_s``
    (until the first acknowledgement of a request sent after the kill), ``acknowledged_during_lag``,
    the statuses of requests sent after the failure and answered before writes resumed
    (``statuses_while_down``: 503s alone if the outage is answered as it should be),
    the 503s' error codes and those without ``Retry-After``, and ``service_log_tracebacks`` (a background task
    that died of a store error logs one)."""
    if outage not in CLUSTER_OUTAGES:
        raise ValueError(f"outage must be one of {CLUSTER_OUTAGES}")
    settings = _service_settings(**({"redis_wait_replicas": 1, "redis_wait_timeout_ms": wait_timeout_ms}
                                    if wait else {}))
    store = functools.partial(LocalCluster, replicas_each=1, node_timeout_ms=node_timeout_ms)
    marks: dict[str, float] = {}
    with services_on_redis(workdir, replicas, store=store, **settings) as (cluster, services):
        started = time.monotonic()
        urls = [s.url for s in services]
        _create(urls[0])
        key = learner_keys(LearnerRef("alpha", NAME))[0]

        async def disturb() -> None:
            await asyncio.sleep(calm_seconds)
            primary = await asyncio.to_thread(cluster.primary_of, key)
            replica = await asyncio.to_thread(cluster.replica_of, primary)
            marks["lag"] = time.monotonic()
            if outage == "lagging_replica":
                replica.pause()
                # the link is dropped too: a SIGKILLed process's socket buffers still reach the replica,
                # where a crashed host's would not
                with contextlib.closing(primary.client()) as r:
                    await asyncio.to_thread(r.execute_command, "CLIENT", "KILL", "TYPE", "replica")
                await asyncio.sleep(lag_seconds)
            marks["lost"] = time.monotonic()
            primary.kill()
            if outage == "shard_down":
                replica.kill()
                await asyncio.sleep(down_seconds)
                for node in (primary, replica):
                    await asyncio.to_thread(node.start)
            else:
                replica.resume()
                await asyncio.to_thread(cluster.wait_promoted, replica)
                marks["promoted"] = time.monotonic()
                await asyncio.sleep(rejoin_after_s)
                await asyncio.to_thread(primary.start)
            await asyncio.to_thread(cluster.settle)
            marks["rejoined"] = time.monotonic()
            await asyncio.sleep(after_seconds)

        ledger = await _run_storm(urls, clients, disturb, seed)
        result = {"outage": outage, "wait_replicas": 1 if wait else 0, "replicas": replicas,
                  "clients": clients, "node_timeout_ms": node_timeout_ms, "rejoin_after_s": rejoin_after_s,
                  "settings": {k: v for k, v in settings.items() if k != "api_keys"},
                  **ledger.summary(), **audit(urls, cluster.url, ledger)}
    logs = "".join(s.log.read_text() for s in services)
    # The outage, as a client sees it, lasts from the kill until a request sent after it is acknowledged:
    # restarted nodes still load their files, and the cluster settles again. Only what was both sent and
    # answered within it says how an outage is answered. Ending it at the restart left it empty on a loaded
    # machine: each answer was held for 1-3 s by the store client's retries, past the restart.
    resumed = _first_ack_after(ledger, marks["lost"])
    down = Counter(status for sent, end, status in ledger.events
                   if marks["lost"] <= sent and (resumed is None or end < marks["lost"] + resumed))
    return {**result,
            "acknowledged_during_lag": sum(1 for _, end, status in ledger.events
                                           if status == 200 and marks["lag"] <= end < marks["lost"]),
            "promote_s": round(marks["promoted"] - marks["lost"], 2) if "promoted" in marks else None,
            "rejoined_s": round(marks["rejoined"] - marks["lost"], 2),
            "writes_resumed_s": _rounded(resumed),
            "statuses_while_down": {str(k): v for k, v in sorted(down.items())},
            "rollbacks_reported": logs.count(ROLLBACK_LOG),
            "service_log_tracebacks": logs.count("Traceback"),
            "seconds": round(time.monotonic() - started, 1)}


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 2)


async def _failover_storm(
    workdir: Path, store: Callable[[Path], Any], fail: Callable[[Any, dict[str, float]], Awaitable[None]], *,
    wait: bool, replicas: int, clients: int, calm_seconds: float, after_seconds: float, wait_timeout_ms: int,
    seed: int,
) -> dict[str, Any]:
    """A storm on the Redis deployment ``store`` during which ``fail`` fails it over (marking the times
    ``lag``, replication stopped, and ``lost``, the primary lost); see :func:`failover_scenario`."""
    settings = _service_settings(**({"redis_wait_replicas": 1, "redis_wait_timeout_ms": wait_timeout_ms}
                                    if wait else {}))
    marks: dict[str, float] = {}
    with services_on_redis(workdir, replicas, store=store, **settings) as (deployment, services):
        started = time.monotonic()
        urls = [s.url for s in services]
        _create(urls[0])

        async def disturb() -> None:
            await asyncio.sleep(calm_seconds)
            await fail(deployment, marks)
            marks["rejoined"] = time.monotonic()
            await asyncio.sleep(after_seconds)

        ledger = await _run_storm(urls, clients, disturb, seed)
        result = {"wait_replicas": 1 if wait else 0, "replicas": replicas, "clients": clients,
                  "settings": {k: v for k, v in settings.items() if k != "api_keys"},
                  **ledger.summary(), **audit(urls, deployment.url, ledger)}
    acks = sorted(end for _, end, status in ledger.events if status == 200 and end >= marks["lag"])
    gaps = [b - a for a, b in itertools.pairwise([marks["lag"], *acks])]
    logs = "".join((workdir / f"service{i}.log").read_text() for i in range(replicas))
    return {**result, "rollbacks_reported": logs.count(ROLLBACK_LOG),
            "acknowledged_during_lag": sum(1 for _, end, status in ledger.events
                                           if status == 200 and marks["lag"] <= end < marks["lost"]),
            "failover_s": round(marks["rejoined"] - marks["lost"], 2),
            "longest_ack_gap_s": round(max(gaps, default=0.0), 2),
            "seconds": round(time.monotonic() - started, 1)}


async def soak_scenario(
    workdir: Path, *, seconds: float, clients: int = 4, learners: int = 8, sample_every: float = 1.0,
    seed: int = 0, min_rounds: int = 0,
) -> dict[str, Any]:
    """A bounded soak: feedback, predicts with ids (some never consumed) and batches over several
    learners of bounded state (ONS, dim 8), sampling the service's VmRSS and Redis's memory.

    The traffic lasts ``seconds``, and past them until ``min_rounds`` rounds are acknowledged (for at most
    a minute more), so that a loaded machine soaks as many rounds as an idle one, only more slowly."""
    settings = _service_settings(**_SOAK_SETTINGS)
    spec = {"algorithm": "ons", "dim": 8, "params": {"loss": "squared", "C": 3.0}}
    samples: list[tuple[float, int, int]] = []
    statuses: Counter[int] = Counter()
    rounds = 0
    with services_on_redis(workdir, **settings) as (server, [service]), \
            contextlib.closing(redis.Redis.from_url(server.url)) as r:
        started = time.monotonic()
        for i in range(learners):
            httpx.put(f"{service.url}/v1/learners/s{i}", json=spec, headers=HEADERS).raise_for_status()
        deadline = time.monotonic() + seconds

        def soaking() -> bool:
            now = time.monotonic()
            return now < deadline or (rounds < min_rounds and now < deadline + 60)

        async def client(c: int, http: httpx.AsyncClient) -> None:
            nonlocal rounds
            rng = random.Random(seed * 31 + c)
            seq = 0
            while soaking():
                name = f"s{rng.randrange(learners)}"
                x = [rng.uniform(-1, 1) for _ in range(8)]
                kind = seq % 4
                body: dict[str, object]
                if kind == 0:  # predict with an id that is never consumed: the id store must expire it
                    body, path = {"x": x, "id": f"orphan-{c}-{seq}"}, "predict"
                elif kind == 1:
                    body, path = {"items": [{"x": x, "y": x[0]}] * 8, "request_id": f"b{c}-{seq}"}, "feedback"
                else:
                    body, path = {"x": x, "y": x[0] - x[1], "request_id": f"s{c}-{seq}"}, "feedback"
                response = await http.post(f"{service.url}/v1/learners/{name}/{path}", json=body)
                statuses[response.status_code] += 1
                if response.status_code == 200 and path == "feedback":
                    rounds += 8 if kind == 1 else 1
                seq += 1

        async def sampler() -> None:
            while soaking():
                used = int(r.info("memory")["used_memory"])
                samples.append((time.monotonic() - started, vm_rss_kib(service.pid), used))
                await asyncio.sleep(sample_every)

        async with httpx.AsyncClient(timeout=30, headers=HEADERS) as http:
            await asyncio.gather(sampler(), *(client(c, http) for c in range(clients)))
        state_bytes = sum(len(httpx.get(f"{service.url}/v1/learners/s{i}/state", headers=HEADERS).content)
                          for i in range(learners))
        await asyncio.sleep(6)  # past both TTLs: the id stores must be gone or nearly empty
        leftovers = {"ids": 0, "reqs": 0, "log": 0}
        for i in range(learners):
            for key in learner_keys(LearnerRef("alpha", f"s{i}")):
                kind = key.rsplit(":", 1)[1]
                if kind in ("ids", "reqs"):
                    leftovers[kind] += r.hlen(key)
                elif kind == "reqs_kept":
                    leftovers["reqs"] += r.llen(key)
                elif kind == "log":
                    leftovers["log"] += r.xlen(key)
    half = [s for s in samples if s[0] >= samples[-1][0] / 2] if samples else []
    rss = [s[1] for s in samples]
    return {
        "seconds": round(seconds, 1), "clients": clients, "learners": learners, "rounds": rounds,
        "settings": _SOAK_SETTINGS, "settings_why": _SOAK_SETTINGS_WHY,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "samples": len(samples),
        "rss_kib_first": rss[0] if rss else None, "rss_kib_max": max(rss) if rss else None,
        "rss_kib_last": rss[-1] if rss else None,
        "rss_kib_second_half_spread": (max(s[1] for s in half) - min(s[1] for s in half)) if half else None,
        "rss_kib_per_minute_second_half": _slope(half, 1) * 60 if len(half) > 2 else None,
        "redis_used_memory_max": max(s[2] for s in samples) if samples else None,
        "redis_used_memory_last": samples[-1][2] if samples else None,
        "learners_state_bytes": state_bytes,
        "leftover_after_ttl": leftovers,
        "rss_series": [(round(t, 1), k) for t, k, _ in samples],
    }


def _slope(samples: Sequence[tuple[float, int, int]], column: int) -> float:
    ts = [s[0] for s in samples]
    ys = [s[column] for s in samples]
    mt, my = statistics.fmean(ts), statistics.fmean(ys)
    den = sum((t - mt) ** 2 for t in ts)
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / den if den else 0.0


# ---------------------------------------------------------------------------------------------- rollback
#: key -> (its DUMP, its absolute expiry in ms or None), or None for an absent key
_Saved = dict[str, tuple[bytes, int | None] | None]


def _save_keys(client: redis.Redis, keys: Sequence[str]) -> _Saved:
    """The keys as they are now, read in one transaction (no script runs between two reads)."""
    pipe = client.pipeline(transaction=True)
    for key in keys:
        pipe.dump(key)
        pipe.pttl(key)
    replies = pipe.execute()
    now_ms = int(time.time() * 1000)
    saved: _Saved = {}
    for key, value, ttl in zip(keys, replies[::2], replies[1::2], strict=True):
        saved[key] = None if value is None else (value, now_ms + ttl if ttl >= 0 else None)
    return saved


def _restore_keys(client: redis.Redis, saved: _Saved) -> None:
    """Put the keys back as saved, in one transaction; an expiry is kept absolute (a key whose expiry
    has passed stays absent), as Redis does when it loads an append-only file."""
    now_ms = int(time.time() * 1000)
    pipe = client.pipeline(transaction=True)
    for key, entry in saved.items():
        pipe.delete(key)
        if entry is None:
            continue
        value, expire_at = entry
        if expire_at is None:
            pipe.restore(key, 0, value)
        elif expire_at > now_ms:
            pipe.restore(key, expire_at, value, absttl=True)
    pipe.execute()


async def rollback_scenario(
    workdir: Path, *, rollbacks: int = 2, replicas: int = 2, clients: int = 4,
    loss_window: tuple[float, float] = (0.3, 1.0), calm: tuple[float, float] = (1.0, 2.0), seed: int = 0,
    settings: Mapping[str, object] | None = None,
) -> dict[str, Any]:
    """A storm through ``replicas`` service processes while Redis loses its newest acknowledged rounds
    ``rollbacks`` times, and the storm goes on.

    A rollback saves the learner's keys (``DUMP``) and puts them back as they were (``RESTORE``) a
    ``loss_window`` later: what a Redis that restarts from an append-only file missing its last second
    (``appendfsync everysec`` and a host crash), or a failover to a replica that had not received them,
    leaves behind. During the window the storm goes to the first replica only, which thus holds the
    rounds that are lost; for a ``loss_window`` after it, to the others only, which take those versions
    again with other rounds; then to all. The first replica must notice that the log no longer continues
    its history, and neither serve nor extend the lost rounds.

    The surviving history is read from the learner's request-id markers in Redis (written by the same
    script as the log entry, one per round, ``<version>:<fingerprint>``): an acknowledged round whose id is
    no longer there was lost by a rollback. The surviving acknowledged rounds are then audited like any storm
    (:func:`audit`): each in the learner exactly once, every replica bit-identical to a serial replay.
    """
    if replicas < 2:
        raise ValueError("a rollback scenario needs a replica that held the lost rounds and another one")
    rng = random.Random(seed)
    windows: list[tuple[float, float]] = []
    service_settings = _service_settings(**(settings or {}))
    with services_on_redis(workdir, replicas, **service_settings) as (server, services), \
            contextlib.closing(server.client()) as client:
        started = time.monotonic()
        urls = [s.url for s in services]
        routed = list(urls)  # the replicas the storm sends to, changed in place below
        _create(urls[0])
        ref = LearnerRef("alpha", NAME)
        keys = learner_keys(ref)

        async def disturb() -> None:
            for _ in range(rollbacks):
                await asyncio.sleep(rng.uniform(*calm))
                saved = await asyncio.to_thread(_save_keys, client, keys)
                routed[:] = urls[:1]
                t0 = time.monotonic()
                await asyncio.sleep(rng.uniform(*loss_window))
                await asyncio.to_thread(_restore_keys, client, saved)
                windows.append((t0, time.monotonic()))
                routed[:] = urls[1:]
                await asyncio.sleep(loss_window[1])
                routed[:] = urls
            await asyncio.sleep(calm[1])

        ledger = await _run_storm(routed, clients, disturb, seed)
        remembered = {rid.decode(): int(marker.split(b":", 1)[0])  # (not the answers, '=', nor counts, '*')
                      for rid, marker in client.hgetall(learner_key(ref, "reqs")).items()
                      if not rid.startswith((b"=", b"*"))}
        survivors = Ledger(acked={rid: vb for rid, vb in ledger.acked.items() if rid in remembered})
        moved = sum(1 for rid, (v, _) in survivors.acked.items() if remembered[rid] != v)
        lost = len(ledger.acked) - len(survivors.acked)
        detections = [s.log.read_text().count(ROLLBACK_LOG) for s in services]
        counted = [scrape.value(httpx.get(f"{u}/metrics", timeout=30).text, ROLLBACK_METRIC) for u in urls]
        return {
            "rollbacks": rollbacks, "replicas": replicas, "clients": clients,
            "settings": dict(settings or {}),
            "loss_windows_s": [round(t1 - t0, 2) for t0, t1 in windows],
            **ledger.summary(),
            "lost_by_the_rollbacks": lost,
            "survivors_at_another_version": moved,
            "request_ids_cap": _effective(settings, "request_ids_max"),
            "rollbacks_detected_per_replica": detections,
            "rollback_metric_per_replica": counted,  # None: this service version has no such metric
            **{f"survivors_{k}": v for k, v in audit(urls, server.url, survivors).items()},
            "seconds": round(time.monotonic() - started, 1),
        }


#: A service's report of a rollback: who saw it, and the versions it names as lost.
ROLLBACK_REPORT = re.compile(r"the store lost rounds of .*? that (this process held|a client was answered|"
                             r"were acknowledged before this process started).*?; lost at least versions "
                             r"(\d+) to (\d+) \((\d+) rounds\)")


async def restart_rollback_scenario(
    workdir: Path, *, trials: int = 2, kept: int = 6, lost: int = 4, marks: bool = False,
) -> dict[str, Any]:
    """A host reboot that rolls Redis back, with the service on the same host: two service processes on
    one redis-server that keeps only RDB snapshots (``appendonly no``); in each of ``trials``, ``SAVE``,
    ``lost`` more rounds acknowledged through the first process, then Redis and that process are SIGKILLed
    together and restarted: Redis comes back from the older snapshot, and no process holds the lost
    rounds any more (the second one never did).

    Then, with ``marks`` (both processes keep their acknowledged versions in ``KONS_ACK_MARKS_DIR``), a
    predict without any version goes to the restarted process first, which must report the loss from its
    predecessor's marks. In every case the client then sends back the newest version it was answered
    (``Kons-Seen-Version``): in a predict to the second process, then in a feedback to the restarted one
    (which reports a loss once, whoever saw it first).

    Figures per trial: the versions the store lost (the client's newest version minus the head after the
    restart), and what each process reported (parsed from its log lines: who saw it, the versions named),
    with the metrics ``kons_rollbacks_detected_total`` and ``kons_rollback_rounds_lost_total`` and
    ``/readyz``'s totals of each process at the end."""
    snapshots_only = functools.partial(RedisServer, extra=("--appendonly", "no"))
    settings = _service_settings(**({"ack_marks_dir": workdir / "marks"} if marks else {}))
    started = time.monotonic()
    runs: list[dict[str, Any]] = []
    with services_on_redis(workdir, 2, store=snapshots_only, **settings) as (server, services):
        _create(services[0].url)
        url = f"/v1/learners/{NAME}"
        seen = 0
        seq = itertools.count()

        async def feed(http: httpx.AsyncClient, rounds: int, **headers: str) -> None:
            nonlocal seen
            for _ in range(rounds):
                answer = await http.post(f"{url}/feedback", json=round_body(0, next(seq)),
                                         headers={**HEADERS, **headers})
                answer.raise_for_status()
                seen = answer.json()["version"]  # the newest answer's, not the highest ever seen

        async def predict(http: httpx.AsyncClient, **headers: str) -> int:
            answer = await http.post(f"{url}/predict", json={"x": PROBES[1]}, headers={**HEADERS, **headers})
            answer.raise_for_status()
            return int(answer.json()["version"])

        async with httpx.AsyncClient(base_url=services[0].url, timeout=30) as first, \
                httpx.AsyncClient(base_url=services[1].url, timeout=30) as other:
            await feed(first, kept)
            for _ in range(trials):
                await asyncio.to_thread(server.client().save)
                await feed(first, lost)
                acknowledged = seen
                services[0].kill()
                server.kill()
                await asyncio.to_thread(server.start)
                await asyncio.to_thread(services[0].start)
                reports_before = [_rollback_reports(s.log) for s in services]
                if marks:
                    await predict(first)
                head = await predict(other, **{"Kons-Seen-Version": str(seen)})
                await feed(first, 1, **{"Kons-Seen-Version": str(seen)})
                reports = [_rollback_reports(s.log)[len(before):]
                           for s, before in zip(services, reports_before, strict=True)]
                runs.append({"acknowledged_version": acknowledged, "head_after_restart": head,
                             "lost_versions": [head + 1, acknowledged] if acknowledged > head else [],
                             "lost_rounds": acknowledged - head,
                             "reports_restarted_process": reports[0], "reports_other_process": reports[1]})
            totals = [(await http.get("/readyz")).json().get("rollbacks") for http in (first, other)]
            scraped = [(await http.get("/metrics")).text for http in (first, other)]
    return {
        "marks": marks,
        "trials": runs,
        "reported_with_the_right_extent": sum(
            1 for r in runs for reports in (r["reports_restarted_process"], r["reports_other_process"])
            if [[x["first"], x["last"]] for x in reports] == [r["lost_versions"]]),
        "reports_expected": 2 * trials,
        "metric_detected_per_process": [
            {seen_by: scrape.value(text, "kons_rollbacks_detected_total", seen_by=seen_by)
             for seen_by in ("process", "marks", "client")} for text in scraped],
        "metric_rounds_lost_per_process": [
            scrape.value(text, "kons_rollback_rounds_lost_total") for text in scraped],
        "readyz_rollbacks_per_process": totals,
        "seconds": round(time.monotonic() - started, 1),
    }


def _rollback_reports(log: Path) -> list[dict[str, Any]]:
    """The rollbacks a service's log reports, oldest first: who saw each, the versions lost."""
    return [{"seen_by": m[1], "first": int(m[2]), "last": int(m[3]), "rounds": int(m[4])}
            for m in ROLLBACK_REPORT.finditer(log.read_text())]


# ---------------------------------------------------------------------------------------------- eviction
#: The eviction scenario's learners: linear, small state, so that Redis's memory is the logs' and ids'.
_EVICTION_SPEC = {"algorithm": "ons", "dim": 8, "params": {"loss": "squared", "C": 3.0}}


async def _fill(
    url: str, server: RedisServer, *, learners: int, batches: int, rows: int, headroom_bytes: int,
    concurrency: int = 4,
) -> dict[str, Any]:
    """Create ``learners``, cap Redis's memory at what it uses plus ``headroom_bytes``, send each learner
    ``batches`` feedback batches of ``rows`` rounds, then count what the learners still hold."""
    names = [f"ev{i}" for i in range(learners)]
    statuses: Counter[int | str] = Counter()  # HTTP statuses and transport errors
    acked = dict.fromkeys(names, 0)
    with contextlib.closing(server.client()) as client:
        async with httpx.AsyncClient(base_url=url, timeout=60, headers=HEADERS) as http:
            for name in names:
                (await http.put(f"/v1/learners/{name}", json=_EVICTION_SPEC)).raise_for_status()
            used = int(client.info("memory")["used_memory"])
            client.config_set("maxmemory", used + headroom_bytes)
            gate = asyncio.Semaphore(concurrency)

            async def send(name: str, batch: int) -> None:
                rng = random.Random(f"{name}/{batch}")
                items = []
                for _ in range(rows):
                    x = [rng.uniform(-1, 1) for _ in range(8)]
                    items.append({"x": x, "y": x[0] - 0.5 * x[1]})
                async with gate:
                    try:
                        response = await http.post(f"/v1/learners/{name}/feedback",
                                                   json={"items": items, "request_id": f"{name}-{batch}"})
                    except httpx.HTTPError as exc:  # not acknowledged; counted, never retried
                        statuses[type(exc).__name__] += 1
                        return
                statuses[response.status_code] += 1
                if response.status_code == 200:
                    acked[name] += rows

            for batch in range(batches):
                await asyncio.gather(*(send(name, batch) for name in names))
            versions = {}
            for name in names:
                response = await http.get(f"/v1/learners/{name}")
                versions[name] = response.json()["version"] if response.status_code == 200 else None
        memory = client.info("memory")
        evicted = int(client.info("stats")["evicted_keys"])
    gone = [n for n in names if versions[n] is None]
    return {
        "learners": learners, "rounds_sent": learners * batches * rows,
        "maxmemory_bytes": int(memory["maxmemory"]), "used_memory_bytes": int(memory["used_memory"]),
        "evicted_keys": evicted,
        "feedback_statuses": {str(k): v for k, v in sorted(statuses.items(), key=lambda kv: str(kv[0]))},
        "acknowledged_rounds": sum(acked.values()),
        "learners_gone": len(gone),
        "acknowledged_rounds_gone": sum(acked[n] - (versions[n] or 0) for n in names
                                        if (versions[n] or 0) < acked[n]),
        "learners_above_acknowledged": sum(1 for n in names if (versions[n] or 0) > acked[n]),
    }


async def eviction_scenario(
    workdir: Path, *, learners: int = 12, batches: int = 8, rows: int = 100, headroom_bytes: int = 2**20,
) -> dict[str, Any]:
    """What the service does on a Redis whose ``maxmemory-policy`` may evict keys (``allkeys-lru``).

    * ``refused``: a service started on such a Redis exits, naming the policy;
    * ``readiness``: a service whose Redis is switched to that policy at run time answers /readyz 503;
    * ``override``: with ``KONS_REDIS_REQUIRE_NOEVICTION=false`` it runs on it; Redis's memory is capped
      just above its use and the learners are fed (:func:`_fill`): what vanished;
    * ``noeviction``: the same load on the required policy: writes are refused when memory runs out,
      nothing acknowledged vanishes.
    """
    started = time.monotonic()
    evicting = RedisServer(workdir / "lru", eviction="allkeys-lru").start()
    try:
        service = ServiceProcess(evicting.url, workdir / "refused.log", **_service_settings())
        try:
            service.start()
        except RuntimeError:
            refused = True
        else:
            refused = False
            service.stop()
        log = (workdir / "refused.log").read_text()
        refusal = next((line for line in log.splitlines() if "refusing to start" in line), "")
        service = ServiceProcess(evicting.url, workdir / "override.log",
                                 **_service_settings(redis_require_noeviction="false")).start()
        try:
            override = await _fill(service.url, evicting, learners=learners, batches=batches, rows=rows,
                                   headroom_bytes=headroom_bytes)
        finally:
            service.stop()
        override["service_log_tracebacks"] = (workdir / "override.log").read_text().count("Traceback")
    finally:
        evicting.stop()
    with services_on_redis(workdir / "noeviction", **_service_settings()) as (server, [service]):
        with contextlib.closing(server.client()) as client:
            client.config_set("maxmemory-policy", "allkeys-lru")
            try:
                ready = httpx.get(f"{service.url}/readyz", timeout=10)
            finally:
                client.config_set("maxmemory-policy", "noeviction")
            ready_again = httpx.get(f"{service.url}/readyz", timeout=10).status_code
        readiness = {"status": ready.status_code, "code": ready.json().get("error", {}).get("code"),
                     "status_after_policy_restored": ready_again}
        noeviction = await _fill(service.url, server, learners=learners, batches=batches, rows=rows,
                                 headroom_bytes=headroom_bytes)
        noeviction["service_log_tracebacks"] = service.log.read_text().count("Traceback")
    return {
        "refused_to_start": refused, "refusal_log_line": refusal.strip()[-300:],
        "readiness_when_policy_changes": readiness,
        "override_allkeys_lru": override, "noeviction": noeviction,
        "seconds": round(time.monotonic() - started, 1),
    }
