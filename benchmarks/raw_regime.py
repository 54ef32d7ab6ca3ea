"""The raw regime of the quality benchmark (the headline of ``docs/bench-protocol.md``).

Rows exactly as they are in the files (:func:`kons.datasets.load_dataset` with ``standardize=False``:
no z-scoring of features or targets; binary labels in {-1, +1}), order ``default_rng(0).permutation(n)``,
the first ``T`` rows scored by progressive validation. Every method runs at its defaults, written as its
users write it, and learns any scaling, width or range online:

* ``auto``: ``kons.Auto()`` (``task="classification"`` for binary sets);
* every kons learner at ``kons.learner_from_params(name, {})`` (``{"loss": "logistic"}`` for binary
  sets), which includes the online preprocessing of :mod:`kons.preprocessing`;
* River 0.26 as a River user writes it: ``StandardScaler() | LinearRegression()`` /
  ``LogisticRegression()`` (and, for regression, inside ``TargetStandardScaler``),
  ``StandardScaler() | KNNRegressor()`` / ``KNNClassifier()``, ``HoeffdingAdaptiveTree*``, ``ARF*``
  (``seed=0`` where it exists);
* Vowpal Wabbit at its defaults, and with ``--OjaNewton``.

Metric: mean squared error divided by the variance of the scored targets (regression; a constant at
the mean scores about 1), error rate of ``sign(prediction)`` (classification).

Run through :mod:`benchmarks.quality`::

    python -m benchmarks.quality --regime raw --T 5000 --out benchmarks/results
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

import kons
from benchmarks.methods import KonsRunner, RiverRunner, Runner, VWRunner
from kons.datasets import load_dataset

__all__ = ["RAW_METHODS", "run_raw", "write_raw_report"]

#: Sub-directory of ``--out`` with the per-data-set records of the raw regime.
RAW_REGIME_DIR = "quality_raw_regime"
#: kons learners run at ``learner_from_params(name, {})`` (exact KONS only on short streams).
KONS_DEFAULTS = ("nystrom_kons", "sketched_kons", "kons", "kernel_ogd", "ons", "fd_son", "rp_son", "oja_son",
                 "adagrad", "ogd")


@dataclass(frozen=True)
class RawMethod:
    key: str
    label: str
    group: str  # "auto", "kons", "river" or "vw"
    build: Callable[[bool], Runner]  # argument: regression?


def _kons_default(name: str) -> Callable[[bool], Runner]:
    def build(regression: bool) -> Runner:
        learner = kons.learner_from_params(name, {} if regression else {"loss": "logistic"})
        return KonsRunner(learner, kernel=kons.LEARNERS[name].uses_kernel)

    return build


def _auto(regression: bool) -> Runner:
    return KonsRunner(kons.Auto(task="regression" if regression else "classification"), kernel=True)


def _river(make: Callable[[Any, bool], Any]) -> Callable[[bool], Runner]:
    def build(regression: bool) -> Runner:
        from river import forest, linear_model, neighbors, preprocessing, tree

        river = SimpleNamespace(forest=forest, linear_model=linear_model, neighbors=neighbors,
                                preprocessing=preprocessing, tree=tree)
        return RiverRunner(make(river, regression), regression)

    return build


def _river_linear(river: Any, regression: bool) -> Any:
    pp, lm = river.preprocessing, river.linear_model
    return pp.StandardScaler() | (lm.LinearRegression() if regression else lm.LogisticRegression())


def _river_linear_target(river: Any, regression: bool) -> Any:
    pp, lm = river.preprocessing, river.linear_model
    if not regression:  # the target scaler is for regression: the same pipeline as river_linear
        return _river_linear(river, regression)
    return pp.TargetStandardScaler(regressor=pp.StandardScaler() | lm.LinearRegression())


def _river_knn(river: Any, regression: bool) -> Any:
    nb = river.neighbors
    model = nb.KNNRegressor() if regression else nb.KNNClassifier()
    return river.preprocessing.StandardScaler() | model


def _river_hat(river: Any, regression: bool) -> Any:
    tree = river.tree
    return tree.HoeffdingAdaptiveTreeRegressor(seed=0) if regression else \
        tree.HoeffdingAdaptiveTreeClassifier(seed=0)


def _river_arf(river: Any, regression: bool) -> Any:
    forest = river.forest
    return forest.ARFRegressor(seed=0) if regression else forest.ARFClassifier(seed=0)


def _methods() -> list[RawMethod]:
    methods = [RawMethod("auto", "kons auto", "auto", _auto)]
    methods += [RawMethod(n, f"kons {n}", "kons", _kons_default(n))
                for n in KONS_DEFAULTS if n in kons.LEARNERS]
    methods += [
        RawMethod("river_linear", "River StandardScaler | Linear/LogisticRegression", "river",
                  _river(_river_linear)),
        RawMethod("river_linear_tss", "River TargetStandardScaler(StandardScaler | LinearRegression)",
                  "river", _river(_river_linear_target)),
        RawMethod("river_knn", "River StandardScaler | KNN", "river", _river(_river_knn)),
        RawMethod("river_hat", "River HoeffdingAdaptiveTree", "river", _river(_river_hat)),
        RawMethod("river_arf", "River ARF", "river", _river(_river_arf)),
        RawMethod("vw", "VW", "vw", lambda regression: VWRunner("", regression)),
        RawMethod("vw_oja", "VW --OjaNewton", "vw", lambda regression: VWRunner("--OjaNewton", regression)),
    ]
    return methods


RAW_METHODS = {m.key: m for m in _methods()}


def _score(method: RawMethod, X: np.ndarray, y: np.ndarray, regression: bool) -> dict[str, Any]:
    preds = np.zeros(len(y))
    error = None
    runner = method.build(regression)
    start = time.perf_counter()
    try:
        for i in range(len(y)):
            preds[i] = runner.step(X[i], float(y[i]))
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - start
    sizes = runner.sizes() if error is None else None
    extra = {}
    if method.group == "auto" and error is None:
        stats = runner.learner.stats()
        extra = {"leader": stats["leader"], "weights": stats["weights"]}
    runner.close()
    if regression:
        losses = (preds - y) ** 2 / max(float(np.var(y)), 1e-300)
    else:
        losses = (np.sign(preds) != y).astype(float)
    metric = math.inf if error or not np.isfinite(losses).all() else float(losses.mean())
    return {"method": method.key, "metric": metric, "seconds": seconds, "error": error,
            "sizes": sizes, **extra}


def run_raw(name: str, keys: Sequence[str], T: int) -> dict[str, Any]:
    """Every method in ``keys`` on the first ``T`` raw rows of ``name``; the record saved as JSON."""
    data = load_dataset(name, T, standardize=False)
    regression = data.task == "regression"
    record: dict[str, Any] = {"dataset": name, "task": data.task, "rows": len(data.y), "dim": data.X.shape[1],
                              "runs": []}
    for key in keys:
        run = _score(RAW_METHODS[key], data.X, data.y, regression)
        print(f"[{name}] {key}: {run['metric']:.4f} in {run['seconds']:.1f}s"
              + (f" ({run['error']})" if run["error"] else ""), file=sys.stderr, flush=True)
        record["runs"].append(run)
    return record


def _cell_label(key: str) -> str:
    return RAW_METHODS[key].label.replace("|", "\\|")  # River's pipe operator inside a table cell


def _lowest(runs: dict[str, dict[str, Any]], keys: Sequence[str]) -> dict[str, Any] | None:
    return min((runs[k] for k in keys if k in runs), key=lambda r: r["metric"], default=None)


def _median(values: list[float]) -> float:
    return float(np.median(values)) if values else math.nan


def _fmt(value: float) -> str:
    return "failed" if not math.isfinite(value) else f"{value:.4f}" if value < 10 else f"{value:.3g}"


def write_raw_report(out: Path, order: Sequence[str]) -> Path:
    """``out/quality_raw_regime.md`` from every record in ``out/quality_raw_regime/``."""
    records = [json.loads(p.read_text()) for p in sorted((out / RAW_REGIME_DIR).glob("*.json"))]
    records.sort(key=lambda r: order.index(r["dataset"]) if r["dataset"] in order else 99)
    keys = [k for k in RAW_METHODS if any(run["method"] == k for r in records for run in r["runs"])]
    peers = [k for k in keys if RAW_METHODS[k].group in ("river", "vw")]
    kons_keys = [k for k in keys if RAW_METHODS[k].group == "kons"]
    head = ["| data set | task | auto | best kons learner at `{}` | best peer at defaults | auto wins | "
            "auto vs best peer | auto leader | seconds (auto / all methods) |", "|---|" * 1 + "---|" * 8]
    wins, gaps, kons_wins = 0, [], 0
    for rec in records:
        runs = {r["method"]: r for r in rec["runs"]}
        finite = {k: r for k, r in runs.items() if math.isfinite(r["metric"])}
        peer = _lowest(finite, peers)
        best_kons = _lowest(finite, kons_keys)
        auto = runs.get("auto")
        if peer is None or auto is None:
            continue
        win = auto["metric"] < peer["metric"]
        wins += win
        kons_wins += best_kons is not None and best_kons["metric"] < peer["metric"]
        gap = (peer["metric"] - auto["metric"]) / peer["metric"] if peer["metric"] else 0.0
        gaps.append(gap)
        total = sum(r["seconds"] for r in rec["runs"])
        kons_cell = "-" if best_kons is None else f"{best_kons['method']} {_fmt(best_kons['metric'])}"
        peer_cell = f"{_cell_label(peer['method'])} {_fmt(peer['metric'])}"
        head.append(f"| {rec['dataset']} | {rec['task']} | {_fmt(auto['metric'])} | {kons_cell} | "
                    f"{peer_cell} | "
                    f"{'yes' if win else 'no'} | {100 * gap:+.1f}% | {auto.get('leader')} | "
                    f"{auto['seconds']:.1f} / {total:.0f} |")
    summary = (f"`auto` at defaults beats the best River/VW default on **{wins} of {len(gaps)}** raw data "
               f"sets; median relative gap {100 * _median(gaps):+.1f}% (positive: auto has the lower error). "
               f"The best kons learner at `{{}}` (preprocessed) beats it on {kons_wins} of {len(gaps)}.")
    table = ["| method | " + " | ".join(r["dataset"] for r in records) + " |",
             "|---|" + "---|" * len(records)]
    for key in keys:
        cells = []
        for rec in records:
            run = next((r for r in rec["runs"] if r["method"] == key), None)
            cells.append("-" if run is None else f"{_fmt(run['metric'])} ({run['seconds']:.1f} s)")
        table.append(f"| {_cell_label(key)} | " + " | ".join(cells) + " |")
    commands = sorted({r.get("command", "") for r in records})
    lines = ["# Learning quality in the raw regime: defaults for everyone (progressive validation)", "",
             "Generated by `benchmarks/raw_regime.py` from `quality_raw_regime/*.json`; do not edit by hand.",
             "", *(f"    {c}" for c in commands), "",
             "Machine: " + "; ".join(sorted({r.get("machine", "") for r in records})), "",
             "**Caveat:** 2 shared cores with other jobs running; seconds are wall time and noisy.", "",
             __doc__.split("\n\n", 1)[1].split("Run through")[0].strip(), "",
             "## Headline", "", summary, "", *head, "",
             "## Every method: metric (seconds for the stream)", "",
             "Regression: MSE / variance of the scored targets; classification: error rate.", "", *table, ""]
    path = out / "quality_raw_regime.md"
    path.write_text("\n".join(lines))
    return path
