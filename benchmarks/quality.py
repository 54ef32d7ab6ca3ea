"""Learning quality and cost of kons against online peers, by progressive validation.

Protocol (``docs/bench-protocol.md``): every method sees the same stream from
:func:`kons.datasets.load_dataset` (z-scored features and regression targets, labels in {-1, +1}, order
``default_rng(0).permutation(n)``); each row is first predicted, then learned. Metric: mean squared
error (regression, z-scored units) or the error rate of ``sign(prediction)`` (classification; a
prediction of exactly 0 counts as an error). Seconds are the wall time of the whole stream, including
each library's per-row input conversion.

Rows: the first ``T`` rows of the permuted stream are scored; rows ``T .. T + 2000`` are the tuning rows,
never scored. A data set with fewer than ``T + 2000`` rows keeps ``min(2000, n // 3)`` rows for tuning and
scores the ``n - tune`` rows before them.

Two columns per method:

* ``default``: kons learners use the default rule of :mod:`benchmarks.methods` (RBF width from the
  median distance of the first 500 rows, eta from the loss curvature, C from the z-scored target range);
  peers use their library defaults (River ``seed=0``).
* ``tuned``: each method with hyper-parameters tries the same number (9, the default included) of
  configurations on the tuning rows only, by progressive validation there; the best one is then run
  on the scored rows. Grids are in :mod:`benchmarks.methods`.

scikit-learn's batch ``KernelRidge`` (default-rule RBF, ``alpha = 1``) fitted on all scored rows and
scored on the same rows is an in-sample *offline reference*, not an online peer.

Raw results go to ``OUT/quality_raw/<data set>.json``; the report (``OUT/quality.md`` and PNGs) is rebuilt
from every raw file present, so data sets may be run in separate invocations. This paper regime is
not published in ``benchmarks/results``: the headline is the raw regime (``--regime raw``, every method at
its defaults on the rows as stored, :mod:`benchmarks.raw_regime`), whose ``--suite`` (``headline`` or
``holdout``) names the data sets, the records and the page (:mod:`benchmarks.raw_report`).

Examples::

    python -m benchmarks.quality --T 5000 --out DIR
    python -m benchmarks.quality --quick --datasets space_ga --methods kons --out DIR
    OPENBLAS_NUM_THREADS=1 python -m benchmarks.quality --regime raw --suite holdout --methods stale \
        --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.common import command_line, git_commit, machine, require_datasets, results_dir
from benchmarks.methods import RAW_DIR, Context, Method, median_gamma, missing_extras, select_methods
from kons.datasets import load_dataset

if TYPE_CHECKING:  # benchmarks.raw_report imports this module's data set lists
    from benchmarks.raw_report import Suite

__all__ = ["CLASSIFICATION", "REGRESSION", "Run", "main", "progressive"]

REGRESSION = ["cadata", "cpusmall", "abalone", "space_ga", "kin8nm", "power_plant", "casp"]
CLASSIFICATION = ["ijcnn1", "cod-rna", "magic04", "a9a", "phishing"]
#: The offline KernelRidge reference needs an n x n Gram matrix: skipped on longer streams.
REFERENCE_MAX_ROWS = 12_000
#: Number of checkpoints kept of each learning curve.
CURVE_POINTS = 200
#: The libraries whose versions a raw record notes.
PEER_MODULES = ("numpy", "scipy", "sklearn", "river", "vowpalwabbit")


@dataclass
class Run:
    """One progressive-validation pass of one configuration over one segment of the stream."""

    method: str
    params: dict[str, Any]
    metric: float
    seconds: float
    rows: int
    stored_points: int | None = None
    dictionary_size: int | None = None
    error: str | None = None
    curve_t: list[int] = field(default_factory=list)
    curve_loss: list[float] = field(default_factory=list)
    curve_stored: list[int] = field(default_factory=list)
    curve_dict: list[int] = field(default_factory=list)


def _progress(items: Sequence[Any], desc: str) -> Iterable[Any]:
    """tqdm when it is installed and stderr is a terminal, else the items as they are."""
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    shown: Iterable[Any] = tqdm(items, desc=desc, leave=False, mininterval=1.0,
                                disable=not sys.stderr.isatty())
    return shown


def _checkpoints(n: int) -> np.ndarray:
    return np.unique(np.linspace(1, n, min(n, CURVE_POINTS)).astype(int))


def progressive(method: Method, ctx: Context, params: dict[str, Any], X: np.ndarray, y: np.ndarray,
                *, curves: bool = False, desc: str = "") -> Run:
    """Predict-then-learn over ``(X, y)``; a failing configuration gives ``metric = inf`` and its error."""
    n = len(y)
    preds = np.zeros(n)
    marks = set(_checkpoints(n).tolist()) if curves else set()
    sizes: list[tuple[int, int]] = []
    runner = None
    error = None
    start = time.perf_counter()
    try:
        runner = method.build(ctx, params)  # construction (and a peer's first import) is not timed
        start = time.perf_counter()
        for i in _progress(range(n), desc) if curves else range(n):
            preds[i] = runner.step(X[i], float(y[i]))
            if i + 1 in marks and method.kernel:
                sizes.append(runner.sizes() or (0, 0))
    except Exception as exc:  # a diverging configuration must not stop the whole benchmark
        error = f"{type(exc).__name__}: {exc}"
    finally:
        seconds = time.perf_counter() - start
        final = runner.sizes() if runner is not None and error is None else None
        if runner is not None:
            runner.close()
    losses = (preds - y) ** 2 if ctx.regression else (np.sign(preds) != y).astype(float)
    metric = math.inf if error or not np.isfinite(losses).all() else float(losses.mean())
    run = Run(method.key, params, metric, seconds, n, error=error)
    if final is not None:
        run.stored_points, run.dictionary_size = final
    if curves and error is None:
        t = _checkpoints(n)
        run.curve_t = t.tolist()
        run.curve_loss = [float(f"{v:.6g}") for v in np.cumsum(losses)[t - 1]]  # 6 digits: plots only
        run.curve_stored = [s for s, _ in sizes]
        run.curve_dict = [d for _, d in sizes]
    return run


def kernel_ridge_reference(ctx: Context, X: np.ndarray, y: np.ndarray) -> Run | None:
    """Batch KernelRidge fitted on all of ``(X, y)`` and scored in-sample; None without scikit-learn."""
    try:
        from sklearn.kernel_ridge import KernelRidge
    except ImportError:
        return None
    start = time.perf_counter()
    pred = KernelRidge(kernel="rbf", gamma=ctx.rbf_gamma, alpha=1.0).fit(X, y).predict(X)
    seconds = time.perf_counter() - start
    metric = float(np.mean((pred - y) ** 2) if ctx.regression else np.mean(np.sign(pred) != y))
    return Run("krr", {}, metric, seconds, len(y))


def split_rows(n: int, T: int, tune_rows: int) -> tuple[int, int]:
    """``(scored rows, tuning rows)``: tuning rows follow the scored ones and never overlap them."""
    tune = min(tune_rows, n // 3) if n < T + tune_rows else tune_rows
    return min(T, n - tune), tune


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_dataset(name: str, methods: Sequence[Method], *, T: int, tune_rows: int, grid_size: int,
                no_tune: Sequence[str], reference: bool) -> dict[str, Any]:
    """Both columns of every method on one data set; returns the raw record saved as JSON."""
    data = load_dataset(name)
    scored, tune = split_rows(len(data.y), T, tune_rows)
    X, y = data.X[:scored], data.y[:scored]
    Xt, yt = data.X[scored:scored + tune], data.y[scored:scored + tune]
    ctx = Context(data.task, data.X.shape[1], median_gamma(X))
    record: dict[str, Any] = {"dataset": name, "task": data.task, "n": len(data.y), "dim": ctx.dim,
                              "scored_rows": scored, "tuning_rows": tune, "rbf_gamma": ctx.rbf_gamma,
                              "runs": [], "tuning": {}}
    _log(f"== {name}: {data.task}, n={len(data.y)}, d={ctx.dim}, scored {scored}, tuning {tune}, "
         f"rbf gamma {ctx.rbf_gamma:.4g}")
    for position, method in enumerate(methods, 1):
        tag = f"[{name} {position}/{len(methods)}] {method.label}"
        if method.max_rows is not None and scored > method.max_rows:
            _log(f"{tag}: not run on {scored} rows (limit {method.max_rows})")
            record.setdefault("not_run", {})[method.key] = f"stream longer than {method.max_rows} rows"
            continue
        default = progressive(method, ctx, {}, X, y, curves=True, desc=f"{tag} default")
        _log(f"{tag} default: {default.metric:.4f} in {default.seconds:.1f}s"
             + (f"  ({default.error})" if default.error else ""))
        record["runs"].append({"column": "default", **asdict(default)})
        grid = method.grid[:grid_size]
        if len(grid) < 2 or method.key in no_tune:
            record["tuning"][method.key] = {"configs": 1, "chosen": {}, "seconds": 0.0, "tried": False}
            record["runs"].append({"column": "tuned", **asdict(default)})
            continue
        trials = []
        for i, params in enumerate(grid, 1):
            trial = progressive(method, ctx, params, Xt, yt)
            trials.append(trial)
            _log(f"{tag} tune {i}/{len(grid)} {params or 'default'}: {trial.metric:.4f} "
                 f"({trial.seconds:.1f}s)")
        best = min(range(len(trials)), key=lambda k: trials[k].metric)  # ties keep the earlier config
        record["tuning"][method.key] = {
            "configs": len(grid), "chosen": grid[best], "tried": True,
            "seconds": sum(t.seconds for t in trials),
            "trials": [{"params": t.params, "metric": t.metric, "error": t.error} for t in trials]}
        if best == 0:
            tuned = default
        else:
            tuned = progressive(method, ctx, grid[best], X, y, curves=True, desc=f"{tag} tuned")
            _log(f"{tag} tuned {grid[best]}: {tuned.metric:.4f} in {tuned.seconds:.1f}s")
        record["runs"].append({"column": "tuned", **asdict(tuned)})
    if reference and scored <= REFERENCE_MAX_ROWS:
        krr = kernel_ridge_reference(ctx, X, y)
        if krr is not None:
            _log(f"[{name}] KernelRidge (offline, in-sample): {krr.metric:.4f} in {krr.seconds:.1f}s")
            record["runs"].extend({"column": c, **asdict(krr)} for c in ("default", "tuned"))
    return record


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.quality", description=__doc__.split("\n")[0])
    parser.add_argument("--T", type=int, default=5000, help="scored rows per data set (default 5000)")
    parser.add_argument("--tune-rows", type=int, default=2000, help="tuning rows after the scored ones")
    parser.add_argument("--datasets", default=None,
                        help="comma list of data set names (file stems in shared/data; default: the 12 "
                             "of the paper regime, or those of the raw regime's --suite)")
    parser.add_argument("--methods", default="all",
                        help="comma list of method keys or groups: all, kons, peers, river, vw (raw regime: "
                             "all, learners, river, peers, or stale: the runs without provenance or whose "
                             "code changed since)")
    parser.add_argument("--no-tune", default="", help="methods kept at their default in the tuned column")
    parser.add_argument("--grid-size", type=int, default=None, help="configurations per method (default 9)")
    parser.add_argument("--no-reference", action="store_true", help="skip the offline KernelRidge")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: T=300, 150 tuning rows, 2 configurations, no reference")
    parser.add_argument("--out", type=Path, default=None,
                        help="where results go (default: a new temporary directory)")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--regime", choices=("paper", "raw"), default="paper",
                        help="raw: rows as in the files, every method at defaults (benchmarks/raw_regime.py)")
    parser.add_argument("--suite", default="headline",
                        help="raw regime: the data sets, records and page (headline or holdout; "
                             "benchmarks/raw_report.py)")
    args = parser.parse_args(argv)
    if args.datasets is None:
        args.datasets = ",".join(_suite(args.suite).datasets if args.regime == "raw"
                                 else REGRESSION + CLASSIFICATION)
    if args.quick:
        args.T, args.tune_rows, args.no_reference = 300, 150, True
        args.grid_size = args.grid_size or 2
    args.grid_size = args.grid_size or 9
    return args


def _datasets(spec: str) -> Iterator[str]:
    return (s.strip() for s in spec.split(",") if s.strip())


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    require_datasets(_datasets(args.datasets), "benchmarks.quality")
    args.out = results_dir(args.out, "quality")
    if args.regime == "raw":
        return _main_raw(args, argv)
    methods = select_methods(args.methods)
    missing = missing_extras(methods)
    if missing:
        _log("skipping " + ", ".join(f"{k} (needs {p})" for k, p in missing.items())
             + ": install the peers with  pip install '.[bench]'")
        methods = [m for m in methods if m.key not in missing]
    raw_dir = args.out / RAW_DIR
    raw_dir.mkdir(parents=True, exist_ok=True)
    command = command_line("benchmarks.quality", argv)
    no_tune = [s.strip() for s in args.no_tune.split(",") if s.strip()]
    commit = git_commit()  # the code that runs is the code imported now, not HEAD at the end
    for name in _datasets(args.datasets):
        started = time.time()
        record = run_dataset(name, methods, T=args.T, tune_rows=args.tune_rows, grid_size=args.grid_size,
                             no_tune=no_tune, reference=not args.no_reference)
        record.update(command=command, machine={"kons": commit, **machine(*PEER_MODULES)},
                      wall_seconds=time.time() - started, skipped=missing, no_tune=no_tune,
                      grid_size=args.grid_size)
        (raw_dir / f"{name}.json").write_text(json.dumps(record, separators=(",", ":")) + "\n")
        _log(f"== {name} done in {record['wall_seconds']:.0f}s")
    from benchmarks.report import write_report

    path = write_report(args.out, plots=not args.no_plots)
    _log(f"report: {path}")
    return 0


def _main_raw(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """The raw regime: every method at its defaults on the rows as they are in the files, each run with its
    own provenance, merged into the suite's records; the suite's page is then rewritten from them."""
    from benchmarks.raw_regime import (
        RAW_METHODS,
        method_provenance,
        missing_library,
        run_raw,
        select_raw_methods,
        unmeasured_methods,
    )
    from benchmarks.raw_report import write_page

    stamps = {key: method_provenance(key) for key in RAW_METHODS}  # the code imported now is what runs
    suite = _suite(args.suite)
    out_dir = args.out / suite.folder
    out_dir.mkdir(parents=True, exist_ok=True)
    kept = command_line("benchmarks.quality", argv, outputs=("--out", "--methods"))
    info = machine(*PEER_MODULES)
    machine_line = (f"{info['platform']}, {info['cpus']} CPUs, load {info['load_average'][0]:.1f}; numpy "
                    f"{info['versions']['numpy']}, scipy {info['versions']['scipy']}; OPENBLAS_NUM_THREADS="
                    f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    for name in _datasets(args.datasets):
        path = out_dir / f"{name}.json"
        earlier = json.loads(path.read_text())["runs"] if path.exists() else []
        if args.methods == "stale":
            keys = unmeasured_methods({"runs": earlier}) if path.exists() else select_raw_methods("all")
        else:
            keys = select_raw_methods(args.methods)
        for key in [k for k in keys if missing_library(k)]:
            _log(f"[{name}] {key}: not run, {missing_library(key)} is not installed (pip install '.[bench]')")
            keys.remove(key)
        if not keys:
            continue
        # The methods named as run, so that the command runs them again (``stale`` would name none then).
        command = f"{kept} --methods {','.join(keys)}"
        about = {k: {"command": command, "machine": machine_line, "provenance": stamps[k]} for k in keys}
        record = run_raw(name, keys, args.T, about)
        record["runs"] = [r for r in earlier if r["method"] not in keys] + record["runs"]  # keep the others
        path.write_text(json.dumps(record, separators=(",", ":")) + "\n")
    _log(f"report: {write_page(args.out, suite)}")
    return 0


def _suite(name: str) -> Suite:
    from benchmarks.raw_report import SUITES

    if name not in SUITES:
        raise SystemExit(f"unknown suite {name!r}; choose from {', '.join(SUITES)}")
    return SUITES[name]


if __name__ == "__main__":
    raise SystemExit(main())
