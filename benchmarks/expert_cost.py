"""What each of ``auto``'s experts costs against what it gives (issue 36, item 4).

``kons.Auto()`` plays the raw regime's streams (:mod:`benchmarks.raw_regime`: rows as stored, the
protocol's order, the first ``T`` rows; ``task="classification"`` for the binary sets) exactly as the
quality suites do, and two of the multi-class benchmark's streams (:mod:`benchmarks.multiclass`: the
same rows and labels, learnt as given), with every expert's calls timed: its plays and learning
(``predict``, ``learn``, ``probabilities``, ``learn_class``) and its round outside its plays
(``observe``). The experts are grouped by kind:

* ``nystrom members``: the eight Nystrom KONS members of the grid (their shared kernel row and solve
  counted where it is computed, in the first member of a dictionary that plays the row);
* ``ons members``: the three linear ONS members;
* ``generations``: the restarted copies of members after a change and each generation's linear model;
* then one group per kind of :data:`kons.auto.grid.EXPERTS` (named by :data:`GROUPS`): ``bins``, the
  linear model on the quantile thresholds; ``neighbours``, the local expert; ``trees``, the three
  Hoeffding trees (classes only); ``lags``, the last target and its autoregression, and ``linear``, the
  Bayesian linear model of every row (regression only); ``forest``, the Mondrian forest (three classes
  or more); ``fresh bins``, the threshold model started afresh at a change declared on two classes;
  ``long lags``, the second autoregression (regression, once the lags have woken). An
  expert is grouped by the kind whose list holds it in the playing grid, so a kind added to ``EXPERTS``
  without a group here stops the run rather than hide in ``rest``;
* ``rest``: the round's time outside the experts (validation, the scalers and the row's forms, the
  mixture, the change detectors, the kept rounds).

For each kind, over the rounds after the warm-up (the grid exists): its share of the round's time, its
mean mixture weight (the sum over its slots of the marginal weights after each round) and the share of
those rounds in which one of its experts leads (has the largest weight). An expert whose time share is
far above its weight and that never leads costs more than it gives on that stream.

Three suites run: the 12 headline sets (the TUNING streams, where a rule of ``auto`` may be chosen), the
14 held-out sets (where it is reported), and the multi-class streams ``image_segments`` (7 classes, a
TUNING stream of the multi-class rules) and ``random_rbf10`` (10 classes, held out), the only suite where
the forest plays. Among three classes or more the label ``auto`` gives is a vote of its experts' labels
(:class:`kons.auto.mixture.LabelVote`), whose weights are not those of the mixture reported here.

The timing wrappers add a little to every expert's calls (about a microsecond each), which is counted in
the experts' shares; the shares are from one process, so the machine's load moves them little.
Run with one BLAS thread::

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
from benchmarks.multiclass import STREAMS, SYNTHETIC_ROWS, TUNING_STREAMS
from benchmarks.provenance import provenance, publish
from benchmarks.raw_report import SUITES
from kons.auto.experts.forest import ForestExpert
from kons.auto.experts.fresh_bins import FreshThresholds
from kons.auto.experts.lags import LastTarget, LongLags, TargetLags
from kons.auto.experts.neighbours import NeighboursExpert
from kons.auto.experts.newton import LearnerExpert, ThresholdExpert
from kons.auto.experts.recent import RecentExpert
from kons.auto.experts.tree import TreeExpert
from kons.auto.grid import Grid, Kind
from kons.datasets import load_dataset
from kons.kernel.nystrom_kons import NystromKONS

#: The group of each kind of :data:`kons.auto.grid.EXPERTS`, by the kind's first slot.
GROUPS = {"bins": "bins", "neighbours": "neighbours", "tree0": "trees", "target_last": "lags",
          "linear": "linear", "forest": "forest", "fresh_bins": "fresh bins", "target_long_lags": "long lags",
          "wide_numbers": "wide numbers"}
KINDS = ("nystrom members", "ons members", "generations", *GROUPS.values(), "rest")
#: The multi-class suite: streams of :mod:`benchmarks.multiclass`, one it tunes on and one it holds out.
MULTICLASS = ("image_segments", "random_rbf10")
#: The experts' calls that are timed (the protocol's per-round methods).
_TIMED = ("predict", "learn", "probabilities", "learn_class", "observe")
_CLASSES = (LearnerExpert, ThresholdExpert, FreshThresholds, NeighboursExpert, RecentExpert, TreeExpert,
            ForestExpert, LastTarget, TargetLags, LongLags)


def group_of(kind: Kind) -> str:
    """The group of a kind of :data:`~kons.auto.grid.EXPERTS` (an error for a kind this benchmark does not
    know: its time would be counted as the round's ``rest``)."""
    if kind.slots[0] not in GROUPS:
        raise RuntimeError(f"benchmarks.expert_cost has no group for the experts {kind.slots}: "
                           "add it to GROUPS")
    return GROUPS[kind.slots[0]]


class _Clock:
    """The time spent in each kind's calls while a grid plays (``grid``: the one playing now)."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(KINDS, 0.0)
        self.grid: Grid | None = None
        # nested expert calls (a ThresholdExpert's learn is LearnerExpert's, FreshThresholds' its model's)
        # count once
        self.depth = 0
        self._known: dict[int, tuple[Any, str]] = {}  # id -> (the expert, kept so the id stays its, its kind)

    def kind(self, expert: Any) -> str:
        grid = self.grid
        if grid is None:  # the round that builds the grid (not counted)
            return "rest"
        known = self._known.get(id(expert))
        if known is None or known[0] is not expert:
            known = (expert, self._find(grid, expert))
            self._known[id(expert)] = known
        return known[1]

    @staticmethod
    def _find(grid: Grid, expert: Any) -> str:
        """The group of ``expert`` in the grid playing: a member, one of a kind of EXPERTS, else a
        generation's (its copies and linear model)."""
        if any(expert is member for member in grid.members):
            return "nystrom members" if isinstance(expert.base, NystromKONS) else "ons members"
        for kind, experts in zip(grid.kinds, grid.experts, strict=True):
            if any(expert is own for own in experts or ()):
                if not isinstance(expert, _CLASSES):
                    raise RuntimeError(f"benchmarks.expert_cost does not time {type(expert).__name__}")
                return group_of(kind)
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
    of_slot = {slot: group_of(kind) for kind in grid.kinds for slot in kind.slots}

    def kind(name: str) -> str:
        if name.startswith("base"):
            member = grid.members[int(name.removeprefix("base"))]
            return "nystrom members" if isinstance(member.base, NystromKONS) else "ons members"
        return "generations" if name.startswith("young") else of_slot.get(name, "rest")
    return np.array([kind(name) for name in grid.layout], dtype=object)


def _stream(name: str, rows: int) -> tuple[np.ndarray, list[Any], str]:
    """The first ``rows`` rows of ``name``, their targets (labels as given among several classes) and task
    (``regression``, ``binary`` or ``multi-class``)."""
    if name in STREAMS:
        X, labels = STREAMS[name](SYNTHETIC_ROWS)
        return X[:rows], labels[:rows], "multi-class"
    data = load_dataset(name, rows, standardize=False)
    return data.X, [float(y) for y in data.y], data.task


def stream_cost(name: str, rows: int) -> dict[str, Any]:
    """``auto`` on the first ``rows`` raw rows of ``name``: each kind's seconds, mean weight and lead share
    over the rounds the grid played, and the round's mean time."""
    X, targets, task = _stream(name, rows)
    auto = kons.Auto() if task == "regression" else kons.Auto(task="classification")
    clock = _Clock()
    weight = dict.fromkeys(KINDS, 0.0)
    leads = dict.fromkeys(KINDS, 0)
    rounds = 0
    total = 0.0
    kinds = None
    with _clocked(clock):
        for x, y in zip(X, targets, strict=True):
            grid = auto._grid
            clock.grid = grid
            before = dict(clock.seconds)
            start = time.perf_counter()
            auto.learn_one(x, y)
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
    return {"dataset": name, "task": task, "rows": len(targets), "dim": int(X.shape[1]),
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
    chosen = [r for r in records if r["task"] == task and r["rounds"]]
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
    parser.add_argument("--suites", nargs="+", default=["headline", "holdout", "multiclass"],
                        choices=[*sorted(SUITES), "multiclass"])
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
        suite = MULTICLASS if suite_name == "multiclass" else SUITES[suite_name].datasets
        names = [n for n in suite if not args.datasets or n in args.datasets]
        require_datasets([n for n in names if n not in STREAMS], "expert_cost")
        records = []
        for name in names:
            records.append(stream_cost(name, args.rows))
            print(f"[{name}] {records[-1]['round_us']:.0f} us/round, load {os.getloadavg()[0]:.1f}",
                  flush=True)
        record["suites"][suite_name] = records
        role = {"headline": "TUNING", "holdout": "HELD-OUT"}.get(suite_name) or ", ".join(
            f"{n}: {'TUNING' if n in TUNING_STREAMS else 'HELD-OUT'}" for n in names)
        lines += ["", f"## {suite_name} ({role} streams), load average at the end "
                  + " / ".join(f"{v:.2f}" for v in os.getloadavg()), ""]
        lines += [line for task in ("regression", "binary", "multi-class")
                  for line in _summary(records, task)]
        rows = [[r["dataset"], r["task"], r["dim"], f"{r['round_us']:.0f}", *(_cell(r, k) for k in KINDS)]
                for r in records]
        lines += markdown_table(["data set", "task", "d", "round (us)", *KINDS], rows)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        publish(args.out, "expert_cost", stamp, text, record)


if __name__ == "__main__":
    main()
