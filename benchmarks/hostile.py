"""Hostile senders against a victim tenant: the victim's predict latency while others post large bodies.

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.hostile [--seconds 6] [--rounds 2] [--baseline DIR]

One run starts, on 127.0.0.1 only, a ``redis-server`` and one service process with two tenants
(``victim`` and ``attacker``). The victim's learner (:data:`testkit.processes.SPEC`) answers sequential
predicts while, in turn: nobody else sends (idle); two senders post bodies of about 8 MiB of JSON numbers
with a wrong key (unauthenticated); two senders post the same bodies with the attacker's own key to the
attacker's own learner (authenticated; each is refused after validation, the features having the wrong
dimension, or refused unread with a 429 while the attacker already has a large body in flight). Each
phase lasts ``--seconds`` and runs ``--rounds`` times, interleaved, so that the machine's other load
spreads over every cell. The table gives the victim's p50 and p99 (and p99 over the same service's idle
p99), the hostile requests sent (answered or cut off), the service process's CPU time per hostile request
(its parser process not included) and the senders' own CPU. ``--baseline DIR`` also runs a service from
another checkout (e.g. ``git archive main`` unpacked there), on a Redis of its own, each phase on it
right before this checkout's: a before/after comparison in the same run conditions.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event as EventType
from pathlib import Path

import httpx
import numpy as np

from benchmarks.common import blas_env, machine_summary
from testkit.processes import SPEC, RedisServer, free_port, service_env, sigkill, start_service, terminate

KEYS = {"victim": "victim-key", "attacker": "attacker-key"}
#: Just under the default 8 MiB body limit: 590,000 numbers of 13 characters and a comma.
HOSTILE_NUMBERS = 590_000


def _hostile_body() -> bytes:
    numbers = ",".join(["0.12345678901"] * HOSTILE_NUMBERS)
    return ('{"x":[' + numbers + "]}").encode()


def _sender(url: str, key: str, nice: int, stop: EventType, sent: Synchronized[int]) -> None:
    """One hostile sender, in a process of its own (so that it does not share the victim's GIL). A
    request counts once answered or cut off (the service closes the connection on a body it refuses
    unread)."""
    os.nice(nice)
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    body = _hostile_body()
    with httpx.Client(base_url=url, timeout=60) as client:
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                client.post("/v1/learners/target/predict", content=body, headers=headers)
            with sent.get_lock():
                sent.value += 1


def _victim_latencies(url: str, seconds: float) -> list[float]:
    headers = {"authorization": f"Bearer {KEYS['victim']}"}
    latencies = []
    with httpx.Client(base_url=url, timeout=60, headers=headers) as client:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            start = time.perf_counter()
            response = client.post("/v1/learners/victim/predict", json={"x": [0.1, 0.2, 0.3]})
            latencies.append(time.perf_counter() - start)
            assert response.status_code == 200, response.text
    return latencies


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class _Tally:
    """One (phase, service) cell, summed over the rounds."""

    latencies_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0
    service_cpu: float = 0.0
    sender_cpu: float = 0.0
    hostile: int = 0

    def cells(self, idle_p99: float) -> str:
        p50, p99 = np.percentile(self.latencies_ms, [50, 99])
        per_request = f"{1000 * self.service_cpu / self.hostile:.1f}" if self.hostile else "-"
        sender_cores = f"{self.sender_cpu / self.seconds:.2f}" if self.hostile else "-"
        return (f"{len(self.latencies_ms)} | {p50:.1f} | {p99:.1f} | {p99 / idle_p99:.1f}x | "
                f"{self.hostile} | {per_request} | {sender_cores}")


def _phase(tally: _Tally, url: str, pid: int, key: str | None, seconds: float, nice: int) -> None:
    """One phase against one service: the victim's latencies while two senders (none if ``key`` is None)
    post hostile bodies with ``key``, added to ``tally``."""
    stop, sent = multiprocessing.Event(), multiprocessing.Value("i", 0)
    senders = [] if key is None else [
        multiprocessing.Process(target=_sender, args=(url, key, nice, stop, sent)) for _ in range(2)
    ]
    for sender in senders:
        sender.start()
    time.sleep(1.0 if senders else 0.0)
    pids = [pid, *(sender.pid for sender in senders if sender.pid is not None)]
    cpu, hostile, start = [_cpu_seconds(p) for p in pids], sent.value, time.monotonic()
    tally.latencies_ms += [1000 * t for t in _victim_latencies(url, seconds)]
    cpu = [_cpu_seconds(p) - c for p, c in zip(pids, cpu, strict=True)]
    tally.seconds += time.monotonic() - start
    tally.hostile += sent.value - hostile
    tally.service_cpu += cpu[0]
    tally.sender_cpu += sum(cpu[1:])
    stop.set()
    for sender in senders:
        sender.join(timeout=120)
        if sender.is_alive():
            sender.kill()


@contextlib.contextmanager
def _service(workdir: Path, source: Path | None) -> Iterator[tuple[str, int]]:
    """A Redis server and a service (from ``source``, else this checkout) with the two tenants' learners."""
    redis_server = RedisServer(workdir / "redis").start()
    port = free_port()
    keys = ",".join(f"{tenant}:{key}" for tenant, key in KEYS.items())
    env = service_env(KONS_REDIS_URL=redis_server.url, KONS_HOST="127.0.0.1", KONS_PORT=str(port),
                      KONS_API_KEYS=keys, KONS_LOG_LEVEL="warning", **blas_env(1))
    argv = None
    if source is not None:
        boot = (f"import sys, runpy; sys.path.insert(0, {str(source.resolve())!r}); "
                "runpy.run_module('kons_service', run_name='__main__')")
        argv = [sys.executable, "-c", boot]
    proc = start_service(port, env, workdir / "service.log", argv)
    try:
        url = f"http://127.0.0.1:{port}"
        for tenant, name in (("victim", "victim"), ("attacker", "target")):
            response = httpx.put(f"{url}/v1/learners/{name}", json=SPEC,
                                 headers={"authorization": f"Bearer {KEYS[tenant]}"})
            assert response.status_code == 201, response.text
        yield url, proc.pid
    finally:
        terminate(proc, 30)
        sigkill(proc)
        redis_server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=6.0, help="length of one phase on one service")
    parser.add_argument("--rounds", type=int, default=2, help="times each phase is run")
    parser.add_argument("--source", type=Path, help="run the service from this checkout instead")
    parser.add_argument("--baseline", type=Path, help="also measure a service from this checkout")
    parser.add_argument("--sender-nice", type=int, default=0,
                        help="niceness of the senders (19: they take only the CPU the service leaves, as "
                        "senders on other machines would)")
    args = parser.parse_args(argv)
    sources = {"this checkout" if args.source is None else str(args.source): args.source}
    if args.baseline is not None:
        sources = {f"baseline {args.baseline}": args.baseline, **sources}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        services = {name: stack.enter_context(_service(Path(tmp) / str(i), source))
                    for i, (name, source) in enumerate(sources.items())}
        phases = {"idle": None, "2 unauthenticated senders": "wrong-key",
                  "2 authenticated senders": KEYS["attacker"]}
        tallies = {(phase, name): _Tally() for phase in phases for name in services}
        for _ in range(args.rounds):  # interleaved, so that the machine's other load spreads over all cells
            for phase, key in phases.items():
                for name, (url, pid) in services.items():
                    _phase(tallies[phase, name], url, pid, key, args.seconds, args.sender_nice)
        print(f"machine: {machine_summary()}; {args.rounds} rounds of {args.seconds:g} s per cell; "
              f"senders at niceness {args.sender_nice}")
        print("| phase | service | victim predicts | p50 ms | p99 ms | p99 / idle p99 | hostile requests | "
              "service CPU ms per hostile request | senders' CPU (cores) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for (phase, name), tally in tallies.items():
            idle_p99 = float(np.percentile(tallies["idle", name].latencies_ms, 99))
            print(f"| {phase} | {name} | {tally.cells(idle_p99)} |")

if __name__ == "__main__":
    main()
