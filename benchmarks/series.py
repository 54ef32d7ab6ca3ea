"""Real series in time order (issue 39): ``auto`` on streams read in the order they happened, against River's
defaults, River's Aggregated Mondrian Forest and the forecast "the last target", error overall and per tenth
of the stream.

Streams, all available offline (River 0.26 bundles the first three; statsmodels, the ``bench`` extra, the
next three): every row is a time step, read in its true order, features the calendar the user has:

* ``water_flow``: 1,268 hourly water flows (hour, day of week, hours since the start); bursty, a heavy
  left tail (excess kurtosis 30);
* ``trump_approval``: 1,001 daily approval ratings (the day's ordinal and five pollsters' figures);
* ``airline_passengers``: 144 monthly airline passengers, 1949-1960 (month, months since the start):
  trending and seasonal, the seasonal swing growing with the level;
* ``co2``: 2,225 weekly CO2 readings at Mauna Loa, 1958-2001, the 59 weeks without a reading left out
  (week of the year, weeks since the start): trending and seasonal;
* ``elnino``: 732 monthly sea surface temperatures, 1950-2010 (month, year): seasonal, bursty;
* ``sunspots``: 309 yearly sunspot numbers, 1700-2008 (year): cyclic, a heavy right tail (skew 0.8).

Eight short synthetic series in time order, tuning stand-ins for the held-out real ones (the tuning real
series are long and have no trend; the rules for a series' first rounds were chosen on these):

* ``trend_season_s0`` to ``_s3``: 144 monthly values of the airline passengers' character, an exponential
  trend and a season whose swing grows with it (:func:`_trend_season`);
* ``cycles_s0`` to ``_s3``: 300 yearly values of the sunspots' character, skewed cycles of 9-13 years with
  peaks of a gamma's spread (:func:`_cycles`).

And four synthetic heavy-tailed streams in no order (``delays_*``: an arrival delay whose departure delay,
a lognormal tail, carries a linear signal; issue 39's delay-like case), for the rules for heavy tails.

Split (``docs/series.md``): ``water_flow``, ``trump_approval``, the seed-0 delays and the eight synthetic
series are the TUNING streams (the drift benchmark had used the first two before); the others are HELD
OUT, the headline.

Every method predicts, then learns each row (progressive validation). Metric: the mean squared error divided
by the variance of the scored targets, over the stream and over each tenth of it (the series are shorter than
3,000 rows, so a tenth stands for the issue's 1,000-row window). Methods: ``kons.Auto()``, River's defaults as
``benchmarks/raw_regime.py`` writes them (``StandardScaler | LinearRegression``, with
``TargetStandardScaler`` around it, ``StandardScaler | KNN``, ``HoeffdingAdaptiveTree``, ``ARF``),
``forest.AMFRegressor(seed=0)``, and ``last``: the previous round's target (the first round: 0).

    python -m benchmarks.series --out benchmarks/results
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
from benchmarks.common import (
    command_line,
    machine_summary,
    markdown_table,
    method_label,
    metric_cell,
    results_dir,
)
from benchmarks.drift import STREAMS as DRIFT_STREAMS
from benchmarks.provenance import provenance, publish
from benchmarks.raw_regime import RAW_METHODS

__all__ = ["STREAMS", "Series", "main", "run_series"]

#: What the results measure, for their provenance.
SOURCES = ("kons", "benchmarks/series.py", "benchmarks/drift.py", "benchmarks/raw_regime.py",
           "benchmarks/methods.py")
#: The windows scored: tenths of the stream.
PARTS = 10
#: The issue's own window, scored too: consecutive blocks of this many rows (the last one shorter).
BLOCK = 1000
RIVER_KEYS = ("river_linear", "river_linear_tss", "river_knn", "river_hat", "river_arf")
PEERS = (*RIVER_KEYS, "river_amf", "last")


@dataclass(frozen=True)
class Series:
    name: str
    split: str  # "tuning" or "held-out"
    about: str
    build: Callable[[], tuple[np.ndarray, np.ndarray]]


def _trump() -> tuple[np.ndarray, np.ndarray]:
    from river.datasets import TrumpApproval

    rows, ys = [], []
    for x, y in TrumpApproval():
        rows.append([float(v) for v in x.values()])
        ys.append(float(y))
    return np.array(rows), np.array(ys)


def _airline() -> tuple[np.ndarray, np.ndarray]:
    from river.datasets import AirlinePassengers

    rows, ys = [], []
    for t, (x, y) in enumerate(AirlinePassengers()):
        rows.append([float(x["month"].month), float(t)])
        ys.append(float(y))
    return np.array(rows), np.array(ys)


def _co2() -> tuple[np.ndarray, np.ndarray]:
    from statsmodels.datasets import co2

    frame = co2.load_pandas().data
    weeks = np.arange(len(frame), dtype=float)
    week_of_year = np.array([float(when.isocalendar()[1]) for when in frame.index])
    y = frame["co2"].to_numpy(dtype=float)
    kept = np.isfinite(y)
    return np.column_stack([week_of_year, weeks])[kept], y[kept]


def _elnino() -> tuple[np.ndarray, np.ndarray]:
    from statsmodels.datasets import elnino

    frame = elnino.load_pandas().data
    rows, ys = [], []
    for _, year in frame.iterrows():
        for month, value in enumerate(year.to_numpy(dtype=float)[1:], start=1):
            rows.append([float(month), float(year["YEAR"])])
            ys.append(value)
    return np.array(rows), np.array(ys)


def _sunspots() -> tuple[np.ndarray, np.ndarray]:
    from statsmodels.datasets import sunspots

    frame = sunspots.load_pandas().data
    return frame[["YEAR"]].to_numpy(dtype=float), frame["SUNACTIVITY"].to_numpy(dtype=float)


def _delays(seed: int, noise: bool) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
    """Synthetic arrival delays (3,000 rows in no order): the departure delay, a lognormal tail, carries the
    signal; ``noise``: 0.95 times it plus a lognormal, with two features that say nothing, else it plus a
    normal, alone."""

    def build() -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        departure = rng.lognormal(mean=2.0, sigma=1.2 if noise else 1.0, size=3000) - 5.0
        if not noise:
            return departure[:, None], departure + rng.normal(size=3000) * 8.0 - 3.0
        X = np.column_stack([departure, rng.normal(size=3000) * 10 + 100, rng.integers(0, 24, 3000)])
        return X, 0.95 * departure + rng.lognormal(mean=1.0, sigma=1.0, size=3000) - 8.0

    return build


def _trend_season(seed: int, rows: int = 144) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
    """A synthetic monthly series of the airline passengers' character (a tuning stand-in for it): a level
    growing exponentially (0.8-1.2% a month), a season (one harmonic and half of a second, random phases)
    whose swing grows with the level (12-20% of it), lognormal noise (3%); features: month, months since
    the start."""

    def build() -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        t = np.arange(rows, dtype=float)
        phases = rng.uniform(0.0, 2.0 * np.pi, size=2)
        season = np.sin(2.0 * np.pi * t / 12.0 + phases[0]) + 0.5 * np.sin(4.0 * np.pi * t / 12.0 + phases[1])
        level = 100.0 * np.exp(rng.uniform(0.008, 0.012) * t)
        y = level * (1.0 + rng.uniform(0.12, 0.2) * season) * rng.lognormal(0.0, 0.03, size=rows)
        return np.column_stack([t % 12.0 + 1.0, t]), y

    return build


def _cycles(seed: int, rows: int = 300) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
    """A synthetic yearly series of the sunspots' character (a tuning stand-in for them): cycles of 9-13
    years, each a fast rise and a slow fall (a skewed bump) with its own peak (a gamma's, so some cycles
    are far above the others), plus normal noise; feature: the year."""

    def build() -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        y = np.zeros(rows)
        start = -float(rng.uniform(0.0, 11.0))
        while start < rows:
            period, peak = rng.uniform(9.0, 13.0), rng.gamma(4.0, 20.0)
            u = (np.arange(rows) - start) / period
            inside = (u >= 0.0) & (u < 1.0)
            y[inside] += peak * (u[inside] / 0.35) ** 2 * np.exp(2.0 * (1.0 - u[inside] / 0.35))
            start += period
        y = np.maximum(y + rng.normal(size=rows) * 6.0, 0.0)
        return np.arange(1700.0, 1700.0 + rows)[:, None], y

    return build


STREAMS = {s.name: s for s in (
    Series("water_flow", "tuning", "hourly, bursty, heavy left tail", DRIFT_STREAMS["water_flow"].build),
    Series("trump_approval", "tuning", "daily, five pollsters' figures", _trump),
    Series("airline_passengers", "held-out", "monthly, trend and growing season", _airline),
    Series("co2", "held-out", "weekly, trend and season", _co2),
    Series("elnino", "held-out", "monthly, season and bursts", _elnino),
    Series("sunspots", "held-out", "yearly, cycles, heavy right tail", _sunspots),
    Series("delays_one_s0", "tuning", "synthetic, heavy tail, the signal alone", _delays(0, False)),
    Series("delays_one_s2", "held-out", "synthetic, heavy tail, the signal alone", _delays(2, False)),
    Series("delays_noisy_s0", "tuning", "synthetic, heavy tail, lognormal noise", _delays(0, True)),
    Series("delays_noisy_s2", "held-out", "synthetic, heavy tail, lognormal noise", _delays(2, True)),
    *(Series(f"trend_season_s{seed}", "tuning", "synthetic, monthly, trend and growing season",
             _trend_season(seed)) for seed in range(4)),
    *(Series(f"cycles_s{seed}", "tuning", "synthetic, yearly, skewed cycles", _cycles(seed))
      for seed in range(4)),
)}


class _Last:
    """The forecast "the last target"."""

    def __init__(self) -> None:
        self.last = 0.0

    def step(self, x: np.ndarray, y: float) -> float:
        played, self.last = self.last, y
        return played


class _Auto:
    def __init__(self) -> None:
        self.learner = kons.Auto()

    def step(self, x: np.ndarray, y: float) -> float:
        return self.learner.learn_one(x, y)


class _Amf:
    """``forest.AMFRegressor(seed=0)`` (it predicts None before its first row: 0 then)."""

    def __init__(self) -> None:
        from river import forest

        self.model = forest.AMFRegressor(seed=0)

    def step(self, x: np.ndarray, y: float) -> float:
        features = dict(enumerate(x.tolist()))
        played = self.model.predict_one(features)
        self.model.learn_one(features, y)
        return 0.0 if played is None else float(played)


def runner(key: str) -> Any:
    if key == "auto":
        return _Auto()
    if key == "last":
        return _Last()
    if key == "river_amf":
        return _Amf()
    return RAW_METHODS[key].build(True)


def _metric(played: np.ndarray, y: np.ndarray) -> float:
    if not np.isfinite(played).all():
        return math.inf
    return float(np.mean((played - y) ** 2) / max(float(np.var(y)), 1e-300))


def tenths(n: int) -> list[tuple[int, int]]:
    edges = [round(n * k / PARTS) for k in range(PARTS + 1)]
    return list(itertools.pairwise(edges))


def blocks(n: int) -> list[tuple[int, int]]:
    edges = [*range(0, n, BLOCK), n]
    return list(itertools.pairwise(edges))


def run_series(series: Series, keys: Sequence[str]) -> dict[str, Any]:
    """Every method of ``keys`` on the series: the metric overall, by tenth and by block of
    :data:`BLOCK` rows."""
    X, y = series.build()
    spans = tenths(len(y))
    record: dict[str, Any] = {"stream": series.name, "split": series.split, "about": series.about,
                              "rows": len(y), "dim": X.shape[1], "windows": spans,
                              "blocks": blocks(len(y)), "runs": []}
    for key in keys:
        method = runner(key)
        played = np.zeros(len(y))
        start = time.process_time()
        for i in range(len(y)):
            played[i] = method.step(X[i], float(y[i]))
        seconds = time.process_time() - start
        scored = [_metric(played[a:b], y[a:b]) for a, b in spans]
        run = {"method": key, "overall": _metric(played, y), "seconds": seconds, "windows": scored,
               "blocks": [_metric(played[a:b], y[a:b]) for a, b in record["blocks"]]}
        print(f"[{series.name}] {key}: {run['overall']:.4f} tenths " + " ".join(f"{w:.3f}" for w in scored)
              + f" in {seconds:.1f}s", file=sys.stderr, flush=True)
        record["runs"].append(run)
    return record


def verdict(record: dict[str, Any]) -> dict[str, Any]:
    """Auto against the best peer (River's and "last") overall and, tenth by tenth and block by block,
    against the best of them in that tenth or block."""
    runs = {r["method"]: r for r in record["runs"]}
    auto, peers = runs["auto"], [runs[k] for k in PEERS if k in runs]
    best = min(peers, key=lambda r: r["overall"])

    def best_of(part: str) -> list[float]:
        return [min(r[part][i] for r in peers) for i in range(len(record[part]))]

    best_windows, best_blocks = best_of("windows"), best_of("blocks")
    return {"best": best["method"], "ahead_overall": auto["overall"] <= best["overall"],
            "ahead_windows": [a <= b for a, b in zip(auto["windows"], best_windows, strict=True)],
            "ahead_blocks": [a <= b for a, b in zip(auto["blocks"], best_blocks, strict=True)],
            "ratios": [a / b if b > 0 else math.inf
                       for a, b in zip(auto["windows"], best_windows, strict=True)]}


#: The methods' names in the tables, where not River's defaults' (``method_label``).
LABELS = {"auto": "kons auto", "last": "the last target", "river_amf": "River AMFRegressor"}


def render(records: list[dict[str, Any]], command: str, commit: str) -> str:
    lines = ["# Real series in time order: `auto` against River's defaults and the last target", "",
             "Generated by `benchmarks/series.py`; do not edit by hand.", "",
             f"    {command}", "",
             f"Commit {commit}. Machine: {machine_summary()}; load average "
             + " / ".join(f"{v:.2f}" for v in os.getloadavg()) + " at the end (2 shared cores: seconds are "
             "CPU time and noisy).", "",
             "Metric: MSE / variance of the scored targets (lower is better), overall and per tenth of the "
             "stream. Goal: `auto` at most the best peer's error (River's defaults, AMF, the last target) "
             "overall and in every tenth, where each tenth's best peer is the best in that tenth (stricter "
             f"than the issue's every {BLOCK:,}-row block, also counted: a block's best peer is the best in "
             "that block). Tuning "
             "streams chose the rules; the held-out ones are the headline.", ""]
    summary = [["stream", "split", "rows", "auto", "best peer (overall)", "auto / best peer by tenth",
                f"ahead: overall / tenths / {BLOCK:,}-row blocks"]]
    for split in ("held-out", "tuning"):
        for record in (r for r in records if r["split"] == split):
            runs = {r["method"]: r for r in record["runs"]}
            v = verdict(record)
            summary.append([record["stream"], split, record["rows"], metric_cell(runs["auto"]["overall"]),
                            f"{method_label(v['best'], LABELS)} {metric_cell(runs[v['best']]['overall'])}",
                            " ".join(f"{r:.2f}" for r in v["ratios"]),
                            ("yes" if v["ahead_overall"] else "no") + f" / {sum(v['ahead_windows'])} of "
                            f"{len(v['ahead_windows'])} / {sum(v['ahead_blocks'])} of "
                            f"{len(v['ahead_blocks'])}"])
    lines += ["## Summary", "", *markdown_table(summary[0], summary[1:]), ""]
    for record in records:
        head = ["method", "overall", *(f"{a}-{b}" for a, b in record["windows"]), "CPU s"]
        rows = [[method_label(r["method"], LABELS), metric_cell(r["overall"]),
                 *(f"{w:.3f}" for w in r["windows"]),
                 f"{r['seconds']:.1f}"] for r in record["runs"]]
        lines += [f"## {record['stream']} ({record['split']}; {record['about']}; {record['rows']} rows, "
                  f"{record['dim']} features)", "", *markdown_table(head, rows), ""]
    return "\n".join(lines)


def _cost_stream(rows: int, ordered: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, 8)) * 3.0 + 10.0
    y = X @ rng.normal(size=8) + rng.normal(size=rows)
    return X, (0.1 * y + np.cumsum(rng.normal(size=rows)) * 3.0) if ordered else y


def cost(rows: int = 3000, warmup: int = 600, block: int = 40) -> list[str]:
    """What the experts this benchmark's issue added (those on the last targets, the linear model of every
    row) cost an ``auto`` round: one learner with them, one without (:data:`kons.auto.grid.EXPERTS` less
    them), on the same rows (8 features, in no order and in time order), alternating blocks of ``block``
    rounds in one process, CPU time; the median of the blocks' paired ratios."""
    import statistics

    import kons.auto.grid as grid

    full = grid.EXPERTS
    added = ("target_last", "target_long_lags", "linear")
    without = tuple(kind for kind in full if kind.slots[0] not in added)
    lines = []
    for ordered in (False, True):
        X, y = _cost_stream(rows, ordered)
        learners = []
        for kinds in (full, without):  # the grid takes EXPERTS when the warm-up ends: each past it
            grid.EXPERTS = kinds
            learner = kons.Auto()
            for i in range(warmup):
                learner.learn_one(X[i], float(y[i]))
            learners.append(learner)
        grid.EXPERTS = full
        seconds: list[list[float]] = [[], []]
        for start in range(warmup, rows - block + 1, block):
            for k, learner in enumerate(learners):
                begin = time.process_time()
                for i in range(start, start + block):
                    learner.learn_one(X[i], float(y[i]))
                seconds[k].append((time.process_time() - begin) / block)
        ratios = [a / b for a, b in zip(*seconds, strict=True)]
        awake = "the last target" in learners[0].stats()["weights"]
        with_them, without_them = (statistics.median(spent) * 1e3 for spent in seconds)
        lines.append(f"{'time order' if ordered else 'no order'} (the last targets "
                     f"{'awake' if awake else 'asleep'}): {with_them:.3f} ms a round with them, "
                     f"{without_them:.3f} ms without, median paired ratio {statistics.median(ratios):.3f} "
                     f"over {len(ratios)} blocks of {block}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default=",".join(STREAMS), help="comma list of streams")
    parser.add_argument("--methods", default=",".join(("auto", *PEERS)), help="comma list: auto and peers")
    parser.add_argument("--out", type=Path, help="where series.md and series.json go (default: a temporary "
                                                  "directory)")
    parser.add_argument("--cost", action="store_true", help="print what the new experts cost a round, only")
    args = parser.parse_args(argv)
    if args.cost:
        print("\n".join(cost()))
        return 0
    names, keys = args.streams.split(","), args.methods.split(",")
    unknown = [n for n in names if n not in STREAMS] + [k for k in keys if k not in ("auto", *PEERS)]
    if unknown:
        parser.error(f"unknown stream or method: {', '.join(unknown)}")
    if "auto" not in keys or not set(PEERS) & set(keys):
        parser.error("the methods must include auto and at least one peer (the goals compare them)")
    out = results_dir(args.out, "series")
    command = command_line("benchmarks.series", argv, outputs=("--out",))
    stamp = provenance(SOURCES, ("river", "statsmodels"))
    records = [run_series(STREAMS[name], keys) for name in names]
    report = publish(out, "series", stamp, render(records, command, stamp["commit"][:9]),
                     {"command": command, "records": records})
    print(f"series: {report}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
