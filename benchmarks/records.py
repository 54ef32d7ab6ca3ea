"""Records as features: the cost of an ``auto`` round on records, and quality on record-shaped raw streams.

Two parts, both written to ``records.md``:

* **Cost.** ``auto`` plays the same rows as arrays, as records (width set by the first record:
  ``WIDTH_PER_KEY`` coordinates a key, at least 32) and as records in a learner given a tight ``dim``
  (the record's own coordinates plus its hash buckets), in alternating blocks of rounds so that each sees
  the same machine load; the report gives the median time per round and the median of the per-block
  ratios to arrays.
* **Quality.** Record-shaped raw streams built from the shared data's CSVs with named columns: 10% of
  the cells blanked at random to ``None`` (kept, not dropped), a categorical column as strings (abalone's
  sex, housing's RAD index, a numeric column cut into decile labels for cpu_act and magic04, a column of
  5 random categories added to space_ga, 20 added to abalone as the stream ``abalone+noise``), rows
  in the protocol's order (``docs/bench-protocol.md``). Each
  learner plays every row once, predicting before it learns (progressive validation): ``auto`` and
  ``ons`` at their defaults on the records, against River's pipeline for records as its documentation
  writes it: ``Select(numeric) | StatImputer(mean) | StandardScaler`` plus ``Select(categorical) |
  OneHotEncoder`` into ``LinearRegression`` (also inside ``TargetStandardScaler``, as the raw regime
  runs it) or ``LogisticRegression``, and into ``AMFRegressor`` / ``AMFClassifier`` (``seed=0``).
  Classification scores the class each method predicts (``auto``: ``Round.predicted``, its label vote).
  For reference, ``auto`` on the same rows before blanking and
  encoding (complete arrays, the categorical column as its numbers) shows what the gaps cost.
  Regression: MSE relative to the variance of the target; classification: error rate.
* **A record's categoricals.** ``auto`` on each stream's records against the same records without the
  categorical name (issue 39: a record's categoricals never make ``auto`` worse than the same record
  without them by more than noise), with a 95% interval of the ratio from a paired block bootstrap. The
  streams above tuned the rules for categorical names (``docs/auto.md``); five more are held out:
  cadata (latitude in deciles), power_plant (AT in deciles), kin8nm (20 random categories added),
  cpusmall (freemem in deciles), bodyfat (Age in deciles).

Run::

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.records --out benchmarks/results

(``--parts categoricals --streams space_ga,kin8nm`` runs one part on chosen streams.)
"""

from __future__ import annotations

import argparse
import csv
import gzip
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import kons
from benchmarks import registry
from benchmarks.common import command_line, git_commit, machine_summary, markdown_table, require_datasets
from benchmarks.provenance import provenance, publish
from kons.datasets import data_dir
from kons.records import MIN_WIDTH, WIDTH_PER_KEY

Record = dict[str, Any]
#: name -> (task, the column made categorical, how: "code" (keep its labels), "deciles", or "noise:K" (a
#: column of K categories drawn at random, added)); the streams that tuned the rules for categorical names
STREAMS = {
    "abalone": ("regression", "sex", "code"),
    "housing": ("regression", "RAD", "code"),
    "cpu_act": ("regression", "runqsz", "deciles"),
    "magic04": ("classification", "FAlpha", "deciles"),
    "space_ga": ("regression", "noise", "noise:5"),
    # (added for issue 39's noise categorical of many levels: held-out kin8nm's 20 cost more than 5 do)
    "abalone+noise": ("regression", "noise", "noise:20"),
}
#: The streams held out from that tuning (only ``auto`` with and without the categorical name is run).
HELD_OUT = {
    "cadata": ("regression", "latitude", "deciles"),
    "power_plant": ("regression", "AT", "deciles"),
    "kin8nm": ("regression", "noise", "noise:20"),
    "cpusmall": ("regression", "freemem", "deciles"),
    "bodyfat": ("regression", "Age", "deciles"),
}
BLANKED = 0.1
#: Rounds per block of the paired block bootstrap (at most; at least MIN_BLOCKS blocks), and its resamples.
BOOTSTRAP_BLOCK = 100
MIN_BLOCKS = 20
BOOTSTRAP_RESAMPLES = 2000


def _columns(name: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The named columns and the target of ``name``, rows in the protocol's order
    (``default_rng(0).permutation(n)``, ``docs/bench-protocol.md``)."""
    with gzip.open(data_dir() / f"{name}.csv.gz", "rt") as f:
        rows = list(csv.reader(f))
    header, values = rows[0], np.array(rows[1:], dtype=np.float64)
    values = values[np.random.default_rng(0).permutation(len(values))]
    return header[:-1], values[:, :-1], values[:, -1]


def record_stream(name: str, n: int, seed: int = 0
                  ) -> tuple[list[Record], np.ndarray, list[str], list[str], np.ndarray]:
    """The first ``n`` rows of ``name`` as records (see the module docstring), their targets, the
    numeric and categorical names, and the rows as they were (complete, all numbers)."""
    _, column, how = {**STREAMS, **HELD_OUT}[name]
    header, X, y = _columns(name.partition("+")[0])  # ("abalone+noise": abalone's rows)
    X, y = X[:n], y[:n]
    if how.startswith("noise:"):  # a name that says nothing of the target
        codes = np.random.default_rng(seed + 1).integers(0, int(how.split(":")[1]), len(y))
        labels = [f"{column}={code}" for code in codes]
        X_all = np.column_stack([X, codes])
        header_all = [*header, column]
    else:
        j = header.index(column)
        if how == "deciles":
            edges = np.quantile(X[:, j], np.linspace(0.1, 0.9, 9))
            labels = [f"{column}_q{int(k)}" for k in np.searchsorted(edges, X[:, j])]
        else:
            labels = [f"{column}={value:g}" for value in X[:, j]]
        X_all, header_all = X, header
    j = header_all.index(column)
    rng = np.random.default_rng(seed)
    blank = rng.random(X_all.shape) < BLANKED
    records = []
    for i in range(len(y)):
        record: Record = {h: None if blank[i, k] else float(X_all[i, k])
                          for k, h in enumerate(header_all) if k != j}
        record[column] = None if blank[i, j] else labels[i]
        records.append(record)
    numeric = [h for h in header_all if h != column]
    return records, y, numeric, [column], X


# ----------------------------------------------------------------------------------------- quality
def _river_features(numeric: list[str], categorical: list[str]) -> Any:
    from river import compose, preprocessing, stats

    imputer = preprocessing.StatImputer(*[(n, stats.Mean()) for n in numeric])  # type: ignore[no-untyped-call]
    return (compose.Select(*numeric) | imputer | preprocessing.StandardScaler()) + \
        (compose.Select(*categorical) | preprocessing.OneHotEncoder())


def _river(numeric: list[str], categorical: list[str], regression: bool, target_scaled: bool) -> Any:
    from river import linear_model, preprocessing

    features = _river_features(numeric, categorical)
    if not regression:
        return features | linear_model.LogisticRegression()
    model = features | linear_model.LinearRegression()
    return preprocessing.TargetStandardScaler(regressor=model) if target_scaled else model


def _river_amf(numeric: list[str], categorical: list[str], regression: bool) -> Any:
    """The Aggregated Mondrian Forest at its defaults behind the same imputation and encoding."""
    from river import forest

    model = forest.AMFRegressor(seed=0) if regression else forest.AMFClassifier(seed=0)
    return _river_features(numeric, categorical) | model


def _play_kons(learner: kons.Learner, records: list[Record], y: np.ndarray, regression: bool) -> np.ndarray:
    """The plays; for ``auto``'s classes +1 or -1 by the class predicted (``Round.predicted``: its label
    vote)."""
    if regression or not learner.gives_class_probabilities:
        labels = y if regression else (y > 0.5)
        return np.array([learner.learn_one(r, t) for r, t in zip(records, labels, strict=True)])
    return np.array([1.0 if learner.learn_round(r, bool(t > 0.5)).predicted else -1.0
                     for r, t in zip(records, y, strict=True)])


def _play_river(model: Any, records: list[Record], y: np.ndarray, regression: bool) -> np.ndarray:
    played = []
    for record, target in zip(records, y, strict=True):
        if regression:
            prediction = model.predict_one(record)  # (River's AMF says None before its first row)
            played.append(0.0 if prediction is None else float(prediction))
            model.learn_one(record, float(target))
        else:
            proba = model.predict_proba_one(record)
            played.append(proba.get(True, 0.0) - proba.get(False, 0.0))  # the sign is the class
            model.learn_one(record, bool(target > 0.5))
    return np.array(played)


def _score(played: np.ndarray, y: np.ndarray, regression: bool) -> float:
    if regression:
        return float(np.mean((played - y) ** 2) / np.var(y))
    return float(np.mean((played > 0) != (y > 0.5)))


def _methods(task: str, records: list[Record], complete: np.ndarray, y: np.ndarray, numeric: list[str],
             categorical: list[str]) -> dict[str, Callable[[], np.ndarray]]:
    """Each method's run over one stream (its plays)."""
    regression = task == "regression"
    ons = {} if regression else {"loss": "logistic"}
    methods: dict[str, Callable[[], np.ndarray]] = {
        "auto": lambda: _play_kons(kons.Auto(task=task), records, y, regression),
        "ons": lambda: _play_kons(kons.learner_from_params("ons", ons), records, y, regression),
        "River linear": lambda: _play_river(_river(numeric, categorical, regression, False), records, y,
                                            regression),
    }
    if regression:
        methods["River TargetStandardScaler(linear)"] = lambda: _play_river(
            _river(numeric, categorical, regression, True), records, y, regression)
    methods["River AMF"] = lambda: _play_river(_river_amf(numeric, categorical, regression), records, y,
                                               regression)
    methods["(auto on the complete rows as arrays)"] = lambda: _play_kons(
        kons.Auto(task=task), list(complete), y, regression)
    return methods


def quality(n: int, only: set[str] | None = None) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for name, (task, column, how) in STREAMS.items():
        if only is not None and name not in only:
            continue
        records, y, numeric, categorical, complete = record_stream(name, n)
        regression = task == "regression"
        scores = {}
        for method, play in _methods(task, records, complete, y, numeric, categorical).items():
            start = time.perf_counter()
            played = play()
            scores[method] = (_score(played, y, regression), (time.perf_counter() - start) / len(y))
        best_river = min(v[0] for k, v in scores.items() if k.startswith("River"))
        for method, (score, seconds) in scores.items():
            rows.append((name, f"{len(y)} x {len(numeric) + 1} ({column}: {how})",
                         "relative MSE" if regression else "error rate", method, f"{score:.4f}",
                         f"{score / best_river:.2f}", f"{seconds * 1e6:.0f}"))
            print(*rows[-1], flush=True)
    return rows


# ----------------------------------------------------------------------------------------- categoricals
def _losses(played: np.ndarray, y: np.ndarray, regression: bool) -> np.ndarray:
    """Each round's loss as :func:`_score` averages it (squared error, or an error of the class)."""
    losses: np.ndarray = (played - y) ** 2 if regression else ((played > 0) != (y > 0.5)).astype(np.float64)
    return losses


def paired_block_interval(with_losses: np.ndarray, without_losses: np.ndarray) -> tuple[float, float]:
    """A 95% interval of ``sum(with) / sum(without)`` by a paired block bootstrap: blocks of
    :data:`BOOTSTRAP_BLOCK` consecutive rounds (the losses of nearby rounds are not independent; shorter
    on a stream of fewer than :data:`MIN_BLOCKS` such blocks), the same blocks drawn for both (the rows
    are the same)."""
    size = max(1, min(BOOTSTRAP_BLOCK, len(with_losses) // MIN_BLOCKS))
    blocks = len(with_losses) // size
    a = with_losses[: blocks * size].reshape(blocks, size).sum(axis=1)
    b = without_losses[: blocks * size].reshape(blocks, size).sum(axis=1)
    drawn = np.random.default_rng(0).integers(0, blocks, (BOOTSTRAP_RESAMPLES, blocks))
    ratios = a[drawn].sum(axis=1) / b[drawn].sum(axis=1)
    low, high = np.quantile(ratios, [0.025, 0.975])
    return float(low), float(high)


def categoricals(n: int, only: set[str] | None = None) -> list[tuple[str, ...]]:
    """``auto`` on each stream's records with and without its categorical name."""
    rows: list[tuple[str, ...]] = []
    for split, streams in (("tuning", STREAMS), ("held-out", HELD_OUT)):
        for name, (task, column, how) in streams.items():
            if only is not None and name not in only:
                continue
            records, y, _, _, _ = record_stream(name, n)
            regression = task == "regression"
            without = [{k: v for k, v in record.items() if k != column} for record in records]
            losses = [_losses(_play_kons(kons.Auto(task=task), rows_, y, regression), y, regression)
                      for rows_ in (records, without)]
            scale = float(np.var(y)) if regression else 1.0
            low, high = paired_block_interval(*losses)
            rows.append((name, split, f"{column} ({how})", f"{losses[0].mean() / scale:.4f}",
                         f"{losses[1].mean() / scale:.4f}", f"{losses[0].sum() / losses[1].sum():.3f}",
                         f"[{low:.3f}, {high:.3f}]"))
            print(*rows[-1], flush=True)
    return rows


# ----------------------------------------------------------------------------------------- cost
def cost(rounds: int, blocks: int) -> tuple[list[tuple[str, ...]], int]:
    """Seconds per round of ``auto`` on arrays, records (default width) and records (tight ``dim``)."""
    header, X, y = _columns("abalone")
    n = rounds * blocks
    X, y = X[:n], y[:n]
    # the same rows, with the sex as a string instead of its code
    records: list[Record] = [{h: f"sex={v:g}" if h == "sex" else float(v)
                              for h, v in zip(header, row, strict=True)} for row in X]
    default_width = max(MIN_WIDTH, WIDTH_PER_KEY * len(header))
    tight = (len(header) - 1) + 3 + 1  # 7 numbers, 3 sexes and the one hash bucket of a width of 11
    variants: dict[str, tuple[kons.Learner, list[Any]]] = {
        "arrays (d = 8)": (kons.Auto(), list(X)),
        f"records, default width ({default_width})": (kons.Auto(), records),
        f"records, dim = {tight}": (kons.Auto(dim=tight), records),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    for block in range(blocks):
        rows = slice(block * rounds, (block + 1) * rounds)
        order = list(variants) if block % 2 == 0 else list(reversed(variants))
        for key in order:
            learner, inputs = variants[key]
            start = time.perf_counter()
            for x, target in zip(inputs[rows], y[rows], strict=True):
                learner.learn_one(x, target)
            times[key].append((time.perf_counter() - start) / rounds)
    base = np.array(times["arrays (d = 8)"])
    table: list[tuple[str, ...]] = []
    for key, measured in times.items():
        warm = np.array(measured)[1:]  # the first block holds the warm-up and the kernel bases' growth
        table.append((key, f"{np.median(warm) * 1e6:.0f}", f"{np.median(warm / base[1:]):.2f}"))
        print(*table[-1], flush=True)
    return table, default_width


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=3000, help="rows of each quality stream (at most)")
    parser.add_argument("--rounds", type=int, default=100, help="rounds per cost block")
    parser.add_argument("--blocks", type=int, default=12, help="cost blocks per variant (alternated)")
    parser.add_argument("--out", type=Path, default=None, help="write records.md there")
    parser.add_argument("--parts", default="cost,quality,categoricals",
                        help="comma-separated parts to run (cost, quality, categoricals); the others' tables "
                             "are left empty")
    parser.add_argument("--streams", default=None,
                        help="comma-separated streams of the quality and categorical parts (default: all)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    only = None if args.streams is None else set(args.streams.split(","))
    unknown = (parts - {"cost", "quality", "categoricals"}) | (only or set()) - {*STREAMS, *HELD_OUT}
    if unknown:
        parser.error(f"unknown parts or streams: {', '.join(sorted(unknown))}")
    require_datasets({name.partition("+")[0] for name in {**STREAMS, **HELD_OUT}}, "records")
    commit = git_commit()
    stamp = provenance(registry.sources_of("records.md") or ())  # the code imported now is what runs
    load_before = os.getloadavg()[0]
    cost_rows, default_width = (cost(args.rounds, args.blocks) if "cost" in parts
                                 else ([], max(MIN_WIDTH, WIDTH_PER_KEY * len(_columns("abalone")[0]))))
    quality_rows = quality(args.rows, only) if "quality" in parts else []
    categorical_rows = categoricals(args.rows, only) if "categoricals" in parts else []
    load = f"1-minute load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    lines = [
        "# Records as features: cost and quality",
        "",
        f"`{command_line('benchmarks.records', outputs=['--out'])}` at {commit}; {machine_summary()}; {load} "
        "(a shared machine: the ratios, measured side by side, are what to read).",
        "Written by `benchmarks/records.py`; do not edit by hand.",
        "",
        "## Cost of a round: `auto` on the same rows as arrays and as records",
        "",
        f"abalone's first {args.rounds * args.blocks} rows, {args.blocks} blocks of {args.rounds} rounds per "
        "variant, alternated; medians over the blocks after the first (which holds the warm-up), and the "
        "median of the per-block ratios to arrays. The records are the same rows with the sex as a string "
        f"(one-hot: 3 coordinates instead of 1); the default width is {default_width} coordinates "
        f"({WIDTH_PER_KEY} a key, at least {MIN_WIDTH}), of which {default_width // 8} are hash buckets.",
        "",
        *markdown_table(["variant", "us/round", "ratio to arrays"], cost_rows, "lrr"),
        "",
        "## Quality on record-shaped raw streams (progressive validation)",
        "",
        f"Each stream: its first rows (at most {args.rows}), {BLANKED:.0%} of the cells blanked to None at "
        "random, one column as category strings; nothing dropped. `vs best River` is the score over the "
        "best River pipeline's (below 1: better). us/round includes predicting and learning.",
        "",
        *markdown_table(["stream", "rows x keys", "metric", "method", "score", "vs best River", "us/round"],
                        quality_rows, "lllllrr"),
        "",
        "## A record's categoricals: `auto` with them against without",
        "",
        f"The same streams' records (at most {args.rows} rows) with the categorical name and without it "
        "(the name dropped from every record), `auto` at its defaults; the score as above, their ratio, and "
        f"a 95% interval of the ratio from a paired block bootstrap (blocks of {BOOTSTRAP_BLOCK} rounds, at "
        f"least {MIN_BLOCKS} blocks, "
        f"{BOOTSTRAP_RESAMPLES} resamples). The tuning streams chose the rules for categorical names "
        "(`docs/auto.md`); the held-out ones played no part in it, but for kin8nm's noise name: the kernel "
        "member on the wide numbers was adopted as an invariant of a record's names after its figures on "
        "kin8nm had been seen, so they are not an independent test of it (docs/auto-log.md, \"A "
        "systematic tuning set for item 5 (session 22)\").",
        "",
        *markdown_table(["stream", "split", "categorical", "with", "without", "with / without",
                         "95% interval"], categorical_rows, "lllrrrr"),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        publish(args.out, "records", stamp, text)


if __name__ == "__main__":
    main()
