"""Issue 36's four service figures, the checkout and a baseline measured in alternating blocks.

:mod:`benchmarks.hotpath` measures its checkouts one after the other, so on a shared machine each one's
figures move with the load of its minutes. Here both services run at once (real ``python -m kons_service``
processes, each on its own fresh ``redis-server``, one ``auto`` learner of dimension 8 warmed with 64 rows
of ``cadata``), beside the bare FastAPI echo of :mod:`benchmarks.echo_app`, and take turns in blocks (which
starts alternates): per block and target, ``--rows`` single-row feedbacks, then as many predicts, each
followed by an echo of the same body; the same rows to both. Per block: the service's CPU (its process
tree's threads' time on a core, in nanoseconds) per feedback and per predict, and the p50 of each against
the p50 of the echoes sent between them; each checkout's in-process round and predict (a subprocess
importing its ``kons``, the same rows, one BLAS thread) are timed between blocks too. Figures: medians
over the blocks of the ratios::

    OPENBLAS_NUM_THREADS=1 nice -n 5 python -m benchmarks.hotpath_paired --baseline /tmp/base469 \\
        --out benchmarks/results/hotpath_single
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import blas_env, command_line, machine_summary, markdown_table
from benchmarks.hotpath import (
    LEARNERS,
    WARM_ROWS,
    Rows,
    Target,
    _checkout_provenance,
    create,
    feed,
    http_client,
    in_process,
    process_tree_cpu_seconds,
    service,
    timed,
)
from benchmarks.load import uvicorn_server
from benchmarks.provenance import provenance, publish
from testkit.processes import REPO, service_env

__all__ = ["main", "run"]

SOURCES = ("kons", "kons_service", "testkit/processes.py", "benchmarks/hotpath.py",
           "benchmarks/hotpath_paired.py", "benchmarks/echo_app.py")
PATH = "/v1/learners/paired"
#: The service's own CPU per request (ms), compared between the checkouts block by block.
_CPU = {"feedback_cpu_ms": "service CPU ms per feedback", "predict_cpu_ms": "service CPU ms per predict"}
#: The figures and their goals (issue 36): the checkout's value of each must be at most its goal.
FIGURES = {"feedback_cpu": ("service CPU per feedback / in-process round", 3.0),
           "predict_cpu": ("service CPU per predict / in-process predict", 3.0),
           "feedback_p50": ("feedback p50 / echo p50", 3.0),
           "predict_p50": ("predict p50 / echo p50", 1.5)}


async def _requests(client: httpx.AsyncClient, echo: httpx.AsyncClient, pid: int, path: str,
                    bodies: list[dict[str, Any]]) -> tuple[float, float, float]:
    """The requests' service CPU seconds each, their p50 and the p50 of an echo after each (ms)."""
    served, echoed = [], []
    cpu = process_tree_cpu_seconds(pid)
    for body in bodies:
        served.append(await timed(client, path, body))
        cpu -= process_tree_cpu_seconds(pid)  # (the echo's time is no part of the service's CPU)
        echoed.append(await timed(echo, "/echo", body))
        cpu += process_tree_cpu_seconds(pid)
    cpu = process_tree_cpu_seconds(pid) - cpu
    return cpu / len(bodies), statistics.median(served), statistics.median(echoed)


async def run(targets: Sequence[Target], *, blocks: int, rows_per_block: int) -> dict[str, Any]:
    rows = Rows("cadata")
    spec = LEARNERS["auto"]
    warm = rows.rows(0, WARM_ROWS)
    measured: dict[str, dict[str, list[float]]] = {t.label: {k: [] for k in (*FIGURES, *_CPU)}
                                                    for t in targets}
    own: dict[str, list[dict[str, float]]] = {t.label: [] for t in targets}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="kons-paired-") as tmp:
        workdir = Path(tmp)
        echo_env = {**service_env(), **blas_env(1)}
        with uvicorn_server("benchmarks.echo_app:app", echo_env, workdir / "echo.log") as echo_url:
            async with http_client(echo_url) as echo, contextlib.AsyncExitStack() as stack:
                services = {}  # every target's service (on its own Redis) at once: label -> (pid, client)
                for target in targets:
                    proc, _, client = await stack.enter_async_context(service(target, workdir, "paired"))
                    services[target.label] = (proc.pid, client)
                for _, client in services.values():
                    assert await create(client, "paired", spec) == "201"
                    assert await feed(client, "paired", warm) == "200"
                start = WARM_ROWS
                for block in range(blocks):
                    block_rows = rows.rows(start, rows_per_block)
                    order = list(targets) if block % 2 == 0 else list(reversed(targets))
                    for target in order:
                        pid, client = services[target.label]
                        fed = [{"x": x, "y": y} for x, y in block_rows]
                        cpu_f, p50_f, echo_f = await _requests(client, echo, pid, f"{PATH}/feedback", fed)
                        asked = [{"x": x} for x, _ in block_rows]
                        cpu_p, p50_p, echo_p = await _requests(client, echo, pid, f"{PATH}/predict", asked)
                        if not own[target.label] or block % 4 == 3:  # the in-process cost, now and then
                            played = rows.rows(0, start + rows_per_block)
                            own[target.label].append(in_process(target.checkout, spec, played, start,
                                                                predict=True))
                        mine = own[target.label][-1]
                        round_cpu = mine["cpu_seconds"] / mine["rounds"]
                        predict_cpu = mine["predict_cpu_seconds"] / mine["rounds"]
                        figures = measured[target.label]
                        figures["feedback_cpu"].append(cpu_f / round_cpu)
                        figures["predict_cpu"].append(cpu_p / predict_cpu)
                        figures["feedback_p50"].append(p50_f / echo_f)
                        figures["predict_p50"].append(p50_p / echo_p)
                        figures["feedback_cpu_ms"].append(cpu_f * 1e3)
                        figures["predict_cpu_ms"].append(cpu_p * 1e3)
                    start += rows_per_block
                    loads.append(os.getloadavg()[0])
    described = {t.label: {"checkout": str(t.checkout), "provenance": _checkout_provenance(t.checkout),
                           "figures": measured[t.label], "in_process": own[t.label]} for t in targets}
    return {"blocks": blocks, "rows_per_block": rows_per_block, "targets": described,
            "load": [round(min(loads), 1), round(max(loads), 1)]}


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], statistics.median(values), q[2]


def markdown(record: dict[str, Any], command: str) -> str:
    labels = list(record["targets"])
    rows = []
    for key, (name, goal) in FIGURES.items():
        cells: list[object] = [name, f"<= {goal:g}x"]
        for label in labels:
            low, mid, high = _quartiles(record["targets"][label]["figures"][key])
            cells.append(f"{mid:.2f}x ({low:.2f}-{high:.2f})")
        mid = statistics.median(record["targets"]["current"]["figures"][key])
        cells.append("met" if mid <= goal else "not met")
        rows.append(cells)
    if "baseline" in labels:
        for key, name in _CPU.items():
            current, baseline = (record["targets"][label]["figures"][key]
                                 for label in ("current", "baseline"))
            ratios = [c / b for c, b in zip(current, baseline, strict=True)]
            low, mid, high = _quartiles(ratios)
            rows.append([name, "-", f"{statistics.median(current):.2f}", f"{statistics.median(baseline):.2f}",
                         f"current / baseline {mid:.2f}x ({low:.2f}-{high:.2f})"])
    low, high = record["load"]
    return "\n".join([
        "# Issue 36's service figures, in alternating blocks against a baseline", "",
        f"`{command}`; machine: {machine_summary()}, shared: 1-minute load average {low}-{high} during "
        f"the run. {record['blocks']} blocks of {record['rows_per_block']} single-row feedbacks then as many "
        "predicts to each service, alternating which goes first (`benchmarks/hotpath_paired.py` says how "
        "each figure is measured). Medians over the blocks, quartiles in brackets; `current` is this "
        f"checkout, `baseline` {record['targets'].get('baseline', {}).get('checkout', '-')}.", "",
        *markdown_table(["figure", "goal", *labels, "current: goal"], rows, "llrrl"), ""])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="another checkout measured alike")
    parser.add_argument("--blocks", type=int, default=16)
    parser.add_argument("--rows", type=int, default=40, help="feedbacks (and predicts) per block and target")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/hotpath_single"))
    parser.add_argument("--name", default="paired", help="the results' file names (NAME.md, NAME.json)")
    args = parser.parse_args(argv)
    stamp = provenance(SOURCES)
    targets = [Target("current", REPO), Target("baseline", args.baseline.resolve())]
    started = time.time()
    record = asyncio.run(run(targets, blocks=args.blocks, rows_per_block=args.rows))
    record["seconds"] = round(time.time() - started, 1)
    command = command_line("benchmarks.hotpath_paired", argv, outputs=("--out",))
    text = markdown(record, command)
    publish(args.out, args.name, stamp, text, record, indent=1)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
