"""How long a learner's writes stall after its writer dies, and after a Redis restart (default settings).

Two real service processes share one real Redis and one learner:

* ``sigkill``: process B is killed (SIGKILL) while it holds the learner's writer lease (in the middle of a
  large feedback batch); the stall is the time from the kill to the first feedback acknowledged by A.
* ``redis-restart``: both processes write the learner in a loop (a failed request is sent again after
  10 ms); Redis is stopped (SIGTERM) and started again; the stall is the time from Redis answering again
  to the first acknowledgement after it, and ``gap`` the time between the last acknowledgement before the
  stop and the first after the restart.

Each scenario runs on this checkout with the fast takeover on (the default) and off
(``KONS_LEASE_TAKEOVER=false``), and on a baseline commit (``--baseline``, default ``main``: its service
processes run from a ``git archive`` of it), side by side::

    python -m benchmarks.takeover --runs 10 --baseline main --out benchmarks/results/takeover.md
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks import registry
from benchmarks.common import REPO, blas_env, command_line, git_commit, machine_summary, markdown_table
from benchmarks.provenance import provenance, stamp_markdown
from kons_service.store import LearnerRef
from kons_service.store.keys import learner_key
from testkit.processes import SPEC, RedisServer, ServiceProcess, start_service

__all__ = ["main"]

URL = "/v1/learners/m"
LEASE_KEY = learner_key(LearnerRef("default", "m"), "lease")
BIG_BATCH = 20_000  # rows: long enough for a kill to land while the lease is held


def _row(rng: np.random.Generator) -> dict[str, Any]:
    x = rng.normal(size=3)
    return {"x": x.tolist(), "y": float(np.sin(x[0]))}


def _wait(check: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.002)
    return False


def _acknowledged(http: httpx.Client, body: dict[str, Any], timeout: float) -> float:
    """Send ``body`` until it is acknowledged (a failure is sent again after 10 ms); the time it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        with contextlib.suppress(httpx.HTTPError):
            if http.post(f"{URL}/feedback", json=body).status_code == 200:
                return time.monotonic() - start
        time.sleep(0.01)
    raise TimeoutError(f"no acknowledgement in {timeout} s")


@dataclass(frozen=True)
class Mode:
    """What runs: the service code in ``code`` (None: this checkout), with the takeover on or off."""

    name: str
    takeover: bool = True
    code: Path | None = None


class _Service(ServiceProcess):
    """A service process that may run another checkout's code (``-P``: not this directory's)."""

    def __init__(self, redis_url: str, log: Path, code: Path | None, **settings: object) -> None:
        # settings are KONS_* settings only: none of them fills the base's `checkout` (a Path)
        super().__init__(redis_url, log, **settings)  # type: ignore[arg-type]
        self.code = code
        self.env.update(blas_env(1))
        if code is not None:
            self.env["PYTHONPATH"] = str(code)

    def start(self) -> _Service:
        argv = [sys.executable, "-P", "-m", "kons_service"]
        self.proc = start_service(self.port, self.env, self.log, argv=argv)
        return self


@contextlib.contextmanager
def _pair(workdir: Path, mode: Mode) -> Iterator[tuple[RedisServer, list[ServiceProcess]]]:
    """A Redis and two service processes with default settings (but the takeover switch)."""
    server = RedisServer(workdir / "redis").start()
    services: list[ServiceProcess] = []
    try:
        for i in range(2):
            service: ServiceProcess = _Service(server.url, workdir / f"service{i}.log", mode.code,
                                               lease_takeover=str(mode.takeover).lower(), max_batch=BIG_BATCH)
            services.append(service.start())
        assert httpx.put(services[0].url + URL, json=SPEC).status_code == 201
        yield server, services
    finally:
        for service in services:
            service.stop()
        server.stop()


def sigkill_stalls(workdir: Path, mode: Mode, runs: int) -> list[float]:
    """Per run: seconds from SIGKILL of the lease holder to the survivor's first acknowledgement."""
    rng = np.random.default_rng(0)
    stalls = []
    with _pair(workdir, mode) as (server, (survivor, victim)):
        redis = server.client()
        with httpx.Client(base_url=survivor.url, timeout=30) as http:
            for _ in range(runs):
                batch = {"items": [_row(rng) for _ in range(BIG_BATCH)]}
                sender = threading.Thread(target=_post_quietly, args=(victim.url, batch), daemon=True)
                sender.start()
                if not _wait(lambda: redis.get(LEASE_KEY) is not None, 30):
                    raise RuntimeError("the victim never took the lease")
                time.sleep(0.05)  # well inside the batch: the lease was renewed at least once or not yet
                victim.kill()
                killed = time.monotonic()
                _acknowledged(http, _row(rng), 60)
                stalls.append(time.monotonic() - killed)
                sender.join(10)
                victim.start()
    return stalls


def _post_quietly(base: str, body: dict[str, Any]) -> None:
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(f"{base}{URL}/feedback", json=body, timeout=60)


def restart_stalls(workdir: Path, mode: Mode, runs: int) -> list[dict[str, float]]:
    """Per run: ``stall`` (Redis answering again -> first acknowledgement) and ``gap`` (last
    acknowledgement before the stop -> first after the restart), with both processes writing."""
    results = []
    with _pair(workdir, mode) as (server, services):
        for run in range(runs):
            acks: list[float] = []
            stop = threading.Event()
            writers = [threading.Thread(target=_write_loop, args=(s.url, acks, stop, 10 * run + i),
                                        daemon=True) for i, s in enumerate(services)]
            for w in writers:
                w.start()
            time.sleep(1.0)
            stopped = time.monotonic()
            server.stop()
            server.start()
            back = time.monotonic()
            if not _wait(functools.partial(_any_after, acks, back), 60):
                raise RuntimeError("no acknowledgement after the restart")
            first = min(t for t in list(acks) if t > back)
            last_before = max(t for t in list(acks) if t <= stopped)
            stop.set()
            for w in writers:
                w.join(30)
            results.append({"stall": first - back, "gap": first - last_before, "down": back - stopped})
    return results


def _any_after(times: list[float], start: float) -> bool:
    return any(t > start for t in list(times))


def _write_loop(base: str, acks: list[float], stop: threading.Event, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with httpx.Client(base_url=base, timeout=30) as http:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                _acknowledged(http, _row(rng), 30)
                acks.append(time.monotonic())


def _summary(values: Sequence[float]) -> str:
    slow = sum(v > 1.0 for v in values)
    return (f"median {statistics.median(values):.3f} s, max {max(values):.3f} s; "
            f"{slow} of {len(values)} runs over 1 s")


def _markdown(results: dict[str, Any], command: str) -> str:
    rows = []
    for mode, r in results["modes"].items():
        rows.append([mode, _summary(r["sigkill"]), _summary([x["stall"] for x in r["restart"]]),
                     _summary([x["gap"] for x in r["restart"]])])
    lines = ["# Writer takeover: stalls after a SIGKILL and after a Redis restart", "",
             f"`{command}` at commit {results['commit']}. {machine_summary()}", "",
             "Default settings (lease TTL 2 s) but `KONS_LEASE_TAKEOVER`. Two service processes, one Redis, "
             f"one learner. `baseline` is commit {results['baseline']} (before the takeover).", "",
             *markdown_table(["mode", "SIGKILL of the lease holder -> survivor's first ack",
                              "Redis SIGTERM restart: back -> first ack", "last ack -> first ack"],
                             rows),
             "", "Raw figures (seconds):", "", "```json", json.dumps(results, indent=1), "```", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--baseline", default="main", help="git commit to compare with (its service code)")
    parser.add_argument("--out", type=Path, default=None, help="Markdown report (default: stdout only)")
    args = parser.parse_args(argv)
    baseline = subprocess.run(["git", "rev-parse", "--short", args.baseline], cwd=REPO, check=True,
                              capture_output=True, text=True).stdout.strip()
    stamp = provenance(registry.sources_of("takeover.md") or ())  # the code imported now is what runs
    results: dict[str, Any] = {"commit": git_commit(), "baseline": baseline, "modes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        code = Path(tmp) / "baseline"
        code.mkdir()
        archive = subprocess.run(["git", "archive", baseline], cwd=REPO, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(code)], input=archive.stdout, check=True)
        for mode in (Mode("takeover"), Mode("lease_takeover=false", takeover=False),
                     Mode("baseline", code=code)):
            kills = sigkill_stalls(Path(tmp) / f"{mode.name}-kill", mode, args.runs)
            restarts = restart_stalls(Path(tmp) / f"{mode.name}-restart", mode, args.runs)
            results["modes"][mode.name] = {
                "sigkill": [round(s, 4) for s in kills],
                "restart": [{k: round(v, 4) for k, v in r.items()} for r in restarts]}
            print(mode.name, json.dumps(results["modes"][mode.name]), flush=True)
    text = _markdown(results, command_line("benchmarks.takeover", argv, outputs=("--out",)))
    if args.out:
        args.out.write_text(stamp_markdown(text, stamp))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
