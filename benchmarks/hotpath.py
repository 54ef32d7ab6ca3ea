"""The service's hot path (issue 18): every "Show" of the issue measured side by side in one run.

    python -m benchmarks.hotpath                                    # short, this checkout only
    python -m benchmarks.hotpath --baseline /work/wt-before         # and another checkout, side by side
    python -m benchmarks.hotpath --many 10000 --snapshot-seconds 300 --baseline PATH   # the published run

Everything runs on 127.0.0.1: a fresh ``redis-server`` (append-only file, ``everysec``) for each service
process, real ``python -m kons_service`` processes (:class:`testkit.processes.ServiceProcess`, one BLAS
thread, default settings unless said) and the floor, the bare FastAPI echo endpoint of
:mod:`benchmarks.echo_app` under uvicorn. Rows are the ``cadata`` stream (8 features) in protocol order.
Each part runs for the checkout under test ("current") and then, with ``--baseline``, for the other one:

a. **Single client.** An ``auto`` learner (dim 8, warmed with 64 rows) gets single-row feedback and
   predict requests interleaved with echo requests of the same bodies: p50 of each against echo's. Then
   ``--cpu-rounds`` feedbacks alone, and as many predicts: the service's CPU seconds per request (its
   process tree's threads' time on a core, ``/proc/<pid>/task/<tid>/schedstat``) against an in-process
   round of the same learner on the same rows (a subprocess importing that checkout's ``kons``) and
   against the echo's CPU for as many requests of the same bodies right after (the floor: what's left of
   the service's once the echo's and the learner's are taken out is its own; and the learner's CPU
   inside the service, from its ``kons_learner_cpu_seconds``, where it has it), and Redis's
   ``INFO commandstats`` delta per request, in total and by command. Redis counts the commands a
   script runs as well as the ``EVALSHA`` that runs it.
b. **16 clients, one learner.** For ``auto`` and ``nystrom_kons``, with ``KONS_GROUP_COMMIT=true`` and
   ``=false`` (a setting today's code ignores): acknowledged feedback rounds per second over
   ``--seconds``, the learner's version checked to grow by exactly that many; against the ceiling measured
   in the same run, min(echo's rate with the same clients and bodies, the in-process learner's rate on
   the same rows).
c. **Many learners.** ``--learners`` ``auto`` learners (dim 8) created in one tenant under the default
   budget: how many are accepted, and whether each accepted one keeps taking feedback as it grows (two
   batches of ``--grow-rows`` rows each). Then ``--many`` learners in one process with
   ``KONS_CACHE_SIZE=--cache-size`` (tenant budget lifted): each created and given one batch of
   ``--grow-rows`` rows, the service's RSS sampled as they come (against the state of all of them and
   of a cache's worth, from one learner's exported state); and the p50 of a predict on a cold learner
   (evicted long ago) against a hot one, interleaved.
d. **Snapshots.** One ``auto`` learner fed at ``--rate`` requests/s (open loop, up to 8 in flight) for
   ``--snapshot-seconds``: snapshot bytes written per acknowledged round, exactly from the snapshotter's
   ``kons_snapshot_bytes_total`` when the service has it, else the snapshots written
   (``kons_snapshots_total``) times the size of the learner's state at the end (an estimate, marked so);
   and the bytes Redis received per round (``total_net_input_bytes``). Extrapolated to an hour at the
   rate achieved.

Results: ``hotpath.md`` and ``hotpath.json`` under ``--out`` (default ``benchmarks/results``), both from
the same record, with the provenance of both checkouts (:mod:`benchmarks.provenance`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import redis

from benchmarks.common import blas_env, command_line, machine, markdown_table
from benchmarks.load import UVICORN_ARGS, percentiles
from benchmarks.provenance import provenance, publish
from kons.datasets import load_dataset
from testkit.processes import (
    REPO,
    RedisServer,
    ServiceProcess,
    free_port,
    service_env,
    start_service,
    terminate,
    vm_rss_kib,
)
from testkit.scrape import samples, value

__all__ = ["Config", "main", "run"]

#: What the results measure, for their provenance (the service runs all of kons and kons_service).
SOURCES = (
    "kons",
    "kons_service",
    "testkit/processes.py",
    "benchmarks/hotpath.py",
    "benchmarks/echo_app.py",
    "benchmarks/load.py",
)
LEARNERS = {
    "auto": {"algorithm": "auto", "dim": 8, "params": {}},
    "nystrom_kons": {"algorithm": "nystrom_kons", "dim": 8, "params": {}},
}
#: The service's count of the CPU seconds its learners took, by work (``predict``, ``feedback``).
LEARNER_CPU = "kons_learner_cpu_seconds_total"
WARM_ROWS = 64  # past auto's first 32 rows, where it still learns its kernel width
SNAPSHOT_IN_FLIGHT = 8

#: One learner's rounds in a process of their own, importing the ``kons`` of the current directory (the
#: checkout measured): reads {"spec", "warm", "predict"} and the rows (JSON lines), prints CPU and wall
#: seconds (and with "predict", the CPU seconds of predicting the same rows afterwards).
_IN_PROCESS = """
import json, sys, time
import numpy as np
import kons
job = json.loads(sys.stdin.readline())
rows = [(np.asarray(x, dtype=float), y) for x, y in json.loads(sys.stdin.readline())]
spec = job["spec"]
learner = kons.learner_from_params(spec["algorithm"], {**spec["params"], "dim": spec["dim"]})
for x, y in rows[:job["warm"]]:
    learner.learn_one(x, y)
cpu, wall = time.process_time(), time.perf_counter()
for x, y in rows[job["warm"]:]:
    learner.learn_one(x, y)
done = {"rounds": len(rows) - job["warm"], "cpu_seconds": time.process_time() - cpu,
        "wall_seconds": time.perf_counter() - wall}
if job.get("predict"):  # then the same rows predicted by the learner that learnt them all
    cpu = time.process_time()
    for x, _ in rows[job["warm"]:]:
        learner.predict_one(x)
    done["predict_cpu_seconds"] = time.process_time() - cpu
print(json.dumps(done))
"""


@dataclass(frozen=True)
class Config:
    """One run's knobs; the defaults make a short run (a few minutes per checkout)."""

    single_rounds: int = 200  # a: interleaved rounds (feedback, predict, and echo for each)
    cpu_rounds: int = 200  # a: feedbacks, then predicts, counted for CPU and Redis commands
    clients: int = 16  # b
    seconds: float = 5.0  # b: per phase
    learners: int = 1000  # c: auto learners in one tenant under the default budget
    grow_rows: int = 40  # c: rows per feedback batch to each of them (two batches)
    many: int = 2000  # c: learners in one process
    cache_size: int = 256  # c: KONS_CACHE_SIZE of that process
    cold_probes: int = 30  # c: cold (and as many hot) predicts
    rate: float = 100.0  # d: requests per second
    snapshot_seconds: float = 120.0  # d
    dataset: str = "cadata"


@dataclass(frozen=True)
class Target:
    """A checkout whose service is measured."""

    label: str
    checkout: Path


# ---------------------------------------------------------------------------------------------- probes
def process_tree_cpu_seconds(pid: int) -> float:
    """The CPU seconds of ``pid`` and its live descendants so far: each live thread's time on a core
    (``/proc/<pid>/task/<tid>/schedstat``, in nanoseconds; ``utime + stime`` come in clock ticks, 10 ms,
    a quarter of a millisecond per request over a block of 40). A thread that ends between two readings
    takes its time with it (the service's worker threads outlive a block)."""
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            parent[int(stat.parent.name)] = int(text[text.rindex(")") + 2 :].split()[1])  # after "pid (comm)"
    tree, grew = {pid}, True
    while grew:
        more = {p for p, pp in parent.items() if pp in tree} - tree
        tree |= more
        grew = bool(more)
    nanoseconds = 0
    for process in tree:
        for schedstat in Path(f"/proc/{process}/task").glob("*/schedstat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                nanoseconds += int(schedstat.read_text().split()[0])
    return nanoseconds / 1e9


def command_calls(client: redis.Redis) -> dict[str, int]:
    """Redis's calls per command since it started (``INFO commandstats``)."""
    stats: dict[str, Any] = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def per_request(
    before: dict[str, int], after: dict[str, int], requests: int, ignore: Sequence[str] = ("info",)
) -> dict[str, float]:
    """Commands per request by command (the harness's own INFO calls left out), largest first."""
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after if k not in ignore}
    return {k: v / requests for k, v in sorted(delta.items(), key=lambda kv: -kv[1]) if v}


async def metrics_text(client: httpx.AsyncClient) -> str:
    return (await client.get("/metrics")).text


def in_process(
    checkout: Path, spec: dict[str, Any], rows: Sequence[tuple[list[float], float]], warm: int,
    predict: bool = False,
) -> dict[str, float]:
    """Rounds of ``spec``'s learner on ``rows`` (the first ``warm`` untimed) in a subprocess running
    ``checkout``'s kons with one BLAS thread; with ``predict``, then predictions of the timed rows."""
    env = {**os.environ, **blas_env(1), "PYTHONPATH": str(checkout)}
    job = {"spec": spec, "warm": warm, "predict": predict}
    payload = json.dumps(job) + "\n" + json.dumps(list(rows)) + "\n"
    done = subprocess.run(
        [sys.executable, "-c", _IN_PROCESS],
        input=payload,
        capture_output=True,
        text=True,
        cwd=checkout,
        env=env,
        check=True,
        timeout=3600,
    )
    return dict(json.loads(done.stdout))


# ---------------------------------------------------------------------------------------------- set-up
@contextlib.contextmanager
def echo_server(env: dict[str, str], log: Path) -> Iterator[tuple[str, int]]:
    """The echo app under uvicorn as :func:`benchmarks.load.uvicorn_server` runs it; yields its base URL
    and process id (whose CPU is the floor of a request's)."""
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "benchmarks.echo_app:app", *UVICORN_ARGS, "--port", str(port)]
    proc = start_service(port, env, log, argv)
    try:
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        terminate(proc, 60)


def http_client(base_url: str) -> httpx.AsyncClient:
    """Keep-alive connections dropped after 1 s idle: uvicorn closes them after 5 s, and a request sent
    on one just as it closes fails (httpx.ReadError) instead of measuring anything."""
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64, keepalive_expiry=1.0)
    return httpx.AsyncClient(base_url=base_url, limits=limits, timeout=120.0)


class Rows:
    """The benchmark stream, cycled: ``rows(start, count)`` as (features, target) pairs."""

    def __init__(self, dataset: str) -> None:
        data = load_dataset(dataset)
        self.X, self.y = data.X, data.y

    def rows(self, start: int, count: int) -> list[tuple[list[float], float]]:
        n = len(self.X)
        return [
            ([float(v) for v in self.X[t % n]], float(self.y[t % n])) for t in range(start, start + count)
        ]


@contextlib.asynccontextmanager
async def service(
    target: Target, workdir: Path, tag: str, **settings: object
) -> AsyncIterator[tuple[ServiceProcess, RedisServer, httpx.AsyncClient]]:
    """A fresh Redis and one service process of ``target`` on it; yields (service, Redis, client)."""
    directory = workdir / f"{target.label}-{tag}"
    server = RedisServer(directory / "redis").start()
    proc = ServiceProcess(server.url, directory / "service.log", checkout=target.checkout, **settings)
    try:
        proc.start()
        async with http_client(proc.url) as client:
            yield proc, server, client
    finally:
        proc.stop()
        server.stop()


async def status(request: Awaitable[httpx.Response]) -> str:
    """The status code of a request, or the name of the transport error that ended it."""
    try:
        return str((await request).status_code)
    except httpx.HTTPError as exc:
        return type(exc).__name__


async def create(client: httpx.AsyncClient, name: str, spec: dict[str, Any]) -> str:
    return await status(client.put(f"/v1/learners/{name}", json=spec))


async def feed(client: httpx.AsyncClient, name: str, rows: Sequence[tuple[list[float], float]]) -> str:
    """One feedback request with ``rows`` (a batch if several); its status."""
    body: dict[str, Any] = (
        {"x": rows[0][0], "y": rows[0][1]}
        if len(rows) == 1
        else {"items": [{"x": x, "y": y} for x, y in rows]}
    )
    return await status(client.post(f"/v1/learners/{name}/feedback", json=body))


async def version(client: httpx.AsyncClient, name: str) -> int:
    return int((await client.get(f"/v1/learners/{name}")).json()["version"])


async def timed(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> float:
    """Milliseconds of one POST, which must succeed."""
    started = time.perf_counter()
    (await client.post(path, json=body)).raise_for_status()
    return (time.perf_counter() - started) * 1e3


async def closed_loop(
    client: httpx.AsyncClient, path: str, bodies: Sequence[dict[str, Any]], clients: int, seconds: float
) -> dict[str, Any]:
    """``clients`` concurrent clients POST the bodies in order for ``seconds``: acknowledged per second."""
    feed_from, ok, errors = iter(bodies), 0, dict[str, int]()
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal ok
        for body in feed_from:
            if time.perf_counter() >= deadline:
                return
            try:
                code = str((await client.post(path, json=body)).status_code)
            except httpx.HTTPError as exc:
                code = type(exc).__name__
            if code.startswith("2"):
                ok += 1
            else:
                errors[code] = errors.get(code, 0) + 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    return {"ok": ok, "errors": errors, "seconds": elapsed, "rate": ok / elapsed}


# ---------------------------------------------------------------------------------------------- a
async def single_client(
    target: Target,
    config: Config,
    rows: Rows,
    echoed: tuple[httpx.AsyncClient, int],
    workdir: Path,
    log: Callable[[str], None],
) -> dict[str, Any]:
    echo, echo_pid = echoed  # (its client, its process)
    spec, name = LEARNERS["auto"], "single"
    warm = rows.rows(0, WARM_ROWS)
    single = rows.rows(WARM_ROWS, config.single_rounds)
    counted = rows.rows(WARM_ROWS + config.single_rounds, config.cpu_rounds)
    async with service(target, workdir, "single") as (proc, server, client):
        assert await create(client, name, spec) == "201"
        assert await feed(client, name, warm) == "200"
        latency: dict[str, list[float]] = {
            "feedback": [],
            "echo_feedback": [],
            "predict": [],
            "echo_predict": [],
        }
        path = f"/v1/learners/{name}"
        for x, y in single:
            latency["echo_feedback"].append(await timed(echo, "/echo", {"x": x, "y": y}))
            latency["feedback"].append(await timed(client, f"{path}/feedback", {"x": x, "y": y}))
            latency["echo_predict"].append(await timed(echo, "/echo", {"x": x}))
            latency["predict"].append(await timed(client, f"{path}/predict", {"x": x}))
        counts: dict[str, Any] = {}
        with contextlib.closing(server.client()) as r:
            for endpoint in ("feedback", "predict"):
                learner_cpu = value(await metrics_text(client), LEARNER_CPU, work=endpoint)
                calls, cpu = command_calls(r), process_tree_cpu_seconds(proc.pid)
                for x, y in counted:
                    await timed(
                        client, f"{path}/{endpoint}", {"x": x, "y": y} if endpoint == "feedback" else {"x": x}
                    )
                cpu_after, calls_after = process_tree_cpu_seconds(proc.pid), command_calls(r)
                learner_after = value(await metrics_text(client), LEARNER_CPU, work=endpoint)
                by_command = per_request(calls, calls_after, len(counted))
                # the floor: the echo's CPU for the same bodies, right after
                echo_cpu = process_tree_cpu_seconds(echo_pid)
                for x, y in counted:
                    await timed(echo, "/echo", {"x": x, "y": y} if endpoint == "feedback" else {"x": x})
                echo_cpu = process_tree_cpu_seconds(echo_pid) - echo_cpu
                counts[endpoint] = {
                    "cpu_ms": (cpu_after - cpu) / len(counted) * 1e3,
                    "echo_cpu_ms": echo_cpu / len(counted) * 1e3,
                    # (the learner's own CPU in the service, where the service counts it)
                    "learner_cpu_ms": math.nan if learner_cpu is None or learner_after is None
                    else (learner_after - learner_cpu) / len(counted) * 1e3,
                    "redis_commands": sum(by_command.values()),
                    "by_command": by_command,
                }
    own = in_process(target.checkout, spec, warm + single + counted, WARM_ROWS + len(single), predict=True)
    result = {
        "p50_ms": {k: percentiles(v)["p50"] for k, v in latency.items()},
        "p99_ms": {k: percentiles(v)["p99"] for k, v in latency.items()},
        "requests": counts,
        "in_process_round_cpu_ms": own["cpu_seconds"] / own["rounds"] * 1e3,
        "in_process_predict_cpu_ms": own["predict_cpu_seconds"] / own["rounds"] * 1e3,
    }
    log(f"[{target.label}] a: {json.dumps(result)[:400]}")
    return result


# ---------------------------------------------------------------------------------------------- b
async def concurrent_clients(
    target: Target,
    config: Config,
    rows: Rows,
    echo: httpx.AsyncClient,
    workdir: Path,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    results = []
    warm = rows.rows(0, WARM_ROWS)
    stream = rows.rows(WARM_ROWS, 30_000)
    bodies = [{"x": x, "y": y} for x, y in stream]
    for group_commit in ("true", "false"):
        async with service(target, workdir, f"clients-gc-{group_commit}", group_commit=group_commit) as (
            _,
            _,
            client,
        ):
            for algorithm, spec in LEARNERS.items():
                assert await create(client, algorithm, spec) == "201"
                assert await feed(client, algorithm, warm) == "200"
                floor = await closed_loop(echo, "/echo", bodies, config.clients, config.seconds)
                before = await version(client, algorithm)
                served = await closed_loop(
                    client, f"/v1/learners/{algorithm}/feedback", bodies, config.clients, config.seconds
                )
                grown = await version(client, algorithm) - before
                own = in_process(target.checkout, spec, warm + stream[: max(served["ok"], 200)], WARM_ROWS)
                own_rate = own["rounds"] / own["wall_seconds"]
                ceiling = min(floor["rate"], own_rate)
                result = {
                    "algorithm": algorithm,
                    "group_commit": group_commit,
                    "acknowledged": served["ok"],
                    "errors": served["errors"],
                    "rate": served["rate"],
                    "echo_rate": floor["rate"],
                    "in_process_rate": own_rate,
                    "ceiling": ceiling,
                    "of_ceiling": served["rate"] / ceiling,
                    "lost_updates": served["ok"] - grown,
                }
                log(f"[{target.label}] b: {result}")
                results.append(result)
    return results


# ---------------------------------------------------------------------------------------------- c
async def many_learners(
    target: Target, config: Config, rows: Rows, workdir: Path, log: Callable[[str], None]
) -> dict[str, Any]:
    spec = LEARNERS["auto"]
    result: dict[str, Any] = {}
    async with service(target, workdir, "budget") as (_, _, client):
        created = await _bounded(4, [create(client, f"b{i}", spec) for i in range(config.learners)])
        accepted = [f"b{i}" for i, code in enumerate(created) if code == "201"]
        passes = []
        for batch in range(2):
            chunk = rows.rows(batch * config.grow_rows, config.grow_rows)
            codes = await _bounded(4, [feed(client, name, chunk) for name in accepted])
            passes.append(_tally(codes))
        result["budget"] = {
            "asked": config.learners,
            "created": _tally(created),
            "feedback_passes": passes,
            "rows_per_batch": config.grow_rows,
        }
    log(f"[{target.label}] c budget: {result['budget']}")
    async with service(target, workdir, "many", cache_size=config.cache_size, tenant_max_bytes=2**50) as (
        proc,
        _,
        client,
    ):
        samples, codes = [], []
        step = max(1, config.many // 10)
        for start in range(0, config.many, step):
            names = [f"m{i}" for i in range(start, min(config.many, start + step))]
            codes += await _bounded(
                4,
                [
                    _create_and_feed(client, n, spec, rows.rows(i, config.grow_rows))
                    for i, n in zip(range(start, config.many), names, strict=False)
                ],
            )
            samples.append({"learners": start + len(names), "rss_mib": vm_rss_kib(proc.pid) / 1024})
        hot, cold = [], []
        last = f"m{config.many - 1}"
        x = rows.rows(0, 1)[0][0]
        for i in range(config.cold_probes):  # the first learners were evicted long ago
            hot.append(await timed(client, f"/v1/learners/{last}/predict", {"x": x}))
            cold.append(await timed(client, f"/v1/learners/m{i}/predict", {"x": x}))
        each = len((await client.get(f"/v1/learners/{last}/state")).content)
        result["many"] = {
            "learners": config.many,
            "cache_size": config.cache_size,
            "state_bytes_each": each,
            "outcomes": _tally(codes),
            "rss": samples,
            "hot_p50_ms": percentiles(hot)["p50"],
            "cold_p50_ms": percentiles(cold)["p50"],
            "cold_is_cold": config.many - config.cold_probes > config.cache_size,
        }
    log(f"[{target.label}] c many: {result['many']}")
    return result


async def _create_and_feed(
    client: httpx.AsyncClient, name: str, spec: dict[str, Any], rows: Sequence[tuple[list[float], float]]
) -> str:
    code = await create(client, name, spec)
    return code if code != "201" else await feed(client, name, rows)


async def _bounded(limit: int, jobs: Sequence[Awaitable[str]]) -> list[str]:
    """Await ``jobs`` (coroutines), at most ``limit`` at a time, in order."""
    gate = asyncio.Semaphore(limit)

    async def one(job: Awaitable[str]) -> str:
        async with gate:
            return await job

    return list(await asyncio.gather(*(one(j) for j in jobs)))


def _tally(codes: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for code in codes:
        counts[code] = counts.get(code, 0) + 1
    return counts


# ---------------------------------------------------------------------------------------------- d
async def snapshot_traffic(
    target: Target, config: Config, rows: Rows, workdir: Path, log: Callable[[str], None]
) -> dict[str, Any]:
    spec, name = LEARNERS["auto"], "snap"
    stream = rows.rows(0, int(config.rate * config.snapshot_seconds) + WARM_ROWS)
    async with service(target, workdir, "snapshots") as (_, server, client):
        assert await create(client, name, spec) == "201"
        assert await feed(client, name, stream[:WARM_ROWS]) == "200"
        text = await metrics_text(client)
        with contextlib.closing(server.client()) as r:
            net = int(r.info("stats")["total_net_input_bytes"])
            before = await version(client, name)
            paced = await _paced(
                client,
                f"/v1/learners/{name}/feedback",
                stream[WARM_ROWS:],
                config.rate,
                config.snapshot_seconds,
            )
            rounds = await version(client, name) - before
            net = int(r.info("stats")["total_net_input_bytes"]) - net
        after = await metrics_text(client)
        state = len((await client.get(f"/v1/learners/{name}/state")).content)
    written = _counter(after, "kons_snapshots_total", outcome="written") - _counter(
        text, "kons_snapshots_total", outcome="written"
    )
    exact = bool(samples(after, "kons_snapshot_bytes_total"))
    snap_bytes = (
        _counter(after, "kons_snapshot_bytes_total") - _counter(text, "kons_snapshot_bytes_total")
        if exact
        else written * state
    )
    rate = paced["ok"] / paced["seconds"]
    per_round = snap_bytes / max(rounds, 1)
    result = {
        "seconds": paced["seconds"],
        "asked_rate": config.rate,
        "rate": rate,
        "acknowledged": paced["ok"],
        "errors": paced["errors"],
        "rounds": rounds,
        "snapshots_written": written,
        "state_bytes_at_end": state,
        "snapshot_bytes": snap_bytes,
        "exact": exact,
        "snapshot_bytes_per_round": per_round,
        "redis_input_bytes_per_round": net / max(rounds, 1),
        "snapshot_bytes_per_hour": per_round * rate * 3600,
        "redis_input_bytes_per_hour": net / max(rounds, 1) * rate * 3600,
    }
    log(f"[{target.label}] d: {result}")
    return result


def _counter(text: str, name: str, **labels: str) -> float:
    return value(text, name, **labels) or 0.0


async def _paced(
    client: httpx.AsyncClient,
    path: str,
    rows: Sequence[tuple[list[float], float]],
    rate: float,
    seconds: float,
) -> dict[str, Any]:
    """Open loop for ``seconds``: row i is sent at start + i / rate (or as soon as one of the senders is
    free, when the service is slower than that)."""
    ok, errors, started = 0, dict[str, int](), time.perf_counter()
    queue = iter(enumerate(rows))

    async def sender() -> None:
        nonlocal ok
        for i, (x, y) in queue:
            await asyncio.sleep(max(0.0, started + i / rate - time.perf_counter()))
            if time.perf_counter() - started >= seconds:
                return
            try:
                code = str((await client.post(path, json={"x": x, "y": y})).status_code)
            except httpx.HTTPError as exc:
                code = type(exc).__name__
            if code.startswith("2"):
                ok += 1
            else:
                errors[code] = errors.get(code, 0) + 1

    await asyncio.gather(*(sender() for _ in range(SNAPSHOT_IN_FLIGHT)))
    return {"ok": ok, "errors": errors, "seconds": time.perf_counter() - started}


# ---------------------------------------------------------------------------------------------- the run
PARTS = ("single", "clients", "many", "snapshots")


async def run(
    config: Config,
    targets: Sequence[Target],
    parts: Sequence[str] = PARTS,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every part for every target (targets side by side within each part); the raw record."""
    started = time.time()
    record: dict[str, Any] = {
        "config": asdict(config),
        "targets": {},
        "machine": {"before": machine("httpx")},
    }
    for target in targets:
        checkout_provenance = _checkout_provenance(target.checkout)
        record["targets"][target.label] = {
            "checkout": str(target.checkout),
            "provenance": checkout_provenance,
        }
    rows = Rows(config.dataset)
    with tempfile.TemporaryDirectory(prefix="kons-hotpath-") as tmp:
        workdir = Path(tmp)
        echo_env = {**service_env(), **blas_env(1)}
        with echo_server(echo_env, workdir / "echo.log") as (echo_url, echo_pid):
            async with http_client(echo_url) as echo:
                for part in parts:
                    for target in targets:
                        t = record["targets"][target.label]
                        if part == "single":
                            echoed = (echo, echo_pid)
                            t[part] = await single_client(target, config, rows, echoed, workdir, log)
                        elif part == "clients":
                            t[part] = await concurrent_clients(target, config, rows, echo, workdir, log)
                        elif part == "many":
                            t[part] = await many_learners(target, config, rows, workdir, log)
                        else:
                            t[part] = await snapshot_traffic(target, config, rows, workdir, log)
    record["machine"]["after"] = machine("httpx")
    record["started_utc"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started))
    record["seconds"] = time.time() - started
    return record


def _checkout_provenance(checkout: Path) -> dict[str, Any]:
    """This checkout's provenance record; for another one, its commit (``git -C`` there)."""
    if checkout.resolve() == REPO:
        return provenance(SOURCES)
    head = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(checkout), "status", "--porcelain", "--", "kons", "kons_service"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    ).stdout.strip()
    return {"commit": head or "unknown", "dirty": bool(dirty)}


# ---------------------------------------------------------------------------------------------- report
def _x(a: float, b: float) -> str:
    return "n/a" if not (b > 0) or math.isnan(a) else f"{a / b:.1f}x"


def _n(v: float, digits: int = 1) -> str:
    return "n/a" if isinstance(v, float) and math.isnan(v) else f"{v:,.{digits}f}"


def _mib(v: float) -> str:
    return f"{v / 2**20:,.2f} MiB"


def render(record: dict[str, Any], command: str) -> str:
    """``hotpath.md`` from the raw record."""
    cfg, targets = record["config"], record["targets"]
    before, after = record["machine"]["before"], record["machine"]["after"]
    labels = list(targets)
    lines = [
        '# Service hot path (issue 18): the figures of its "Show", side by side',
        "",
        "Generated by `benchmarks/hotpath.py` (its docstring says how each figure is measured); every number "
        "comes from `hotpath.json` of the same run.",
        "",
        "```",
        command,
        "```",
        "",
        f"Run started {record['started_utc']} UTC, took {record['seconds']:.0f} s. "
        + "; ".join(
            f"`{label}`: {t['checkout']} at commit `{t['provenance']['commit'][:9]}`"
            + (" with local changes" if t["provenance"]["dirty"] else "")
            for label, t in targets.items()
        )
        + ".",
        "",
        f"Machine: {before['cpus']} CPUs ({before['cpu']}), shared with other engineers' jobs: 1-minute "
        f"load average {before['load_average'][0]:.1f} at the start, {after['load_average'][0]:.1f} at the "
        "end. The load generator, the servers and Redis share these cores, so absolute figures are noisy: "
        "compare the ratios, measured side by side.",
        "",
    ]
    if all("single" in targets[label] for label in labels):
        lines += [
            "## a. Single-row `auto` requests, one client",
            "",
            f"{cfg['single_rounds']} interleaved rounds (echo, feedback, echo, predict) after {WARM_ROWS} "
            f"warm-up rows; CPU and Redis commands over {cfg['cpu_rounds']} feedbacks, then as many "
            "predicts (the in-process predictions: of the same rows by the learner that learnt them). Issue "
            "18's targets: feedback p50 <= 3x echo, predict p50 <= 1.5x echo, service CPU per feedback <= "
            "3x the in-process round, <= 6 Redis commands per feedback; issue 36's add service CPU per "
            "predict <= 3x the in-process predict.",
            "",
        ]
        rows = []
        for label in labels:
            a = targets[label]["single"]
            p50, req = a["p50_ms"], a["requests"]
            rows.append(
                (
                    label,
                    _n(p50["feedback"], 2),
                    _n(p50["echo_feedback"], 2),
                    _x(p50["feedback"], p50["echo_feedback"]),
                    _n(p50["predict"], 2),
                    _n(p50["echo_predict"], 2),
                    _x(p50["predict"], p50["echo_predict"]),
                    _n(req["feedback"]["cpu_ms"], 2),
                    _n(a["in_process_round_cpu_ms"], 3),
                    _x(req["feedback"]["cpu_ms"], a["in_process_round_cpu_ms"]),
                    _n(req["feedback"]["redis_commands"]),
                    _n(req["predict"]["cpu_ms"], 2),
                    _n(a["in_process_predict_cpu_ms"], 3),
                    _x(req["predict"]["cpu_ms"], a["in_process_predict_cpu_ms"]),
                    _n(req["predict"]["redis_commands"]),
                )
            )
        lines += markdown_table(
            [
                "checkout",
                "feedback p50 ms",
                "echo p50",
                "ratio",
                "predict p50 ms",
                "echo p50",
                "ratio",
                "service CPU ms / feedback",
                "in-process round CPU ms",
                "ratio",
                "Redis commands / feedback",
                "service CPU ms / predict",
                "in-process predict CPU ms",
                "ratio",
                "Redis commands / predict",
            ],
            rows,
            "l" + "r" * 14,
        )
        lines += [
            "",
            "Redis commands per request by command (`INFO commandstats`; the commands a script runs "
            "are counted as well as the `evalsha` that runs it):",
            "",
        ]
        for label in labels:
            for endpoint, counts in targets[label]["single"]["requests"].items():
                shown = ", ".join(f"{k} {v:.2f}" for k, v in counts["by_command"].items())
                lines.append(f"* `{label}` {endpoint}: {shown}")
        lines.append("")
        requests = [req for label in labels for req in targets[label]["single"]["requests"].values()]
        if all("echo_cpu_ms" in req for req in requests):  # (not in the records of before)
            lines += [
                "Where a request's service CPU goes: the echo's CPU for the same bodies (HTTP, JSON and "
                "the framework: the floor of any endpoint), the in-process learner's, and the rest (the "
                "service's own: Redis round trips, validation, the cache, metrics), in ms; and the CPU the "
                "learner took inside the service (`kons_learner_cpu_seconds`, where the service counts it), "
                "which a warm in-process loop underestimates:",
                "",
            ]
            for label in labels:
                a = targets[label]["single"]
                own = {"feedback": a["in_process_round_cpu_ms"], "predict": a["in_process_predict_cpu_ms"]}
                for endpoint, counts in a["requests"].items():
                    rest = counts["cpu_ms"] - counts["echo_cpu_ms"] - own[endpoint]
                    lines.append(
                        f"* `{label}` {endpoint}: {_n(counts['cpu_ms'], 2)} = echo "
                        f"{_n(counts['echo_cpu_ms'], 2)} + learner {_n(own[endpoint], 2)} + rest "
                        f"{_n(rest, 2)}"
                        + (f"; the learner took {_n(counts['learner_cpu_ms'], 2)} in the service"
                           if not math.isnan(counts.get("learner_cpu_ms", math.nan)) else "")
                    )
            lines.append("")
    if all("clients" in targets[label] for label in labels):
        lines += [
            "## b. One learner, concurrent clients",
            "",
            f"{cfg['clients']} clients for {cfg['seconds']:.0f} s per phase, one process, after "
            f"{WARM_ROWS} warm-up rows. Ceiling = min(echo's rate with the same clients and bodies, the "
            "in-process learner's rate on the same rows); target >= 0.5x. Lost = acknowledged - growth "
            "of the learner's version.",
            "",
        ]
        lines += markdown_table(
            [
                "checkout",
                "learner",
                "KONS_GROUP_COMMIT",
                "acknowledged/s",
                "echo/s",
                "in-process rounds/s",
                "of ceiling",
                "errors",
                "lost",
            ],
            [
                (
                    label,
                    b["algorithm"],
                    b["group_commit"],
                    _n(b["rate"]),
                    _n(b["echo_rate"], 0),
                    _n(b["in_process_rate"], 0),
                    f"{b['of_ceiling']:.2f}x",
                    ", ".join(f"{k}: {v}" for k, v in b["errors"].items()) or "0",
                    b["lost_updates"],
                )
                for label in labels
                for b in targets[label]["clients"]
            ],
            "lllrrrrrr",
        )
        lines.append("")
    if all("many" in targets[label] for label in labels):
        lines += [
            "## c. Many learners",
            "",
            f"{cfg['learners']} `auto` learners (dim 8) created in one tenant, default budget; each "
            f"accepted one then gets two feedback batches of {cfg['grow_rows']} rows (4 at a time). "
            f"Then {cfg['many']} learners in one process with `KONS_CACHE_SIZE={cfg['cache_size']}` "
            f"(tenant budget lifted), each created and given one batch of {cfg['grow_rows']} rows; cold/hot: "
            f"{cfg['cold_probes']} predicts each, interleaved.",
            "",
        ]
        cells = []
        for label in labels:
            c = targets[label]["many"]
            budget, many = c["budget"], c["many"]
            passes = " / ".join(
                ", ".join(f"{k}: {v}" for k, v in p.items()) for p in budget["feedback_passes"]
            )
            rss = many["rss"]
            cells.append(
                (
                    label,
                    budget["created"].get("201", 0),
                    passes,
                    ", ".join(f"{k}: {v}" for k, v in many["outcomes"].items()),
                    " ".join(f"{s['learners']}:{s['rss_mib']:.0f}" for s in rss),
                    f"{many['learners'] * many['state_bytes_each'] / 2**20:,.0f} / "
                    f"{many['cache_size'] * many['state_bytes_each'] / 2**20:,.0f}",
                    _n(many["hot_p50_ms"], 2),
                    _n(many["cold_p50_ms"], 2),
                    _x(many["cold_p50_ms"], many["hot_p50_ms"]),
                )
            )
        lines += markdown_table(
            [
                "checkout",
                f"created of {cfg['learners']}",
                "feedback passes (status: count)",
                f"{cfg['many']} learners: outcomes",
                "RSS MiB by learners created",
                "state MiB of all / of a cache's worth",
                "hot predict p50 ms",
                "cold predict p50 ms",
                "cold / hot",
            ],
            cells,
            "lrllllrrr",
        )
        lines.append("")
    if all("snapshots" in targets[label] for label in labels):
        lines += [
            "## d. Snapshot bytes per acknowledged round, `auto` traffic",
            "",
            f"Asked {cfg['rate']:.0f} single-row feedbacks/s (open loop, up to {SNAPSHOT_IN_FLIGHT} in "
            f"flight) for {cfg['snapshot_seconds']:.0f} s; the hour is extrapolated from that at the "
            'rate achieved. "estimated" = snapshots written x the state\'s size at the end (the service '
            'has no byte counter); "exact" = `kons_snapshot_bytes_total`.',
            "",
        ]
        lines += markdown_table(
            [
                "checkout",
                "rate achieved/s",
                "rounds",
                "snapshots",
                "snapshot bytes / round",
                "how",
                "per hour (extrapolated)",
                "Redis input bytes / round",
                "Redis input per hour",
            ],
            [
                (
                    label,
                    _n(d["rate"]),
                    d["rounds"],
                    int(d["snapshots_written"]),
                    _n(d["snapshot_bytes_per_round"], 0),
                    "exact" if d["exact"] else "estimated",
                    _mib(d["snapshot_bytes_per_hour"]),
                    _n(d["redis_input_bytes_per_round"], 0),
                    _mib(d["redis_input_bytes_per_hour"]),
                )
                for label in labels
                for d in [targets[label]["snapshots"]]
            ],
            "lrrrrlrrr",
        )
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.hotpath", description=__doc__.split("\n\n")[0]
    )
    defaults = Config()
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--baseline", type=Path, help="another checkout (e.g. a git worktree) measured alike")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    for field, default in asdict(defaults).items():
        parser.add_argument(f"--{field.replace('_', '-')}", type=type(default), default=default)
    args = parser.parse_args(argv)
    config = Config(**{f: getattr(args, f) for f in asdict(defaults)})
    targets = [Target("current", REPO)]
    if args.baseline is not None:
        targets.append(Target("baseline", args.baseline.resolve()))
    command = command_line("benchmarks.hotpath", argv, outputs=("--out",))
    stamp = provenance(SOURCES)
    record = asyncio.run(run(config, targets, args.parts, log=lambda m: print(m, flush=True)))
    record["command"] = command
    publish(args.out, "hotpath", stamp, render(record, command), record)
    print(f"wrote {args.out / 'hotpath.md'} and {args.out / 'hotpath.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
