"""Memory in a soak: does a replica's resident memory, and Redis's, level off under steady mixed traffic?

Two real service processes (``--replicas``) share one real Redis and serve ``--learners`` learners of three
tenants (API keys on), a third each of: ``auto`` on dense rows of 8 numbers (regression), ``auto`` on
records of numbers and categories (a 5-class classifier), and ``ons`` on 16 numbers. ``--clients`` client
threads send, for ``--seconds``, to either replica at random: predicts (one row, or 10; half of them
keeping the rows under ids), feedbacks with a ``request_id`` (as the Python client sends every one: one
round, or 20), feedbacks naming remembered ids, and reads of a learner and of its history. Every
``--sample-seconds`` the run records each replica's RSS, Redis's ``used_memory`` and, per kind of key, what
Redis's ``MEMORY USAGE`` gives for the learners' keys; the report is the curves' table, and whether the
last third of the run still grows (a plateau, or a leak)::

    nice -n 5 python -m benchmarks.soak --seconds 600 --out benchmarks/results

``--rate`` paces the clients (requests a second, all together) for a long run on a shared machine.

``--checkout PATH`` runs the service processes from another source tree (e.g. a ``git worktree`` of an
earlier commit), to compare before and after a change side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks import registry
from benchmarks.common import REPO, command_line, git_commit, machine_summary, markdown_table, results_dir
from benchmarks.provenance import provenance, publish
from kons_service.store import LearnerRef
from kons_service.store.keys import LEARNER_PARTS, learner_key
from testkit.processes import RedisServer, ServiceProcess, vm_rss_kib
from testkit.scrape import value

__all__ = ["main"]

TENANTS = ("t0", "t1", "t2")
KINDS: dict[str, dict[str, Any]] = {
    "dense": {"algorithm": "auto", "dim": 8},
    "records": {"algorithm": "auto", "params": {"task": "classification"}},
    "ons": {"algorithm": "ons", "dim": 16},
}
DIMS = {"dense": 8, "ons": 16}
CATEGORIES = [f"c{i}" for i in range(40)]
CLASSES = ["red", "green", "blue", "cyan", "plum"]
METRICS_KEY = "soak-metrics"


@dataclass(frozen=True)
class Learner:
    tenant: str
    name: str
    kind: str


def _learners(count: int) -> list[Learner]:
    kinds = list(KINDS)
    return [Learner(TENANTS[i % len(TENANTS)], f"{kinds[i % len(kinds)]}-{i}", kinds[i % len(kinds)])
            for i in range(count)]


def _row(learner: Learner, rng: random.Random) -> Any:
    if learner.kind == "records":
        return {"size": rng.gauss(0, 1), "weight": rng.gauss(3, 1), "colour": rng.choice(CATEGORIES),
                "shop": rng.choice(CATEGORIES[:8]), "fresh": rng.random() < 0.5}
    return [rng.gauss(0, 1) for _ in range(DIMS[learner.kind])]


def _label(learner: Learner, x: Any) -> Any:
    if learner.kind == "records":
        return CLASSES[(CATEGORIES.index(x["colour"]) + int(x["size"] > 0)) % len(CLASSES)]
    return float(np.sin(x[0]) + 0.5 * x[1])


@dataclass
class Tally:
    """What the clients got, by status (0: a connection error)."""

    statuses: Counter[int] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, status: int) -> None:
        with self.lock:
            self.statuses[status] += 1


def _client(urls: Sequence[str], learners: Sequence[Learner], keys: dict[str, str], seed: int, stop: float,
            tally: Tally, interval: float) -> None:
    rng = random.Random(seed)
    due = time.monotonic()
    clients = [httpx.Client(base_url=url, timeout=30) for url in urls]
    serial = 0
    remembered: dict[str, list[str]] = {}
    try:
        while time.monotonic() < stop:
            # a steady pace if asked, not as fast as the replicas answer: a long soak shares the machine
            due = max(due + interval, time.monotonic() - interval)  # a late answer is not made up in a burst
            time.sleep(max(0.0, due - time.monotonic()))
            learner, http = rng.choice(learners), rng.choice(clients)
            path = f"/v1/learners/{learner.name}"
            headers = {"Authorization": f"Bearer {keys[learner.tenant]}"}
            serial += 1
            roll = rng.random()
            try:
                if roll < 0.35:
                    rows = [_row(learner, rng) for _ in range(1 if rng.random() < 0.7 else 10)]
                    body: dict[str, Any] = {"xs": rows}
                    if rng.random() < 0.5:
                        ids = [f"p{seed}-{serial}-{i}" for i in range(len(rows))]
                        body["ids"] = ids
                        remembered.setdefault(learner.name, []).extend(ids)
                    response = http.post(f"{path}/predict", json=body, headers=headers)
                elif roll < 0.85:
                    rows = [_row(learner, rng) for _ in range(1 if rng.random() < 0.75 else 20)]
                    items = [{"x": x, "y": _label(learner, x)} for x in rows]
                    response = http.post(f"{path}/feedback", headers=headers, json={
                        "items": items, "request_id": f"r{seed}-{serial}"})
                elif roll < 0.92 and remembered.get(learner.name):
                    # (the label is a guess: the features are not kept here)
                    items = [{"id": i, "y": CLASSES[0] if learner.kind == "records" else 0.0}
                             for i in remembered.pop(learner.name)[:20]]
                    response = http.post(f"{path}/feedback", headers=headers, json={
                        "items": items, "request_id": f"r{seed}-{serial}"})
                else:
                    response = http.get(path + ("/history" if rng.random() < 0.5 else ""), headers=headers)
                tally.add(response.status_code)
            except httpx.HTTPError:
                tally.add(0)
    finally:
        for http in clients:
            http.close()


def _redis_by_part(server: RedisServer, learners: Sequence[Learner]) -> dict[str, int]:
    """Bytes of the learners' keys, by the part that ends their name (``MEMORY USAGE``)."""
    client = server.client()
    pipe = client.pipeline(transaction=False)
    names = [(part, learner_key(LearnerRef(learner.tenant, learner.name), part))
             for learner in learners for part in LEARNER_PARTS]
    for _, key in names:
        pipe.memory_usage(key, samples=0)
    totals: Counter[str] = Counter()
    for (part, _), used in zip(names, pipe.execute(), strict=True):
        totals[part] += used or 0
    return dict(totals)


def _held_mib(service: ServiceProcess) -> float:
    """The state bytes of the learners a replica holds, as its ``kons_cached_bytes`` says (MiB)."""
    metrics = httpx.get(f"{service.url}/metrics", headers={"Authorization": f"Bearer {METRICS_KEY}"},
                        timeout=30).text
    return round((value(metrics, "kons_cached_bytes") or 0.0) / 2**20, 1)


def _sample(started: float, services: Sequence[ServiceProcess], server: RedisServer,
            learners: Sequence[Learner], tally: Tally) -> dict[str, Any]:
    info = server.client().info("memory")
    with tally.lock:
        requests = sum(tally.statuses.values())
    return {"seconds": round(time.monotonic() - started, 1),
            "rss_mib": [round(vm_rss_kib(s.pid) / 1024, 1) for s in services],
            "held_mib": [_held_mib(s) for s in services],
            "redis_used_mb": round(int(info["used_memory"]) / 1e6, 2),
            "redis_parts_mb": {k: round(v / 1e6, 3) for k, v in _redis_by_part(server, learners).items()},
            "requests": requests}


def _growth(samples: Sequence[dict[str, Any]], values: Sequence[float]) -> float:
    """The growth of ``values`` over the last third of the run, per minute (least squares)."""
    tail = max(3, len(samples) // 3)
    t = np.array([s["seconds"] for s in samples[-tail:]]) / 60
    v = np.array(values[-tail:])
    return float(np.polyfit(t, v, 1)[0]) if len(t) >= 2 else 0.0


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(args.workdir or results_dir(None, "soak-work"))
    server = RedisServer(workdir / "redis").start()
    keys = {tenant: f"key-{tenant}" for tenant in TENANTS}
    api_keys = ",".join(f"{tenant}:{key}" for tenant, key in keys.items())
    services: list[ServiceProcess] = []
    try:
        for i in range(args.replicas):
            service = ServiceProcess(server.url, workdir / f"service{i}.log", args.checkout or REPO,
                                     api_keys=api_keys, metrics_key=METRICS_KEY, tenant_rate=100_000,
                                     tenant_burst=100_000, tenant_concurrency=1000)
            service.env.update(dict(item.split("=", 1) for item in args.env))
            services.append(service.start())
        learners = _learners(args.learners)
        with httpx.Client(base_url=services[0].url, timeout=30) as http:
            for learner in learners:
                headers = {"Authorization": f"Bearer {keys[learner.tenant]}"}
                put = http.put(f"/v1/learners/{learner.name}", json=KINDS[learner.kind], headers=headers)
                put.raise_for_status()
        tally, started = Tally(), time.monotonic()
        stop = started + args.seconds
        interval = args.clients / args.rate if args.rate else 0.0
        threads = [threading.Thread(target=_client, args=([s.url for s in services], learners, keys, seed,
                                                          stop, tally, interval), daemon=True)
                   for seed in range(args.clients)]
        samples = [_sample(started, services, server, learners, tally)]
        for thread in threads:
            thread.start()
        while time.monotonic() < stop:
            time.sleep(min(args.sample_seconds, max(0.0, stop - time.monotonic())))
            samples.append(_sample(started, services, server, learners, tally))
            print(json.dumps(samples[-1]), flush=True)
        for thread in threads:
            thread.join(timeout=60)
        return {"samples": samples, "statuses": {str(k): v for k, v in sorted(tally.statuses.items())},
                "learners": len(learners), "replicas": args.replicas, "clients": args.clients,
                "seconds": args.seconds, "rate": args.rate, "checkout": str(args.checkout or "this"),
                "env": args.env}
    finally:
        for service in services:
            service.stop()
        server.stop()


def report(results: dict[str, Any], commit: str, command: str) -> str:
    samples = results["samples"]
    replicas = results["replicas"]
    rss = [[s["rss_mib"][i] for s in samples] for i in range(replicas)]
    redis_mb = [s["redis_used_mb"] for s in samples]
    parts = sorted({part for s in samples for part, used in s["redis_parts_mb"].items() if used})
    header = ["s", "requests", *[f"RSS {i} (MiB)" for i in range(replicas)],
              *[f"state held {i} (MiB)" for i in range(replicas)], "Redis used (MB)",
              *[f"{p} keys (MB)" for p in parts]]
    rows = [[s["seconds"], s["requests"], *s["rss_mib"], *s["held_mib"], s["redis_used_mb"],
             *[s["redis_parts_mb"].get(p, 0) for p in parts]] for s in samples]
    growth = [_growth(samples, r) for r in rss]
    lines = [
        "# Soak: replica RSS and Redis memory under steady mixed traffic", "",
        f"`{command}` at commit {commit} (service code: {results['checkout']}, environment "
        f"{results['env'] or 'as is'}). {machine_summary()}; load average {results['load_average']} at the "
        "end (the machine is shared).", "",
        f"{replicas} replicas on one Redis, {results['learners']} learners of 3 tenants, "
        f"{results['clients']} client threads for {results['seconds']} s"
        f"{' at ' + str(results['rate']) + ' requests/s' if results.get('rate') else ''}; answers by status: "
        f"{results['statuses']}.", "",
        "| | start | end | growth over the last third |", "|---|---:|---:|---:|",
        *[f"| RSS replica {i} (MiB) | {r[0]} | {r[-1]} | {g:+.2f} MiB/min |" for i, (r, g) in
          enumerate(zip(rss, growth, strict=True))],
        *[f"| learner state held by replica {i} (MiB) | {samples[0]['held_mib'][i]} | "
          f"{samples[-1]['held_mib'][i]} | {_growth(samples, [s['held_mib'][i] for s in samples]):+.2f} "
          "MiB/min |" for i in range(replicas)],
        f"| Redis used_memory (MB) | {redis_mb[0]} | {redis_mb[-1]} | "
        f"{_growth(samples, redis_mb):+.2f} MB/min |",
        "", *markdown_table(header, rows, "r" * len(header)), "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--sample-seconds", type=float, default=20.0)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--learners", type=int, default=36)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rate", type=float, default=0.0,
                        help="requests a second, all clients together (0: each as fast as answered)")
    parser.add_argument("--checkout", type=Path, default=None, help="source tree the services run")
    parser.add_argument("--env", nargs="*", default=[], metavar="NAME=VALUE",
                        help="environment variables of the service processes (e.g. MALLOC_ARENA_MAX=2)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--name", default="soak", help="the report's name (soak.md, soak.json)")
    args = parser.parse_args(argv)
    stamp = provenance(registry.sources_of("soak.md") or ())  # the code imported now is what runs
    commit = git_commit()
    results = run(args)
    results["load_average"] = [round(x, 2) for x in os.getloadavg()]
    command = command_line("benchmarks.soak", argv, outputs=("--out", "--workdir"))
    publish(results_dir(args.out, "soak"), args.name, stamp, report(results, commit, command), results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
