"""How sure is the prediction (issue 38): ``kons.Auto``'s conformal intervals and prediction sets on shuffled,
ordered and drifting streams, against River's jackknife and a global conformal interval.

Streams (raw rows, as the raw regime sends them, ``T`` rows at most):

* ``shuffled``: every regression data set of the raw-regime suites (the 7 headline ones, the tuning
  streams of the two constants below, and the 5 held-out ones) in protocol order
  (``default_rng(0).permutation``);
* ``sorted``: the same rows sorted by their first feature, a covariate drift (the data sets are not time
  ordered: this is the order that moves the most);
* ``drift``: the regression streams of :mod:`benchmarks.drift` (four synthetic drifts, two real series
  in their time order).

For each stream ``kons.Auto()`` learns every row with ``learn_round(x, y, coverage=0.9)`` (predict, then
learn: the interval is the play's). The intervals at 80% and 95% are those the same learner would answer
had it been asked them from the start too: the library's own :class:`kons.conformal.Conformal` replayed on
the recorded plays, spreads and targets (a learner's thresholds do not touch its plays; the replay of 90%
is checked equal to what ``learn_round`` answered, bit for bit).

Compared, at 90%, on the rounds from :data:`SCORED_FROM` on: River's ``conf.RegressionJackknife`` (a global
interval from the quantiles of the past signed residuals) around the best River default of the stream in
the raw-regime and drift results (:data:`RIVER_BEST`), and the global conformal interval on auto's own
residuals (the play plus or minus the split-conformal quantile of every past absolute residual). A stream
counts as a win when auto's mean width is smaller at a coverage at least the baseline's minus 0.5 point.

Classification: every binary or multi-class stream of the same suites (their first
:data:`CLASSIFICATION_T` rows) and of the drift benchmark, shuffled: coverage of
``learn_round(x, y, coverage=c)``'s sets (replayed likewise for 80% and 95%), mean
set size against a global threshold (the split-conformal quantile of every past score, the same scores),
and the expected calibration error of the played probabilities of the most probable class (10 bins) in
every window of :data:`WINDOW` rows.

Cost: ``predict_round(x)`` against ``predict_round(x, coverage=0.9)`` on a trained ``auto``, alternating
blocks of rows, CPU time.

Tuning (``--tune``): the spread exponent and the tracking step of :mod:`kons.conformal` were chosen on the
7 headline data sets shuffled (:data:`TUNING`); the other streams are held out.

    python -m benchmarks.intervals --out benchmarks/results
"""

from __future__ import annotations

import argparse
import bisect
import json
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
from benchmarks.common import command_line, machine_summary, markdown_table, require_datasets, results_dir
from benchmarks.drift import STREAMS as DRIFT_STREAMS
from benchmarks.provenance import provenance, publish
from benchmarks.quality import CLASSIFICATION, REGRESSION
from benchmarks.raw_regime import RAW_METHODS
from benchmarks.raw_report import SUITES
from kons.conformal import SPREAD_EXPONENT, STEP, Conformal
from kons.datasets import load_dataset

__all__ = ["main"]

SOURCES = ("kons", "benchmarks/intervals.py")
COVERAGES = (0.8, 0.9, 0.95)
#: Rows per stream at most (regression; classification: CLASSIFICATION_T, to keep the run within an hour
#: on the shared machine).
T = 5000
CLASSIFICATION_T = 2000
#: The windows of the per-window coverage and calibration.
WINDOW = 1000
#: A last window shorter than this is not scored on its own.
SHORTEST_WINDOW = 500
#: The first rounds, left out of the width comparisons (a global interval has no quantile before them).
SCORED_FROM = 50
#: The tuning streams (the raw-regime headline regression sets, shuffled).
TUNING = tuple(f"{name}/shuffled" for name in REGRESSION)
HOLDOUT = SUITES["holdout"].datasets
REGRESSION_SETS = (*REGRESSION,
                   *(n for n in HOLDOUT if n in ("bodyfat", "housing", "triazines", "mg", "cpu_act")))
CLASSIFICATION_SETS = (*CLASSIFICATION, *(n for n in HOLDOUT if n not in REGRESSION_SETS))
#: The best River default of each data set in benchmarks/results (raw regime, drift), by MSE.
RIVER_BEST = {"bodyfat": "river_linear_tss", "power_plant": "river_linear_tss",
              "linear_abrupt": "river_linear_tss", "friedman_lea": "river_arf",
              "friedman_gra": "river_linear_tss", "friedman_gsg": "river_linear_tss",
              "trump_approval": "river_linear_tss", "water_flow": "river_linear_tss"}
#: The preprocessed second-order learners whose intervals follow their leverage, and their rows per stream.
LEARNERS = ("ons", "fd_son", "rp_son", "oja_son", "kons", "sketched_kons", "nystrom_kons")
LEARNER_T = 2000
GOAL_STREAM = 0.015
GOAL_WINDOW = 0.05


@dataclass(frozen=True)
class Stream:
    name: str  # data set / order
    kind: str  # shuffled, sorted or drift
    build: Callable[[], tuple[np.ndarray, np.ndarray]]

    @property
    def dataset(self) -> str:
        return self.name.split("/")[0]


def _dataset(name: str, order: str, rows: int = T) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
    def build() -> tuple[np.ndarray, np.ndarray]:
        data = load_dataset(name, rows, standardize=False)
        if order == "sorted":
            by = np.argsort(data.X[:, 0], kind="stable")
            return data.X[by], data.y[by]
        return data.X, data.y
    return build


def regression_streams() -> list[Stream]:
    streams = [Stream(f"{n}/{order}", order, _dataset(n, order)) for order in ("shuffled", "sorted")
               for n in REGRESSION_SETS]
    streams += [Stream(f"{s.name}/drift", "drift", s.build) for s in DRIFT_STREAMS.values()
                if s.task == "regression"]
    return streams


def classification_streams() -> list[Stream]:
    streams = [Stream(f"{n}/shuffled", "shuffled", _dataset(n, "shuffled", CLASSIFICATION_T))
               for n in CLASSIFICATION_SETS]
    streams += [Stream(f"{s.name}/drift", "drift", s.build) for s in DRIFT_STREAMS.values()
                if s.task != "regression"]
    return streams


# ----------------------------------------------------------------- measures
def _windows(n: int) -> list[tuple[int, int]]:
    spans = [(a, min(a + WINDOW, n)) for a in range(0, n, WINDOW)]
    if len(spans) > 1 and spans[-1][1] - spans[-1][0] < SHORTEST_WINDOW:
        spans[-2:] = [(spans[-2][0], n)]  # a short tail joins the window before it
    return [s for s in spans if s[1] - s[0] >= SHORTEST_WINDOW]


def _coverage_record(covered: np.ndarray, target: float) -> dict[str, Any]:
    by_window = [float(covered[a:b].mean()) for a, b in _windows(len(covered))]
    worst = max((abs(c - target) for c in by_window), default=None)  # None: no window (a short stream)
    return {"coverage": float(covered.mean()), "windows": by_window, "worst_window_gap": worst}


def _global_quantile(kept: list[float], coverage: float) -> float:
    """The split-conformal quantile of the sorted ``kept`` scores (infinite when too few)."""
    rank = math.ceil((len(kept) + 1) * coverage)
    return kept[rank - 1] if rank <= len(kept) else math.inf


def replay_intervals(plays: np.ndarray, spreads: np.ndarray, y: np.ndarray, coverage: float,
                     step: float | None = None, exponent: float = SPREAD_EXPONENT) -> np.ndarray:
    """The (n, 2) intervals of the library's component asked ``coverage`` from the first round (the first
    round: its fallback, the targets' range, here infinite); ``exponent``: auto's unless given."""
    conformal = Conformal("interval", step=step, spread_exponent=exponent)
    conformal.track(coverage)
    out = np.empty((len(y), 2))
    for t, (play, spread, target) in enumerate(zip(plays, spreads, y, strict=True)):
        interval = conformal.interval(float(play), float(spread), coverage)
        out[t] = (-math.inf, math.inf) if interval is None else interval
        conformal.learn_residual(float(play), float(target), float(spread))
    return out


def global_intervals(plays: np.ndarray, y: np.ndarray, coverage: float) -> np.ndarray:
    kept: list[float] = []
    out = np.empty((len(y), 2))
    for t, (play, target) in enumerate(zip(plays, y, strict=True)):
        half = _global_quantile(kept, coverage)
        out[t] = (play - half, play + half)
        bisect.insort(kept, abs(float(target) - float(play)))
    return out


def _scored(intervals: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    covered = (intervals[:, 0] <= y) & (y <= intervals[:, 1])
    return covered, float(np.mean(intervals[SCORED_FROM:, 1] - intervals[SCORED_FROM:, 0]))


def at_coverage(intervals: np.ndarray, centers: np.ndarray, y: np.ndarray, coverage: float) -> float:
    """The mean width (rounds from SCORED_FROM on) of ``intervals`` scaled about their ``centers`` by the
    least factor, chosen in hindsight, that makes them hold ``coverage`` of the targets there: a baseline
    compared at the coverage another interval achieved (the hindsight favours the baseline)."""
    low, high = (centers - intervals[:, 0])[SCORED_FROM:], (intervals[:, 1] - centers)[SCORED_FROM:]
    gap = (y - centers)[SCORED_FROM:]
    with np.errstate(divide="ignore", invalid="ignore"):
        needed = np.where(gap >= 0, gap / high, -gap / low)
    needed = np.where(gap == 0, 0.0, np.where(np.isnan(needed) | (needed < 0), np.inf, needed))
    factor = float(np.sort(needed)[max(math.ceil(coverage * len(needed)) - 1, 0)])
    return factor * float(np.mean(low + high))


def _jackknife(stream: Stream, X: np.ndarray, y: np.ndarray) -> tuple[str, np.ndarray, np.ndarray]:
    from river import conf

    key = RIVER_BEST.get(stream.dataset, "river_knn")
    runner: Any = RAW_METHODS[key].build(True)  # a RiverRunner: its River model
    model = conf.RegressionJackknife(runner.model, confidence_level=0.9)
    out, centers = np.empty((len(y), 2)), np.empty(len(y))
    for t, (x, target) in enumerate(zip(X, y, strict=True)):
        xd: dict[Any, object] = dict(enumerate(x.tolist()))
        interval = model.predict_one(xd, with_interval=True)
        out[t], centers[t] = (interval.lower, interval.upper), model.predict_one(xd)
        model.learn_one(xd, float(target))
    return key, out, centers


def run_regression(stream: Stream, river: bool) -> dict[str, Any]:
    X, y = stream.build()
    learner = kons.Auto()
    plays, spreads, answered = np.empty(len(y)), np.empty(len(y)), np.empty((len(y), 2))
    start = time.process_time()
    for t, (x, target) in enumerate(zip(X, y, strict=True)):
        played = learner.learn_round(x, float(target), coverage=0.9)
        assert played.interval is not None
        plays[t], answered[t] = played.value, played.interval
        spreads[t] = learner._spread()  # the spread the round just used (what the replays need)
    seconds = time.process_time() - start
    record: dict[str, Any] = {"stream": stream.name, "kind": stream.kind, "rows": len(y), "seconds": seconds,
                              "levels": {}}
    for c in COVERAGES:
        ours = replay_intervals(plays, spreads, y, c)
        if c == 0.9:  # the replay is the library's answer (the first round: the library's range instead)
            assert np.array_equal(ours[1:], answered[1:]), stream.name
            ours[0] = answered[0]
        covered, width = _scored(ours, y)
        achieved = float(covered[SCORED_FROM:].mean())
        baseline = global_intervals(plays, y, c)
        baseline_covered, baseline_width = _scored(baseline, y)
        record["levels"][str(c)] = {**_coverage_record(covered, c), "width": width,
                                    "global": {"coverage": float(baseline_covered[SCORED_FROM:].mean()),
                                               "width": baseline_width,
                                               "width_at_auto_coverage": at_coverage(baseline, plays, y,
                                                                                     achieved)},
                                    "scored_coverage": achieved}
    if river:
        key, jack, centers = _jackknife(stream, X, y)
        covered, width = _scored(jack, y)
        achieved = record["levels"]["0.9"]["scored_coverage"]
        record["river"] = {"model": key, "coverage": float(covered[SCORED_FROM:].mean()), "width": width,
                           "width_at_auto_coverage": at_coverage(jack, centers, y, achieved)}
    return record


def _ece(top: np.ndarray, right: np.ndarray, bins: int = 10) -> float:
    which = np.minimum((top * bins).astype(int), bins - 1)
    gap = 0.0
    for b in range(bins):
        inside = which == b
        if inside.any():
            gap += inside.sum() * abs(float(top[inside].mean()) - float(right[inside].mean()))
    return gap / len(top)


def run_classification(stream: Stream) -> dict[str, Any]:
    X, y = stream.build()
    learner = kons.Auto(task="classification")
    answered: list[list[Any]] = []
    played: list[tuple[np.ndarray, int, list[Any]]] = []
    top, right = np.empty(len(y)), np.empty(len(y))
    for t, (x, label) in enumerate(zip(X, y, strict=True)):
        rnd = learner.learn_round(x, label.item(), coverage=0.9)
        assert rnd.distribution is not None and rnd.prediction_set is not None
        probabilities = np.array([p for _, p in rnd.distribution])
        index = [c for c, _ in rnd.distribution].index(rnd.label)
        played.append((probabilities, index, [c for c, _ in rnd.distribution]))
        answered.append(rnd.prediction_set)
        top[t], right[t] = probabilities.max(), float(np.argmax(probabilities) == index)
    record: dict[str, Any] = {"stream": stream.name, "kind": stream.kind, "rows": len(y),
                              "classes": len(learner.classes), "levels": {},
                              "ece_windows": [_ece(top[a:b], right[a:b]) for a, b in _windows(len(y))]}
    for c in COVERAGES:
        conformal = Conformal("set")
        conformal.track(c)
        kept: list[float] = []
        covered, sizes, global_covered, global_sizes = [], [], [], []
        for t, (probabilities, index, labels) in enumerate(played):
            inside = conformal.prediction_set(probabilities, c)
            if c == 0.9:  # the replay is the library's answer
                assert [labels[i] for i in inside] == answered[t], stream.name
            covered.append(index in inside)
            sizes.append(len(inside))
            share = conformal._share()  # the same draw for the global threshold
            scores = _set_scores(probabilities, share)
            threshold = _global_quantile(kept, c)
            global_covered.append(scores[index] <= threshold)
            global_sizes.append(int((scores <= threshold).sum()))
            bisect.insort(kept, float(scores[index]))
            conformal.learn_label(probabilities, index)
        record["levels"][str(c)] = {**_coverage_record(np.array(covered), c), "size": float(np.mean(sizes)),
                                    "global": {"coverage": float(np.mean(global_covered)),
                                               "size": float(np.mean(global_sizes))}}
    return record


def _set_scores(probabilities: np.ndarray, share: float) -> np.ndarray:
    from kons.conformal import _set_scores as scores

    return scores(probabilities, share)


def cost(rows: int = 2000, blocks: int = 12, block: int = 100) -> dict[str, Any]:
    """CPU seconds of ``predict_round`` without and with a coverage, alternating blocks on a trained auto."""
    X, y = _dataset("cadata", "shuffled")()
    learner = kons.Auto()
    for x, target in zip(X[:rows], y[:rows], strict=True):
        learner.learn_round(x, float(target), coverage=0.9)
    probe = X[rows:rows + block]
    ratios = []
    for b in range(blocks):
        timings = {}
        for asked in ((None, 0.9) if b % 2 == 0 else (0.9, None)):
            start = time.process_time()
            for x in probe:
                learner.predict_round(x, asked)
            timings[asked] = time.process_time() - start
        ratios.append(timings[0.9] / timings[None])
    return {"rows_trained": rows, "blocks": blocks, "block": block, "ratios": ratios,
            "median_ratio": float(np.median(ratios))}


# ----------------------------------------------------------------- tuning
def tune(streams: Sequence[Stream]) -> list[list[Any]]:
    """Each (exponent of auto's spread, step) on the tuning streams: the 90% width relative to the global
    interval at equal coverage (median, streams narrower), the worst stream and window coverage gaps."""
    recorded = []
    for stream in streams:
        X, y = stream.build()
        learner = kons.Auto()
        plays, spreads = np.empty(len(y)), np.empty(len(y))
        for t, (x, target) in enumerate(zip(X, y, strict=True)):
            plays[t] = learner.learn_one(x, float(target))
            spreads[t] = learner._spread()
        recorded.append((plays, spreads, y))
        print(f"[tune] {stream.name} recorded", file=sys.stderr, flush=True)
    rows = []
    for exponent in (0.0, 0.5, 1.0, 1.5):
        for step in (0.02, 0.05, 0.1):
            ratios, gaps, windows = [], [], []
            for plays, spreads, y in recorded:
                ours = replay_intervals(plays, spreads, y, 0.9, step, exponent)
                covered, width = _scored(ours, y)
                baseline = global_intervals(plays, y, 0.9)
                ratios.append(width / at_coverage(baseline, plays, y, float(covered[SCORED_FROM:].mean())))
                rec = _coverage_record(covered, 0.9)
                gaps.append(abs(rec["coverage"] - 0.9))
                windows.append(rec["worst_window_gap"])
            rows.append([exponent, step, f"{np.median(ratios):.3f}", f"{sum(r < 1.0 for r in ratios)} of "
                         f"{len(ratios)}", f"{max(gaps):.4f}", f"{max(windows):.3f}"])
    return rows


# ----------------------------------------------------------------- the other learners
def record_learner(algorithm: str, stream: Stream) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The plays and spreads (the square root of the row's leverage) of the preprocessed ``algorithm`` on
    the first :data:`LEARNER_T` rows of ``stream`` with ``learn_round(x, y, coverage=0.9)``, and its
    targets; the replay of 90% is checked equal to the intervals the rounds answered."""
    X, y = stream.build()
    X, y = X[:LEARNER_T], y[:LEARNER_T]
    learner = kons.learner_from_params(algorithm, {})
    plays, spreads, answered = np.empty(len(y)), np.empty(len(y)), np.empty((len(y), 2))
    for t, (x, target) in enumerate(zip(X, y, strict=True)):
        played = learner.learn_round(x, float(target), coverage=0.9)
        assert played.interval is not None
        plays[t], spreads[t], answered[t] = played.value, learner._spread(), played.interval
    replayed = replay_intervals(plays, spreads, y, 0.9, exponent=learner._spread_exponent)
    assert np.array_equal(replayed[1:], answered[1:]), (algorithm, stream.name)
    return plays, spreads, y


def run_learner(algorithm: str, stream: Stream) -> dict[str, Any]:
    """A preprocessed second-order learner's intervals on ``stream``: coverage at each level and the 90%
    width against its own global interval (its spread left out: one width for every row)."""
    plays, spreads, y = record_learner(algorithm, stream)
    exponent = learner_exponent(algorithm)
    levels = {}
    for c in COVERAGES:
        covered, _ = _scored(replay_intervals(plays, spreads, y, c, exponent=exponent), y)
        levels[str(c)] = _coverage_record(covered, c)
    ratio, _ = _local_against_global(plays, spreads, y, exponent)
    return {"learner": algorithm, "stream": stream.name, "rows": len(y), "levels": levels,
            "width_ratio": ratio}


def learner_exponent(algorithm: str) -> float:
    return kons.learner_from_params(algorithm, {})._spread_exponent


def tune_learners(streams: Sequence[Stream], exponents: Sequence[float] = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0)
                  ) -> list[list[Any]]:
    """Each learner and exponent of its leverage on the tuning streams: the median ratio of the 90% width
    to the learner's own global interval (exponent 0, at the coverage achieved), the worst stream gap."""
    rows = []
    for algorithm in LEARNERS:
        recorded = [record_learner(algorithm, stream) for stream in streams]
        print(f"[tune] {algorithm} recorded", file=sys.stderr, flush=True)
        for exponent in exponents:
            ratios, gaps = [], []
            for plays, spreads, y in recorded:
                ratio, coverage = _local_against_global(plays, spreads, y, exponent)
                ratios.append(ratio)
                gaps.append(abs(coverage - 0.9))
            rows.append([algorithm, exponent, f"{np.median(ratios):.3f}", f"{max(ratios):.3f}",
                         f"{max(gaps):.4f}"])
    return rows


def _local_against_global(plays: np.ndarray, spreads: np.ndarray, y: np.ndarray, exponent: float
                          ) -> tuple[float, float]:
    """The 90% width with the local scale of ``exponent`` over that of the global scale (exponent 0)
    scaled in hindsight to the coverage the local one achieved, and that coverage (rounds from
    :data:`SCORED_FROM` on)."""
    local = replay_intervals(plays, spreads, y, 0.9, exponent=exponent)
    covered, width = _scored(local, y)
    achieved = float(covered[SCORED_FROM:].mean())
    flat = replay_intervals(plays, spreads, y, 0.9, exponent=0.0)
    return width / at_coverage(flat, plays, y, achieved), float(covered.mean())


# ----------------------------------------------------------------- report
def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def render(regression: list[dict[str, Any]], classification: list[dict[str, Any]],
           learners: list[dict[str, Any]], costs: dict[str, Any] | None, command: str, commit: str) -> str:
    lines = ["# How sure is the prediction: conformal intervals and sets of `auto` (issue 38)", "",
             "Generated by `benchmarks/intervals.py`; do not edit by hand.", "", f"    {command}", "",
             f"Commit {commit}. Machine: {machine_summary()}; load average "
             + " / ".join(f"{v:.2f}" for v in os.getloadavg()) + " at the end (2 shared cores).", "",
             (__doc__ or "").split("\n\n", 1)[1].split("    python -m")[0].strip(), ""]
    if regression:
        met_stream = met_window = windowed = 0
        rows = []
        for r in regression:
            cells, ok_s, ok_w = [], True, True
            for c in COVERAGES:
                level = r["levels"][str(c)]
                worst = level["worst_window_gap"]
                ok_s &= abs(level["coverage"] - c) <= GOAL_STREAM
                ok_w &= worst is not None and worst <= GOAL_WINDOW
                cells.append(f"{_pct(level['coverage'])} / " + ("n/a" if worst is None else _pct(worst)))
            met_stream += ok_s
            met_window += ok_w
            windowed += r["levels"]["0.9"]["worst_window_gap"] is not None
            rows.append([r["stream"], r["kind"], r["rows"], *cells])
        lines += ["## Regression coverage", "",
                  f"Within {GOAL_STREAM * 100:.1f} points of the target over the whole stream at 80, 90 and "
                  f"95%: **{met_stream} of {len(regression)}** streams; within {GOAL_WINDOW * 100:.0f} "
                  "points in every "
                  f"window of {WINDOW} rows: **{met_window} of the {windowed}** streams with a window ("
                  f"n/a: fewer than {SHORTEST_WINDOW} rows). Cells: coverage over the stream (%) / the "
                  "largest gap of a window to the target (points).", "",
                  *markdown_table(["stream", "kind", "rows", *(f"{c:.0%}" for c in COVERAGES)], rows), ""]
        rows, river_ratios, global_ratios, river_wins, global_wins = [], [], [], 0, 0
        for r in regression:
            level = r["levels"]["0.9"]
            ours, glob = level["width"], level["global"]
            global_ratios.append(ours / glob["width_at_auto_coverage"])
            global_wins += ours < glob["width_at_auto_coverage"]
            river = r.get("river")
            cells = ["n/a", "n/a"]
            if river:
                river_ratios.append(ours / river["width_at_auto_coverage"])
                river_wins += ours < river["width_at_auto_coverage"]
                cells = [f"{river['model']}: {_pct(river['coverage'])}, {river['width']:.4g}; "
                         f"{river['width_at_auto_coverage']:.4g}",
                         f"{river_ratios[-1]:.2f}"]
            rows.append([r["stream"], f"{_pct(level['scored_coverage'])}, {ours:.4g}",
                         f"{_pct(glob['coverage'])}, {glob['width']:.4g}; "
                         f"{glob['width_at_auto_coverage']:.4g}",
                         f"{global_ratios[-1]:.2f}", *cells])
        lines += ["## Width at 90% (rounds from " + str(SCORED_FROM) + " on)", "",
                  "Each baseline is compared at the coverage auto achieved: its intervals scaled about their "
                  "centres by the least factor, chosen in hindsight, that reaches auto's coverage on the "
                  "stream (the hindsight favours the baseline; unscaled, both baselines cover more than "
                  "asked and are wider still). Narrower than the global conformal interval on auto's "
                  f"residuals: **{global_wins} of {len(regression)}** streams, median width ratio "
                  f"**{np.median(global_ratios):.3f}**. Narrower than River's RegressionJackknife around its "
                  f"best default: **{river_wins} of {len(river_ratios)}**, median ratio "
                  f"**{np.median(river_ratios) if river_ratios else math.nan:.3f}**. "
                  + _split(regression, global_ratios) + " Cells: coverage (%), "
                  "mean width (the target's units); for a baseline, then its width at auto's coverage.", "",
                  *markdown_table(["stream", "auto", "global conformal", "auto / global (equal coverage)",
                                   "River jackknife", "auto / River (equal coverage)"], rows), ""]
    if classification:
        rows = []
        met = 0
        for r in classification:
            cells = []
            ok = True
            for c in COVERAGES:
                level = r["levels"][str(c)]
                ok &= abs(level["coverage"] - c) <= GOAL_STREAM
                cells.append(f"{_pct(level['coverage'])}, {level['size']:.2f} "
                             f"({_pct(level['global']['coverage'])}, {level['global']['size']:.2f})")
            met += ok
            rows.append([r["stream"], r["rows"], r["classes"], *cells,
                         " ".join(f"{e:.3f}" for e in r["ece_windows"])])
        lines += ["## Classification sets", "",
                  f"Coverage within {GOAL_STREAM * 100:.1f} points at 80, 90 and 95%: **{met} of "
                  f"{len(classification)}** streams. Cells: coverage (%), mean set size (global threshold: "
                  "coverage, size); ECE of the most probable class's played probability per window.", "",
                  *markdown_table(["stream", "rows", "classes", *(f"{c:.0%}" for c in COVERAGES),
                                   f"ECE per {WINDOW} rows"], rows), ""]
    if learners:
        lines += _render_learners(learners)
    if costs:
        lines += ["## Cost", "",
                  "`predict_round(x, coverage=0.9)` / `predict_round(x)` on auto trained on "
                  f"{costs['rows_trained']} rows of cadata, {costs['blocks']} alternating blocks of "
                  f"{costs['block']} rows, CPU time: "
                  f"median ratio **{costs['median_ratio']:.3f}** (blocks: "
                  + ", ".join(f"{v:.3f}" for v in costs["ratios"]) + ").", ""]
    return "\n".join(lines)


def _split(regression: list[dict[str, Any]], ratios: list[float]) -> str:
    """The width against the global interval and the coverage goal on the tuning and held-out streams."""
    parts = []
    for label, tuning in (("tuning", True), ("held out", False)):
        chosen = [(r, v) for r, v in zip(regression, ratios, strict=True)
                  if (r["stream"] in TUNING) == tuning]
        if not chosen:
            continue
        within = sum(all(abs(r["levels"][str(c)]["coverage"] - c) <= GOAL_STREAM for c in COVERAGES)
                     for r, _ in chosen)
        parts.append(f"{label}: narrower than the global interval on **{sum(v < 1.0 for _, v in chosen)} of "
                     f"{len(chosen)}**, median ratio **{np.median([v for _, v in chosen]):.3f}**, coverage "
                     f"within {GOAL_STREAM * 100:.1f} points on {within} of {len(chosen)}")
    return "On the " + "; ".join(parts) + "."


def _render_learners(learners: list[dict[str, Any]]) -> list[str]:
    rows = []
    for algorithm in LEARNERS:
        records = [r for r in learners if r["learner"] == algorithm]
        if not records:
            continue
        within = sum(all(abs(r["levels"][str(c)]["coverage"] - c) <= GOAL_STREAM for c in COVERAGES)
                     for r in records)
        windowed = [r for r in records if r["levels"]["0.9"]["worst_window_gap"] is not None]
        in_windows = sum(all(r["levels"][str(c)]["worst_window_gap"] <= GOAL_WINDOW for c in COVERAGES)
                         for r in windowed)
        ratios = [r["width_ratio"] for r in records]
        rows.append([algorithm, len(records), f"{within} of {len(records)}",
                     f"{in_windows} of {len(windowed)}",
                     f"{sum(v < 1.0 for v in ratios)} of {len(ratios)}", f"{np.median(ratios):.3f}",
                     f"{min(ratios):.3f} - {max(ratios):.3f}"])
    return ["## The other regression learners (held-out streams)", "",
            "Each preprocessed second-order learner (``learner_from_params(name, {})``), on the first "
            f"{LEARNER_T} rows of every regression stream but the tuning ones, learns with "
            "``learn_round(x, y, coverage=0.9)``; its spread is the square root of the row's leverage "
            "(80% and 95% replayed as for auto). Width: its 90% interval against its own global one (the "
            "same component without the spread: one width for every row, following the drift), that "
            "one scaled in hindsight to the coverage the local one achieved.", "",
            *markdown_table(["learner", "streams", "coverage within 1.5 points (80, 90, 95%)",
                             "every window within 5 points", "narrower than its global interval",
                             "median width ratio", "range"], rows), ""]


def _library(stamp: dict[str, Any]) -> dict[str, str]:
    return {path: blob for path, blob in stamp["blobs"].items() if path.startswith("kons/")}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, help="where intervals.md and intervals.json go")
    parser.add_argument("--streams", help="comma list of stream names (default: all)")
    parser.add_argument("--parts", default="regression,classification,learners,cost")
    parser.add_argument("--no-river", action="store_true", help="skip River's jackknife")
    parser.add_argument("--tune", action="store_true", help="print the tuning table and stop")
    parser.add_argument("--tune-learners", action="store_true",
                        help="print the other learners' tuning table (their leverage's exponent) and stop")
    parser.add_argument("--shard", default="0/1", help="i/n: run every n-th stream from the i-th")
    parser.add_argument("--merge", type=Path, nargs="*",
                        help="folders of intervals.json of shards measured on one kons: publish them as one, "
                             "stamped with the first one's provenance")
    args = parser.parse_args(argv)
    require_datasets((*REGRESSION_SETS, *CLASSIFICATION_SETS), "intervals")
    chosen = None if args.streams is None else set(args.streams.split(","))
    parts = set(args.parts.split(","))
    if args.tune:
        rows = tune([s for s in regression_streams() if s.name in TUNING])
        print("\n".join(markdown_table(["spread exponent", "step", "median width / global",
                                        "narrower", "worst stream gap", "worst window gap"], rows)))
        return 0
    if args.tune_learners:
        rows = tune_learners([s for s in regression_streams() if s.name in TUNING])
        print("\n".join(markdown_table(["learner", "exponent", "median width / global", "largest",
                                        "worst stream gap"], rows)))
        return 0
    out = results_dir(args.out, "intervals")
    command = command_line("benchmarks.intervals", argv, outputs=("--out",))
    stamp = provenance(SOURCES, ("river",))
    regression: list[dict[str, Any]] = []
    classification: list[dict[str, Any]] = []
    learners: list[dict[str, Any]] = []
    costs = None
    shards: list[dict[str, Any]] = []  # the provenance of each merged shard
    if args.merge:
        for folder in args.merge:
            shard = json.loads((folder / "intervals.json").read_text())
            shards.append(shard["provenance"])
            if _library(shard["provenance"]) != _library(shards[0]):
                parser.error(f"{folder} was measured on another kons than {args.merge[0]}")
            regression += shard["regression"]
            classification += shard["classification"]
            learners += shard.get("learners", [])
            costs = shard["cost"] or costs
            command += f" # shard: {shard['command']}"
        parts = set()
        stamp = shards[0]  # the code measured (the shards' kons is one; their harness may differ by a commit)
    index, count = (int(v) for v in args.shard.split("/"))
    if "regression" in parts:
        for stream in regression_streams()[index::count]:
            if chosen is None or stream.name in chosen:
                regression.append(run_regression(stream, not args.no_river))
                print(f"[intervals] {stream.name}: " + json.dumps(
                    {c: round(v["coverage"], 4) for c, v in regression[-1]["levels"].items()}),
                    file=sys.stderr, flush=True)
    if "learners" in parts:
        for stream in [s for s in regression_streams() if s.name not in TUNING][index::count]:
            if chosen is None or stream.name in chosen:
                for algorithm in LEARNERS:
                    learners.append(run_learner(algorithm, stream))
                print(f"[intervals] learners on {stream.name}: " + json.dumps(
                    {r["learner"]: round(r["width_ratio"], 3) for r in learners[-len(LEARNERS):]}),
                    file=sys.stderr, flush=True)
    if "classification" in parts:
        for stream in classification_streams()[index::count]:
            if chosen is None or stream.name in chosen:
                classification.append(run_classification(stream))
                print(f"[intervals] {stream.name}: " + json.dumps(
                    {c: round(v["coverage"], 4) for c, v in classification[-1]["levels"].items()}),
                    file=sys.stderr, flush=True)
    if "cost" in parts:
        costs = cost()
    record = {"command": command, "regression": regression, "classification": classification,
              "learners": learners, "cost": costs,
              "constants": {"step": STEP, "spread_exponent": SPREAD_EXPONENT}, "shards": shards}
    report = publish(out, "intervals", stamp, render(regression, classification, learners, costs, command,
                                                     stamp["commit"][:9]), record)
    print(f"intervals: {report}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
