"""Hostile senders against a victim tenant: the victim's predict latency while others post large bodies.

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.hostile [--seconds 6] [--source DIR]

One run starts, on 127.0.0.1 only, a ``redis-server`` and one service process with two tenants
(``victim`` and ``attacker``). The victim's learner (:data:`testkit.processes.SPEC`) answers sequential
predicts while, in turn: nobody else sends (idle); two senders post bodies of about 8 MiB of JSON numbers
with a wrong key (unauthenticated); two senders post the same bodies with the attacker's own key to the
attacker's own learner (authenticated; each is refused after validation, the features having the wrong
dimension). Each phase lasts ``--seconds`` and prints the victim's p50 and p99, the hostile requests
answered and the service process's CPU time per hostile request (the robust figure on shared cores).
``--source DIR`` runs the service from another checkout (e.g. ``git archive main`` unpacked
there) for a before/after comparison on the same machine in the same run conditions.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
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


def _sender(url: str, key: str, stop: EventType, answered: Synchronized[int]) -> None:
    """One hostile sender, in a process of its own (so that it does not share the victim's GIL)."""
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    body = _hostile_body()
    with httpx.Client(base_url=url, timeout=60) as client:
        while not stop.is_set():
            try:
                client.post("/v1/learners/target/predict", content=body, headers=headers)
                with answered.get_lock():
                    answered.value += 1
            except httpx.HTTPError:
                pass


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


def _phase(url: str, pid: int, name: str, key: str | None, seconds: float) -> None:
    stop, answered = multiprocessing.Event(), multiprocessing.Value("i", 0)
    senders = [] if key is None else [
        multiprocessing.Process(target=_sender, args=(url, key, stop, answered)) for _ in range(2)
    ]
    for sender in senders:
        sender.start()
    time.sleep(1.0 if senders else 0.0)
    cpu, hostile = _cpu_seconds(pid), answered.value
    latencies = np.array(_victim_latencies(url, seconds)) * 1000
    cpu, hostile = _cpu_seconds(pid) - cpu, answered.value - hostile
    stop.set()
    for sender in senders:
        sender.join(timeout=120)
        if sender.is_alive():
            sender.kill()
    p50, p99 = np.percentile(latencies, [50, 99])
    per_request = f"{1000 * cpu / hostile:.1f}" if hostile else "-"
    print(f"| {name} | {len(latencies)} | {p50:.1f} | {p99:.1f} | {hostile} | {per_request} |", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--source", type=Path, help="run the service from this checkout instead")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        redis_server = RedisServer(Path(tmp) / "redis").start()
        port = free_port()
        keys = ",".join(f"{tenant}:{key}" for tenant, key in KEYS.items())
        env = service_env(KONS_REDIS_URL=redis_server.url, KONS_HOST="127.0.0.1", KONS_PORT=str(port),
                          KONS_API_KEYS=keys, KONS_LOG_LEVEL="warning", **blas_env(1))
        argv_service = None
        if args.source is not None:
            boot = (f"import sys, runpy; sys.path.insert(0, {str(args.source.resolve())!r}); "
                    "runpy.run_module('kons_service', run_name='__main__')")
            argv_service = [sys.executable, "-c", boot]
        proc = start_service(port, env, Path(tmp) / "service.log", argv_service)
        try:
            url = f"http://127.0.0.1:{port}"
            for tenant, name in (("victim", "victim"), ("attacker", "target")):
                response = httpx.put(f"{url}/v1/learners/{name}", json=SPEC,
                                     headers={"authorization": f"Bearer {KEYS[tenant]}"})
                assert response.status_code == 201, response.text
            print(f"machine: {machine_summary()}; service from {args.source or 'this checkout'}")
            print("| phase | victim predicts | p50 ms | p99 ms | hostile requests answered | service CPU ms "
                  "per hostile request |")
            print("|---|---|---|---|---|---|")
            _phase(url, proc.pid, "idle", None, args.seconds)
            _phase(url, proc.pid, "2 unauthenticated senders", "wrong-key", args.seconds)
            _phase(url, proc.pid, "2 authenticated senders", KEYS["attacker"], args.seconds)
        finally:
            terminate(proc, 30)
            sigkill(proc)
            redis_server.stop()


if __name__ == "__main__":
    main()
