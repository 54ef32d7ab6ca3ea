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
  acknowledged rounds in version order, in this process. With ``lost = duplicated = 0`` this proves the
  service holds exactly the acknowledged rounds, each once, in the acknowledged order;
* ``log_mismatches``: log entries still in Redis (the tail after the newest snapshot) whose request id is
  not the one acknowledged at that version.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis

import kons
from kons_service.store import LearnerRef, Store
from testkit.processes import SPEC, services_on_redis, vm_rss_kib

__all__ = [
    "HEADERS",
    "TENANT_KEYS",
    "Ledger",
    "audit",
    "crash_scenario",
    "redis_fault_scenario",
    "replica_scenario",
    "round_body",
    "soak_scenario",
    "storm",
]

NAME = "storm"
TENANT_KEYS = "alpha:alpha-key,beta:beta-key"
HEADERS = {"Authorization": "Bearer alpha-key"}
PROBES = [[0.0, 0.0, 0.0], [0.5, -0.5, 0.25], [-1.0, 1.0, 0.9], [3.0, 0.1, -2.0]]
_BACKOFF = (0.02, 0.25)


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


def local_replay(spec: dict[str, Any], ledger: Ledger) -> kons.Learner:
    """One kons learner fed the acknowledged rounds in version order, in this process."""
    learner = kons.learner_from_params(spec["algorithm"], {**spec["params"], "dim": spec["dim"]})
    for _, body in sorted(ledger.acked.values(), key=lambda vb: vb[0]):
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
    local = local_replay(spec, ledger)
    by_version = {v: rid for rid, (v, _) in ledger.acked.items()}
    client = redis.Redis.from_url(redis_url)
    try:
        log_key = next(k for k in Store(client).keys_of(LearnerRef("alpha", NAME)) if k.endswith(":log"))
        tail = client.xrange(log_key)
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


def _create(url: str, spec: dict[str, Any] = SPEC) -> None:
    response = httpx.put(f"{url}/v1/learners/{NAME}", json=spec, headers=HEADERS, timeout=30)
    response.raise_for_status()


def _service_settings(**overrides: Any) -> dict[str, Any]:
    return {"api_keys": TENANT_KEYS, "lease_ttl_ms": 1000, "lease_wait_seconds": 2.0,
            "snapshot_every_rounds": 150, "snapshot_interval_seconds": 2.0, "redis_timeout_seconds": 0.5,
            **overrides}


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
    spec: dict[str, Any] = SPEC,
) -> dict[str, Any]:
    """A feedback storm against one learner of ``spec`` in a service process that is SIGKILLed ``kills``
    times and restarted."""
    rng = random.Random(seed)
    with services_on_redis(workdir, **_service_settings()) as (server, [service]):
        started = time.monotonic()
        _create(service.url, spec)

        async def disturb() -> None:
            for _ in range(kills):
                await asyncio.sleep(rng.uniform(*gap))
                service.kill()
                await asyncio.to_thread(service.start)

        ledger = await _run_storm([service.url], clients, disturb, seed)
        return {"kills": kills, "clients": clients, **ledger.summary(),
                **audit([service.url], server.url, ledger, spec),
                "seconds": round(time.monotonic() - started, 1)}


async def redis_fault_scenario(
    workdir: Path, *, clients: int = 4, outage_seconds: float = 3.0, pause_seconds: float = 3.0,
    calm_seconds: float = 2.0, kill_redis: bool = False, redis_timeout: float = 0.5, seed: int = 0,
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

    with services_on_redis(workdir, **_service_settings(redis_timeout_seconds=redis_timeout)) as (
            server, [service]):
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
        return {"clients": clients, "redis_timeout_s": redis_timeout, **ledger.summary(),
                **audit([service.url], server.url, ledger), "phases": per_phase,
                "service_restarted": service.starts - 1, "seconds": round(time.monotonic() - started, 1)}


async def replica_scenario(
    workdir: Path, *, replicas: int = 2, clients: int = 6, seconds: float = 5.0, seed: int = 0,
    spec: dict[str, Any] = SPEC,
) -> dict[str, Any]:
    """Clients send feedback to one learner of ``spec`` through ``replicas`` service processes on one
    Redis."""
    with services_on_redis(workdir, replicas, **_service_settings()) as (server, services):
        started = time.monotonic()
        urls = [s.url for s in services]
        _create(urls[0], spec)
        ledger = await _run_storm(urls, clients, lambda: asyncio.sleep(seconds), seed)
        return {"replicas": replicas, "clients": clients, **ledger.summary(),
                **audit(urls, server.url, ledger, spec), "seconds": round(time.monotonic() - started, 1)}


async def soak_scenario(
    workdir: Path, *, seconds: float, clients: int = 4, learners: int = 8, sample_every: float = 1.0,
    seed: int = 0,
) -> dict[str, Any]:
    """A bounded soak: feedback, predicts with ids (some never consumed) and batches over several
    learners of bounded state (ONS, dim 8), sampling the service's VmRSS and Redis's memory."""
    settings = _service_settings(id_ttl_seconds=5, request_id_ttl_seconds=5, request_ids_max=2000)
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

        async def client(c: int, http: httpx.AsyncClient) -> None:
            nonlocal rounds
            rng = random.Random(seed * 31 + c)
            seq = 0
            while time.monotonic() < deadline:
                name = f"s{rng.randrange(learners)}"
                x = [rng.uniform(-1, 1) for _ in range(8)]
                kind = seq % 4
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
            while time.monotonic() < deadline:
                used = int(r.info("memory")["used_memory"])
                samples.append((time.monotonic() - started, vm_rss_kib(service.pid), used))
                await asyncio.sleep(sample_every)

        async with httpx.AsyncClient(timeout=30, headers=HEADERS) as http:
            await asyncio.gather(sampler(), *(client(c, http) for c in range(clients)))
        state_bytes = sum(len(httpx.get(f"{service.url}/v1/learners/s{i}/state", headers=HEADERS).content)
                          for i in range(learners))
        await asyncio.sleep(6)  # past both TTLs: the id stores must be gone or nearly empty
        store = Store(r)
        leftovers = {"ids": 0, "reqs": 0, "log": 0}
        for i in range(learners):
            for key in store.keys_of(LearnerRef("alpha", f"s{i}")):
                kind = key.rsplit(":", 1)[1]
                if kind in ("ids", "reqs"):
                    leftovers[kind] += r.hlen(key)
                elif kind == "log":
                    leftovers["log"] += r.xlen(key)
    half = [s for s in samples if s[0] >= samples[-1][0] / 2] if samples else []
    rss = [s[1] for s in samples]
    return {
        "seconds": round(seconds, 1), "clients": clients, "learners": learners, "rounds": rounds,
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
