"""What each of ``auto``'s experts costs against what it gives (issue 36, item 4).

``kons.Auto()`` plays the raw regime's streams (:mod:`benchmarks.raw_regime`: rows as stored, the
protocol's order, the first ``T`` rows; ``task="classification"`` for the binary sets) exactly as the
quality suites do, with every expert's calls timed: its plays and learning (``predict``, ``learn``,
``probabilities``, ``learn_class``) and its round outside its plays (``observe``). The experts are
grouped by kind:

* ``nystrom members``: the eight Nystrom KONS members of the grid (their shared kernel row and solve
  counted where it is computed, in the first member of a dictionary that plays the row);
* ``ons members``: the three linear ONS members;
* ``generations``: the restarted copies of members after a change and each generation's linear model;
* ``bins``: the linear model on the quantile thresholds; ``neighbours``: the local expert; ``trees``: the
  three Hoeffding trees (classes only);
* ``rest``: the round's time outside the experts (validation, the scalers and the row's forms, the
  mixture, the change detectors, the kept rounds).

For each kind, over the rounds after the warm-up (the grid exists): its share of the round's time, its
mean mixture weight (the sum over its slots of the marginal weights after each round) and the share of
those rounds in which one of its experts leads (has the largest weight). An expert whose time share is
far above its weight and that never leads costs more than it gives on that stream.

Both suites run: the 12 headline sets (the TUNING streams, where a rule of ``auto`` may be chosen) and
the 14 held-out sets (where it is reported). The timing wrappers add a little to every expert's calls
(about a microsecond each), which is counted in the experts' shares; the shares are from one process, so
the machine's load moves them little. Run with one BLAS thread::

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.expert_cost --out benchmarks/results
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

import kons
from benchmarks.common import command_line, machine_summary, markdown_table, require_datasets
from benchmarks.provenance import provenance, publish
from benchmarks.raw_report import SUITES
from kons.auto.experts.neighbours import NeighboursExpert
from kons.auto.experts.newton import LearnerExpert, ThresholdExpert
from kons.auto.experts.recent import RecentExpert
from kons.auto.experts.tree import TreeExpert
from kons.auto.grid import Grid
from kons.datasets import load_dataset
from kons.kernel.nystrom_kons import NystromKONS

KINDS = ("nystrom members", "ons members", "generations", "bins", "neighbours", "trees", "rest")
#: The experts' calls that are timed (the protocol's per-round methods).
_TIMED = ("predict", "learn", "probabilities", "learn_class", "observe")
_CLASSES = (LearnerExpert, ThresholdExpert, NeighboursExpert, RecentExpert, TreeExpert)


class _Clock:
    """The time spent in each kind's calls while a grid plays (``grid``: the one playing now)."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(KINDS, 0.0)
        self.grid: Grid | None = None
        self.depth = 0  # nested expert calls (a ThresholdExpert's learn is LearnerExpert's) count once

    def kind(self, expert: Any) -> str:
        if isinstance(expert, ThresholdExpert):
            return "bins"
        if isinstance(expert, NeighboursExpert):
            return "neighbours"
        if isinstance(expert, TreeExpert):
            return "trees"
        grid = self.grid
        if isinstance(expert, LearnerExpert) and grid is not None and any(expert is m for m in grid.members):
            return "nystrom members" if isinstance(expert.base, NystromKONS) else "ons members"
        return "generations"


def _timed(clock: _Clock, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(expert: Any, *args: Any, **kwargs: Any) -> Any:
        if clock.depth:
            return method(expert, *args, **kwargs)
        clock.depth += 1
        start = time.perf_counter()
        try:
            return method(expert, *args, **kwargs)
        finally:
            clock.seconds[clock.kind(expert)] += time.perf_counter() - start
            clock.depth -= 1
    return wrapper


@contextmanager
def _clocked(clock: _Clock) -> Iterator[None]:
    """The experts' classes with their per-round calls timed by ``clock`` (restored after)."""
    # (a method a class inherits, from a shared base, is timed on the class itself, then taken off again)
    saved = [(cls, name, getattr(cls, name), name in cls.__dict__) for cls in _CLASSES for name in _TIMED]
    try:
        for cls, name, method, _ in saved:
            setattr(cls, name, _timed(clock, method))
        yield
    finally:
        for cls, name, method, own in saved:
            if own:
                setattr(cls, name, method)
            else:
                delattr(cls, name)


def _slot_kinds(grid: Grid) -> np.ndarray:
    """Each mixture slot's kind, by its name (:mod:`kons.auto.slots`; the constant's: "rest")."""
    def kind(name: str) -> str:
        if name.startswith("base"):
            member = grid.members[int(name.removeprefix("base"))]
            return "nystrom members" if isinstance(member.base, NystromKONS) else "ons members"
        prefixes = (("young", "generations"), ("bins", "bins"), ("neighbours", "neighbours"),
                    ("tree", "trees"))
        return next((kind for prefix, kind in prefixes if name.startswith(prefix)), "rest")
    return np.array([kind(name) for name in grid.layout], dtype=object)


def stream_cost(name: str, rows: int) -> dict[str, Any]:
    """``auto`` on the first ``rows`` raw rows of ``name``: each kind's seconds, mean weight and lead share
    over the rounds the grid played, and the round's mean time."""
    data = load_dataset(name, rows, standardize=False)
    regression = data.task == "regression"
    auto = kons.Auto() if regression else kons.Auto(task="classification")
    clock = _Clock()
    weight = dict.fromkeys(KINDS, 0.0)
    leads = dict.fromkeys(KINDS, 0)
    rounds = 0
    total = 0.0
    kinds = None
    with _clocked(clock):
        for x, y in zip(data.X, data.y, strict=True):
            grid = auto._grid
            clock.grid = grid
            before = dict(clock.seconds)
            start = time.perf_counter()
            auto.learn_one(x, float(y))
            elapsed = time.perf_counter() - start
            if grid is None:  # the warm-up (or the round that built the grid): not counted
                clock.seconds = before
                continue
            rounds += 1
            total += elapsed
            kinds = _slot_kinds(grid) if kinds is None or len(kinds) != len(grid.layout) else kinds
            w = grid.mixture.weights()
            for kind in KINDS:
                weight[kind] += float(w[kinds == kind].sum())
            leads[str(kinds[grid.leader])] += 1
    experts = sum(v for k, v in clock.seconds.items() if k != "rest")
    clock.seconds["rest"] = total - experts
    return {"dataset": name, "task": data.task, "rows": len(data.y), "dim": int(data.X.shape[1]),
            "rounds": rounds, "round_us": 1e6 * total / max(rounds, 1),
            "share": {k: v / total for k, v in clock.seconds.items()} if total else {},
            "weight": {k: v / rounds for k, v in weight.items()} if rounds else {},
            "leads": {k: v / rounds for k, v in leads.items()} if rounds else {}}


def _cell(record: dict[str, Any], kind: str) -> str:
    """time share / weight / lead share, in percent."""
    share, weight, lead = (100 * record[key].get(kind, 0.0) for key in ("share", "weight", "leads"))
    return f"{share:.0f} / {weight:.1f} / {lead:.0f}"


def _summary(records: list[dict[str, Any]], task: str) -> list[str]:
    """The mean over a suite's streams of one task, per kind."""
    chosen = [r for r in records if (r["task"] == "regression") == (task == "regression") and r["rounds"]]
    if not chosen:
        return []
    rows = []
    for kind in KINDS:
        share, weight, lead = (float(np.mean([100 * r[key].get(kind, 0.0) for r in chosen]))
                               for key in ("share", "weight", "leads"))
        most = max(100 * r["weight"].get(kind, 0.0) for r in chosen)
        rows.append([kind, f"{share:.1f}", f"{weight:.2f}", f"{most:.2f}", f"{lead:.1f}"])
    return [f"Mean over the {len(chosen)} {task} streams:", "",
            *markdown_table(["kind", "time share %", "mean weight %", "largest stream's weight %",
                             "rounds leading %"], rows), ""]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", nargs="+", default=["headline", "holdout"], choices=sorted(SUITES))
    parser.add_argument("--rows", type=int, default=5000, help="T: the first rows of each stream")
    parser.add_argument("--datasets", nargs="*", help="only these data sets (default: the suites')")
    parser.add_argument("--out", type=Path, help="folder for expert_cost.md/.json (else: stdout only)")
    args = parser.parse_args(argv)
    stamp = provenance(("kons", "benchmarks/expert_cost.py"))
    command = command_line("benchmarks.expert_cost", argv, outputs=("--out",))
    lines = ["# What each of `auto`'s experts costs against what it gives", "",
             f"Command: `OPENBLAS_NUM_THREADS=1 {command}` at commit {stamp['commit'][:7]}"
             f"{' (with local changes)' if stamp['dirty'] else ''}. Machine: {machine_summary()}.", "",
             "Each cell: the kind's share of the round's time (%) / its mean mixture weight (%) / the share "
             "of rounds one of its experts leads (%), over the rounds after the warm-up. `rest` is the "
             "round outside the experts (validation, scalers, forms, mixture, detectors, kept rounds); its "
             "weight is the constant's. The headline sets are the TUNING streams, the held-out sets the "
             "streams a rule chosen on them is reported on."]
    record: dict[str, Any] = {"rows": args.rows, "suites": {}}
    for suite_name in args.suites:
        suite = SUITES[suite_name]
        names = [n for n in suite.datasets if not args.datasets or n in args.datasets]
        require_datasets(names, "expert_cost")
        records = []
        for name in names:
            records.append(stream_cost(name, args.rows))
            print(f"[{name}] {records[-1]['round_us']:.0f} us/round, load {os.getloadavg()[0]:.1f}",
                  flush=True)
        record["suites"][suite_name] = records
        role = "TUNING" if suite_name == "headline" else "HELD-OUT"
        lines += ["", f"## {suite_name} ({role} streams), load average at the end "
                  + " / ".join(f"{v:.2f}" for v in os.getloadavg()), ""]
        lines += _summary(records, "regression") + _summary(records, "classification")
        rows = [[r["dataset"], r["task"], r["dim"], f"{r['round_us']:.0f}", *(_cell(r, k) for k in KINDS)]
                for r in records]
        lines += markdown_table(["data set", "task", "d", "round (us)", *KINDS], rows)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        publish(args.out, "expert_cost", stamp, text, record)


if __name__ == "__main__":
    main()
