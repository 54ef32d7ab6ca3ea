"""Hostile senders against a victim tenant: the victim's predict latency while others post large bodies.

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.hostile [--seconds 6] [--rounds 2] [--baseline DIR]

One run starts, on 127.0.0.1 only, a ``redis-server`` and one service process with two tenants
(``victim`` and ``attacker``). The victim's learner (:data:`testkit.processes.SPEC`) answers sequential
predicts while, in turn: nobody else sends (idle); two senders post bodies of about 8 MiB of JSON numbers
with a wrong key (unauthenticated); two senders post the same bodies with the attacker's own key to the
attacker's own learner (authenticated; each is refused after validation, the features having the wrong
dimension, or refused unread with a 429 while the attacker already has a large body in flight); four
tenants each post 60 KiB bodies (just under the large-body gate: parsed by the serving process) to their
own learners; a neighbour trains an exact KONS learner with 500-row feedback batches (halved on a 413;
the learner grows over the whole run, so each round is heavier). Each
phase lasts ``--seconds`` and runs ``--rounds`` times, interleaved, so that the machine's other load
spreads over every cell. The table gives the victim's p50 and p99 (and p99 over the same service's idle
p99), the hostile requests sent (answered or cut off), the service process's CPU time per hostile request
(its parser process not included) and the senders' own CPU; a second table gives each round's p99 over
that round's idle p99. ``--baseline DIR`` also runs a service from
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

from benchmarks import registry
from benchmarks.common import blas_env, command_line, machine_summary
from benchmarks.provenance import provenance, stamp_markdown
from testkit.processes import SPEC, RedisServer, free_port, service_env, sigkill, start_service, terminate

#: The tenants and their keys: the victim, the 8 MiB attacker, four senders of medium bodies and a
#: neighbour training an exact learner.
KEYS = {"victim": "victim-key", "attacker": "attacker-key",
        **{f"medium{i}": f"medium{i}-key" for i in range(4)}, "trainer": "trainer-key"}
#: Just under the default 8 MiB body limit: 590,000 numbers of 13 characters and a comma.
HOSTILE_NUMBERS = 590_000
#: Just under the 64 KiB of a large body (parsed by the serving process itself): 4,600 such numbers.
MEDIUM_NUMBERS = 4_600
#: The exact learner the neighbour trains (every round joins its second-order matrix: O(t^2) a round),
#: and the batch it sends (halved while the service answers 413, as a client reading the error would).
EXACT = {"algorithm": "kons", "dim": 3, "params": {"preprocess": False}}
TRAINER_BATCH = 500


def _numbers_body(count: int) -> bytes:
    numbers = ",".join(["0.12345678901"] * count)
    return ('{"x":[' + numbers + "]}").encode()


def _sender(url: str, key: str, kind: str, nice: int, stop: EventType, sent: Synchronized[int]) -> None:
    """One hostile sender, in a process of its own (so that it does not share the victim's GIL): ``kind``
    "large" posts 8 MiB bodies, "medium" 60 KiB ones (both of features of the wrong dimension, refused
    once validated), "trainer" feedback batches to an exact learner. A request counts once answered or cut
    off (the service closes the connection on a body it refuses unread)."""
    os.nice(nice)
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    body = _numbers_body(HOSTILE_NUMBERS if kind == "large" else MEDIUM_NUMBERS)
    rng = np.random.default_rng(len(key))
    batch = TRAINER_BATCH
    with httpx.Client(base_url=url, timeout=120) as client:
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                if kind != "trainer":
                    client.post("/v1/learners/target/predict", content=body, headers=headers)
                else:
                    rows = rng.normal(size=(batch, 4))
                    items = [{"x": row[:3].tolist(), "y": float(row[3])} for row in rows]
                    fed = client.post("/v1/learners/target/feedback", json={"items": items}, headers=headers)
                    if fed.status_code == 413:
                        batch = max(batch // 2, 1)
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
    """One (phase, service) cell, summed over the rounds (and the victim's latencies of each round)."""

    latencies_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0
    service_cpu: float = 0.0
    sender_cpu: float = 0.0
    hostile: int = 0
    rounds_ms: list[list[float]] = field(default_factory=list)

    def cells(self, idle_p99: float) -> str:
        p50, p99 = np.percentile(self.latencies_ms, [50, 99])
        per_request = f"{1000 * self.service_cpu / self.hostile:.1f}" if self.hostile else "-"
        sender_cores = f"{self.sender_cpu / self.seconds:.2f}" if self.hostile else "-"
        return (f"{len(self.latencies_ms)} | {p50:.1f} | {p99:.1f} | {p99 / idle_p99:.1f}x | "
                f"{self.hostile} | {per_request} | {sender_cores}")


def _phase(tally: _Tally, url: str, pid: int, senders_of: list[tuple[str, str]], seconds: float,
           nice: int) -> None:
    """One phase against one service: the victim's latencies while one sender per ``(key, kind)`` of
    ``senders_of`` posts (see :func:`_sender`), added to ``tally``."""
    stop, sent = multiprocessing.Event(), multiprocessing.Value("i", 0)
    senders = [multiprocessing.Process(target=_sender, args=(url, key, kind, nice, stop, sent))
               for key, kind in senders_of]
    for sender in senders:
        sender.start()
    time.sleep(1.0 if senders else 0.0)
    pids = [pid, *(sender.pid for sender in senders if sender.pid is not None)]
    cpu, hostile, start = [_cpu_seconds(p) for p in pids], sent.value, time.monotonic()
    tally.rounds_ms.append([1000 * t for t in _victim_latencies(url, seconds)])
    tally.latencies_ms += tally.rounds_ms[-1]
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
        for tenant, key in KEYS.items():
            name = "victim" if tenant == "victim" else "target"
            response = httpx.put(f"{url}/v1/learners/{name}", json=EXACT if tenant == "trainer" else SPEC,
                                 headers={"authorization": f"Bearer {key}"})
            assert response.status_code == 201, response.text
        yield url, proc.pid
    finally:
        terminate(proc, 30)
        sigkill(proc)
        redis_server.stop()


def _tables(tallies: dict[tuple[str, str], _Tally], rounds: int) -> list[str]:
    """The victim's figures per phase and service, then each round's p99 over that round's idle p99."""
    lines = ["| phase | service | victim predicts | p50 ms | p99 ms | p99 / idle p99 | hostile requests | "
             "service CPU ms per hostile request | senders' CPU (cores) |", "|---" * 9 + "|"]
    for (phase, name), tally in tallies.items():
        idle_p99 = float(np.percentile(tallies["idle", name].latencies_ms, 99))
        lines.append(f"| {phase} | {name} | {tally.cells(idle_p99)} |")
    lines += ["", "Per round: the victim's p99 ms, and over the same round's idle p99", "",
              f"| phase | service | {' | '.join(f'round {i + 1}' for i in range(rounds))} | worst |",
              "|---|---|" + "---|" * (rounds + 1)]
    for (phase, name), tally in tallies.items():
        ratios = [float(np.percentile(ms, 99) / np.percentile(idle, 99))
                  for ms, idle in zip(tally.rounds_ms, tallies["idle", name].rounds_ms, strict=True)]
        cells = [f"{np.percentile(ms, 99):.1f} ({ratio:.1f}x)"
                 for ms, ratio in zip(tally.rounds_ms, ratios, strict=True)]
        lines.append(f"| {phase} | {name} | {' | '.join(cells)} | {max(ratios):.1f}x |")
    return lines


def _measure(services: dict[str, tuple[str, int]], seconds: float, rounds: int,
             nice: int) -> dict[tuple[str, str], _Tally]:
    phases: dict[str, list[tuple[str, str]]] = {
        "idle": [], "2 unauthenticated senders": [("wrong-key", "large")] * 2,
        "2 authenticated senders": [(KEYS["attacker"], "large")] * 2,
        "4 tenants sending 60 KiB bodies": [(KEYS[f"medium{i}"], "medium") for i in range(4)],
        "a neighbour training an exact learner": [(KEYS["trainer"], "trainer")]}
    tallies = {(phase, name): _Tally() for phase in phases for name in services}
    for _ in range(rounds):  # interleaved, so that the machine's other load spreads over all cells
        for phase, senders_of in phases.items():
            for name, (url, pid) in services.items():
                _phase(tallies[phase, name], url, pid, senders_of, seconds, nice)
    return tallies


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=6.0, help="length of one phase on one service")
    parser.add_argument("--rounds", type=int, default=2, help="times each phase is run")
    parser.add_argument("--source", type=Path, help="run the service from this checkout instead")
    parser.add_argument("--baseline", type=Path, help="also measure a service from this checkout")
    parser.add_argument("--sender-nice", type=int, nargs="+", default=[0],
                        help="niceness of the senders, one run each (19: they take only the CPU the service "
                        "leaves, as senders on other machines would)")
    parser.add_argument("--out", type=Path, default=None, help="write hostile.md there (else: stdout only)")
    args = parser.parse_args(argv)
    stamp = provenance(registry.sources_of("hostile.md") or ())  # the code imported now is what runs
    sources = {"this checkout" if args.source is None else str(args.source): args.source}
    if args.baseline is not None:
        sources = {f"baseline {args.baseline}": args.baseline, **sources}
    page = ["# Hostile senders: a victim tenant's predict latency while others send", "",
            f"Generated by `{command_line('benchmarks.hostile', argv, outputs=('--out',))}` at commit "
            f"{stamp['commit'][:9]}" + (" with local changes" if stamp["dirty"] else "") + "; "
            "do not edit by hand. How it measures: the module docstring of `benchmarks/hostile.py`. 2 shared "
            "cores: compare ratios within a run, not absolute latencies across runs.", ""]
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        services = {name: stack.enter_context(_service(Path(tmp) / str(i), source))
                    for i, (name, source) in enumerate(sources.items())}
        for nice in args.sender_nice:
            tallies = _measure(services, args.seconds, args.rounds, nice)
            machine = (f"machine: {machine_summary()}; {args.rounds} rounds of {args.seconds:g} s per cell; "
                       f"senders at niceness {nice}")
            lines = [machine, *_tables(tallies, args.rounds)]
            print("\n".join(lines), "", sep="\n", flush=True)
            load = " / ".join(f"{v:.1f}" for v in os.getloadavg())
            page += [f"## Senders at niceness {nice}", "", f"{machine[0].upper()}{machine[1:]}; load average "
                     f"at the end {load}.", "", *lines[1:], ""]
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "hostile.md").write_text(stamp_markdown("\n".join(page), stamp))


if __name__ == "__main__":
    main()
