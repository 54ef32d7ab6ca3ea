"""Where a round's service CPU goes: the floors under it, counted as :mod:`benchmarks.hotpath_paired` counts.

Issue 36 asks a mature ``auto`` learner's service CPU per single-row predict (feedback) to be at most 3x its
in-process predict (round). This measures, with the same counter (the process tree's threads' time on a
core, :func:`benchmarks.hotpath.process_tree_cpu_seconds`), what any request costs before the service's
own work: a bare raw-ASGI echo under uvicorn (no framework), the FastAPI echo of :mod:`benchmarks.echo_app`,
the service's ``/healthz``; then the service's predict and feedback (``auto``, d = 8, warmed with 64 rows of
``cadata``) and the same learner in-process (:func:`benchmarks.hotpath.in_process`). (What a round's
CPU is made of inside the app, with no server, is :mod:`benchmarks.hotpath_parts`'.) Each target is sent
``--rows`` requests one after the other, ``--repeats`` times (the median is kept), once back to back and
once with ``--gap`` seconds of sleep after each request: :mod:`benchmarks.hotpath_paired` sends an echo and
reads ``/proc`` between two requests, so a service wakes from idle, with caches others' work has cooled,
for each one; the in-process reference is a tight loop::

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.service_floors --out /tmp/floors
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from starlette.types import Receive, Scope, Send

from benchmarks.common import blas_env, command_line, machine_summary, markdown_table
from benchmarks.hotpath import (
    LEARNERS,
    WARM_ROWS,
    Rows,
    Target,
    create,
    echo_server,
    feed,
    http_client,
    in_process,
    process_tree_cpu_seconds,
    service,
)
from benchmarks.load import UVICORN_ARGS
from benchmarks.provenance import provenance, publish
from testkit.processes import REPO, free_port, service_env, start_service, terminate

__all__ = ["main", "raw_echo", "run"]

SOURCES = ("kons", "kons_service", "benchmarks/hotpath.py", "benchmarks/echo_app.py",
           "benchmarks/service_floors.py")

async def raw_echo(scope: Scope, receive: Receive, send: Send) -> None:
    """A bare ASGI app: a request's JSON body echoed (``{"status": "ok"}`` without one), no framework."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body, more = b"", True
    while more:
        message = await receive()
        body, more = body + message.get("body", b""), message.get("more_body", False)
    answer = json.dumps(json.loads(body) if body else {"status": "ok"}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(answer)).encode())]})
    await send({"type": "http.response.body", "body": answer})


async def _cpu_ms(client: httpx.AsyncClient, pid: int, path: str, bodies: Sequence[dict[str, Any] | None],
                  repeats: int, gap: float) -> float:
    """The median over ``repeats`` of the process tree's CPU ms per request of ``bodies`` sent in turn (a
    GET for None), each followed by ``gap`` seconds of sleep."""
    runs = []
    for _ in range(repeats):
        cpu = process_tree_cpu_seconds(pid)
        for body in bodies:
            answer = await (client.get(path) if body is None else client.post(path, json=body))
            answer.raise_for_status()
            if gap:
                await asyncio.sleep(gap)
        runs.append((process_tree_cpu_seconds(pid) - cpu) / len(bodies) * 1e3)
    return statistics.median(runs)


async def run(*, rows: int, repeats: int, gap: float) -> dict[str, Any]:
    data = Rows("cadata")
    spec = LEARNERS["auto"]
    warm, measured = data.rows(0, WARM_ROWS), data.rows(WARM_ROWS, rows)
    asked: list[dict[str, Any] | None] = [{"x": x} for x, _ in measured]
    fed: list[dict[str, Any] | None] = [{"x": x, "y": y} for x, y in measured]
    bare: list[dict[str, Any] | None] = [None] * rows
    gaps = (0.0, gap)
    cpu: dict[str, list[float]] = {}
    loads = [os.getloadavg()[0]]

    async def measure(name: str, client: httpx.AsyncClient, pid: int, path: str,
                      bodies: list[dict[str, Any] | None]) -> None:
        cpu[name] = [await _cpu_ms(client, pid, path, bodies, repeats, g) for g in gaps]
        loads.append(os.getloadavg()[0])

    env = {**service_env(), **blas_env(1)}
    with tempfile.TemporaryDirectory(prefix="kons-floors-") as tmp:
        workdir = Path(tmp)
        port = free_port()
        argv = [sys.executable, "-m", "uvicorn", "benchmarks.service_floors:raw_echo", *UVICORN_ARGS,
                "--port", str(port)]
        raw = start_service(port, env, workdir / "raw.log", argv)
        try:
            async with http_client(f"http://127.0.0.1:{port}") as client:
                await measure("raw ASGI echo, POST predict body", client, raw.pid, "/echo", asked)
                await measure("raw ASGI, bare GET", client, raw.pid, "/healthz", bare)
        finally:
            terminate(raw, 60)
        with echo_server(env, workdir / "echo.log") as (url, pid):
            async with http_client(url) as client:
                await measure("FastAPI echo, POST predict body", client, pid, "/echo", asked)
                await measure("FastAPI, GET /healthz", client, pid, "/healthz", bare)
        async with service(Target("current", REPO), workdir, "floors") as (proc, _, client):
            assert await create(client, "floors", spec) == "201"
            assert await feed(client, "floors", warm) == "200"
            path = "/v1/learners/floors"
            await measure("service GET /healthz", client, proc.pid, "/healthz", bare)
            await measure("service predict", client, proc.pid, f"{path}/predict", asked)
            await measure("service feedback", client, proc.pid, f"{path}/feedback", fed)
            started = time.perf_counter()
            idle = process_tree_cpu_seconds(proc.pid)
            await asyncio.sleep(5.0)
            idle_ms = (process_tree_cpu_seconds(proc.pid) - idle) / (time.perf_counter() - started) * 1e3
    # the learner's own: the warm rows and the measured ones
    played = data.rows(0, WARM_ROWS + rows)
    own = in_process(REPO, spec, played, WARM_ROWS, predict=True)
    return {"rows": rows, "repeats": repeats, "gaps": list(gaps), "cpu_ms": cpu, "idle_ms_per_s": idle_ms,

            "in_process": {"round_ms": own["cpu_seconds"] / own["rounds"] * 1e3,
                           "predict_ms": own["predict_cpu_seconds"] / own["rounds"] * 1e3},
            "load": [round(min(loads), 1), round(max(loads), 1)]}


def markdown(record: dict[str, Any], command: str) -> str:
    own = record["in_process"]
    reference = {"service predict": own["predict_ms"], "service feedback": own["round_ms"]}
    rows: list[list[object]] = []
    for name, (tight, gapped) in record["cpu_ms"].items():
        against = reference.get(name)
        rows.append([name, f"{tight:.3f}", f"{gapped:.3f}",
                     "-" if against is None else f"{tight / against:.2f}x / {gapped / against:.2f}x"])
    rows.append(["in-process predict (tight loop)", f"{own['predict_ms']:.3f}", "-", "1x"])
    rows.append(["in-process round (tight loop)", f"{own['round_ms']:.3f}", "-", "1x"])
    low, high = record["load"]
    gap_ms = record["gaps"][1] * 1e3
    return "\n".join([
        "# The service's CPU per request and its floors", "",
        f"`{command}`; machine: {machine_summary()}, shared: 1-minute load average {low}-{high} during the "
        f"run. {record['rows']} requests per target one after the other, median of {record['repeats']} "
        f"repeats; CPU ms per request of the serving process tree, back to back and with {gap_ms:g} ms of "
        f"sleep after each (the service idles at {record['idle_ms_per_s']:.2f} ms of CPU a second). "
        "`benchmarks/service_floors.py` says what each target is.", "",
        *markdown_table(["target", "CPU ms, back to back", f"CPU ms, {gap_ms:g} ms apart",
                         "/ in-process (back to back / apart)"], rows, "lrrr"), ""])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100, help="requests per target and repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gap", type=float, default=0.01, help="seconds of sleep after each request")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/service_floors"))
    args = parser.parse_args(argv)
    stamp = provenance(SOURCES)
    record = asyncio.run(run(rows=args.rows, repeats=args.repeats, gap=args.gap))
    text = markdown(record, command_line("benchmarks.service_floors", argv, outputs=("--out",)))
    publish(args.out, "floors", stamp, text, record)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
