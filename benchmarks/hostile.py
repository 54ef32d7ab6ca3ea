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
hostile phase lasts ``--seconds`` and runs ``--rounds`` times, interleaved, so that the machine's other
load spreads over every cell, and every hostile cell has an idle cell (nobody else sends) on the same
service right before it and right after it: on a shared machine the idle p99 itself moves several-fold
within a minute, so a round is judged against the idle cells adjacent to it, not against a pooled idle.
The first table gives, per phase, the victim's p50 and p99 over all rounds (and that p99 over the pooled
idle p99), the worst round's ratio and how many rounds were over 3x, the hostile requests sent
(answered or cut off), the service process's CPU time per hostile request (its parser process not
included) and the senders' own CPU. The second table gives every round: its p99, the adjacent idle p99s,
their ratio, and the machine's own scheduling noise in each of those cells (how late a separate process
wakes from a 1 ms sleep, p99), which tells a slow round of the service from a busy machine.
``--baseline DIR`` also runs a service from another checkout (e.g. ``git archive main`` unpacked there),
on a Redis of its own, each cell on it right before this checkout's: a before/after comparison in the
same run conditions.
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


class _Jitter:
    """The machine's own scheduling noise, which touches no service: a process of its own sleeps 1 ms over
    and over and logs how late it wakes (with CLOCK_MONOTONIC, which every process shares), so that a
    round whose victim was slow can be told from a round in which the machine itself was busy."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.process = multiprocessing.Process(target=_oversleep, args=(path,), daemon=True)
        self.process.start()

    def p99_ms(self, start: float, end: float) -> float:
        samples = np.fromfile(self.path, dtype=np.float64).reshape(-1, 2)
        late = samples[(samples[:, 0] >= start) & (samples[:, 0] < end), 1]
        return float(np.percentile(late, 99) * 1000) if len(late) else float("nan")

    def stop(self) -> None:
        self.process.kill()
        self.process.join(10)


def _oversleep(path: Path) -> None:
    with path.open("ab", buffering=0) as out:
        while True:
            block = np.empty((100, 2))
            for i in range(100):
                before = time.monotonic()
                time.sleep(0.001)
                block[i] = before, time.monotonic() - before - 0.001
            out.write(block.tobytes())


@dataclass
class _Cell:
    """The victim's latencies of one phase, one round, on one service, and what the phase cost."""

    latencies_ms: list[float]
    start: float
    end: float
    hostile: int = 0
    service_cpu: float = 0.0
    sender_cpu: float = 0.0

    @property
    def p99(self) -> float:
        return float(np.percentile(self.latencies_ms, 99))


@dataclass
class _Tally:
    """One (phase, service) pair over the rounds: its cells, and for a hostile phase the idle cells run
    on the same service just before and just after each of them (its reference)."""

    cells: list[_Cell] = field(default_factory=list)
    idle_before: list[_Cell] = field(default_factory=list)
    idle_after: list[_Cell | None] = field(default_factory=list)

    def reference_p99(self, i: int) -> float:
        """Round ``i``'s idle p99: the mean of those of the adjacent idle cells."""
        after = self.idle_after[i]
        return float(np.mean([self.idle_before[i].p99, *([after.p99] if after else [])]))

    def ratios(self) -> list[float]:
        """Each hostile round's p99 over its idle reference (none for the idle phase itself)."""
        return [self.cells[i].p99 / self.reference_p99(i) for i in range(len(self.idle_before))]

    def pooled(self) -> str:
        latencies = [ms for cell in self.cells for ms in cell.latencies_ms]
        idle = [ms for cell in self.idle_before for ms in cell.latencies_ms]
        p50, p99 = np.percentile(latencies, [50, 99])
        hostile = sum(cell.hostile for cell in self.cells)
        seconds = sum(cell.end - cell.start for cell in self.cells)
        per_request = f"{1000 * sum(c.service_cpu for c in self.cells) / hostile:.1f}" if hostile else "-"
        sender_cores = f"{sum(c.sender_cpu for c in self.cells) / seconds:.2f}" if hostile else "-"
        ratios = self.ratios()
        worst, over = "-", "-"
        if ratios:
            worst, over = f"{max(ratios):.1f}x", f"{sum(r > 3 for r in ratios)} of {len(ratios)}"
        idle_p99 = np.percentile(idle or latencies, 99)
        return (f"{len(latencies)} | {p50:.1f} | {p99:.1f} | {p99 / idle_p99:.1f}x | {worst} | {over} | "
                f"{hostile} | {per_request} | {sender_cores}")


def _phase(url: str, pid: int, senders_of: list[tuple[str, str]], seconds: float, nice: int) -> _Cell:
    """One phase against one service: the victim's latencies while one sender per ``(key, kind)`` of
    ``senders_of`` posts (see :func:`_sender`)."""
    stop, sent = multiprocessing.Event(), multiprocessing.Value("i", 0)
    senders = [multiprocessing.Process(target=_sender, args=(url, key, kind, nice, stop, sent))
               for key, kind in senders_of]
    for sender in senders:
        sender.start()
    time.sleep(1.0 if senders else 0.0)
    pids = [pid, *(sender.pid for sender in senders if sender.pid is not None)]
    cpu, hostile, start = [_cpu_seconds(p) for p in pids], sent.value, time.monotonic()
    cell = _Cell([1000 * t for t in _victim_latencies(url, seconds)], start, time.monotonic())
    cpu = [_cpu_seconds(p) - c for p, c in zip(pids, cpu, strict=True)]
    cell.hostile = sent.value - hostile
    cell.service_cpu, cell.sender_cpu = cpu[0], sum(cpu[1:])
    stop.set()
    for sender in senders:
        sender.join(timeout=120)
        if sender.is_alive():
            sender.kill()
    return cell


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
    parser.add_argument("--phase", action="append", dest="phases", metavar="TEXT",
                        help="run only the hostile phases whose name holds TEXT (repeatable; default: all)")
    parser.add_argument("--out", type=Path, help="also write the report to this Markdown file")
    args = parser.parse_args(argv)
    stamp, load_at_start = provenance(["kons", "kons_service", "benchmarks/hostile.py"]), os.getloadavg()[0]
    sources = {"this checkout" if args.source is None else str(args.source): args.source}
    if args.baseline is not None:
        sources = {f"baseline {args.baseline}": args.baseline, **sources}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        services = {name: stack.enter_context(_service(Path(tmp) / str(i), source))
                    for i, (name, source) in enumerate(sources.items())}
        phases: dict[str, list[tuple[str, str]]] = {
            "2 unauthenticated senders": [("wrong-key", "large")] * 2,
            "2 authenticated senders": [(KEYS["attacker"], "large")] * 2,
            "4 tenants sending 60 KiB bodies": [(KEYS[f"medium{i}"], "medium") for i in range(4)],
            "a neighbour training an exact learner": [(KEYS["trainer"], "trainer")]}
        if args.phases:
            phases = {phase: senders for phase, senders in phases.items()
                      if any(text in phase for text in args.phases)}
        jitter = _Jitter(Path(tmp) / "jitter")
        stack.callback(jitter.stop)
        tallies = {(phase, name): _Tally() for phase in ["idle", *phases] for name in services}
        last_idle: dict[str, _Tally] = {}  # the tally whose hostile cell waits for its idle cell after
        for _ in range(args.rounds):  # interleaved, so that the machine's other load spreads over all cells
            for phase, senders_of in phases.items():
                for name, (url, pid) in services.items():
                    idle = _phase(url, pid, [], args.seconds, args.sender_nice)
                    tallies["idle", name].cells.append(idle)
                    if name in last_idle:
                        last_idle.pop(name).idle_after[-1] = idle
                    tally = tallies[phase, name]
                    tally.idle_before.append(idle)
                    tally.idle_after.append(None)
                    tally.cells.append(_phase(url, pid, senders_of, args.seconds, args.sender_nice))
                    last_idle[name] = tally
        for name, (url, pid) in services.items():  # the last hostile cells' idle cells after
            idle = _phase(url, pid, [], args.seconds, args.sender_nice)
            tallies["idle", name].cells.append(idle)
            last_idle.pop(name).idle_after[-1] = idle
        _require_senders(tallies, args.sender_nice)
        machine = (f"machine: {machine_summary()}; {args.rounds} rounds of {args.seconds:g} s per cell, an "
                   f"idle cell before and after each hostile one; senders at niceness {args.sender_nice}; "
                   f"load average {load_at_start:.1f} at the start and {os.getloadavg()[0]:.1f} at the end")
        tables = _tables(tallies, jitter)
        print(machine, *tables, sep="\n")  # (benchmarks/reliability.py reads the first table after that line)
        if args.out is not None:
            command = command_line("benchmarks.hostile", argv, outputs=("--out",))
            report = ["# Hostile senders and fair sharing: the victim's p99 per phase and per round", "",
                      f"    OPENBLAS_NUM_THREADS=1 {command}", "",
                      machine, "", *tables]
            args.out.write_text(stamp_markdown("\n".join(report), stamp))


def _require_senders(tallies: dict[tuple[str, str], _Tally], nice: int) -> None:
    """Stop with an error when a hostile cell's senders sent nothing: its victim ran as if idle, so the
    page would claim fairness it never measured (senders at a high niceness on a loaded machine get no
    CPU at all)."""
    silent = [f"{phase} on {name}, round {i + 1}" for (phase, name), tally in tallies.items()
              if phase != "idle" for i, cell in enumerate(tally.cells) if cell.hostile == 0]
    if silent:
        raise SystemExit(f"no hostile request was sent in {len(silent)} cell(s) ({'; '.join(silent)}): "
                         f"the senders at niceness {nice} got no CPU; run on a quieter machine")


def _tables(tallies: dict[tuple[str, str], _Tally], jitter: _Jitter) -> list[str]:
    """The report's two tables (see the module's docstring), as lines."""
    lines = ["| phase | service | victim predicts | p50 ms | p99 ms | p99 / idle p99 | worst round | rounds "
             "over 3x | hostile requests | service CPU ms per hostile request | senders' CPU (cores) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {phase} | {name} | {tally.pooled()} |" for (phase, name), tally in tallies.items()]
    lines += ["", "Every round: the victim's p99 (ms) under the hostile phase, the idle p99 of the same "
              "service just before and after it, their ratio (hostile over the mean of the two idle ones), "
              "and the machine's own scheduling noise (the p99 of a 1 ms sleep's overshoot, ms) in the "
              "hostile cell and in the idle cells", "",
              "| phase | service | round | p99 ms | idle p99 ms (before, after) | ratio | machine noise ms "
              "(hostile; idle before, after) |", "|---|---|---|---|---|---|---|"]
    for (phase, name), tally in tallies.items():
        for i, before in enumerate(tally.idle_before):
            cell, after = tally.cells[i], tally.idle_after[i]
            idle_p99 = f"{before.p99:.1f}, {after.p99:.1f}" if after else f"{before.p99:.1f}, -"
            noise = [jitter.p99_ms(c.start, c.end) for c in (cell, before, *([after] if after else []))]
            lines.append(f"| {phase} | {name} | {i + 1} | {cell.p99:.1f} | {idle_p99} | "
                         f"{cell.p99 / tally.reference_p99(i):.1f}x | {noise[0]:.1f}; "
                         f"{', '.join(f'{n:.1f}' for n in noise[1:])} |")
    return lines


if __name__ == "__main__":
    main()
