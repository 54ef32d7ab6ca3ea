"""What fair sharing costs the heavy requests: a batch predict's latency with keys configured against a
single-tenant service, side by side.

With API keys configured, a request whose body is over 16 KiB (``kons_service.http.body.HEAVY_BYTES``) is
parsed and validated in the parser process and then takes a turn with other tenants' heavy requests
(``kons_service.core.fairness.HeavyTurns``), so that it does not hold up the small requests of everyone
else (``benchmarks/hostile.py`` measures that side). A single-tenant service (no keys) has nobody to
protect and parses every body under 64 KiB on its event loop. This benchmark runs both services from this
checkout on one Redis and times, from one sequential client, requests interleaved between them: a one-row
predict, a 100-row batch (under 16 KiB: parsed inline by both) and a 900-row batch (about 38 KB: heavy).
The ratio of the heavy batch's latency, keys over single tenant, is the price of the parser process.

    python -m benchmarks.heavy_bodies --requests 400 --out benchmarks/results/heavy_bodies.md

Latencies on a shared 2-core machine: compare the two columns of one run, not figures across runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks.common import command_line, machine_summary
from benchmarks.provenance import provenance, stamp_markdown
from testkit.processes import SPEC, RedisServer, ServiceProcess

KEY = "bench-key"
ROW = "[0.12345678901,-1.2345678901,2.345678901]"
#: The bodies timed: name -> JSON text (the 900-row batch is over the 16 KiB of a heavy body).
BODIES = {"1 row": '{"x":' + ROW + "}",
          "100 rows": '{"xs":[' + ",".join([ROW] * 100) + "]}",
          "900 rows": '{"xs":[' + ",".join([ROW] * 900) + "]}"}
#: Requests left out of each series at its start (connections, caches, the parser process's start).
WARMUP = 20


@contextlib.contextmanager
def _services(workdir: Path) -> Iterator[dict[str, str]]:
    """One Redis, and two services on it: with a key configured (tenant "bench") and single-tenant."""
    redis_server = RedisServer(workdir / "redis").start()
    services = {"keys configured": ServiceProcess(redis_server.url, workdir / "keys.log", blas_threads=1,
                                                  api_keys=f"bench:{KEY}"),
                "single tenant": ServiceProcess(redis_server.url, workdir / "single.log", blas_threads=1)}
    try:
        yield {name: service.start().url for name, service in services.items()}
    finally:
        for service in services.values():
            service.stop()
        redis_server.stop()


def run(workdir: Path, requests: int) -> dict[str, Any]:
    """Each body's latencies (ms) on each service, ``requests`` of each after :data:`WARMUP`."""
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    with _services(workdir) as urls, contextlib.ExitStack() as stack:
        clients = {name: stack.enter_context(httpx.Client(base_url=url, timeout=60, headers=headers))
                   for name, url in urls.items()}
        for client in clients.values():
            assert client.put("/v1/learners/m", json=SPEC).status_code == 201
        latencies: dict[str, dict[str, list[float]]] = {b: {s: [] for s in clients} for b in BODIES}
        for _ in range(WARMUP + requests):  # interleaved, so that the machine's load falls on both alike
            for body, text in BODIES.items():
                for name, client in clients.items():
                    start = time.perf_counter()
                    answer = client.post("/v1/learners/m/predict", content=text)
                    latencies[body][name].append(1000 * (time.perf_counter() - start))
                    assert answer.status_code == 200, answer.text
    return {"bytes": {body: len(text) for body, text in BODIES.items()},
            "latencies_ms": {body: {name: series[WARMUP:] for name, series in by.items()}
                             for body, by in latencies.items()}}


def markdown(results: dict[str, Any], command: str) -> str:
    lines = ["# What fair sharing costs the heavy requests: batch predicts with keys and single-tenant", "",
             f"    {command}", "", f"machine: {machine_summary()}; load average {os.getloadavg()[0]:.1f} at "
             "the end", "",
             "| body | bytes | keys configured: p50 / p99 ms | single tenant: p50 / p99 ms | p50 ratio |",
             "|---|---|---|---|---|"]
    for body, by in results["latencies_ms"].items():
        (k50, k99), (s50, s99) = (np.percentile(by[name], [50, 99]) for name in ("keys configured",
                                                                               "single tenant"))
        lines.append(f"| {body} | {results['bytes'][body]} | {k50:.1f} / {k99:.1f} | {s50:.1f} / {s99:.1f} "
                     f"| {k50 / s50:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400, help="requests of each body to each service")
    parser.add_argument("--out", type=Path, help="also write the report to this Markdown file")
    args = parser.parse_args(argv)
    stamp = provenance(["kons", "kons_service", "testkit/processes.py", "benchmarks/heavy_bodies.py"])
    with tempfile.TemporaryDirectory() as tmp:
        results = run(Path(tmp), args.requests)
    report = markdown(results, command_line("benchmarks.heavy_bodies", argv, outputs=("--out",)))
    print(report)
    if args.out is not None:
        args.out.write_text(stamp_markdown(report, stamp))


if __name__ == "__main__":
    main()
