"""One NystromKONS learner behind the real service, fed 1,000,000 rounds: latency, snapshots, restarts.

Starts a ``redis-server`` (append-only file in a temporary directory) and one ``python -m kons_service``
process on loopback (one BLAS thread, ``KONS_SNAPSHOT_EVERY_ROUNDS`` = ``--snapshot-every``), creates the
learner with ``PUT /v1/learners/long`` (the service's kernel configuration of
:mod:`benchmarks.long_stream`) and feeds the cycled ``cadata`` stream in batches of ``--batch`` rows
(``POST .../feedback``). At each checkpoint it measures, in this order:

* **feedback p50/p90**: ``--probes`` single-row feedback requests, one at a time (these are rounds too),
  alternating with as many to a second learner, ``ref``, that was fed 10,000 rounds at the start: the
  ratio of the two p50s is paired (same moments, same machine load), unlike the p50s of different
  checkpoints, which minutes of changing load on the shared machine separate;
* **snapshot time**: mean of ``kons_snapshot_duration_seconds`` over the snapshots written since the
  previous checkpoint (from ``/metrics``);
* **restart replay**: SIGKILL the service, start it again, and time the first ``predict`` (it loads
  the latest snapshot and replays the logged rounds after it); ``kons_replayed_rounds`` says how many.

Example::

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.nystrom_http --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks import registry
from benchmarks.long_stream import PARAMS
from benchmarks.provenance import provenance, publish
from kons.datasets import load_dataset
from testkit.processes import RedisServer, ServiceProcess

__all__ = ["main"]

CHECKPOINTS = (10_000, 100_000, 300_000, 1_000_000)
URL = "/v1/learners/long"
REFERENCE_URL = "/v1/learners/ref"
REFERENCE_ROUNDS = 10_000


def _metric(text: str, name: str) -> float:
    """Sum of the samples of ``name`` (all label sets) in a Prometheus text page."""
    pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.eE+-]+)$", re.MULTILINE)
    return sum(float(v) for v in pattern.findall(text))


def _post(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = client.post(path, json=body)
    reply.raise_for_status()
    result: dict[str, Any] = reply.json()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1_000_000)
    # 100 rows of a full 3 MB learner stay under the service's default KONS_BATCH_MAX_WORK_BYTES (512 MiB
    # of rows x state bytes); batches of 1000 are refused with 413 since that bound (issue 21)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--snapshot-every", type=int, default=20_000)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    stamp = provenance(registry.sources_of("nystrom_http.md") or ())
    data = load_dataset("cadata")
    n = len(data.y)
    rows = [{"x": x.tolist(), "y": float(label)} for x, label in zip(data.X, data.y, strict=True)]
    checkpoints = [c for c in CHECKPOINTS if c < args.rounds] + [args.rounds]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kons-nystrom-http-") as tmp:
        redis = RedisServer(Path(tmp) / "redis").start()
        service = ServiceProcess(redis.url, Path(tmp) / "service.log", blas_threads=1,
                                 snapshot_every_rounds=args.snapshot_every).start()
        try:
            client = httpx.Client(base_url=service.url, timeout=120)
            spec = {"algorithm": "nystrom_kons", "dim": data.X.shape[1], "params": PARAMS}
            client.put(URL, json=spec).raise_for_status()
            client.put(REFERENCE_URL, json=spec).raise_for_status()
            for begin in range(0, REFERENCE_ROUNDS, args.batch):
                _post(client, f"{REFERENCE_URL}/feedback",
                      {"items": rows[begin : min(begin + args.batch, REFERENCE_ROUNDS)]})
            t, start = 0, time.perf_counter()
            snapshots_seen = (0.0, 0.0)
            for target in checkpoints:
                while t < target - args.probes:
                    size = min(args.batch, target - args.probes - t)
                    _post(client, f"{URL}/feedback", {"items": [rows[(t + i) % n] for i in range(size)]})
                    t += size
                latencies, reference = [], []
                for i in range(args.probes):
                    t0 = time.perf_counter()
                    _post(client, f"{URL}/feedback", rows[t % n])
                    t1 = time.perf_counter()
                    _post(client, f"{REFERENCE_URL}/feedback", rows[(REFERENCE_ROUNDS + i) % n])
                    reference.append(time.perf_counter() - t1)
                    latencies.append(t1 - t0)
                    t += 1
                page = client.get("/metrics").text
                total = (_metric(page, "kons_snapshot_duration_seconds_sum"),
                         _metric(page, "kons_snapshot_duration_seconds_count"))
                written = total[1] - snapshots_seen[1]
                snapshot_ms = 1e3 * (total[0] - snapshots_seen[0]) / written if written else None
                info = client.get(URL).json()
                client.close()
                service.kill()
                service.start()
                client = httpx.Client(base_url=service.url, timeout=120)
                t0 = time.perf_counter()
                _post(client, f"{URL}/predict", {"x": rows[t % n]["x"]})
                replay_s = time.perf_counter() - t0
                replayed = _metric(client.get("/metrics").text, "kons_replayed_rounds_total")
                snapshots_seen = (0.0, 0.0)  # the new process's counters start from zero
                record = {
                    "rounds": t, "feedback_p50_ms": 1e3 * float(np.median(latencies)),
                    "feedback_p90_ms": 1e3 * float(np.quantile(latencies, 0.9)),
                    "reference_p50_ms": 1e3 * float(np.median(reference)),
                    "snapshots": int(written), "snapshot_mean_ms": snapshot_ms,
                    "restart_first_predict_ms": 1e3 * replay_s, "replayed_rounds": int(replayed),
                    "version": info["version"], "dictionary_size": info["stats"]["dictionary_size"],
                    "elapsed_s": time.perf_counter() - start,
                }
                results.append(record)
                print(json.dumps(record), flush=True)
            client.close()
        finally:
            service.stop()
            redis.stop()
    meta = {
        "command": "OPENBLAS_NUM_THREADS=1 python -m benchmarks.nystrom_http "
                   + shlex.join(sys.argv[1:] if argv is None else argv),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
                   f"load average at the end " + " / ".join(f"{v:.1f}" for v in os.getloadavg()),
        "params": PARAMS, "batch": args.batch, "probes": args.probes, "snapshot_every": args.snapshot_every,
    }
    report = publish(args.out, "nystrom_http", stamp, _markdown(results, meta),
                     {"meta": meta, "checkpoints": results})
    print(f"wrote {report}", flush=True)
    return 0


def _markdown(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.3g}"

    lines = [
        "# NystromKONS through HTTP over 1,000,000 rounds",
        "",
        f"Command: `{meta['command']}`",
        "",
        f"One learner, `nystrom_kons` with `{json.dumps(meta['params'])}`, dim 8, fed the cycled cadata "
        f"stream in feedback batches of {meta['batch']} rows; one service process and one redis-server "
        f"(append-only file) on loopback, snapshots by cost with `KONS_SNAPSHOT_EVERY_ROUNDS` = "
        f"{meta['snapshot_every']:,} as a cap (`docs/service-design.md`). At each "
        f"checkpoint: {meta['probes']} single-row feedbacks one at a time (p50, p90), each followed by one "
        "to a second learner `ref` with the same parameters, fed 10,000 rounds at the start (its p50 is the "
        "paired reference: same moments, same load), the mean time of the "
        "snapshots written since the previous checkpoint (`kons_snapshot_duration_seconds`), then a SIGKILL "
        "and a restart of the service and the time of the first predict (snapshot load + replay of the "
        "logged rounds after it; `replayed` from `kons_replayed_rounds`).",
        "",
        f"**Machine caveat**: {meta['machine']}; 2 cores shared with other jobs: absolute times are noisy.",
        "",
        "| rounds | feedback p50 ms | p90 ms | paired p50 of `ref` (10k rounds) ms | p50 / paired p50 "
        "| snapshots | snapshot mean ms | restart: first predict ms | replayed rounds "
        "| ms per replayed round | dictionary |",
        "|---" * 11 + "|",
    ]
    for r in results:
        cells = [f"{r['rounds']:,}", f"{r['feedback_p50_ms']:.2f}", f"{r['feedback_p90_ms']:.2f}",
                 f"{r['reference_p50_ms']:.2f}", f"{r['feedback_p50_ms'] / r['reference_p50_ms']:.2f}x",
                 str(r["snapshots"]), ms(r["snapshot_mean_ms"]), f"{r['restart_first_predict_ms']:.0f}",
                 f"{r['replayed_rounds']:,}",
                 ms(r["restart_first_predict_ms"] / r["replayed_rounds"] if r["replayed_rounds"] else None),
                 str(r["dictionary_size"])]
        lines.append("| " + " | ".join(cells) + " |")
    if len(results) > 1:
        first, last = results[0], results[-1]
        lines += ["", f"Feedback p50 at {last['rounds']:,} rounds / at {first['rounds']:,} rounds: "
                      f"{last['feedback_p50_ms'] / first['feedback_p50_ms']:.2f}x across the run (load "
                      "changes between checkpoints included); paired with the 10,000-round learner at "
                      f"{last['rounds']:,} rounds: "
                      f"**{last['feedback_p50_ms'] / last['reference_p50_ms']:.2f}x**."]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
