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
* ``shadow cost``: the CPU time (this process and Redis) of ``--cost-rounds`` sequential feedbacks to a
  champion without and with a shadow challenger, and of the challenger's catch-up, per round, paired;
  beside the challenger's own round timed alone (kons, no service) and its config fed as a learner of
  its own.
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
from benchmarks.common import machine_summary, markdown_table, run_and_publish
from kons_service.settings import Settings
from kons_service.store import LearnerRef
from kons_service.store.keys import learner_key, learner_keys
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


def _cpu_seconds(r: redis.Redis) -> float:
    """CPU seconds used so far by this process (the service, in-process, and its HTTP client) and by Redis."""
    info = r.info("cpu")
    return time.process_time() + float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


async def _timed_feedbacks(redis_url: str, name: str, config: dict[str, Any], shadowed: bool, x: np.ndarray,
                           y: np.ndarray) -> tuple[float, float]:
    """CPU seconds (this process and Redis) of the feedbacks of ``x``, ``y`` to a new learner ``name`` of
    ``config``; with a shadow challenger, then of its catch-up alone: during the feedbacks its catch-up
    lock is held here (as by another process), so none runs; then it is released and the challenger
    learns every round while nothing else runs."""
    r = redis.Redis.from_url(redis_url)
    challenger = LearnerRef("default", f"{name}-c")
    async with serve(Settings(redis_url=redis_url, snapshot_interval_seconds=3600.0)) as client:
        (await client.put(f"/v1/learners/{name}", json=config)).raise_for_status()
        if shadowed:
            shadow = {**CHALLENGER, "shadow": name}
            (await client.put(f"/v1/learners/{challenger.name}", json=shadow)).raise_for_status()
            r.set(learner_key(challenger, "shadowlock"), "benchmark", px=600_000)
        await asyncio.sleep(0.6)  # (the creation's background work done)
        started = _cpu_seconds(r)
        await _feed(client, name, x, y)
        feedbacks = _cpu_seconds(r) - started
        catch_up = 0.0
        if shadowed:
            started = _cpu_seconds(r)
            r.delete(learner_key(challenger, "shadowlock"))
            client.app.state.service.shadows.nudge()
            while int(r.hget(learner_key(challenger, "meta"), "version") or 0) < len(x):
                await asyncio.sleep(0.005)
            catch_up = _cpu_seconds(r) - started
    r.close()
    return feedbacks, catch_up


async def shadow_cost(redis_url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Without a shadow, with one, and the challenger's config fed as a learner of its own, alternated
    ``--cost-repeats`` times (the machine's load drifts): CPU milliseconds per feedback, and what the
    shadow added to each run's pair (its feedbacks' extra and its catch-up per round); medians."""
    x, y = _stream(args.cost_rounds, seed=3)
    n = args.cost_rounds
    runs: dict[str, list[float]] = {"without": [], "with": [], "catch_up": [], "added": [], "served": [],
                                    "kons": [], "catch_up_per_kons_round": []}
    for repeat in range(args.cost_repeats):
        without, _ = await _timed_feedbacks(redis_url, f"cost{repeat}a", CHAMPION, False, x, y)
        with_shadow, catch_up = await _timed_feedbacks(redis_url, f"cost{repeat}b", CHAMPION, True, x, y)
        own = _kons_seconds(x, y)  # (right after the catch-up: the load drifts)
        served, _ = await _timed_feedbacks(redis_url, f"cost{repeat}c", CHALLENGER, False, x, y)
        for key, seconds in (("without", without), ("with", with_shadow), ("catch_up", catch_up),
                             ("added", with_shadow - without + catch_up), ("served", served), ("kons", own)):
            runs[key].append(seconds / n * 1e3)
        runs["catch_up_per_kons_round"].append(catch_up / own)
    return {"rounds": n, "repeats": args.cost_repeats, "runs_ms": runs,
            "median_ms": {key: float(np.median(values)) for key, values in runs.items()}}


def _kons_seconds(x: np.ndarray, y: np.ndarray) -> float:
    """CPU seconds of the challenger's rounds in kons alone (no service)."""
    alone = kons.learner_from_params(CHALLENGER["algorithm"], {**CHALLENGER["params"], "dim": 3})
    started = time.process_time()
    for row, label in zip(x, y, strict=True):
        alone.learn_one(row, float(label))
    return time.process_time() - started


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
    m, runs = c["median_ms"], c["runs_ms"]
    lines += ["CPU milliseconds per feedback (this process, which runs the service and its HTTP client, "
              f"plus Redis), {c['rounds']} sequential feedbacks a run, {c['repeats']} runs of each kind "
              "alternated; medians:", ""]
    lines += markdown_table(["no shadow", "with a shadow: the feedbacks", "+ its catch-up, per round",
                             "added by the shadow (paired)", "the challenger's round in kons",
                             "catch-up / kons round (paired)",
                             "the challenger's config as a learner of its own, per feedback"],
                            [[f"{m['without']:.3f}", f"{m['with']:.3f}", f"{m['catch_up']:.3f}",
                              f"{m['added']:.3f}", f"{m['kons']:.3f}",
                              f"**{m['catch_up_per_kons_round']:.2f}x**",
                              f"{m['served']:.3f}"]])
    per_run = " / ".join(f"{v:.3f}" for v in runs["added"])
    ratios = " / ".join(f"{v:.2f}x" for v in runs["catch_up_per_kons_round"])
    lines += ["", f"Added per run: {per_run} ms; the catch-up per round over the kons round, per run: "
              f"{ratios}. "
              "During the feedbacks the challenger's catch-up lock is held by the benchmark (as by another "
              "process), then the catch-up runs alone, so its CPU is measured without the noise of the "
              "feedbacks', and the kons round is timed right after it; the feedbacks' difference (the "
              "writer's hand-over, the shadow task's polls) is within the noise of a shared machine.", "",
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
    parser.add_argument("--cost-repeats", type=int, default=5)
    parser.add_argument("--snapshot-every", type=int, default=250)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    return run_and_publish("benchmarks.lifecycle", argv, name="lifecycle", out=args.out,
                           sources=registry.sources_of("lifecycle.md") or (),
                           run=lambda: asyncio.run(_run(args)), page=_markdown)


if __name__ == "__main__":
    raise SystemExit(main())
