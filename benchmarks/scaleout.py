"""Scaling out behind the shipped load balancer (deploy/haproxy/haproxy.cfg), and a tenant alone.

    nice -n 5 python -m benchmarks.scaleout [--parts routing failover alone] [--seconds 15] [--out DIR]

Everything runs on 127.0.0.1: one ``redis-server``, real service processes (``python -m kons_service``,
API keys configured) and Debian's ``haproxy`` running the shipped configuration (but for the replicas'
addresses: :class:`testkit.processes.LoadBalancer`). The load generator runs in processes of its own at
the niceness of the run (start the whole run under ``nice``), so the services and it share the machine's
cores as they would on one host.

* ``routing``: 200 ``auto`` learners (dim 8) of 4 tenants, fed by 32 clients in 2 processes (one feedback
  of one row per request, to a learner drawn at random), against 1 replica behind HAProxy, 2 replicas behind
  HAProxy as shipped (consistent hash of the API key and learner), and 2 replicas behind HAProxy in round
  robin, each cell warmed up first (every learner fed twice, then ``--warmup`` seconds of the load), the
  cells interleaved ``--rounds`` times: acknowledged rounds a second,
  their ratio to 1 replica, the services' CPU per round, and full loads of a learner
  (``kons_learner_loads_total``) per 1,000 requests after the warm-up.
* ``failover``: 2 replicas behind HAProxy under the same load; one replica is SIGKILLed and restarted: the
  acknowledged rounds lost (each learner's version against the 2xx it answered: must be 0), the requests
  answered otherwise, and the latency of the first request of each learner it held, on the replica that
  took it over and again once it is back.
* ``alone``: one tenant alone, 16 clients feeding one ``auto`` learner, with the default per-tenant limits
  and with limits no run reaches ("no quotas"): rounds a second and their ratio (issue 40 asks >= 0.9);
  ``--baseline PATH`` runs the default limits from another checkout too (e.g. ``git archive`` of main).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import multiprocessing
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks.common import blas_env, command_line, machine_summary, markdown_table, results_dir
from benchmarks.hostile import _cpu_seconds
from benchmarks.provenance import provenance, publish
from testkit.processes import REPO, LoadBalancer, RedisServer, ServiceProcess
from testkit.scrape import value

AUTO = {"algorithm": "auto", "dim": 8, "params": {}}
TENANTS = {f"tenant{i}": f"key-{i}-{'x' * 16}" for i in range(4)}
METRICS_KEY = "metrics-key-" + "x" * 16
#: Per-tenant limits that no run here reaches: the "no quotas" cell of ``alone``.
UNLIMITED = {"tenant_rate": 1e9, "tenant_burst": 1e9, "tenant_bytes_rate": 1e15, "tenant_bytes_burst": 1e15,
             "tenant_work_rate": 1e18, "tenant_work_burst": 1e18}

Target = tuple[str, str]  # (tenant, learner)


@dataclass(frozen=True)
class Answer:
    """One request of the load generator: when it was sent (monotonic), its latency, status, target and
    the replica that answered (HAProxy's ``X-Kons-Replica``); ``failure``: the error of a request that got
    no answer (status 0)."""

    sent: float
    seconds: float
    status: int
    target: Target
    replica: str
    failure: str


async def _clients(url: str, targets: Sequence[Target], until: float, clients: int,
                   seed: int) -> list[Answer]:
    rng = random.Random(seed)
    noise = np.random.default_rng(seed)
    answers: list[Answer] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        async def one_client() -> None:
            while (sent := time.monotonic()) < until:
                tenant, name = target = rng.choice(targets)
                x = noise.normal(size=8)
                body = {"x": x.tolist(), "y": float(x.sum() + 0.1 * noise.normal())}
                headers = {"authorization": f"Bearer {TENANTS[tenant]}"}
                try:
                    response = await client.post(f"/v1/learners/{name}/feedback", json=body,
                                                 headers=headers)
                    status, replica = response.status_code, response.headers.get("x-kons-replica", "")
                    failure = ""
                except httpx.HTTPError as error:
                    status, replica, failure = 0, "", type(error).__name__
                answers.append(Answer(sent, time.monotonic() - sent, status, target, replica, failure))

        await asyncio.gather(*(one_client() for _ in range(clients)))
    return answers


def _generator(url: str, targets: Sequence[Target], until: float, clients: int, seed: int,
               out: multiprocessing.Queue[list[Answer]]) -> None:
    out.put(asyncio.run(_clients(url, targets, until, clients, seed)))


def drive(url: str, targets: Sequence[Target], seconds: float, clients: int = 32,
          processes: int = 2) -> list[Answer]:
    """Feed ``targets`` at random from ``clients`` clients in ``processes`` processes for ``seconds``."""
    until = time.monotonic() + seconds
    queue: multiprocessing.Queue[list[Answer]] = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=_generator,
                                       args=(url, targets, until, clients // processes, i, queue))
               for i in range(processes)]
    for worker in workers:
        worker.start()
    answers = [answer for _ in workers for answer in queue.get(timeout=seconds + 120)]
    for worker in workers:
        worker.join(30)
    return answers


@contextlib.contextmanager
def deployment(
    workdir: Path, redis: RedisServer, replicas: int, balance: str | None = None,
    settings: dict[str, object] | None = None,
) -> Iterator[tuple[LoadBalancer, list[ServiceProcess]]]:
    """``replicas`` service processes on ``redis`` (with ``settings``) behind HAProxy (the shipped
    configuration, or with ``balance`` instead of its hash); stopped on exit."""
    keys = ",".join(f"{tenant}:{key}" for tenant, key in TENANTS.items())
    workdir.mkdir(parents=True, exist_ok=True)
    services = [ServiceProcess(redis.url, workdir / f"service{i}.log", REPO, api_keys=keys,
                               metrics_key=METRICS_KEY, **(settings or {})) for i in range(replicas)]
    for service in services:
        service.env.update(blas_env(1))
        service.start()
    balancer = LoadBalancer(workdir / "lb", [service.port for service in services], balance).start()
    try:
        balancer.wait_states({f"kons{i + 1}": "UP" for i in range(replicas)})
        yield balancer, services
    finally:
        balancer.stop()
        for service in services:
            service.stop()


def falls_of(balancer: LoadBalancer) -> int:
    """How many times HAProxy's checks have taken a replica out of the ring so far."""
    return sum(int(fields["chkdown"] or 0) for fields in balancer.stats().values())


LOAD_REASONS = ("cold", "dropped", "behind")


def loads(services: Sequence[ServiceProcess]) -> collections.Counter[str]:
    """Full loads of a learner so far, by reason, summed over the replicas (``kons_learner_loads_total``)."""
    total: collections.Counter[str] = collections.Counter()
    for service in services:
        text = httpx.get(f"{service.url}/metrics", headers={"authorization": f"Bearer {METRICS_KEY}"},
                         timeout=30).text
        for reason in LOAD_REASONS:
            total[reason] += int(value(text, "kons_learner_loads_total", reason=reason) or 0)
    return total


def touch(url: str, targets: Sequence[Target]) -> None:
    """One feedback to every learner, 16 at once: each is then held by the replica the router sends it to."""
    x = [0.1] * 8

    async def touch_all() -> None:
        gate = asyncio.Semaphore(16)
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            async def one(tenant: str, name: str) -> None:
                async with gate:
                    response = await client.post(f"/v1/learners/{name}/feedback", json={"x": x, "y": 0.1},
                                                 headers={"authorization": f"Bearer {TENANTS[tenant]}"})
                    response.raise_for_status()

            await asyncio.gather(*(one(tenant, name) for tenant, name in targets))

    asyncio.run(touch_all())


def create(url: str, targets: Sequence[Target]) -> None:
    with httpx.Client(base_url=url, timeout=60) as client:
        for tenant, name in targets:
            response = client.put(f"/v1/learners/{name}", json=AUTO,
                                  headers={"authorization": f"Bearer {TENANTS[tenant]}"})
            if response.status_code not in (200, 201):
                raise RuntimeError(response.text)


@dataclass
class Cell:
    """One measured stretch of one set-up."""

    seconds: float
    requests: int
    acknowledged: int
    loads: collections.Counter[str]
    cpu_seconds: float
    falls: int  # replicas HAProxy's checks took out of the ring during the cell
    latencies: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.acknowledged / self.seconds


SETUPS = {"1 replica": (1, None), "2 replicas, shipped hash": (2, None),
          "2 replicas, round robin": (2, "roundrobin")}


def routing(workdir: Path, redis: RedisServer, targets: Sequence[Target], seconds: float, warmup: float,
            rounds: int) -> dict[str, list[Cell]]:
    cells: dict[str, list[Cell]] = collections.defaultdict(list)
    for round_ in range(rounds):
        for label, (replicas, balance) in SETUPS.items():
            cell_dir = workdir / f"{round_}-{replicas}-{balance}"
            with deployment(cell_dir, redis, replicas, balance) as (lb, services):
                touch(lb.url, targets)  # every learner at home (round robin: on every replica)
                touch(lb.url, targets)
                drive(lb.url, targets, warmup)
                loaded, falls = loads(services), falls_of(lb)
                cpu = sum(_cpu_seconds(service.pid) for service in services)
                answers = drive(lb.url, targets, seconds)
                cells[label].append(Cell(
                    seconds, len(answers), sum(a.status == 200 for a in answers), loads(services) - loaded,
                    sum(_cpu_seconds(service.pid) for service in services) - cpu, falls_of(lb) - falls,
                    [a.seconds for a in answers if a.status == 200]))
    return cells


def routing_table(cells: dict[str, list[Cell]]) -> list[str]:
    one = sum(c.acknowledged for c in cells["1 replica"]) / sum(c.seconds for c in cells["1 replica"])
    rows = []
    for label, measured in cells.items():
        acknowledged, requests = sum(c.acknowledged for c in measured), sum(c.requests for c in measured)
        rate = acknowledged / sum(c.seconds for c in measured)
        latencies = [t for c in measured for t in c.latencies]
        rows.append([label, " / ".join(f"{c.rate:.0f}" for c in measured), f"{rate / one:.2f}x",
                     f"{1000 * sum(c.cpu_seconds for c in measured) / max(acknowledged, 1):.2f}",
                     f"{1000 * sum(c.loads.total() for c in measured) / max(requests, 1):.2f} ("
                     + ", ".join(f"{reason} {sum(c.loads[reason] for c in measured)}"
                                 for reason in LOAD_REASONS) + ")",
                     f"{1000 * statistics.median(latencies):.0f} / {1000 * np.quantile(latencies, 0.99):.0f}",
                     f"{requests - acknowledged}", f"{sum(c.falls for c in measured)}"])
    return markdown_table(["set-up", "acknowledged rounds/s (each round)", "vs 1 replica",
                           "service CPU ms per round", "full loads per 1,000 requests (how many, by reason)",
                           "p50 / p99 ms",
                           "not acknowledged", "replicas out of the ring"], rows, "lrrrrrrr")


def failover(workdir: Path, redis: RedisServer, targets: Sequence[Target], seconds: float,
             warmup: float) -> dict[str, Any]:
    with deployment(workdir / "failover", redis, 2) as (lb, services), \
            httpx.Client(base_url=lb.url, timeout=60) as client:
        drive(lb.url, targets, warmup)

        def versions() -> dict[Target, int]:
            return {(tenant, name): client.get(f"/v1/learners/{name}", headers={
                "authorization": f"Bearer {TENANTS[tenant]}"}).json()["version"] for tenant, name in targets}

        before = versions()
        queue: multiprocessing.Queue[list[Answer]] = multiprocessing.Queue()
        until = time.monotonic() + seconds
        workers = [multiprocessing.Process(target=_generator,
                                           args=(lb.url, targets, until, 16, 100 + i, queue))
                   for i in range(2)]
        for worker in workers:
            worker.start()
        time.sleep(seconds / 3)
        killed = time.monotonic()
        services[1].kill()
        services[1].start()  # back as soon as it answers /healthz ...
        restarted = time.monotonic()
        lb.wait_states({"kons2": "UP"})  # ... and in the ring again once HAProxy's checks pass
        back = time.monotonic()
        answers = [answer for _ in workers for answer in queue.get(timeout=seconds + 120)]
        for worker in workers:
            worker.join(30)
        after = versions()
    acknowledged = collections.Counter(a.target for a in answers if a.status == 200)
    lost = sum(max(0, acknowledged[t] - (after[t] - before[t])) for t in targets)
    unacknowledged_applied = sum(max(0, after[t] - before[t] - acknowledged[t]) for t in targets)
    held = {a.target for a in answers if a.sent < killed and a.replica == "kons2"}

    def firsts(start: float, replica: str | None) -> list[float]:
        first: dict[Target, Answer] = {}
        for a in sorted(answers, key=lambda a: a.sent):
            if a.target in held and a.sent >= start and a.target not in first and a.status == 200 and (
                    replica is None or a.replica == replica):
                first[a.target] = a
        return [a.seconds for a in first.values()]

    steady = [a.seconds for a in answers if a.sent < killed and a.status == 200]
    return {"acknowledged": sum(acknowledged.values()), "lost": lost, "requests": len(answers),
            "not_acknowledged": sum(a.status != 200 for a in answers),
            "statuses": dict(collections.Counter(a.failure or str(a.status) for a in answers
                                                 if a.status != 200)),
            "applied_unacknowledged": unacknowledged_applied, "learners_held": len(held),
            "restart_seconds": restarted - killed, "back_in_ring_seconds": back - killed,
            "steady_ms": [1000 * statistics.median(steady), 1000 * float(np.quantile(steady, 0.99))],
            "moved_first_ms": sorted(1000 * t for t in firsts(killed, "kons1")),
            "back_first_ms": sorted(1000 * t for t in firsts(back, "kons2"))}


#: Rounds the learner of ``alone`` plays before it is measured: a trained ``auto`` learner, whose state (and
#: so the work a round is charged) is several times a new one's. Every cell starts from that same state.
PRETRAINED_ROUNDS = 6000
#: ``auto`` with its task said, so that a state exported from one imports into another.
AUTO_REGRESSION = {"algorithm": "auto", "dim": 8, "params": {"task": "regression"}}


def trained_state(url: str, tenant: str, rounds: int) -> bytes:
    """The state of an ``auto`` learner fed ``rounds`` rows in batches (halved on a 413, as a client
    reading it would)."""
    noise, batch, fed = np.random.default_rng(7), 100, 0
    with httpx.Client(base_url=url, timeout=120,
                      headers={"authorization": f"Bearer {TENANTS[tenant]}"}) as client:
        client.put("/v1/learners/trained", json=AUTO_REGRESSION).raise_for_status()
        while fed < rounds:
            xs = noise.normal(size=(batch, 8))
            items = [{"x": x.tolist(), "y": float(x.sum())} for x in xs]
            response = client.post("/v1/learners/trained/feedback", json={"items": items})
            if response.status_code == 413:
                batch = max(1, batch // 2)
            else:
                response.raise_for_status()
                fed += batch
        state = client.get("/v1/learners/trained/state")
        state.raise_for_status()
        return state.content


def alone(workdir: Path, redis: RedisServer, seconds: float, rounds: int,
          baseline: Path | None) -> dict[str, list[float]]:
    setups: dict[str, tuple[Path, dict[str, object]]] = {
        "default limits": (REPO, {}), "no quotas": (REPO, dict(UNLIMITED))}
    if baseline is not None:
        setups["default limits, baseline"] = (baseline, {})
    rates: dict[str, list[float]] = collections.defaultdict(list)
    keys = ",".join(f"{tenant}:{key}" for tenant, key in TENANTS.items())
    with deployment(workdir / "trainer", redis, 1, settings=dict(UNLIMITED)) as (_, (trainer,)):
        state = trained_state(trainer.url, "tenant0", PRETRAINED_ROUNDS)
    headers = {"authorization": f"Bearer {TENANTS['tenant0']}"}
    for round_ in range(rounds):
        order = list(setups.items())
        order = order[round_ % len(order):] + order[:round_ % len(order)]  # each setup first in turn
        for index, (label, (checkout, settings)) in enumerate(order):
            name = f"alone{round_}-{index}"
            service = ServiceProcess(redis.url, workdir / f"{name}.log", checkout, api_keys=keys, **settings)
            service.env.update(blas_env(1))
            service.start()
            try:
                httpx.put(f"{service.url}/v1/learners/{name}", json=AUTO_REGRESSION, headers=headers,
                          timeout=60).raise_for_status()
                httpx.put(f"{service.url}/v1/learners/{name}/state", content=state, timeout=120,
                          headers={**headers, "content-type": "application/octet-stream"}).raise_for_status()
                target = [("tenant0", name)]
                drive(service.url, target, 3, clients=16, processes=2)  # warm-up: the learner at home
                answers = drive(service.url, target, seconds, clients=16, processes=2)
                rates[label].append(sum(a.status == 200 for a in answers) / seconds)
            finally:
                service.stop()
    return rates


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="+", default=["routing", "failover", "alone"],
                        choices=["routing", "failover", "alone"])
    parser.add_argument("--learners", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=15.0, help="measured stretch of each cell")
    parser.add_argument("--warmup", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", type=Path, help="a checkout whose default limits `alone` measures too")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    # a SIGTERM stops the run as an exception does: every service, HAProxy and Redis it started stops too
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    stamp = provenance(["kons", "kons_service", "testkit/processes.py", "deploy/haproxy/haproxy.cfg",
                        "benchmarks/scaleout.py"])
    load_start = os.getloadavg()
    targets = [(tenant, f"learner{i}") for i in range(args.learners) for tenant in [list(TENANTS)[i % 4]]]
    record: dict[str, Any] = {}
    report = ["# Scaling out behind HAProxy, and a tenant alone", "",
              f"    {command_line('benchmarks.scaleout', argv, outputs=('--out',))}", ""]
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        redis = RedisServer(workdir / "redis").start()
        try:
            with deployment(workdir / "setup", redis, 1) as (lb, _):
                create(lb.url, targets)
            if "routing" in args.parts:
                cells = routing(workdir, redis, targets, args.seconds, args.warmup, args.rounds)
                record["routing"] = {label: [vars(c) | {"latencies": None, "loads": dict(c.loads)}
                                             for c in measured]
                                     for label, measured in cells.items()}
                report += [f"## {args.learners} learners, 32 clients: 1 replica against 2 behind HAProxy", "",
                           *routing_table(cells), ""]
            if "failover" in args.parts:
                found = record["failover"] = failover(workdir, redis, targets, 3 * args.seconds, args.warmup)
                moved, home = found["moved_first_ms"], found["back_first_ms"]
                report += ["## A replica SIGKILLed and restarted behind HAProxy", "",
                           f"{found['acknowledged']} rounds acknowledged, **{found['lost']} lost** (each "
                           f"learner's version against its 2xx answers); {found['not_acknowledged']} of "
                           f"{found['requests']} requests answered otherwise {found['statuses']} "
                           f"({found['applied_unacknowledged']} of those applied all the same). The killed "
                           f"replica held {found['learners_held']} learners; it answered /healthz again "
                           f"{found['restart_seconds']:.1f} s after the kill and was in HAProxy's ring after "
                           f"{found['back_in_ring_seconds']:.1f} s. Before the kill: p50 "
                           f"{found['steady_ms'][0]:.0f} ms, p99 {found['steady_ms'][1]:.0f} ms.", "",
                           *markdown_table(
                               ["first request of each moved learner", "learners", "p50 ms", "max ms"],
                               [[where, len(ms), f"{statistics.median(ms):.0f}" if ms else "-",
                                 f"{max(ms):.0f}" if ms else "-"]
                                for where, ms in (("on the replica that took it over", moved),
                                                  ("back on the restarted replica (a cold load)", home))],
                               "lrrr"), ""]
            if "alone" in args.parts:
                rates = record["alone"] = alone(workdir, redis, args.seconds, args.rounds, args.baseline)
                free = statistics.mean(rates["no quotas"])
                report += ["## One tenant alone: 16 clients feeding one `auto` learner", "",
                           *markdown_table(["limits", "rounds/s (each round)", "vs no quotas"],
                                           [[label, " / ".join(f"{r:.0f}" for r in measured),
                                             f"{statistics.mean(measured) / free:.2f}x"]
                                            for label, measured in rates.items()], "lrr"), ""]
        finally:
            redis.stop()
    report.insert(4, f"machine: {machine_summary()}; load average {load_start[0]:.1f} at the start, "
                  f"{os.getloadavg()[0]:.1f} at the end (other developers' work on the same cores); run at "
                  f"niceness {os.nice(0)}, the load generator too.\n")
    text = "\n".join(report)
    print(text)
    if args.out is not None:
        publish(results_dir(args.out, "scaleout"), "scaleout", stamp, text, record, indent=1)


if __name__ == "__main__":
    main()
