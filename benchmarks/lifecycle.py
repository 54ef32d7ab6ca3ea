"""A learner's life over HTTP (issue 37): a poisoned stretch rolled back, a challenger promoted when its
paired test says so, what a shadow costs a feedback, and what kept versions cost in Redis.

One service (in this process, on a real Redis started for the run), a regression stream with a nonlinear
target (``y = sin(2 x0) + 0.5 x1 x2 + noise``, 3 features):

* ``poison``: the champion (``ons``, linear) learns ``--clean`` rounds, then ``--poisoned`` rounds with
  the labels' signs flipped; its error on a held-out set (mean squared error of its predictions) before
  the poison, after it, and after ``POST .../rollback`` to the last clean version.
* ``promotion``: a shadow challenger of another configuration (``sketched_kons``, an RBF kernel) follows
  the champion; ``GET .../challengers`` is asked every ``--window`` rounds until its paired t test says
  ``challenger_better``; then ``POST .../promote``; the held-out error before and after.
* ``shadow cost``: the wall time of ``--cost-rounds`` sequential feedbacks to a champion without and with
  a shadow challenger (until the challenger has caught up), per round, beside the challenger's own round
  timed alone (kons, no service).
* ``kept bytes``: Redis's ``MEMORY USAGE`` of one learner's keys after the stream with a snapshot every
  ``--snapshot-every`` rounds, at ``KONS_KEEP_VERSIONS`` 1 (only the newest) and the default.

Run under ``nice``; the machine is shared: timings are ratios in one run::

    nice -n 5 python -m benchmarks.lifecycle --out benchmarks/results
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import redis

import kons
from benchmarks import registry
from benchmarks.common import command_line, machine_summary, markdown_table, results_dir
from benchmarks.provenance import provenance, publish
from kons_service.settings import Settings
from kons_service.store import LearnerRef
from kons_service.store.keys import learner_keys
from testkit.processes import AppClient, RedisServer, serve

__all__ = ["main"]

CHAMPION: dict[str, Any] = {"algorithm": "ons", "dim": 3, "params": {"loss": "squared", "C": 4.0}}
CHALLENGER: dict[str, Any] = {"algorithm": "sketched_kons", "dim": 3,
              "params": {"kernel": {"name": "rbf", "gamma": 1.0}, "loss": "squared", "alpha": 1.0, "eta": 0.1,
                         "C": 4.0, "beta": 0.5, "seed": 1}}


def _stream(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.5, 1.5, size=(n, 3))
    y = np.sin(2 * x[:, 0]) + 0.5 * x[:, 1] * x[:, 2] + 0.1 * rng.normal(size=n)
    return x, y


async def _feed(client: AppClient, name: str, x: np.ndarray, y: np.ndarray) -> None:
    for row, label in zip(x, y, strict=True):
        body = {"x": row.tolist(), "y": float(label)}
        (await client.post(f"/v1/learners/{name}/feedback", json=body)).raise_for_status()


async def _held_out_mse(client: AppClient, name: str, x: np.ndarray, y: np.ndarray) -> float:
    answer = await client.post(f"/v1/learners/{name}/predict", json={"xs": x.tolist()})
    answer.raise_for_status()
    return float(np.mean((np.array(answer.json()["predictions"]) - y) ** 2))


async def _snapshot(client: AppClient, name: str) -> None:
    service = client.app.state.service
    (await client.get(f"/v1/learners/{name}")).raise_for_status()
    await service.snapshots.snapshot(service.cache.entry(LearnerRef("default", name)))


async def poison(client: AppClient, args: argparse.Namespace,
                 held: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    x, y = _stream(args.clean + args.poisoned, seed=1)
    (await client.put("/v1/learners/poisoned", json=CHAMPION)).raise_for_status()
    await _feed(client, "poisoned", x[:args.clean], y[:args.clean])
    await _snapshot(client, "poisoned")
    before = await _held_out_mse(client, "poisoned", *held)
    await _feed(client, "poisoned", x[args.clean:], -y[args.clean:])  # the labels' signs flipped
    poisoned = await _held_out_mse(client, "poisoned", *held)
    started = time.perf_counter()
    rolled = await client.post("/v1/learners/poisoned/rollback", json={"version": args.clean})
    rolled.raise_for_status()
    seconds = time.perf_counter() - started
    after = await _held_out_mse(client, "poisoned", *held)
    return {"clean_rounds": args.clean, "poisoned_rounds": args.poisoned, "mse_before_poison": before,
            "mse_poisoned": poisoned, "mse_after_rollback": after, "rollback_seconds": seconds,
            "rollback": rolled.json()}


async def promotion(client: AppClient, args: argparse.Namespace,
                    held: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    x, y = _stream(args.promotion_rounds, seed=2)
    (await client.put("/v1/learners/champion", json=CHAMPION)).raise_for_status()
    shadow = {**CHALLENGER, "shadow": "champion"}
    (await client.put("/v1/learners/challenger", json=shadow)).raise_for_status()
    checks = []
    for start in range(0, len(x), args.window):
        await _feed(client, "champion", x[start:start + args.window], y[start:start + args.window])
        report = (await client.get("/v1/learners/champion/challengers")).json()
        comparison = report["challengers"][0]["comparison"]
        checks.append({"rounds": start + args.window, "champion": comparison["champion"],
                       "challenger": comparison["challenger"], "p_value": comparison["p_value"],
                       "verdict": comparison["verdict"]})
        if comparison["verdict"] == "challenger_better":
            break
    before = await _held_out_mse(client, "champion", *held)
    promoted = await client.post("/v1/learners/champion/promote", json={"challenger": "challenger"})
    promoted.raise_for_status()
    after = await _held_out_mse(client, "champion", *held)
    return {"checks": checks, "promoted_at_rounds": checks[-1]["rounds"], "mse_champion": before,
            "mse_after_promotion": after, "promoted": promoted.json()}


async def _timed_feedbacks(redis_url: str, name: str, shadowed: bool, x: np.ndarray, y: np.ndarray) -> float:
    """Seconds for the feedbacks of ``x``, ``y`` to a new champion ``name`` (with a shadow: until it has
    learnt them all too)."""
    async with serve(Settings(redis_url=redis_url, snapshot_interval_seconds=3600.0)) as client:
        (await client.put(f"/v1/learners/{name}", json=CHAMPION)).raise_for_status()
        if shadowed:
            shadow = {**CHALLENGER, "shadow": name}
            (await client.put(f"/v1/learners/{name}-c", json=shadow)).raise_for_status()
        started = time.perf_counter()
        await _feed(client, name, x, y)
        while shadowed:
            report = (await client.get(f"/v1/learners/{name}/challengers")).json()
            if report["challengers"][0]["learnt"] == len(x):
                break
            await asyncio.sleep(0.01)
        return time.perf_counter() - started


async def shadow_cost(redis_url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Without and with a shadow, alternated ``--cost-repeats`` times (the machine's load drifts): the
    median seconds per feedback of each."""
    x, y = _stream(args.cost_rounds, seed=3)
    runs: dict[bool, list[float]] = {False: [], True: []}
    for repeat in range(args.cost_repeats):
        for shadowed in (False, True):
            seconds = await _timed_feedbacks(redis_url, f"cost{repeat}{int(shadowed)}", shadowed, x, y)
            runs[shadowed].append(seconds / args.cost_rounds)
    alone = kons.learner_from_params(CHALLENGER["algorithm"], {**CHALLENGER["params"], "dim": 3})
    started = time.perf_counter()
    for row, label in zip(x, y, strict=True):
        alone.learn_one(row, float(label))
    own = (time.perf_counter() - started) / args.cost_rounds
    without, with_shadow = float(np.median(runs[False])), float(np.median(runs[True]))
    return {"rounds": args.cost_rounds, "repeats": args.cost_repeats, "runs_without": runs[False],
            "runs_with_shadow": runs[True], "seconds_per_feedback_without": without,
            "seconds_per_feedback_with_shadow": with_shadow, "added_per_feedback": with_shadow - without,
            "challenger_round_alone": own}


async def kept_bytes(redis_url: str, args: argparse.Namespace) -> dict[str, Any]:
    x, y = _stream(args.clean, seed=4)
    r = redis.Redis.from_url(redis_url)
    found = {}
    for keep in (1, Settings().keep_versions):
        settings = Settings(redis_url=redis_url, snapshot_interval_seconds=3600.0, keep_versions=keep)
        async with serve(settings) as client:
            name = f"kept{keep}"
            (await client.put(f"/v1/learners/{name}", json=CHALLENGER)).raise_for_status()
            for start in range(0, len(x), args.snapshot_every):
                end = start + args.snapshot_every
                await _feed(client, name, x[start:end], y[start:end])
                await _snapshot(client, name)
            versions = (await client.get(f"/v1/learners/{name}/versions")).json()
        usage = {key.rsplit(":", 1)[1]: int(r.memory_usage(key) or 0)
                 for key in learner_keys(LearnerRef("default", name))}
        found[keep] = {"keep_versions": keep, "oldest": versions["oldest"], "newest": versions["newest"],
                       "kept_bytes_reported": versions["kept_bytes"], "redis_bytes": sum(usage.values()),
                       "redis_bytes_by_key": {k: v for k, v in usage.items() if v}}
    r.close()
    return {"rounds": args.clean, "snapshot_every": args.snapshot_every, "by_policy": list(found.values())}


def _markdown(result: dict[str, Any], command: str) -> str:
    p, s, c = result["poison"], result["promotion"], result["shadow_cost"]
    lines = ["# A learner's life over HTTP: rollback, shadow challenger, promotion", "",
             f"`{command}` on {machine_summary()}; load average at the start {result['load'][0]:.1f}, at the "
             f"end {result['load'][1]:.1f} (the machine is shared with other developers).", "",
             "## A poisoned stretch, rolled back", "",
             f"`ons` learns {p['clean_rounds']} clean rounds, then {p['poisoned_rounds']} with the labels' "
             "signs flipped; held-out mean squared error (1,000 rows):", ""]
    lines += markdown_table(["before the poison", "after it", "after the rollback", "rollback took"],
                            [[f"{p['mse_before_poison']:.4f}", f"{p['mse_poisoned']:.4f}",
                              f"{p['mse_after_rollback']:.4f}", f"{p['rollback_seconds']:.3f} s"]])
    lines += ["", "## A challenger promoted when its paired test says so", "",
              "Champion `ons` (linear), shadow challenger `sketched_kons` (RBF kernel); the comparison after "
              "each window:", ""]
    lines += markdown_table(["rounds", "champion MSE", "challenger MSE", "paired t p-value", "verdict"],
                            [[k["rounds"], f"{k['champion']:.4f}", f"{k['challenger']:.4f}",
                              "-" if k["p_value"] is None else f"{k['p_value']:.2g}", k["verdict"]]
                             for k in s["checks"]])
    lines += ["", f"Promoted at {s['promoted_at_rounds']} rounds: held-out MSE {s['mse_champion']:.4f} "
              f"before, {s['mse_after_promotion']:.4f} after.", "", "## What a shadow costs a feedback", ""]
    pairs = zip(c["runs_without"], c["runs_with_shadow"], strict=True)
    runs = " / ".join(f"{a * 1e3:.2f} vs {b * 1e3:.2f}" for a, b in pairs)
    lines += [f"Medians of {c['repeats']} runs each, alternated (ms per feedback, without vs with: {runs}):",
              ""]
    lines += markdown_table(["rounds", "per feedback, no shadow", "with a shadow (caught up)", "added",
                             "the challenger's round alone (kons)"],
                            [[c["rounds"], f"{c['seconds_per_feedback_without'] * 1e3:.2f} ms",
                              f"{c['seconds_per_feedback_with_shadow'] * 1e3:.2f} ms",
                              f"{c['added_per_feedback'] * 1e3:.2f} ms",
                              f"{c['challenger_round_alone'] * 1e3:.2f} ms"]])
    lines += ["", "The added time is the challenger's round plus its own log append and catch-up reads "
              "(sequential feedbacks in one process, in-process HTTP).", "",
              "## What kept versions cost in Redis", ""]
    k = result["kept_bytes"]
    lines += [f"`sketched_kons` after {k['rounds']} rounds, a snapshot every {k['snapshot_every']}; "
              "`MEMORY USAGE` of the learner's keys:", ""]
    lines += markdown_table(["KONS_KEEP_VERSIONS", "restorable versions", "kept_bytes (reported)",
                             "Redis bytes", "by key"],
                            [[b["keep_versions"], f"{b['oldest']}-{b['newest']}", b["kept_bytes_reported"],
                              b["redis_bytes"], json.dumps(b["redis_bytes_by_key"])] for b in k["by_policy"]])
    return "\n".join(lines) + "\n"


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    held = _stream(1000, seed=99)
    load = [os.getloadavg()[0]]  # (of the machine, shared with other developers)
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        try:
            async with serve(Settings(redis_url=server.url, snapshot_interval_seconds=3600.0)) as client:
                result = {"poison": await poison(client, args, held),
                          "promotion": await promotion(client, args, held)}
            result["shadow_cost"] = await shadow_cost(server.url, args)
            result["kept_bytes"] = await kept_bytes(server.url, args)
        finally:
            server.stop()
    load.append(os.getloadavg()[0])
    return {**result, "load": load}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clean", type=int, default=1500)
    parser.add_argument("--poisoned", type=int, default=500)
    parser.add_argument("--promotion-rounds", type=int, default=3000)
    parser.add_argument("--window", type=int, default=250)
    parser.add_argument("--cost-rounds", type=int, default=300)
    parser.add_argument("--cost-repeats", type=int, default=3)
    parser.add_argument("--snapshot-every", type=int, default=250)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    stamp = provenance(registry.sources_of("lifecycle.md") or ())
    result = asyncio.run(_run(args))
    text = _markdown(result, command_line("benchmarks.lifecycle", argv, outputs=("--out",)))
    publish(results_dir(args.out, "lifecycle"), "lifecycle", stamp, text, result)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
