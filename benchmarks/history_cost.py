"""What the history's coverage and calibration totals (issue 38) cost a feedback, against a baseline revision.

Two parts of a feedback carry them, each timed against the same part at ``--baseline`` (a git revision; its
files imported or loaded beside this checkout's), in blocks that rotate, in one process:

* the offer, in the service process (``HistoryRecorder.due`` of ``kons_service/core/history.py``): one round
  of a trained ``auto`` of 3 classes that answered a set at 90%; CPU time per call;
* ``record_point`` in Redis (``lua/lib/history.lua``, run by ``history.lua`` as every append runs it), with
  the offer of before (a learner without intervals), with coverage sums (a regression learner answering
  intervals) and with coverage and calibration bins (that classifier); the server's own microseconds per
  call (``INFO commandstats``), and the bytes of a point.

::

    nice -n 5 python -m benchmarks.history_cost --baseline main --out benchmarks/results
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import kons
from benchmarks.common import REPO, machine_summary, markdown_table, module_at, run_and_publish, text_at
from kons_service.core import history as current_history
from kons_service.core.cache import CachedLearner
from kons_service.store import LearnerRef
from testkit.processes import RedisServer

__all__ = ["main", "run"]

SOURCES = ("kons_service/core/history.py", "kons_service/lua/lib/history.lua", "kons_service/lua/history.lua",
           "benchmarks/history_cost.py")
_LABELS = "abc"


def _rotated(arms: dict[str, Callable[[], float]], blocks: int) -> dict[str, float]:
    """The median over ``blocks`` rounds of each arm's figure, the arms' order rotating each round."""
    names, seen = list(arms), {name: [] for name in arms}  # type: ignore[var-annotated]
    for block in range(blocks):
        for name in names[block % len(names):] + names[:block % len(names)]:
            seen[name].append(arms[name]())
    return {name: statistics.median(values) for name, values in seen.items()}


def _offer_part(baseline: ModuleType, blocks: int, calls: int) -> dict[str, float]:
    """CPU µs per ``due`` call of one round of a 3-class ``auto`` that answered a set, both revisions."""
    learner = kons.Auto(task="classification")
    learner.track_coverage(0.9)
    rows = [[((i * 7919) % 200) / 100 - 1, ((i * 104729) % 200) / 100 - 1, 0.5] for i in range(301)]
    labels = [_LABELS[int(x[0] > 0) + int(x[1] > 0.5)] for x in rows]
    for x, y in zip(rows[:-1], labels[:-1], strict=True):
        learner.learn_round(x, y, 0.9, track=False)
    played = learner.learn_round(rows[-1], labels[-1], 0.9, track=False)
    if played.distribution is None:  # pragma: no cover - a trained classifier plays one
        raise RuntimeError("the classifier played no class probabilities")
    distributions = [[played.distribution]]
    entry = CachedLearner(LearnerRef("t", "m"), learner=learner, version=300)
    covered = current_history.Covered(0.9, bool(played.covered), float(len(played.prediction_set or ())))
    stats, ys, plays = learner.stats(), [[labels[-1]]], [[played.value]]
    # A revision from before the intervals (issue 38) has no ``covered`` argument; one from after takes it.
    baseline_takes_covered = "covered" in inspect.signature(baseline.HistoryRecorder.due).parameters
    baseline_extra: list[Any] = [[covered]] if baseline_takes_covered else []
    calls_of: dict[str, Callable[[], str]] = {
        "baseline": lambda: baseline.HistoryRecorder.due(entry, 300, ys, plays, distributions,
                                                         [played.correct], *baseline_extra, stats, 1000),
        "current": lambda: current_history.HistoryRecorder.due(entry, 300, ys, plays, distributions,
                                                               [played.correct], [covered], stats, 1000)}

    def timed(call: Callable[[], str]) -> Callable[[], float]:
        def block() -> float:
            started = time.process_time()
            for _ in range(calls):
                call()
            return (time.process_time() - started) / calls * 1e6
        return block

    return _rotated({name: timed(call) for name, call in calls_of.items()}, blocks)


_POINT = json.dumps({"version": 0, "time": 1.0, "recent_loss": 0.43, "cumulative_loss": 156.7,
                     "dictionary_size": 106, "stored_points": 106, "effective_dimension": 0.0,
                     "growth_held": False, "state_bytes": 1000,
                     "leader": "nystrom_kons(log, width x1, eta x0.1)", "leader_since": 63})


def _offer(version: int, extras: str) -> str:
    """One round's offer (``lib/history.lua``) with ``extras``: "" none, "coverage", or "calibration" too."""
    segment: list[Any] = [version, 1, 0.0, 0.0, 1.0, 0.21156312741445849]
    offer: dict[str, Any] = {"task": "classification", "segments": [segment],
                             "point": _POINT.replace('"version": 0', f'"version": {version}')}
    if extras:
        extra: dict[str, Any] = {"coverage": {"0.9": [1, 1, 2.0]}}
        if extras == "calibration":
            bins: list[float] = [0] * 30
            bins[8], bins[18], bins[28] = 1, 0.8093181892753337, 1
            extra["bins"] = bins
        segment.append(extra)
        offer["targets"] = current_history.COVERAGE_TARGETS
    return json.dumps(offer)


def _lua_part(revision: str, blocks: int, calls: int, directory: Path) -> dict[str, dict[str, float]]:
    """Server µs per ``history.lua`` call and bytes per point, by arm."""
    def text(read: Callable[[str], str]) -> str:
        return read("kons_service/lua/lib/history.lua") + read("kons_service/lua/history.lua")

    server = RedisServer(directory / "redis").start()
    try:
        client = server.client()
        scripts = {"baseline": client.register_script(text(lambda path: text_at(revision, path))),
                   "current": client.register_script(text(lambda path: (REPO / path).read_text()))}
        arms = {"baseline, no intervals": ("baseline", ""), "current, no intervals": ("current", ""),
                "current, intervals": ("current", "coverage"),
                "current, sets and probabilities": ("current", "calibration")}
        versions = dict.fromkeys(arms, 0)
        for name in arms:
            client.hset(f"meta:{name}", "incarnation", "i")

        def script_usec() -> int:
            stats = client.info("commandstats")
            return sum(int(v["usec"]) for k, v in stats.items() if k.startswith("cmdstat_evalsha"))

        def block(name: str) -> Callable[[], float]:
            script, extras = arms[name]

            def timed() -> float:
                before = script_usec()
                for _ in range(calls):
                    versions[name] += 1
                    scripts[script](keys=[f"meta:{name}", f"hist:{name}"],
                                    args=["i", versions[name], _offer(versions[name], extras), 512])
                return (script_usec() - before) / calls
            return timed

        usec = _rotated({name: block(name) for name in arms}, blocks)
        sizes = {name: statistics.mean(len(p) for p in client.lrange(f"hist:{name}", 0, -1)) for name in arms}
    finally:
        server.stop()
    return {name: {"us": round(usec[name], 1), "point_bytes": round(sizes[name])} for name in arms}


def run(revision: str, *, blocks: int, calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kons-history-cost-") as tmp:
        offer = _offer_part(module_at(revision, "kons_service/core/history.py", Path(tmp)), blocks, calls)
        lua = _lua_part(revision, blocks, calls, Path(tmp))
    return {"offer_us": {k: round(v, 1) for k, v in offer.items()}, "lua": lua,
            "load": round(os.getloadavg()[0], 1)}


def markdown(results: dict[str, Any], command: str, baseline: str) -> str:
    offer, lua = results["offer_us"], results["lua"]
    base = lua["baseline, no intervals"]["us"]
    rows = [[name, arm["us"], f"{arm['us'] / base:.2f}x", arm["point_bytes"]] for name, arm in lua.items()]
    return "\n".join([
        "# What the history's coverage and calibration totals cost a feedback", "",
        f"`{command}`; machine: {machine_summary()}, shared, load average {results['load']} at the end. "
        f"Baseline: {baseline}. Medians of blocks that rotate in one process.", "",
        f"**The offer** (`HistoryRecorder.due`, service process, CPU): one round of a 3-class `auto` that "
        f"answered a set: {offer['baseline']} µs at {baseline}, {offer['current']} µs with the new totals "
        f"({offer['current'] / offer['baseline']:.2f}x, +{offer['current'] - offer['baseline']:.1f} µs).", "",
        "**`record_point` in Redis** (`history.lua`, as every append runs it: the server's µs per call, and "
        "the mean bytes of a point of the capped series):", "",
        *markdown_table(["offer", "µs per call", "ratio", "bytes per point"], rows, "lrrr"), ""])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="main", help="git revision whose history code to compare with")
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--calls", type=int, default=300, help="calls per block")
    parser.add_argument("--out", type=Path, help="write history_cost.md and history_cost.json here")
    args = parser.parse_args(argv)
    return run_and_publish("benchmarks.history_cost", argv, name="history_cost", out=args.out,
                           sources=SOURCES, indent=2,
                           run=lambda: run(args.baseline, blocks=args.blocks, calls=args.calls),
                           page=lambda results, command: markdown(results, command, args.baseline))


if __name__ == "__main__":
    raise SystemExit(main())
