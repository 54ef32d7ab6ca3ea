"""The capacity model of ``docs/capacity.md`` against a measured run on this machine, at small scale.

The model predicts a service process's work from two kinds of figures: what a learner costs in-process (the
CPU of a round and its state's bytes, measured here, in this process with one BLAS thread, on as many rows
as the service's learners got), and what the service adds to each feedback (:data:`SERVICE_CPU_MS`, the
published figure of ``benchmarks/results/hotpath.md``, part a). Its predictions for ``--learners`` learners
of one kind, each given ``--warm`` rows and then single-row feedbacks from ``--clients`` concurrent clients
for ``--seconds``:

* CPU per feedback = the in-process round + the service's share;
* feedbacks per second = the CPU the service process got over the run / the CPU per feedback (and at one
  whole core: 1 / the CPU per feedback);
* the process's memory per cached learner = its state's bytes;
* Redis's memory per learner, once every learner is snapshotted (a graceful stop snapshots them all) = its
  snapshot's bytes, the state's.

Measured: the service's CPU (``/proc``, its process tree), its acknowledged feedbacks, its RSS before and
after the learners were created and warmed, and Redis's ``used_memory`` before the learners and after the
stop::

    nice -n 5 python -m benchmarks.capacity --out benchmarks/results
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np

import kons
from benchmarks import registry
from benchmarks.common import blas_threads, machine_summary, markdown_table, run_and_publish
from benchmarks.hotpath import process_tree_cpu_seconds
from testkit.processes import RedisServer, ServiceProcess, vm_rss_kib

__all__ = ["SERVICE_CPU_MS", "main", "run"]

#: The service's CPU per single-row feedback beyond the learner's round (parse, check, log, answer): 6.05 ms
#: per `auto` feedback less its 2.371 ms in-process round (``benchmarks/results/hotpath.md``, part a).
SERVICE_CPU_MS = 6.05 - 2.371


def _stream(rng: np.random.Generator, n: int, dim: int) -> list[tuple[list[float], float]]:
    x = rng.normal(size=(n, dim))
    return [(row.tolist(), float(np.sin(row[0]) + 0.5 * row[1])) for row in x]


def in_process(spec: dict[str, Any], warm: list[tuple[list[float], float]],
               timed: list[tuple[list[float], float]]) -> dict[str, float]:
    """One learner of ``spec`` here: ``warm`` rows untimed (then its state's bytes), ``timed`` rows timed
    (CPU per round: predict and learn, as the service plays a feedback; then its state's bytes again)."""
    with blas_threads(1):
        learner = kons.learner_from_params(spec["algorithm"], {**spec["params"], "dim": spec["dim"]})
        for x, y in warm:
            learner.learn_one(np.asarray(x), y)
        state = len(learner.to_bytes())
        started = time.process_time()
        for x, y in timed:
            learner.predict_one(np.asarray(x))
            learner.learn_one(np.asarray(x), y)
        seconds = time.process_time() - started
    return {"round_cpu_ms": seconds / max(len(timed), 1) * 1e3, "state_bytes": state,
            "state_bytes_after": len(learner.to_bytes())}


async def _clients(url: str, learners: int, clients: int, seconds: float, dim: int) -> int:
    """``clients`` loops of single-row feedbacks, learner after learner, for ``seconds``; acknowledged."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients, keepalive_expiry=1.0)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        until = asyncio.get_running_loop().time() + seconds

        async def loop(c: int) -> int:
            rng, done, i = np.random.default_rng(c), 0, c
            while asyncio.get_running_loop().time() < until:
                (x, y), = _stream(rng, 1, dim)
                answer = await http.post(f"/v1/learners/m{i % learners}/feedback", json={"x": x, "y": y})
                done += answer.status_code == 200
                i += clients
            return done

        return sum(await asyncio.gather(*(loop(c) for c in range(clients))))


def run(workdir: Path, *, algorithm: str = "auto", dim: int = 8, learners: int = 200, warm: int = 40,
        clients: int = 8, seconds: float = 60.0) -> dict[str, Any]:
    spec = {"algorithm": algorithm, "dim": dim, "params": {}}
    rng = np.random.default_rng(0)
    warm_rows = _stream(rng, warm, dim)
    server = RedisServer(workdir / "redis").start()
    service = ServiceProcess(server.url, workdir / "service.log", blas_threads=1,
                             cache_size=max(256, 2 * learners)).start()
    try:
        redis = server.client()
        redis_empty = int(redis.info("memory")["used_memory"])
        rss_empty = vm_rss_kib(service.pid) * 1024
        with httpx.Client(base_url=service.url, timeout=120) as http:
            for i in range(learners):
                http.put(f"/v1/learners/m{i}", json=spec).raise_for_status()
                http.post(f"/v1/learners/m{i}/feedback",
                          json={"items": [{"x": x, "y": y} for x, y in warm_rows]}).raise_for_status()
            rss_warm = vm_rss_kib(service.pid) * 1024
        cpu, wall = process_tree_cpu_seconds(service.pid), time.perf_counter()
        acknowledged = asyncio.run(_clients(service.url, learners, clients, seconds, dim))
        cpu, wall = process_tree_cpu_seconds(service.pid) - cpu, time.perf_counter() - wall
        service.stop()  # a graceful stop snapshots every learner with new rounds
        redis_snapshotted = int(redis.info("memory")["used_memory"])
    finally:
        if service.proc is not None:
            service.stop()
        server.stop()
    # the learners as the service held them: the warm rows, then each one's share of the feedbacks (timed,
    # over enough learners for 200 rounds at least)
    share = max(1, round(acknowledged / learners))
    copies = [in_process(spec, warm_rows, _stream(rng, share, dim))
              for _ in range(min(learners, -(-200 // share)))]
    model = {"round_cpu_ms": float(np.mean([c["round_cpu_ms"] for c in copies])),
             "state_bytes": copies[0]["state_bytes"]}
    ended = round(float(np.mean([c["state_bytes_after"] for c in copies])))
    cpu_ms_predicted = model["round_cpu_ms"] + SERVICE_CPU_MS
    return {
        "algorithm": algorithm, "dim": dim, "learners": learners, "warm": warm, "clients": clients,
        "seconds": round(wall, 1), "model": {**model, "service_cpu_ms": SERVICE_CPU_MS},
        "state_bytes_at_the_end": ended,
        "predicted": {"cpu_ms_per_feedback": cpu_ms_predicted,
                      "feedbacks_per_second": cpu / (cpu_ms_predicted / 1e3) / wall,
                      "feedbacks_per_second_one_core": 1e3 / cpu_ms_predicted,
                      "rss_bytes_per_learner": model["state_bytes"],
                      "redis_bytes_per_learner": ended},
        "measured": {"cpu_ms_per_feedback": cpu / max(acknowledged, 1) * 1e3,
                     "feedbacks_per_second": acknowledged / wall, "acknowledged": acknowledged,
                     "cpu_share": cpu / wall,
                     "rss_bytes_per_learner": (rss_warm - rss_empty) / learners,
                     "redis_bytes_per_learner": (redis_snapshotted - redis_empty) / learners},
        "load_end": round(os.getloadavg()[0], 1),
    }


def markdown(record: dict[str, Any], command: str, load_start: float) -> str:
    p, m, model = record["predicted"], record["measured"], record["model"]
    rows = [
        ["CPU ms per feedback", f"{p['cpu_ms_per_feedback']:.2f}", f"{m['cpu_ms_per_feedback']:.2f}"],
        [f"feedbacks/s at the CPU the process got ({m['cpu_share']:.2f} of a core)",
         f"{p['feedbacks_per_second']:.1f}", f"{m['feedbacks_per_second']:.1f}"],
        ["feedbacks/s at one whole core", f"{p['feedbacks_per_second_one_core']:.0f}", "(not measured)"],
        ["process memory per cached learner, bytes", f"{p['rss_bytes_per_learner']:,.0f}",
         f"{m['rss_bytes_per_learner']:,.0f}"],
        ["Redis memory per snapshotted learner, bytes", f"{p['redis_bytes_per_learner']:,.0f}",
         f"{m['redis_bytes_per_learner']:,.0f}"],
    ]
    rows = [[*r, f"{float(r[2].replace(',', '')) / float(r[1].replace(',', '')):.2f}x"]
            if not r[2].startswith("(") else [*r, ""] for r in rows]
    return "\n".join([
        "# The capacity model (`docs/capacity.md`) against a measured run", "",
        f"`{command}`", "",
        f"Machine: {machine_summary()}, shared with other developers' jobs: load average {load_start} at the "
        f"start, {record['load_end']} at the end. One service process (one BLAS thread) and one "
        "redis-server; "
        f"{record['learners']} `{record['algorithm']}` learners (d = {record['dim']}), each given "
        f"{record['warm']} rows in one batch, then single-row feedbacks from {record['clients']} clients, "
        f"learner after learner, for {record['seconds']} s.", "",
        f"Model inputs measured in-process here: a round (predict and learn) {model['round_cpu_ms']:.3f} ms "
        f"of CPU, the state {model['state_bytes']:,} bytes after the warm rows and "
        f"{record['state_bytes_at_the_end']:,} with each learner's share of the feedbacks as well; the "
        "service's share of a "
        f"feedback {model['service_cpu_ms']:.2f} ms (`hotpath.md`, part a).", "",
        *markdown_table(["figure", "predicted", "measured", "measured / predicted"], rows, "lrrr"), ""])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithm", default="auto")
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--learners", type=int, default=200)
    parser.add_argument("--warm", type=int, default=40, help="rows each learner gets first, in one batch")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", type=Path, help="write capacity.md and capacity.json here")
    args = parser.parse_args(argv)
    load_start = round(os.getloadavg()[0], 1)

    def measure() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="kons-capacity-") as tmp:
            return run(Path(tmp), algorithm=args.algorithm, dim=args.dim, learners=args.learners,
                       warm=args.warm, clients=args.clients, seconds=args.seconds)

    return run_and_publish("benchmarks.capacity", argv, name="capacity", out=args.out,
                           sources=registry.sources_of("capacity.md") or (), run=measure,
                           page=lambda record, command: markdown(record, command, load_start), indent=2)


if __name__ == "__main__":
    raise SystemExit(main())
