"""Load benchmark of the kons service: latency and throughput of predict and feedback over loopback HTTP.

    python -m benchmarks.load --out benchmarks/results

One run starts, on 127.0.0.1 only:

* a ``redis-server`` on a free port in a temporary directory;
* the kons service (``uvicorn kons_service.main:app``) and the floor, a bare FastAPI echo endpoint
  (``uvicorn benchmarks.echo_app:app``), under identical uvicorn settings (:data:`UVICORN_ARGS`);
* optionally the peer, chantilly 0.3 (River behind Flask, state in Redis), from its own venv, under the
  same uvicorn settings with ``--interface wsgi`` (:mod:`benchmarks.chantilly_peer`).

Learners with ``n`` stored points are built in this process (Sketched-KONS, squared loss, on the CASP stream
of ``docs/bench-protocol.md``; the squared loss stores every point) and uploaded with
``PUT /state``. For each size, async httpx clients drive ``predict`` and then ``feedback`` with a bounded
number of requests and a time cap; the same bodies go to the echo endpoint in blocks alternating with the
kons ones, so the latency ratio kons / echo is measured side by side. After each
feedback phase the learner's version must have grown by exactly the number of acknowledged feedbacks;
the difference is reported as lost updates. Results: ``load.md`` (tables, command, machine) and
``raw/load.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

import kons
from benchmarks import registry
from benchmarks.common import (
    blas_env,
    blas_threads,
    command_line,
    git_commit,
    machine,
    markdown_table,
    require_datasets,
    results_dir,
)
from benchmarks.methods import median_gamma
from benchmarks.provenance import provenance, stamp_json, stamp_markdown
from kons.datasets import load_dataset
from kons.kernels import RBF
from testkit.processes import REPO, RedisServer, free_port, service_env, start_service, terminate

__all__ = ["LoadConfig", "PhaseResult", "drive", "main", "percentiles", "run"]

#: The uvicorn settings of every server in a run (the kons service, the echo floor and the peer).
UVICORN_ARGS = ["--host", "127.0.0.1", "--workers", "1", "--loop", "uvloop", "--http", "httptools",
                "--no-access-log", "--log-level", "warning", "--timeout-graceful-shutdown", "30"]
DEFAULT_CHANTILLY_PYTHON = Path("/tmp/chantilly-py39/bin/python")
#: How the peer's venv was made: chantilly 0.3 needs a River that still exports ``river.metrics.Metric``
#: (0.10.1); River that old has no wheel for Python 3.11 and its sdist does not compile there, hence 3.9.
CHANTILLY_311 = (
    "On the project's Python 3.11, `pip install 'chantilly==0.3.*'` installs (with River 0.26.1) but does "
    "not import: `AttributeError: module 'river.metrics' has no attribute 'Metric'` (chantilly/flavors.py); "
    "River 0.10.1 has no cp311 wheel and its sdist's pre-generated Cython C fails to compile on 3.11 "
    "(`_PyErr_StackItem has no member named exc_type`). Hence Python 3.9; same uvicorn options")
CHANTILLY_INSTALL = ("/root/.pyenv/versions/3.9.18/bin/python -m venv /tmp/chantilly-py39 && "
                     "/tmp/chantilly-py39/bin/pip install --only-binary river 'river==0.10.1' 'numpy<2' && "
                     "/tmp/chantilly-py39/bin/pip install --no-deps 'chantilly==0.3.0' && "
                     "/tmp/chantilly-py39/bin/pip install cerberus dill flask redis uvicorn uvloop httptools")


@dataclass(frozen=True)
class LoadConfig:
    """One run's knobs; the defaults are the published configuration."""

    sizes: tuple[int, ...] = (1_000, 10_000, 50_000)
    requests: int = 1_000  # per phase
    concurrency: int = 4
    max_seconds: float = 20.0  # per phase
    warmup: int = 20  # unmeasured requests before each phase
    blocks: int = 5  # a phase alternates echo and the measured server in this many blocks
    workers_check: int = 2  # also count lost updates with this many uvicorn workers (1 = skip)
    dataset: str = "casp"
    chantilly_python: Path | None = DEFAULT_CHANTILLY_PYTHON
    # OPENBLAS/OMP/MKL threads of every server (1, as `python -m kons_service` sets)
    blas_threads: int | None = 1


@dataclass
class PhaseResult:
    """Latencies (ms) and outcome of one phase: ``requests`` sent by ``concurrency`` clients."""

    target: str  # "kons", "echo" or "chantilly"
    endpoint: str
    n: int  # stored points at the start of the phase (0 for echo)
    requests: int
    ok: int
    errors: dict[str, int]
    seconds: float
    throughput: float  # acknowledged requests per second
    p50: float
    p95: float
    p99: float
    mean: float
    max: float
    extra: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------- measuring
def percentiles(latencies_ms: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99, mean and max of the latencies (NaN when there are none)."""
    if not latencies_ms:
        return dict.fromkeys(("p50", "p95", "p99", "mean", "max"), math.nan)
    a = np.asarray(latencies_ms, dtype=float)
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99), "mean": float(a.mean()),
            "max": float(a.max())}


@dataclass
class _Sample:
    """What the clients saw: latencies (ms) of acknowledged requests, failures by status, wall time."""

    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def result(self, target: str, endpoint: str, n: int = 0) -> PhaseResult:
        ok = len(self.latencies)
        stats: dict[str, Any] = percentiles(self.latencies)  # p50 ... max, as floats
        return PhaseResult(target=target, endpoint=endpoint, n=n, requests=ok + sum(self.errors.values()),
                           ok=ok, errors=self.errors, seconds=self.seconds,
                           throughput=ok / self.seconds if self.seconds > 0 else math.nan,
                           **stats)


async def _block(
    client: httpx.AsyncClient, path: str, bodies: Sequence[dict[str, Any]], concurrency: int,
    max_seconds: float, sample: _Sample,
) -> None:
    """POST each body once (in order, ``concurrency`` at a time) until done or ``max_seconds`` have passed."""
    next_index = iter(range(len(bodies)))
    started = time.perf_counter()
    deadline = started + max_seconds

    async def worker() -> None:
        for i in next_index:
            if time.perf_counter() >= deadline:
                return
            t0 = time.perf_counter()
            try:
                response = await client.post(path, json=bodies[i])
                code = str(response.status_code)
            except httpx.HTTPError as exc:
                code = type(exc).__name__
            elapsed = time.perf_counter() - t0
            if code.startswith("2"):
                sample.latencies.append(elapsed * 1e3)
            else:
                sample.errors[code] = sample.errors.get(code, 0) + 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    sample.seconds += time.perf_counter() - started


async def drive(
    client: httpx.AsyncClient, path: str, bodies: Sequence[dict[str, Any]], *, concurrency: int,
    max_seconds: float, target: str, endpoint: str, n: int = 0,
) -> PhaseResult:
    """One phase: every body POSTed once by ``concurrency`` clients, within ``max_seconds``."""
    sample = _Sample()
    await _block(client, path, bodies, concurrency, max_seconds, sample)
    return sample.result(target, endpoint, n)


async def drive_paired(
    echo: httpx.AsyncClient, client: httpx.AsyncClient, path: str, bodies: Sequence[dict[str, Any]], *,
    blocks: int, concurrency: int, max_seconds: float, target: str, endpoint: str, n: int = 0,
) -> tuple[PhaseResult, PhaseResult]:
    """The echo floor and ``path`` on the same bodies, alternating in ``blocks`` blocks (drift cancels out).

    Each side gets ``max_seconds`` in total; returns (echo result, result of ``path``).
    """
    floor, measured = _Sample(), _Sample()
    step = max(1, math.ceil(len(bodies) / blocks))
    for chunk in (bodies[i:i + step] for i in range(0, len(bodies), step)):
        await _block(echo, "/echo", chunk, concurrency, max_seconds - floor.seconds, floor)
        await _block(client, path, chunk, concurrency, max_seconds - measured.seconds, measured)
    return floor.result("echo", endpoint), measured.result(target, endpoint, n)


async def warm(client: httpx.AsyncClient, path: str, bodies: Sequence[dict[str, Any]]) -> None:
    for body in bodies:
        (await client.post(path, json=body)).raise_for_status()


# ---------------------------------------------------------------------------------------------- learners
@dataclass(frozen=True)
class Stream:
    """The benchmark stream: rows of a data set in protocol order, cycled when more rows are needed."""

    name: str
    X: np.ndarray
    y: np.ndarray

    def rows(self, start: int, count: int) -> Iterator[tuple[list[float], float]]:
        for t in range(start, start + count):
            i = t % len(self.X)
            yield [float(v) for v in self.X[i]], float(self.y[i])


def build_learners(
    stream: Stream, sizes: Sequence[int]
) -> tuple[dict[str, Any], dict[int, bytes], dict[int, dict[str, Any]]]:
    """One Sketched-KONS trained on the first ``max(sizes)`` rows: (spec, state blob per size, info)."""
    gamma = median_gamma(stream.X)
    learner = kons.SketchedKONS(kernel=RBF(gamma=gamma), loss="squared", alpha=1.0, C=3.0, beta=1.0,
                                epsilon=0.5, seed=0, dim=stream.X.shape[1])
    params = learner.get_params()
    dim = params.pop("dim")
    # the paper learner, as built here (the service's dict path would otherwise add kons.preprocessing)
    spec = {"algorithm": learner.name, "dim": dim, "params": {**params, "preprocess": False}}
    blobs: dict[int, bytes] = {}
    info: dict[int, dict[str, Any]] = {}
    done, started = 0, time.perf_counter()
    with blas_threads(1):  # the build is not measured; one BLAS thread is much faster on a busy machine
        for size in sorted(set(sizes)):
            for x, y in stream.rows(done, size - done):
                learner.learn_one(x, y)
            done = size
            blobs[size] = learner.to_bytes()
            stats = learner.stats()
            info[size] = {"stored_points": stats["stored_points"],
                          "dictionary_size": stats["dictionary_size"], "state_bytes": len(blobs[size]),
                          "built_after_seconds": time.perf_counter() - started}
    return spec, blobs, info


# ---------------------------------------------------------------------------------------------- servers
def server_env(config: LoadConfig, **env: str) -> dict[str, str]:
    """The environment of a server: the service-test environment, plus the BLAS thread limit if any."""
    return {**service_env(**env), **blas_env(config.blas_threads)}


@contextlib.contextmanager
def uvicorn_server(
    app_ref: str, env: dict[str, str], log: Path, *, python: str = sys.executable, extra: Sequence[str] = ()
) -> Iterator[str]:
    """Run ``uvicorn app_ref`` with :data:`UVICORN_ARGS` on a free port; yields its base URL."""
    port = free_port()
    argv = [python, "-m", "uvicorn", app_ref, *UVICORN_ARGS, "--port", str(port), *extra]
    proc = start_service(port, env, log, argv)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        terminate(proc, 60)


def http_client(base_url: str, concurrency: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    return httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60.0)


# ---------------------------------------------------------------------------------------------- the run
def _bodies(
    stream: Stream, start: int, count: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows = list(stream.rows(start, count))
    return [{"x": x} for x, _ in rows], [{"x": x, "y": y} for x, y in rows]


async def _upload(
    client: httpx.AsyncClient, path: str, spec: dict[str, Any], blob: bytes
) -> tuple[int, float]:
    """(Re-)create the learner at ``path`` and upload its state: (stored points, upload seconds)."""
    (await client.delete(path)).status_code  # noqa: B018 - a leftover from an earlier run is gone
    (await client.put(path, json=spec)).raise_for_status()
    started = time.perf_counter()
    response = await client.put(f"{path}/state", content=blob,
                                headers={"content-type": "application/octet-stream"})
    response.raise_for_status()
    upload = time.perf_counter() - started
    return int((await client.get(path)).json()["stats"]["stored_points"]), upload


async def _feedback_counted(
    config: LoadConfig, echo: httpx.AsyncClient, client: httpx.AsyncClient, path: str,
    bodies: Sequence[dict[str, Any]], n: int,
) -> tuple[PhaseResult, PhaseResult]:
    """The paired feedback phase, with the learner's version read before and after (lost updates)."""
    before = (await client.get(path)).json()["version"]
    echo_fb, fb = await drive_paired(echo, client, f"{path}/feedback", bodies, target="kons",
                                     endpoint="feedback", n=n, blocks=config.blocks,
                                     concurrency=config.concurrency, max_seconds=config.max_seconds)
    after = (await client.get(path)).json()["version"]
    fb.extra.update(version_before=before, version_after=after, lost_updates=fb.ok - (after - before))
    return echo_fb, fb


async def _kons_size(
    config: LoadConfig, kons_url: str, echo_url: str, stream: Stream, spec: dict[str, Any], size: int,
    blob: bytes, log: Callable[[str], None],
) -> list[PhaseResult]:
    name = f"load-n{size}"
    path = f"/v1/learners/{name}"
    results: list[PhaseResult] = []
    predict_bodies, feedback_bodies = _bodies(stream, size, config.warmup + config.requests)
    warm_p, predict_bodies = predict_bodies[:config.warmup], predict_bodies[config.warmup:]
    warm_f, feedback_bodies = feedback_bodies[:config.warmup], feedback_bodies[config.warmup:]
    async with http_client(kons_url, config.concurrency) as kc, \
            http_client(echo_url, config.concurrency) as ec:
        stored, upload = await _upload(kc, path, spec, blob)
        log(f"n={size}: uploaded {len(blob)} bytes in {upload:.2f} s")

        kw: dict[str, Any] = {"blocks": config.blocks, "concurrency": config.concurrency,
                              "max_seconds": config.max_seconds}
        await warm(ec, "/echo", warm_p)
        await warm(kc, f"{path}/predict", warm_p)
        results += await drive_paired(ec, kc, f"{path}/predict", predict_bodies, target="kons",
                                      endpoint="predict", n=stored, **kw)
        results[-1].extra["upload_seconds"] = upload

        await warm(ec, "/echo", warm_f)
        await warm(kc, f"{path}/feedback", warm_f)
        results += await _feedback_counted(config, ec, kc, path, feedback_bodies, stored + len(warm_f))
        (await kc.delete(path)).raise_for_status()  # frees the server's memory before the next size
    for r in results:
        log(f"  {r.target:9s} {r.endpoint:8s} n={r.n:6d} ok={r.ok} err={r.errors} "
            f"p50={r.p50:.2f} p99={r.p99:.2f} ms {r.throughput:.0f}/s {r.extra}")
    return results


async def _kons_workers(
    config: LoadConfig, redis_url: str, echo_url: str, stream: Stream, spec: dict[str, Any], size: int,
    blob: bytes, workdir: Path, log: Callable[[str], None],
) -> list[PhaseResult]:
    """Feedback to one learner served by ``config.workers_check`` uvicorn worker processes (lost updates)."""
    workers = config.workers_check
    path = f"/v1/learners/load-workers-n{size}"
    _, feedback_bodies = _bodies(stream, size, config.warmup + config.requests)
    env = server_env(config, KONS_REDIS_URL=redis_url)
    log_file = workdir / "kons-workers.log"
    with uvicorn_server("kons_service.main:app", env, log_file, extra=["--workers", str(workers)]) as url:
        async with http_client(url, config.concurrency) as kc, \
                http_client(echo_url, config.concurrency) as ec:
            stored, _ = await _upload(kc, path, spec, blob)
            await warm(kc, f"{path}/feedback", feedback_bodies[:config.warmup])
            echo_fb, fb = await _feedback_counted(config, ec, kc, path, feedback_bodies[config.warmup:],
                                                  stored + config.warmup)
            (await kc.delete(path)).raise_for_status()
    fb.extra["workers"] = workers
    log(f"  kons feedback, {workers} workers, n={fb.n}: ok={fb.ok} err={fb.errors} p50={fb.p50:.2f} "
        f"p99={fb.p99:.2f} ms {fb.throughput:.0f}/s {fb.extra}")
    return [echo_fb, fb]


def _chantilly_count(python: Path, env: dict[str, str], name: str) -> int:
    out = subprocess.run([str(python), "-m", "benchmarks.chantilly_peer", "count", name], env=env, cwd=REPO,
                         capture_output=True, check=True, timeout=60)
    return int(json.loads(out.stdout)["n_iterations"])


async def _chantilly(
    config: LoadConfig, redis: RedisServer, echo_url: str, stream: Stream, workdir: Path,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Serve River LinearRegression with chantilly on the same stream; {"status": ..., phases ...}."""
    python = config.chantilly_python
    if python is None:
        return {"status": "skipped", "reason": "--no-chantilly"}
    if not python.exists():
        return {"status": "not run", "reason": f"{python} not found; install with: {CHANTILLY_INSTALL}"}
    env = server_env(config, STORAGE_BACKEND="redis", REDIS_HOST="127.0.0.1", REDIS_PORT=str(redis.port),
                     REDIS_DB="1")  # chantilly's init flushes its db: never the kons one (0)
    probe = ("import sys, importlib.metadata as m; print(sys.version.split()[0], "
             "*(m.version(p) for p in ('chantilly', 'river', 'flask', 'uvicorn')))")
    version = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    if version.returncode != 0:
        return {"status": "not run", "reason": f"import failed: {version.stderr.strip()[-800:]}"}
    versions = dict(zip(("python", "chantilly", "river", "flask", "uvicorn"), version.stdout.split(),
                        strict=True))
    model = subprocess.run([str(python), "-m", "benchmarks.chantilly_peer", "model"], env=env, cwd=REPO,
                           capture_output=True, check=True, timeout=60).stdout
    kw: dict[str, Any] = {"blocks": config.blocks, "concurrency": config.concurrency,
                          "max_seconds": config.max_seconds}
    name = "load-river"
    total = config.warmup + config.requests
    rows = list(stream.rows(0, total))
    feats = [{"features": {f"x{j}": v for j, v in enumerate(x)}} for x, _ in rows]
    learns = [{**f, "ground_truth": y} for f, (_, y) in zip(feats, rows, strict=True)]
    results: list[PhaseResult] = []
    with uvicorn_server("benchmarks.chantilly_peer:create_app", env, workdir / "chantilly.log",
                        python=str(python), extra=["--interface", "wsgi", "--factory"]) as url:
        async with http_client(url, config.concurrency) as cc, \
                http_client(echo_url, config.concurrency) as ec:
            (await cc.post("/api/init", json={"flavor": "regression"})).raise_for_status()
            (await cc.post(f"/api/model/{name}", content=model)).raise_for_status()
            await warm(ec, "/echo", feats[:config.warmup])
            await warm(cc, "/api/predict", feats[:config.warmup])
            results += await drive_paired(ec, cc, "/api/predict", feats[config.warmup:], target="chantilly",
                                          endpoint="predict", **kw)
            await warm(ec, "/echo", learns[:config.warmup])
            await warm(cc, "/api/learn", learns[:config.warmup])
            before = _chantilly_count(python, env, name)
            echo_fb, fb = await drive_paired(ec, cc, "/api/learn", learns[config.warmup:], target="chantilly",
                                             endpoint="feedback", **kw)
            after = _chantilly_count(python, env, name)
            fb.extra.update(version_before=before, version_after=after, lost_updates=fb.ok - (after - before))
            results += [echo_fb, fb]
    for r in results:
        log(f"  {r.target:9s} {r.endpoint:8s} ok={r.ok} err={r.errors} p50={r.p50:.2f} p99={r.p99:.2f} ms "
            f"{r.throughput:.0f}/s {r.extra}")
    return {"status": "ok", **versions,
            "model": "river.linear_model.LinearRegression() (defaults)",
            "phases": [asdict(r) for r in results]}


async def run(config: LoadConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The whole benchmark; returns the raw record (also what ``load.md`` is made from)."""
    started = time.time()
    commit = git_commit()
    machine_before = machine("httpx")
    data = load_dataset(config.dataset)
    stream = Stream(config.dataset, data.X, data.y)
    build = time.perf_counter()
    spec, blobs, built = build_learners(stream, config.sizes)
    log(f"built {sorted(blobs)} in {time.perf_counter() - build:.1f} s: {built}")
    phases: list[PhaseResult] = []
    with tempfile.TemporaryDirectory(prefix="kons-load-") as tmp:
        workdir = Path(tmp)
        redis = RedisServer(workdir / "redis").start()
        try:
            kons_env = server_env(config, KONS_REDIS_URL=redis.url)
            echo_env = server_env(config)
            with uvicorn_server("kons_service.main:app", kons_env, workdir / "kons.log") as kons_url, \
                    uvicorn_server("benchmarks.echo_app:app", echo_env, workdir / "echo.log") as echo_url:
                for size in config.sizes:
                    blob = blobs[size]
                    phases += await _kons_size(config, kons_url, echo_url, stream, spec, size, blob, log)
                multi: list[PhaseResult] = []
                if config.workers_check > 1:
                    size = min(config.sizes)
                    multi = await _kons_workers(config, redis.url, echo_url, stream, spec, size, blobs[size],
                                                workdir, log)
                peer = await _chantilly(config, redis, echo_url, stream, workdir, log)
        finally:
            redis.stop()
    return {
        "config": {**asdict(config), "chantilly_python": str(config.chantilly_python)},
        "uvicorn_args": UVICORN_ARGS, "spec": spec, "learners": {str(k): v for k, v in built.items()},
        "stream": {"dataset": config.dataset, "rows": len(stream.X), "dim": int(stream.X.shape[1])},
        "kons": [asdict(p) for p in phases], "kons_workers": [asdict(p) for p in multi], "chantilly": peer,
        "machine": {"before": machine_before, "after": machine("httpx")}, "commit": commit,
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "seconds": time.time() - started,
    }


# ---------------------------------------------------------------------------------------------- report
def _ms(v: float) -> str:
    return "nan" if math.isnan(v) else f"{v:.2f}"


def _ratio(a: float, b: float) -> str:
    return "nan" if not (b > 0) or math.isnan(a) else f"{a / b:.1f}x"


def _errors(p: dict[str, Any]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(p["errors"].items())) or "0"


def _pairs(phases: list[dict[str, Any]], target: str) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(measured phase, the echo phase just before it with the same body shape)."""
    echo: dict[str, dict[str, Any]] = {}
    for p in phases:
        if p["target"] == "echo":
            echo[p["endpoint"]] = p
        elif p["target"] == target:
            yield p, echo[p["endpoint"]]


def render(record: dict[str, Any], command: str) -> str:
    """``load.md`` from the raw record."""
    cfg, learners = record["config"], record["learners"]
    before, after = record["machine"]["before"], record["machine"]["after"]
    lines = [
        "# Service under load: kons predict/feedback latency vs a bare FastAPI echo endpoint",
        "",
        "Generated by `benchmarks/load.py`; every number below comes from the raw record "
        "`raw/load.json` of the same run.",
        "",
        "```",
        command,
        "```",
        "",
        f"Run started {record['started_utc']} UTC, took {record['seconds']:.0f} s; "
        f"commit `{record['commit']}`.",
        "",
        "## Machine caveat",
        "",
        f"{before['cpus']} CPUs ({before['cpu']}), shared with other engineers' jobs during the run: "
        f"1-minute load average {before['load_average'][0]:.1f} at the start and "
        f"{after['load_average'][0]:.1f} at the end. The load generator (httpx, "
        "asyncio, one process) runs on the same two cores as the servers and Redis. Absolute numbers are "
        "noisy from run to run; the ratio to the echo endpoint, "
        "measured in blocks alternating with each kons phase with the same body "
        "shape, client and concurrency, is the figure to compare across runs.",
        "",
        "## Set-up",
        "",
        f"* Servers: `uvicorn {' '.join(record['uvicorn_args'])}` for all of them "
        "(kons `kons_service.main:app`, echo "
        "`benchmarks.echo_app:app`, chantilly with `--interface wsgi`); kons service settings are the "
        "defaults except `KONS_REDIS_URL` (a `redis-server` on loopback, AOF `everysec`). "
        f"BLAS threads of the servers: {cfg['blas_threads'] or 'library default'}.",
        f"* Learners: `{record['spec']['algorithm']}` with params `{json.dumps(record['spec']['params'])}` "
        f"(RBF width by the median rule of `benchmarks.methods`), trained in the harness on the first n rows "
        f"of the `{cfg['dataset']}` stream ({record['stream']['rows']} rows x {record['stream']['dim']} "
        "features, protocol order, cycled past its end) and uploaded with `PUT /v1/learners/{name}/state`.",
        "* Each phase: "
        f"{cfg['requests']} requests (cap {cfg['max_seconds']:.0f} s) from {cfg['concurrency']} concurrent "
        f"async clients (keep-alive), after {cfg['warmup']} unmeasured warm-up requests; one row per request "
        "(`{\"x\": [...]}` / `{\"x\": [...], \"y\": v}`), rows n, n+1, ... of the stream (not yet seen by "
        "the learner). The same bodies go to `POST /echo`, alternating with the measured server in "
        f"{cfg['blocks']} blocks per phase so that drift in the machine's load hits both. Latency = "
        "client-side wall time of a request; throughput = acknowledged (2xx) requests / phase wall time.",
        "",
        *markdown_table(["learner", "stored points n", "dictionary size", "state bytes"],
                        [(f"n={size}", info["stored_points"], info["dictionary_size"], info["state_bytes"])
                         for size, info in learners.items()], "lrrr"),
        "",
        "## Latency and throughput",
        "",
    ]
    peer = record["chantilly"]
    measured = [(f"kons {p['endpoint']}", str(p["n"]), p, e) for p, e in _pairs(record["kons"], "kons")]
    measured += [(f"kons feedback, {p['extra']['workers']} uvicorn workers", str(p["n"]), p, e)
                 for p, e in _pairs(record.get("kons_workers", []), "kons")]
    if peer["status"] == "ok":
        measured += [(f"chantilly {p['endpoint']} (River LinearRegression)", "-", p, e)
                     for p, e in _pairs(peer["phases"], "chantilly")]
    lines += markdown_table(
        ["endpoint", "n at start", "ok", "errors", "req/s", "p50 ms", "p95 ms", "p99 ms", "echo p50",
         "echo p99", "p50 / echo", "p99 / echo", "echo req/s"],
        [(label, n, p["ok"], _errors(p), f"{p['throughput']:.0f}", _ms(p["p50"]), _ms(p["p95"]),
          _ms(p["p99"]), _ms(e["p50"]), _ms(e["p99"]), _ratio(p["p50"], e["p50"]), _ratio(p["p99"], e["p99"]),
          f"{e['throughput']:.0f}") for label, n, p, e in measured], "l" + "r" * 12)
    lines += [
        "",
        "## Lost updates under concurrent clients",
        "",
        f"{cfg['concurrency']} clients send feedback to one model at the same time. kons: the learner's "
        "`version` (GET /v1/learners/{name}) before and after the phase; chantilly: the stored River model's "
        "`optimizer.n_iterations` (one per `learn_one`). Lost = acknowledged - increase.",
        "",
    ]
    rows = [("kons", f"n={p['n']}", p) for p in record["kons"] if p["target"] == "kons"
            and p["endpoint"] == "feedback"]
    rows += [(f"kons, {p['extra']['workers']} uvicorn workers", f"n={p['n']}", p)
             for p in record.get("kons_workers", []) if p["target"] == "kons"]
    if peer["status"] == "ok":
        rows += [("chantilly", "River LinearRegression", p) for p in peer["phases"]
                 if p["target"] == "chantilly" and p["endpoint"] == "feedback"]
    lines += markdown_table(
        ["server", "model", "acknowledged feedbacks", "counter before", "counter after", "lost updates"],
        [(server, model, p["ok"], p["extra"]["version_before"], p["extra"]["version_after"],
          p["extra"]["lost_updates"]) for server, model, p in rows], "llrrrr")
    lines += ["", "## Peer: chantilly", ""]
    if peer["status"] == "ok":
        lines.append(
            f"chantilly {peer['chantilly']} with River {peer['river']}, Flask {peer['flask']}, uvicorn "
            f"{peer['uvicorn']} on Python {peer['python']}, installed in a throwaway venv "
            f"(`{CHANTILLY_INSTALL}`). {CHANTILLY_311}, Redis storage backend (db 1 of the same "
            "redis-server), model "
            f"{peer['model']}, on the same stream (rows 0, 1, ... as dict features). chantilly stores the "
            "model as one dill blob in Redis and each request does get-modify-set without a lock, so "
            "concurrent learns overwrite each other's updates; every predict and learn also rewrites the "
            "model (and a stats/metrics blob).")
    else:
        lines.append(f"Not run ({peer['status']}): {peer['reason']}")
    lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="where results go (default: a new temporary directory)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(LoadConfig.sizes))
    parser.add_argument("--requests", type=int, default=LoadConfig.requests, help="per phase")
    parser.add_argument("--concurrency", type=int, default=LoadConfig.concurrency)
    parser.add_argument("--max-seconds", type=float, default=LoadConfig.max_seconds, help="cap per phase")
    parser.add_argument("--warmup", type=int, default=LoadConfig.warmup)
    parser.add_argument("--blocks", type=int, default=LoadConfig.blocks,
                        help="echo and the measured server alternate in this many blocks per phase")
    parser.add_argument("--dataset", default=LoadConfig.dataset)
    parser.add_argument("--workers-check", type=int, default=LoadConfig.workers_check,
                        help="lost-update check with this many uvicorn workers (1 = skip)")
    parser.add_argument("--blas-threads", type=int, default=LoadConfig.blas_threads,
                        help="BLAS threads of every server (0 = the library's default)")
    parser.add_argument("--chantilly-python", type=Path, default=DEFAULT_CHANTILLY_PYTHON)
    parser.add_argument("--no-chantilly", action="store_true")
    parser.add_argument("--name", default="load", help="stem of the result files")
    args = parser.parse_args(argv)
    require_datasets([args.dataset], "benchmarks.load")
    args.out = results_dir(args.out, "load")
    stamp = provenance(registry.sources_of("load.md") or ())  # the code imported now is what runs
    config = LoadConfig(
        sizes=tuple(args.sizes), requests=args.requests, concurrency=args.concurrency,
        max_seconds=args.max_seconds, warmup=args.warmup, blocks=args.blocks,
        workers_check=args.workers_check, dataset=args.dataset,
        chantilly_python=None if args.no_chantilly else args.chantilly_python,
        blas_threads=args.blas_threads or None)
    record = asyncio.run(run(config, log=lambda m: print(m, flush=True)))
    command = command_line("benchmarks.load", argv)
    record = stamp_json({**record, "command": command}, stamp)
    (args.out / "raw").mkdir(parents=True, exist_ok=True)
    (args.out / "raw" / f"{args.name}.json").write_text(json.dumps(record, indent=1) + "\n")
    (args.out / f"{args.name}.md").write_text(stamp_markdown(render(record, command), stamp))
    print(f"wrote {args.out / (args.name + '.md')} and {args.out / 'raw' / (args.name + '.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
