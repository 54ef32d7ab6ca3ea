"""The raw regime of the quality benchmark (the headline of ``docs/bench-protocol.md``).

Rows exactly as they are in the files (:func:`kons.datasets.load_dataset` with ``standardize=False``:
no z-scoring of features or targets; binary labels in {-1, +1}), order ``default_rng(0).permutation(n)``,
the first ``T`` rows scored by progressive validation. Every method runs at its defaults, written as its
users write it, and learns any scaling, width or range online:

* ``auto``: ``kons.Auto()`` (``task="classification"`` for binary sets, scored on the class it predicts,
  ``Round.predicted``; the error of its score's sign, the label before the label vote, is kept beside it
  as ``sign_metric``);
* every kons learner at ``kons.learner_from_params(name, {})`` (``{"loss": "logistic"}`` for binary
  sets), which includes the online preprocessing of :mod:`kons.preprocessing`;
* River 0.26 as a River user writes it: ``StandardScaler() | LinearRegression()`` /
  ``LogisticRegression()`` (and, for regression, inside ``TargetStandardScaler``),
  ``StandardScaler() | KNNRegressor()`` / ``KNNClassifier()``, ``HoeffdingAdaptiveTree*``, ``ARF*``,
  ``AMFRegressor()`` / ``AMFClassifier()`` (Aggregated Mondrian Forests; ``seed=0`` where it exists);
* Vowpal Wabbit at its defaults, and with ``--OjaNewton``.

Metric: mean squared error divided by the variance of the scored targets (regression; a constant at
the mean scores about 1), error rate of ``sign(prediction)`` (classification).

Every run carries its own provenance (:func:`method_provenance`): a data set's record merges runs of
different methods made at different times, and each stays valid until what *it* measures changes. A kons
method measures ``kons`` and the harness files (:data:`HARNESS`); a River or Vowpal Wabbit peer measures
the harness files, the data loader and its library's version (its code is not ours). The pages are
written from the records by :mod:`benchmarks.raw_report`, which is not measured: reformatting a page
does not make a run stale.

Run through :mod:`benchmarks.quality` (``--suite headline`` or ``holdout``: :mod:`benchmarks.raw_report`)::

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.quality --regime raw --suite headline --out benchmarks/results
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast

import numpy as np

import kons
from benchmarks.methods import KonsRunner, RiverRunner, Runner, VWRunner
from benchmarks.provenance import changed_sources, installed_version, provenance
from kons.datasets import load_dataset

__all__ = ["HARNESS", "RAW_METHODS", "RawMethod", "method_provenance", "run_raw", "select_raw_methods",
           "unmeasured_methods"]

#: The benchmark files whose change changes what a raw-regime run measures.
HARNESS = ("benchmarks/quality.py", "benchmarks/raw_regime.py", "benchmarks/methods.py")
#: Method groups that ``--methods`` accepts besides the keys (named unlike any key: ``kons`` and ``vw`` are
#: keys): kons's learners at ``{}`` other than ``auto``, River's and Vowpal Wabbit's, every peer.
GROUPS = {"learners": ("kons",), "river": ("river",), "peers": ("river", "vw")}
#: kons learners run at ``learner_from_params(name, {})`` (exact KONS only on short streams).
KONS_DEFAULTS = ("nystrom_kons", "sketched_kons", "kons", "kernel_ogd", "ons", "fd_son", "rp_son", "oja_son",
                 "adagrad", "ogd")


@dataclass(frozen=True)
class RawMethod:
    key: str
    label: str
    group: str  # "auto", "kons", "river" or "vw"
    build: Callable[[bool], Runner]  # argument: regression?
    libraries: tuple[str, ...] = ()  # the distributions a peer measures (their version, not our code)

    @property
    def sources(self) -> tuple[str, ...]:
        """The files and folders of this repository whose change changes this method's runs: all of
        ``kons`` for kons's learners; for a peer, only the data loader (``kons/datasets.py``)."""
        return (*HARNESS, "kons" if self.group in ("auto", "kons") else "kons/datasets.py")


def _kons_default(name: str) -> Callable[[bool], Runner]:
    def build(regression: bool) -> Runner:
        learner = kons.learner_from_params(name, {} if regression else {"loss": "logistic"})
        return KonsRunner(learner, kernel=kons.LEARNERS[name].uses_kernel)

    return build


class AutoRunner(KonsRunner):
    """``auto``'s rounds: a regression's play; for classes the class it predicts (``Round.predicted``, its
    label vote) as -1.0 or +1.0, and beside it the errors of the score's sign, the label before the vote
    (:attr:`sign_errors`)."""

    def __init__(self, regression: bool) -> None:
        super().__init__(kons.Auto(task="regression" if regression else "classification"), kernel=True)
        self.regression = regression
        self.sign_errors = 0

    def step(self, x: np.ndarray, y: float) -> float:
        if self.regression:
            return self.learner.learn_one(x, y)
        played = self.learner.learn_round(x, y)
        self.sign_errors += bool(np.sign(played.value) != y)
        return 0.0 if played.predicted is None else float(played.predicted)


def _auto(regression: bool) -> Runner:
    return AutoRunner(regression)


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
    # The default engine, SWINN, draws its graph from an unseeded generator (the error moved by up to 0.02
    # between runs on a drifting stream): seeded, and otherwise the default, so that runs repeat.
    engine = nb.SWINN(seed=0)
    model = nb.KNNRegressor(engine=engine) if regression else nb.KNNClassifier(engine=engine)
    return river.preprocessing.StandardScaler() | model


def _river_hat(river: Any, regression: bool) -> Any:
    tree = river.tree
    return tree.HoeffdingAdaptiveTreeRegressor(seed=0) if regression else \
        tree.HoeffdingAdaptiveTreeClassifier(seed=0)


def _river_arf(river: Any, regression: bool) -> Any:
    forest = river.forest
    return forest.ARFRegressor(seed=0) if regression else forest.ARFClassifier(seed=0)


def _river_amf(river: Any, regression: bool) -> Any:
    forest = river.forest
    return forest.AMFRegressor(seed=0) if regression else forest.AMFClassifier(seed=0)


def _methods() -> list[RawMethod]:
    methods = [RawMethod("auto", "kons auto", "auto", _auto)]
    methods += [RawMethod(n, f"kons {n}", "kons", _kons_default(n))
                for n in KONS_DEFAULTS if n in kons.LEARNERS]
    methods += [
        RawMethod("river_linear", "River StandardScaler | Linear/LogisticRegression", "river",
                  _river(_river_linear), ("river",)),
        RawMethod("river_linear_tss", "River TargetStandardScaler(StandardScaler | LinearRegression)",
                  "river", _river(_river_linear_target), ("river",)),
        RawMethod("river_knn", "River StandardScaler | KNN", "river", _river(_river_knn), ("river",)),
        RawMethod("river_hat", "River HoeffdingAdaptiveTree", "river", _river(_river_hat), ("river",)),
        RawMethod("river_arf", "River ARF", "river", _river(_river_arf), ("river",)),
        RawMethod("river_amf", "River AMF", "river", _river(_river_amf), ("river",)),
        RawMethod("vw", "VW", "vw", lambda regression: VWRunner("", regression), ("vowpalwabbit",)),
        RawMethod("vw_oja", "VW --OjaNewton", "vw", lambda regression: VWRunner("--OjaNewton", regression),
                  ("vowpalwabbit",)),
    ]
    return methods


RAW_METHODS = {m.key: m for m in _methods()}


def select_raw_methods(spec: str) -> list[str]:
    """The method keys named by a comma list of keys and groups (``all``, ``learners``, ``river``,
    ``peers``), in :data:`RAW_METHODS` order."""
    chosen: set[str] = set()
    for token in (t.strip() for t in spec.split(",") if t.strip()):
        if token == "all":
            chosen.update(RAW_METHODS)
        elif token in GROUPS:
            chosen.update(k for k, m in RAW_METHODS.items() if m.group in GROUPS[token])
        elif token in RAW_METHODS:
            chosen.add(token)
        else:
            raise SystemExit(f"unknown raw-regime method {token!r}; choose from all, {', '.join(GROUPS)}, "
                             f"stale or {', '.join(RAW_METHODS)}")
    return [k for k in RAW_METHODS if k in chosen]


def unmeasured_methods(record: Mapping[str, Any]) -> list[str]:
    """The methods of a data set's record whose run has no provenance or measured code that changed since:
    what ``--methods stale`` runs again."""
    return [run["method"] for run in record["runs"] if run["method"] in RAW_METHODS
            and ("provenance" not in run or changed_sources(run["provenance"]))]


def method_provenance(key: str) -> dict[str, Any]:
    """The provenance of a run of ``key`` starting now (the code imported now is the code that runs)."""
    method = RAW_METHODS[key]
    return provenance(method.sources, method.libraries)


def missing_library(key: str) -> str | None:
    """The library a peer needs and that is not installed here (None when nothing is missing)."""
    return next((name for name in RAW_METHODS[key].libraries if installed_version(name) is None), None)


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
        auto = cast(AutoRunner, runner)  # the auto group runs kons's Auto
        stats = auto.learner.stats()
        extra = {"leader": stats["leader"], "weights": stats["weights"], "changes": stats["changes"]}
        if not regression:  # the error of the label before the vote, on the same rounds
            extra["sign_metric"] = auto.sign_errors / len(y)
    runner.close()
    if regression:
        losses = (preds - y) ** 2 / max(float(np.var(y)), 1e-300)
    else:
        losses = (np.sign(preds) != y).astype(float)
    metric = math.inf if error or not np.isfinite(losses).all() else float(losses.mean())
    return {"method": method.key, "metric": metric, "seconds": seconds, "error": error,
            "sizes": sizes, **extra}


def run_raw(name: str, keys: Sequence[str], T: int, about: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Every method in ``keys`` on the first ``T`` raw rows of ``name``; the record saved as JSON. Each run
    carries ``about[key]`` (its provenance, command and machine)."""
    data = load_dataset(name, T, standardize=False)
    regression = data.task == "regression"
    record: dict[str, Any] = {"dataset": name, "task": data.task, "rows": len(data.y), "dim": data.X.shape[1],
                              "runs": []}
    for key in keys:
        run = {**_score(RAW_METHODS[key], data.X, data.y, regression), **about[key]}
        print(f"[{name}] {key}: {run['metric']:.4f} in {run['seconds']:.1f}s"
              + (f" ({run['error']})" if run["error"] else ""), file=sys.stderr, flush=True)
        record["runs"].append(run)
    return record
