"""Snapshot bytes per acknowledged feedback, against the log's, at several feeding rates per learner.

One service process with its own redis-server (AOF ``everysec``) per checkout and rate, all at once: this
checkout's, and with ``--baseline PATH`` another's (a worktree of the code before), fed the same load side
by side so that the machine's other load falls on both. Each hosts ``--learners`` learners per rate
(``testkit.SPEC``, a ``sketched_kons`` whose snapshot grows to tens of KB while a round logs about 40 bytes;
or ``--algorithm auto``, whose snapshot is hundreds of KB and whose rounds cost ten times more), created
fresh; a learner fed ``r`` feedbacks a second gets one request of ``4 r`` rows every 4 s (one row every ``1
/ r`` seconds below 0.25 a second; every row is a feedback, a logged round), from a random start. Over
``--seconds``, the service's own counters give the snapshot bytes written (``kons_snapshot_bytes_total``)
and the log's bytes (``kons_log_bytes_total``: each round's features, label, play and id) per acknowledged
feedback; Redis's metadata gives how many rounds each learner's log held behind its snapshot at the end
(what a rebuild would replay). The shutdown's snapshots are not counted (the counters are read before it)::

    nice -n 5 python -m benchmarks.snapshot_rate --baseline /tmp/kons-before --out benchmarks/results
    nice -n 5 python -m benchmarks.snapshot_rate --algorithm auto --rates 0.25 1 --baseline /tmp/kons-before \
        --out benchmarks/results
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks import registry
from benchmarks.common import REPO, machine_summary, markdown_table, run_and_publish
from testkit.processes import SPEC, RedisServer, ServiceProcess, hash_int
from testkit.scrape import value

__all__ = ["main", "run"]

Key = tuple[str, float]  # a checkout's label and a feeding rate: one service process
RATES = (0.25, 1.0, 10.0, 100.0)  # feedbacks a second per learner (0.25: issue 40's one every 4 s)
#: A learner's rows come in one request every 4 s at most (one every 4 s: issue 40's slow learner), so that
#: the load generator and the 8 services fit on two shared cores; snapshots are decided over tens of seconds.
PERIOD_SECONDS = 4.0
#: The learners measured: the tests' small kernel learner (cheap enough to feed 30 of at 100 rows a second on
#: two shared cores), or the default learner (a round costs ~10x more: the slow rates only).
SPECS: dict[str, dict[str, Any]] = {"sketched_kons": SPEC,
                                     "auto": {"algorithm": "auto", "dim": 3, "params": {}}}


def _rows(rng: np.random.Generator, n: int) -> list[dict[str, Any]]:
    x = rng.normal(size=(n, 3))
    return [{"x": row.tolist(), "y": float(np.sin(row[0]))} for row in x]


async def _feed(http: httpx.AsyncClient, name: str, rate: float, until: float, seed: int) -> int:
    """Feed one learner at ``rate`` until ``until`` (loop time), or as fast as its service answers if that
    is slower; returns its acknowledged feedbacks."""
    loop, rng = asyncio.get_running_loop(), np.random.default_rng(seed)
    period = max(1 / rate, PERIOD_SECONDS)
    rows = round(rate * period)
    acknowledged, due = 0, loop.time() + random.Random(seed).uniform(0, period)
    while due < until and loop.time() < until:
        await asyncio.sleep(max(0.0, due - loop.time()))
        body = _rows(rng, rows)
        with contextlib.suppress(httpx.TransportError):  # (not acknowledged: not counted)
            answer = await http.post(f"/v1/learners/{name}/feedback",
                                     json=body[0] if rows == 1 else {"items": body})
            acknowledged += rows if answer.status_code == 200 else 0
        due += period
    return acknowledged


def _counters(http: httpx.Client) -> dict[str, float]:
    text = http.get("/metrics").text
    return {"snapshot_bytes": value(text, "kons_snapshot_bytes_total") or 0.0,
            "log_bytes": value(text, "kons_log_bytes_total") or 0.0,
            "snapshots": value(text, "kons_snapshots_total", outcome="written") or 0.0}


def _redis_input(server: RedisServer) -> float:
    """The bytes Redis has received from its clients (every command: appends, snapshots, reads)."""
    return float(server.client().info("stats")["total_net_input_bytes"])


async def _load(urls: dict[Key, str], learners: int, seconds: float) -> dict[Key, int]:
    """Every service's learners fed at once, each at its rate; acknowledged feedbacks per service."""
    # (idle connections dropped after 1 s: uvicorn closes them after 5 s, and a request sent on one just as
    # it closes fails)
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200, keepalive_expiry=1.0)
    clients = {key: httpx.AsyncClient(base_url=url, timeout=60, limits=limits) for key, url in urls.items()}
    try:
        until = asyncio.get_running_loop().time() + seconds
        tasks = {key: [asyncio.create_task(_feed(clients[key], f"m{i}", key[1], until, i))
                       for i in range(learners)] for key in urls}
        return {key: sum(await asyncio.gather(*feeds)) for key, feeds in tasks.items()}
    finally:
        for client in clients.values():
            await client.aclose()


def run(workdir: Path, checkouts: dict[str, Path], *, learners: int, seconds: float,
        rates: Sequence[float] = RATES, algorithm: str = "sketched_kons") -> dict[str, Any]:
    """One redis-server and one service process per checkout and rate (the service's counters are its own)."""
    keys: list[Key] = [(label, rate) for label in checkouts for rate in rates]
    servers = {key: RedisServer(workdir / f"redis-{key[0]}-{key[1]:g}").start() for key in keys}
    services = {key: ServiceProcess(servers[key].url, workdir / f"service-{key[0]}-{key[1]:g}.log",
                                    checkout=checkouts[key[0]], blas_threads=1).start() for key in keys}
    try:
        before = {}
        for key, service in services.items():
            with httpx.Client(base_url=service.url, timeout=60) as http:
                for i in range(learners):
                    http.put(f"/v1/learners/m{i}", json=SPECS[algorithm]).raise_for_status()
                before[key] = {**_counters(http), "redis_input": _redis_input(servers[key])}
        started = time.monotonic()
        acknowledged = asyncio.run(_load({key: s.url for key, s in services.items()}, learners, seconds))
        elapsed = time.monotonic() - started
        rows = []
        for (label, rate), service in services.items():
            with httpx.Client(base_url=service.url, timeout=60) as http:
                after = {**_counters(http), "redis_input": _redis_input(servers[label, rate])}
            redis = servers[label, rate].client()
            metas = [f"kons:{{default/m{i}}}:meta" for i in range(learners)]
            behind = [hash_int(redis, m, "version") - hash_int(redis, m, "snap_version") for m in metas]
            done = acknowledged[label, rate]
            counted = {k: after[k] - before[label, rate][k] for k in after}
            rows.append({"checkout": label, "rate": rate, "acknowledged": done,
                         "snapshots": int(counted["snapshots"]),
                         "snapshot_bytes_per_feedback": round(counted["snapshot_bytes"] / max(done, 1), 1),
                         "log_bytes_per_feedback": round(counted["log_bytes"] / max(done, 1), 1),
                         "redis_input_per_feedback": round(counted["redis_input"] / max(done, 1), 1),
                         "mean_rounds_behind": round(sum(behind) / len(behind), 1),
                         "max_rounds_behind": max(behind)})
    finally:
        for service in services.values():
            service.stop()
        for server in servers.values():
            server.stop()
    return {"rows": rows, "algorithm": algorithm, "seconds": round(elapsed, 1), "learners_per_rate": learners,
            "checkouts": {label: str(path) for label, path in checkouts.items()},
            "load_end": round(os.getloadavg()[0], 1)}


def markdown(record: dict[str, Any], command: str, load_start: float) -> str:
    header = ["checkout", "feedbacks/s per learner: asked", "achieved", "snapshots written",
              "snapshot bytes / feedback", "log bytes / feedback", "snapshot / log", "Redis input / feedback",
              "rounds behind at the end (mean, max)"]
    per_learner = record["learners_per_rate"] * record["seconds"]
    rows = [[r["checkout"], f"{r['rate']:g}", f"{r['acknowledged'] / per_learner:.2f}", r["snapshots"],
             f"{r['snapshot_bytes_per_feedback']:,.0f}", f"{r['log_bytes_per_feedback']:,.0f}",
             f"{r['snapshot_bytes_per_feedback'] / max(r['log_bytes_per_feedback'], 1e-9):.2f}x",
             f"{r['redis_input_per_feedback']:,.0f}",
             f"{r['mean_rounds_behind']:g}, {r['max_rounds_behind']}"]
            for r in sorted(record["rows"], key=lambda r: (r["rate"], r["checkout"] != "this"))]
    checkouts = ", ".join(f"`{label}` = {path}" for label, path in record["checkouts"].items())
    return "\n".join([
        "# Snapshot bytes per acknowledged feedback, against the log's, by feeding rate", "",
        f"`{command}`", "",
        f"Machine: {machine_summary()}, shared with other developers' jobs: load average {load_start} at the "
        f"start, {record['load_end']} at the end. Checkouts: {checkouts}. {record['learners_per_rate']} "
        f"`{record['algorithm']}` learners (d = 3) per rate and checkout, created fresh, all fed at once "
        f"for {record['seconds']} s, one service process and one redis-server per rate and checkout, service "
        "settings at their defaults.", "",
        *markdown_table(header, rows, "lrrrrrrrr"), "",
        "Snapshot and log bytes are the service's own counters over the run (`kons_snapshot_bytes_total`, "
        "`kons_log_bytes_total`: a round's features, label, play and id), divided by the acknowledged "
        "feedbacks (rows). Redis input = every byte Redis received over the run (appends with their "
        "request records, snapshots, reads), per feedback: issue 40's \"log's ~2 KB a round\" was this "
        "figure for single-row `auto` feedbacks (`hotpath.md`, part d). "
        "Rounds behind = each learner's version minus its snapshot's at the end: the "
        "rounds a rebuild after a crash would replay.", ""])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="another checkout, run beside this one")
    parser.add_argument("--learners", type=int, default=30, help="learners per rate and checkout")
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--algorithm", choices=sorted(SPECS), default="sketched_kons")
    parser.add_argument("--rates", type=float, nargs="+", default=RATES, help="feedbacks/s per learner")
    parser.add_argument("--out", type=Path, help="write snapshot_rate[_ALGORITHM].md and .json here")
    args = parser.parse_args(argv)
    name = "snapshot_rate" if args.algorithm == "sketched_kons" else f"snapshot_rate_{args.algorithm}"
    checkouts = {"this": REPO, **({"baseline": args.baseline} if args.baseline else {})}
    load_start = round(os.getloadavg()[0], 1)

    def measure() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="kons-snapshot-rate-") as tmp:
            return run(Path(tmp), checkouts, learners=args.learners, seconds=args.seconds, rates=args.rates,
                       algorithm=args.algorithm)

    return run_and_publish("benchmarks.snapshot_rate", argv, name=name, out=args.out,
                           sources=registry.sources_of(f"{name}.md") or (), run=measure,
                           page=lambda record, command: markdown(record, command, load_start), indent=2)


if __name__ == "__main__":
    raise SystemExit(main())
