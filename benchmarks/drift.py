"""Following a changing world (issue 20): ``auto`` on streams whose concept changes, against River's
defaults and against ``auto`` restarted by hand at each true change point (the oracle).

Streams, in raw units, from the concept-drift literature (River 0.26's ``datasets.synth``) and River's
bundled real series in their true time order (the benchmark data sets in ``shared/data`` are not
time-ordered, so none of them is used here):

* ``linear_abrupt``: a linear target of 5 raw features (means 0-200, deviations 1-50) whose weights are
  redrawn at rounds 1,000, 2,000 and 3,000 (the first change flips their sign, as in the issue);
* ``friedman_lea`` / ``friedman_gra`` / ``friedman_gsg``: Friedman #1 with local expanding abrupt,
  global recurring abrupt and global slow gradual drift (Ikonomovska et al. 2011);
* ``sea_abrupt``: SEA's four concepts in turn (Street and Kim 2001), 10% label noise;
* ``agrawal_recurring``: Agrawal's loan functions 1 -> 3 -> 1 -> 3 (Agrawal et al. 1993), raw salaries;
* ``rbf_gradual``: two random RBF concepts, a 500-round gradual change (``ConceptDriftStream``);
* ``trump_approval`` and ``water_flow``: River's bundled series (1,001 daily approval ratings; 1,268
  hourly water flows, featurised as hour, day of week and hours since the start). No true change points.

Every method predicts, then learns each row (progressive validation). Metric: for regression the mean
squared error divided by the variance of the scored targets (over the whole stream, or over the window),
for classification the error rate. Windows: the 1,000 rounds after each change point (or up to the next),
and for the real series the last 500 rounds. Methods: ``auto`` (``kons.Auto()``), the oracle (a fresh
``kons.Auto()`` at each change point), and River's defaults as ``benchmarks/raw_regime.py`` writes them
(``StandardScaler | LinearRegression`` / ``LogisticRegression``, with ``TargetStandardScaler`` for
regression, ``StandardScaler | KNN``, ``HoeffdingAdaptiveTree`` and ``ARF``, the last two detecting drift
with ADWIN, and ``AMF``, the Aggregated Mondrian Forest). For classification ``auto`` is scored on the class
it predicts (``Round.predicted``, its label vote).

    python -m benchmarks.drift --out benchmarks/results
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import kons
from benchmarks.common import command_line, machine_summary, markdown_table, results_dir
from benchmarks.provenance import provenance, publish
from benchmarks.raw_regime import RAW_METHODS

__all__ = ["STREAMS", "Stream", "main", "run_stream"]

#: What the results measure, for their provenance.
SOURCES = ("kons", "benchmarks/drift.py", "benchmarks/raw_regime.py", "benchmarks/methods.py")
#: Rounds scored after each change point.
WINDOW = 1000
#: Rounds of the last window of a stream without change points.
LAST = 500
#: The goals: auto within this factor of the oracle after every change ...
ORACLE_FACTOR = 1.10
RIVER_KEYS = ("river_linear", "river_linear_tss", "river_knn", "river_hat", "river_arf", "river_amf")


@dataclass(frozen=True)
class Stream:
    name: str
    kind: str  # abrupt, recurring, gradual, local or real
    task: str  # regression or binary
    changes: tuple[int, ...]
    build: Callable[[], tuple[np.ndarray, np.ndarray]]


def _take(dataset: Any, n: int, keys: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` rows of a River dataset as arrays (features in ``keys``' order, else their own)."""
    rows, ys = [], []
    for x, y in itertools.islice(dataset, n):
        keys = list(x) if keys is None else keys
        rows.append([float(x[k]) for k in keys])
        ys.append(float(y))
    return np.array(rows), np.array(ys)


def _labels(y: np.ndarray) -> np.ndarray:
    labels: np.ndarray = np.where(y > 0, 1.0, -1.0)
    return labels


def _linear_abrupt() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(20)
    n, d = 4000, 5
    X = rng.normal(size=(n, d)) * [1.0, 5.0, 10.0, 20.0, 50.0] + [0.0, 10.0, 50.0, 100.0, 200.0]
    z = (X - [0.0, 10.0, 50.0, 100.0, 200.0]) / [1.0, 5.0, 10.0, 20.0, 50.0]
    w = rng.normal(size=d)
    y = np.empty(n)
    for k, start in enumerate((0, 1000, 2000, 3000)):
        weights = -w if k == 1 else (w if k == 0 else rng.normal(size=d))
        y[start:start + 1000] = 30.0 * z[start:start + 1000] @ weights + 100.0
    return X, y + 3.0 * rng.normal(size=n)


def _friedman(drift_type: str, position: tuple[int, ...], window: int = 1) -> Callable[[], Any]:
    def build() -> tuple[np.ndarray, np.ndarray]:
        from river.datasets import synth

        stream = synth.FriedmanDrift(drift_type=drift_type, position=position, transition_window=window,
                                     seed=20)
        return _take(stream, 4000)

    return build


def _concepts(make: Callable[[int, int], Any], concepts: Sequence[int], every: int, width: int) -> Any:
    """``make(c, seed)`` for each concept in turn, switching every ``every`` rounds over about ``width``
    rounds (River's ``ConceptDriftStream`` overflows at a width of 1).

    Each concept gets its own seed, 20 + its place: every concept's generator starts afresh, so with one
    seed each concept would replay the rows (and noise coins) the previous one drew a concept earlier,
    which rewards a learner that memorises rows rather than one that follows the change."""
    from river.datasets import synth

    stream = make(concepts[-1], 20 + len(concepts) - 1)
    for k in range(len(concepts) - 2, -1, -1):
        stream = synth.ConceptDriftStream(stream=make(concepts[k], 20 + k), drift_stream=stream,
                                          position=every, width=width, seed=20 + k)
    return stream


def _sea() -> tuple[np.ndarray, np.ndarray]:
    from river.datasets import synth

    def make(variant: int, seed: int) -> Any:
        return synth.SEA(variant=variant, noise=0.1, seed=seed)

    X, y = _take(_concepts(make, (0, 1, 2, 3), 1000, 50), 4000)
    return X, _labels(y)


def _agrawal() -> tuple[np.ndarray, np.ndarray]:
    from river.datasets import synth

    def make(function: int, seed: int) -> Any:
        return synth.Agrawal(classification_function=function, seed=seed)

    X, y = _take(_concepts(make, (0, 2, 0, 2), 1000, 50), 4000)
    return X, _labels(y)


def _rbf() -> tuple[np.ndarray, np.ndarray]:
    from river.datasets import synth

    def make(model: int, seed: int) -> Any:
        # Each model draws its rows around its own centroids, so a shared sample seed replays no row.
        return synth.RandomRBF(seed_model=model, seed_sample=20, n_features=10, n_centroids=50)

    X, y = _take(_concepts(make, (1, 2), 2000, 500), 4000)
    return X, _labels(y)


def _trump() -> tuple[np.ndarray, np.ndarray]:
    from river.datasets import TrumpApproval

    return _take(TrumpApproval(), 2000)


def _water_flow() -> tuple[np.ndarray, np.ndarray]:
    from river.datasets import WaterFlow

    rows, ys = [], []
    start = None
    for x, y in WaterFlow():
        when = x["Time"]
        start = when if start is None else start
        rows.append([when.hour, when.weekday(), (when - start).total_seconds() / 3600.0])
        ys.append(float(y))
    return np.array(rows), np.array(ys)


STREAMS = {s.name: s for s in (
    Stream("linear_abrupt", "abrupt", "regression", (1000, 2000, 3000), _linear_abrupt),
    Stream("friedman_lea", "local", "regression", (1000, 2000, 3000), _friedman("lea", (1000, 2000, 3000))),
    Stream("friedman_gra", "recurring", "regression", (1500, 3000), _friedman("gra", (1500, 3000))),
    Stream("friedman_gsg", "gradual", "regression", (1500, 3000), _friedman("gsg", (1500, 3000), 500)),
    Stream("sea_abrupt", "abrupt", "binary", (1000, 2000, 3000), _sea),
    Stream("agrawal_recurring", "recurring", "binary", (1000, 2000, 3000), _agrawal),
    Stream("rbf_gradual", "gradual", "binary", (2000,), _rbf),
    Stream("trump_approval", "real", "regression", (), _trump),
    Stream("water_flow", "real", "regression", (), _water_flow),
)}


class _Oracle:
    """``kons.Auto()`` started afresh at each true change point."""

    def __init__(self, task: str, changes: tuple[int, ...]) -> None:
        self.task = "regression" if task == "regression" else "classification"
        self.changes = set(changes)
        self.seen = 0
        self.learner = kons.Auto(task=self.task)

    def step(self, x: np.ndarray, y: float) -> float:
        if self.seen in self.changes:
            self.learner = kons.Auto(task=self.task)
        self.seen += 1
        return self.learner.learn_one(x, y)


class _Auto:
    """``kons.Auto()``, noting the rounds at which it declared a change."""

    def __init__(self, task: str) -> None:
        self.learner = kons.Auto(task="regression" if task == "regression" else "classification")
        self.detected: list[int] = []

    def step(self, x: np.ndarray, y: float) -> float:
        played = self.learner.learn_one(x, y)
        if self.learner.changes_detected > len(self.detected):
            self.detected.append(int(self.learner.last_change_round or 0))
        return played


def _metric(played: np.ndarray, y: np.ndarray, regression: bool) -> float:
    if not np.isfinite(played).all():
        return math.inf
    if regression:
        return float(np.mean((played - y) ** 2) / max(float(np.var(y)), 1e-300))
    return float(np.mean(np.sign(played) != y))


def windows(stream: Stream, n: int) -> list[tuple[int, int]]:
    """The scored windows: ``WINDOW`` rounds after each change (or up to the next), else the last rows."""
    if not stream.changes:
        return [(max(n - LAST, 0), n)]
    ends = [*stream.changes[1:], n]
    return [(c, min(c + WINDOW, end)) for c, end in zip(stream.changes, ends, strict=True)]


def run_stream(stream: Stream, keys: Sequence[str]) -> dict[str, Any]:
    """Every method of ``keys`` ("auto", "oracle", River's) on the stream: metrics overall and by window."""
    X, y = stream.build()
    regression = stream.task == "regression"
    spans = windows(stream, len(y))
    record: dict[str, Any] = {"stream": stream.name, "kind": stream.kind, "task": stream.task,
                              "rows": len(y), "dim": X.shape[1], "changes": list(stream.changes),
                              "windows": spans, "runs": []}
    for key in keys:
        if key == "oracle" and not stream.changes:
            continue
        runner: Any
        if key == "auto":
            runner = _Auto(stream.task)
        elif key == "oracle":
            runner = _Oracle(stream.task, stream.changes)
        else:
            runner = RAW_METHODS[key].build(regression)
        played = np.zeros(len(y))
        start = time.perf_counter()
        for i in range(len(y)):
            played[i] = runner.step(X[i], float(y[i]))
        seconds = time.perf_counter() - start
        run: dict[str, Any] = {"method": key, "overall": _metric(played, y, regression), "seconds": seconds,
               "windows": [_metric(played[a:b], y[a:b], regression) for a, b in spans]}
        if key == "auto":
            run["detected"] = runner.detected
        print(f"[{stream.name}] {key}: {run['overall']:.4f} windows "
              + " ".join(f"{w:.4f}" for w in run["windows"]) + f" in {seconds:.1f}s", file=sys.stderr,
              flush=True)
        record["runs"].append(run)
    return record


def _label(key: str) -> str:
    if key == "auto":
        return "kons auto"
    if key == "oracle":
        return "auto restarted at each change (oracle)"
    return RAW_METHODS[key].label.replace("|", "\\|")


def _fmt(value: float) -> str:
    return "failed" if not math.isfinite(value) else f"{value:.4f}"


def verdicts(record: dict[str, Any]) -> dict[str, Any]:
    """The goals on one stream: auto against the oracle in every window, against the best River default
    overall and in every window."""
    runs = {r["method"]: r for r in record["runs"]}
    auto = runs["auto"]
    river = [runs[k] for k in RIVER_KEYS if k in runs]
    best_overall = min(river, key=lambda r: r["overall"])
    best_windows = [min(r["windows"][i] for r in river) for i in range(len(record["windows"]))]
    oracle = runs.get("oracle")
    return {
        "oracle_ratios": ([a / o if o > 0 else math.inf for a, o in zip(auto["windows"], oracle["windows"],
                                                                       strict=True)] if oracle else []),
        "best_river": best_overall["method"],
        "ahead_overall": auto["overall"] < best_overall["overall"],
        "ahead_windows": [a < b for a, b in zip(auto["windows"], best_windows, strict=True)],
        "best_river_windows": best_windows,
    }


def render(records: list[dict[str, Any]], command: str, commit: str) -> str:
    lines = ["# Following a changing world: `auto` on drifting streams (progressive validation)", "",
             "Generated by `benchmarks/drift.py`; do not edit by hand.", "",
             f"    {command}", "",
             f"Commit {commit}. Machine: {machine_summary()}; load average "
             + " / ".join(f"{v:.2f}" for v in os.getloadavg()) + " at the end (2 shared cores: seconds are "
             "wall time and noisy).", "",
             "Metric: regression MSE / variance of the scored targets, classification error rate (lower is "
             f"better). Windows: the {WINDOW} rounds after each true change point (or up to the next one); "
             f"for the real series (no known change points) the last {LAST} rounds. Goals: `auto` within "
             f"{ORACLE_FACTOR - 1:.0%} of the oracle in every window after a change; ahead of the best River "
             "default overall and in every window.", ""]
    summary = [["stream", "kind", "task", "rows", "auto", "oracle", "best River (overall)",
                "auto / oracle by window", "ahead of best River: overall / windows", "changes detected at"]]
    met_oracle = met_river = 0
    for record in records:
        runs = {r["method"]: r for r in record["runs"]}
        v = verdicts(record)
        oracle = runs.get("oracle")
        ratios = " ".join(f"{r:.2f}" + ("" if r <= ORACLE_FACTOR else "!") for r in v["oracle_ratios"])
        ok_oracle = bool(record["changes"]) and all(r <= ORACLE_FACTOR for r in v["oracle_ratios"])
        ok_river = v["ahead_overall"] and all(v["ahead_windows"])
        met_oracle += ok_oracle
        met_river += ok_river
        summary.append([record["stream"], record["kind"], record["task"], record["rows"],
                        _fmt(runs["auto"]["overall"]), _fmt(oracle["overall"]) if oracle else "n/a",
                        f"{_label(v['best_river'])} {_fmt(runs[v['best_river']]['overall'])}",
                        ratios or "n/a",
                        ("yes" if v["ahead_overall"] else "no") + " / "
                        + " ".join("yes" if a else "no" for a in v["ahead_windows"]),
                        ", ".join(str(r) for r in runs["auto"]["detected"]) or "none"])
    with_oracle = sum(1 for r in records if r["changes"])
    goal = f"{ORACLE_FACTOR - 1:.0%}"
    lines += ["## Summary", "",
              f"Within {goal} of the oracle in every window after a change: **{met_oracle} of {with_oracle}**"
              " streams with change points. Ahead of the best River default overall and in every window: "
              f"**{met_river} of {len(records)}** streams ('!' marks a window more than {goal} behind the "
              "oracle).", "",
              *markdown_table(summary[0], summary[1:]), ""]
    for record in records:
        spans = record["windows"]
        head = ["method", "overall", *(f"{a}-{b}" for a, b in spans), "seconds"]
        rows = [[_label(r["method"]), _fmt(r["overall"]), *(_fmt(w) for w in r["windows"]),
                 f"{r['seconds']:.1f}"] for r in record["runs"]]
        changes = ", ".join(str(c) for c in record["changes"]) or "none known"
        lines += [f"## {record['stream']} ({record['kind']}, {record['task']}, {record['rows']} rows, "
                  f"{record['dim']} features; changes at {changes})", "", *markdown_table(head, rows), ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default=",".join(STREAMS), help="comma list of streams")
    parser.add_argument("--methods", default=",".join(("auto", "oracle", *RIVER_KEYS)),
                        help="comma list: auto, oracle and River's keys of benchmarks/raw_regime.py")
    parser.add_argument("--out", type=Path, help="where drift.md and drift.json go (default: a temporary "
                                                  "directory)")
    args = parser.parse_args(argv)
    names, keys = args.streams.split(","), args.methods.split(",")
    unknown = [n for n in names if n not in STREAMS] + [k for k in keys
                                                       if k not in ("auto", "oracle", *RIVER_KEYS)]
    if unknown:
        parser.error(f"unknown stream or method: {', '.join(unknown)}")
    if "auto" not in keys or not set(RIVER_KEYS) & set(keys):
        parser.error("the methods must include auto and at least one of River's (the goals compare them)")
    out = results_dir(args.out, "drift")
    command = command_line("benchmarks.drift", argv, outputs=("--out",))
    stamp = provenance(SOURCES)
    records = [run_stream(STREAMS[name], [k for k in keys if k != "river_linear_tss"
                                          or STREAMS[name].task == "regression"]) for name in names]
    record = {"command": command, "records": records}
    report = publish(out, "drift", stamp, render(records, command, stamp["commit"][:9]), record)
    print(f"drift: {report}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
