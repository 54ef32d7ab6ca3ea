"""An ``auto`` round against its numerical floor, and against the code of another checkout.

Issue 18 asks for an :class:`kons.Auto` round within 2x of the BLAS and numpy calls it needs. This
benchmark times, in one child process per checkout, ``learn_one`` on a stream of dimension 8 after a
warm-up (the Nystrom bases then hold their steady-state dictionaries) and, on the same states and rows,
the *floor*: the numerical calls that round makes, issued directly with no Python around them but the
loop over the alive bases (per Nystrom base the kernel row, the triangular solves of the embedding and of
KORS, the matrix-vector product with A^{-1} and its update, the dot products; per ONS base, the threshold
model's included, the product with :math:`A^{-1}`, the dots and the outer product; each restarted
generation's linear model; the scalers, the signed log, the forms, the thresholds' code, the mixture's
switching weights and the kept-round copy: :func:`_floor_round` lists what it covers and leaves out). The
rank-one updates are applied to scratch copies, so the floor changes no state.

The checkouts run alternately (``--repeats`` times each), so that both see the same machine load; the
report gives microseconds per round (medians of the repeats), the round/floor ratio of each checkout
and the before/after ratio.

With ``--paired``, instead of the floor: a mature learner (``--paired-warmup`` rounds learnt) of each
case of issue 36 (regression at d = 8 and d = 50, binary and 10-class classification, records), its
round (``predict_one`` then ``learn_one``) and its predict alone, the two checkouts' learners alive at
once in two processes and timed in CPU seconds block by block, alternately (:func:`paired`).

Run it with one BLAS thread::

    git worktree add /tmp/kons-old main   # the code to compare with
    OPENBLAS_NUM_THREADS=1 python -m benchmarks.auto_round --old /tmp/kons-old --out DIR
    OPENBLAS_NUM_THREADS=1 python -m benchmarks.auto_round --paired --old /tmp/kons-old --out DIR
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

DIM = 8
#: Rounds per block of the alternation between the floor and the rounds.
_BLOCK = 20


def _stream(rows: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, DIM)) * [1.0, 30.0, 0.1, 1.0, 5.0, 1.0, 1.0, 2.0]
    y = np.sin(X[:, 0]) + 0.02 * X[:, 1] + X[:, 2] * X[:, 3] + 0.1 * rng.normal(size=rows)
    return X, y


def _scratch(scratch: dict[Any, np.ndarray], key: Any, array: np.ndarray) -> np.ndarray:
    """A scratch copy of ``array`` kept under ``key``: made again when the state's array changed shape
    (a dictionary grew, a generation was replaced), so that the floor never writes into the state."""
    work = scratch.get(key)
    if work is None or work.shape != array.shape:
        work = scratch[key] = array.copy(order="K")  # (a Fortran-ordered matrix stays one)
    return work


def _floor_ons(Ainv: np.ndarray, u: np.ndarray, index: Any, values: np.ndarray,
               work: np.ndarray) -> float:
    """An ONS round's numerics on the row ``values`` at ``index`` (a slice, or a sparse row's indices):
    :math:`A^{-1}x`, the dots, the weight step and the outer product, the update applied to ``work``."""
    v = Ainv[:, index] @ values  # A^{-1} x, as the base's Features.cols
    s = v[index] @ values
    play = float(u[index] @ values)
    _ = u - 0.1 * v
    work -= (1e-9 / (1.0 + s)) * np.outer(v, v)
    return play


def _floor_nystrom(base: Any, z: np.ndarray, key: Any, scratch: dict[Any, np.ndarray]) -> float:
    """A NystromKONS round's numerics on ``z``: the kernel row, the triangular solve of the embedding and
    (while the dictionary may grow) of KORS on the same row, the product with A^{-1} and its update (on a
    scratch copy), the dots and the weight step."""
    from scipy.linalg.blas import dspmv, dspr, dsymv, dsyr, dtpsv

    j = base._factor.size
    if j == 0:  # a restarted copy before its first point: the round plays 0 and computes nothing
        return 0.0
    points = base._kors.points
    dist = points.sq_norms.view - 2.0 * (points.view @ z)
    dist += z @ z
    k = np.exp(-base.kernel.gamma * np.maximum(dist, 0.0))
    phi = dtpsv(j, base._factor.packed, k, lower=0, trans=1)
    play = float(phi @ base._weights)
    if j < base.max_dictionary:  # KORS's proposal: the same kernel row, its own solve
        u = dtpsv(j, base._kors._chol.packed, base._kors._weights.view * k, lower=0, trans=1)
        _ = u @ u
    dense = getattr(base._inverse, "_dense", None)  # A^{-1} (packed in a checkout that keeps it packed)
    if dense is None:
        v = dspmv(j, 1.0, base._inverse.packed, phi, lower=0)
    else:
        v = dsymv(1.0, dense, phi, lower=1)
    _ = phi @ v
    _ = base._weights - 0.1 * v
    _ = (v * v).max(initial=0.0)
    if dense is None:
        dspr(j, -1e-12, v, _scratch(scratch, key, base._inverse.packed), lower=0, overwrite_ap=1)
    else:
        dsyr(-1e-12, v, lower=1, a=_scratch(scratch, key, dense), overwrite_a=1)
    return play


def _threshold_model(grid: Any) -> Any:
    """The grid's expert on the quantile thresholds, None if it has none (the ``bins`` kind's; before the
    kinds kept their experts: ``Grid.thresholds``; before that, the two attributes ``bins`` and
    ``bins_base``: None). A checkout before ``Grid.experts_of`` has it as ``Grid._kind``."""
    experts_of = getattr(grid, "experts_of", None) or getattr(grid, "_kind", None)
    if experts_of is not None:
        experts = experts_of("bins")
        return None if experts is None else experts[0]
    return getattr(grid, "thresholds", None)


def _floor_round(auto: Any, x: np.ndarray, scratch: dict[Any, np.ndarray]) -> None:
    r"""The numerical calls of one ``auto`` round on ``x`` (dense, after the warm-up), without the Python
    around them, on the learner's current state.

    Covered: the two scalers' pending statistics and standardised views (the raw row and its signed log),
    each form of the row the bases take (``Grid.forms``: a view, with the intercept or not); every alive
    base of ``Grid._members()`` (the grid's and the restarted generations' copies) on its form
    ``_form(member)``, per kind: ONS (the product with :math:`A^{-1}`, the dots, the step and the outer
    product) and NystromKONS (the kernel row, once, shared by the embedding's and KORS's triangular
    solves, the product with A^{-1} and its update, the dots and the step); each generation's linear model
    (``Grid._recent()``: :math:`P x`, the play :math:`x^\top P b`, the Sherman-Morrison outer product
    and the updates of ``b`` and of the sum of the rows); the threshold model (the ``bins`` expert's
    ``base``) on the code of ``x`` (its ``bins.code`` itself, whole-array operations, then ONS's gather on
    the indices); the mixture: the marginal weights over the switching rates (twice, as a round computes
    them for its play and for the leader), Vovk's substitution (the two log-sum-exps), the experts'
    losses and the switching weights' Bayes step and share (the round's exact ufunc calls, on arrays of
    the state's shapes, nothing written back); and the copy of the row's two views into the ring of
    kept rounds.

    Left out: the validation of the row and of each form (``checked_form``, ``check_finite``), the
    target's scaler and clipping, the change detectors' scalar updates, the random draw of KORS, a new
    point joining a dictionary (the factor's and KORS's appends, the grown ``A^{-1}``), a restart and its
    replay, and the multinomial round (this floor is the regression round's). The rank-one updates are
    applied, with tiny coefficients, to scratch copies kept in ``scratch`` (so the floor changes no state
    and its costs are those of the real updates).

    Trees: this function runs against the ``kons`` of the checkout it times (``--old``). It needs the
    grid's layout (``Grid._members``, ``Grid.forms``, ``_form``, the mixture's ``switching`` weights), which
    main has had since the grid moved into its own module (``kons/_grid.py``, ``kons/auto/grid.py`` since
    issue 36); the generations'
    linear models, the threshold model and the kept rounds are used when the tree has them. Older trees
    (``Grid.views``, before that module) are not supported.
    """
    try:
        _grid = importlib.import_module("kons.auto.grid")
    except ImportError:  # a checkout before kons.auto was a package
        _grid = importlib.import_module("kons._grid")
    grid = auto._grid
    # The scalers' pending statistics (Welford) and the standardised views.
    views = {}
    signed_log = np.sign(x) * np.log1p(np.abs(x))
    for log, s, row in ((False, auto._prep.scaler, x), (True, grid.log_scaler, signed_log)):
        delta = row - s.mean
        mean = s.mean + delta / (s.count + 1)
        std = np.sqrt((s.m2 + delta * (row - mean)) / (s.count + 1))
        views[log] = np.divide(row - mean, std, out=np.zeros(len(row)), where=std > 0)
    forms = {(log, linear): np.append(views[log], 1.0) if linear else views[log]
             for log, linear in grid.forms}
    switching = grid.mixture.switching
    plays = np.zeros(len(switching.active))
    for slot, member, base in grid._members():
        z = forms[_grid._form(member)]
        if member[1] == "ons":
            plays[slot] = _floor_ons(base._Ainv, base._u, slice(None), z, _scratch(scratch, slot, base._Ainv))
        else:
            plays[slot] = _floor_nystrom(base, z, slot, scratch)
    for slot, recent in getattr(grid, "_recent", list)():
        z = forms[_grid._RECENT_FORM]
        plays[slot] = z @ (recent.P @ recent.b[:, 0])
        v = recent.P @ z
        _scratch(scratch, ("recent", slot), recent.P)[...] -= np.outer(v, v) * (1e-9 / (1.0 + z @ v))
        _ = recent.b + np.outer(z, [0.5])
        _ = recent.sum + z
    thresholds = _threshold_model(grid)
    bins, bins_base = ((thresholds.bins, thresholds.base) if thresholds is not None
                       else (getattr(grid, "bins", None), getattr(grid, "bins_base", None)))
    if bins is not None and bins_base is not None:
        code = bins.code(x)  # whole-array operations already: the round's own coding is its floor
        bins_slot = grid.slot["bins"] if hasattr(grid, "slot") else _grid.BINS_SLOT
        plays[bins_slot] = _floor_ons(bins_base._Ainv, bins_base._u, code.indices, code.values,
                                      _scratch(scratch, "bins", bins_base._Ainv))
    # The mixture (kons.auto.mixture.Mixture.mix and .update, kons.auto.mixture.SwitchingWeights.apply).
    for _ in range(2):  # the weights for the play, then for the leader
        log_p = np.logaddexp.reduce(switching.log_rate_weights[:, None] + switching.log_weights, axis=0)
        w = np.exp(log_p - log_p.max())
        w /= w.sum()
    eta = 1.0 / 18.0
    log_w = np.log(np.maximum(w, 1e-300))
    for y in (-3.0, 3.0):
        np.logaddexp.reduce(log_w - eta * (plays - y) ** 2)
    losses = (plays - 0.5) ** 2 * eta
    posterior = switching.log_weights - np.where(switching.active, losses, 0.0)
    evidence = np.logaddexp.reduce(posterior, axis=1)
    rates = switching.log_rate_weights + evidence
    _ = rates - np.logaddexp.reduce(rates, axis=-1, keepdims=True)
    posterior -= evidence[:, None]
    uniform = np.where(switching.active, -np.log(switching.active.sum()), -np.inf)
    np.logaddexp(switching._log_keep + posterior, switching._log_share + uniform)
    kept = getattr(grid, "kept", None)
    if kept is not None:  # the round's row, in both views, into the ring of kept rounds
        slot = getattr(kept, "ring", kept).next  # (before the ring's own type: the kept rounds' next)
        ring = _scratch(scratch, "kept", kept.rows)
        ring[0, slot], ring[1, slot] = views[False], views[True]
        _scratch(scratch, "kept_rounds", kept.rounds)[slot] = 0.5, 0.0, 0.0


def child(warmup: int, rounds: int, task: str = "regression", predict: bool = False) -> dict[str, Any]:
    """Time ``learn_one`` (after ``predict_one`` of the row if ``predict``) and the floor of the same
    rounds, in this process's ``kons``; ``task`` "binary" plays the signs of the targets as labels."""
    import kons
    from kons._blas import one_blas_thread

    X, y = _stream(warmup + rounds)
    if task == "binary":
        y = np.where(y > np.median(y), 1.0, -1.0)
    auto = kons.Auto()
    auto.learn_many(X[:warmup], y[:warmup])
    rest_X, rest_y = X[warmup:], y[warmup:]
    scratch: dict[Any, np.ndarray] = {}
    _floor_round(auto, rest_X[0], scratch)
    # Alternating blocks (the floor of a block's rows on the state before them, then their rounds), so
    # that both see the same load and the same dictionary sizes.
    floor = round_ = 0.0
    for at in range(0, rounds, _BLOCK):
        block = slice(at, at + _BLOCK)
        start = time.perf_counter()
        with one_blas_thread(), np.errstate(all="ignore"):
            for x in rest_X[block]:
                _floor_round(auto, x, scratch)
        middle = time.perf_counter()
        for x, label in zip(rest_X[block], rest_y[block], strict=True):
            if predict:
                auto.predict_one(x)
            auto.learn_one(x, label)
        floor, round_ = floor + middle - start, round_ + time.perf_counter() - middle
    floor, round_ = floor / rounds, round_ / rounds
    assert auto._grid is not None  # built by the warm-up
    grid = auto._grid
    sizes = [b.stats()["dictionary_size"] for b in grid.bases if hasattr(b, "max_dictionary")]
    # what the last round had alive (the floor covers each): bases, generations' linear models, thresholds
    alive = [len(grid._members()), len(getattr(grid, "_recent", list)()),
             int(_threshold_model(grid) is not None or getattr(grid, "bins_base", None) is not None)]
    return {"kons": kons.__file__, "round_us": round_ * 1e6, "floor_us": floor * 1e6,
            "dictionary_sizes": sizes, "alive": alive, "state_bytes": len(auto.to_bytes())}


def _run_child(tree: Path, warmup: int, rounds: int, task: str, predict: bool) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree), "OPENBLAS_NUM_THREADS": "1"}
    code = (f"import json, runpy; m = runpy.run_path({str(Path(__file__).resolve())!r}); "
            f"print(json.dumps(m['child']({warmup}, {rounds}, {task!r}, {predict})))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=tree)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if not result["kons"].startswith(str(tree.resolve())):
        raise RuntimeError(f"the child imported {result['kons']}, not the kons of {tree}")
    return result


#: The cases of the paired comparison (issue 36's Show): (task, dimension).
CASES = {"regression d=8": ("regression", 8), "regression d=50": ("regression", 50),
         "binary": ("binary", 8), "10 classes": ("classes", 8), "records": ("records", 8)}


def case_stream(case: str, rows: int) -> tuple[list[Any], list[Any]]:
    """The rows and labels of a paired case: a smooth target of a few features among ``d`` scaled
    unevenly; binary, its sign against the median; 10 classes, its deciles; records, the rows of d = 8 as
    dicts of named values, one categorical (three strings) and 5% of the values missing (None)."""
    task, dim = CASES[case]
    rng = np.random.default_rng(1)
    X = rng.normal(size=(rows, dim)) * np.geomspace(0.1, 30.0, dim)
    y = np.sin(X[:, 0]) + 0.02 * X[:, 1] + X[:, 2] * X[:, 3] / 10.0 + 0.1 * rng.normal(size=rows)
    if task == "binary":
        return list(X), [int(v > np.median(y)) for v in y]
    if task == "classes":
        return list(X), np.digitize(y, np.quantile(y, np.linspace(0.0, 1.0, 11)[1:-1])).tolist()
    if task == "records":
        kinds = np.array(["north", "south", "east"])[rng.integers(0, 3, rows)]
        missing = rng.random((rows, dim)) < 0.05
        records = [{**{f"f{j}": (None if missing[i, j] else float(X[i, j])) for j in range(dim)},
                    "kind": str(kinds[i])} for i in range(rows)]
        return records, (y + (kinds == "north")).tolist()
    return list(X), y.tolist()


def serve_paired(warmup: int, rounds: int, cases: list[str]) -> None:
    """A child of :func:`paired`: a mature learner per case of ``cases`` (``warmup`` rounds learnt), then,
    for each command read from stdin (``case part start``, part ``round`` or ``predict``), the CPU seconds
    of one block of rows from ``start`` (a round: ``predict_one`` then ``learn_one``; ``predict``:
    ``predict_one`` alone, nothing learnt), printed as one JSON line."""
    import kons

    learners = {}
    streams = {}
    for case in cases:
        rows, labels = case_stream(case, warmup + rounds)
        classes = CASES[case][0] in ("binary", "classes")
        auto = kons.Auto(task="classification" if classes else "regression")
        for x, label in zip(rows[:warmup], labels[:warmup], strict=True):
            auto.learn_one(x, label)
        learners[case], streams[case] = auto, (rows[warmup:], labels[warmup:])
    print(json.dumps({"kons": kons.__file__}), flush=True)
    for command in sys.stdin:
        case, part, start = command.rsplit(" ", 2)
        rows, labels = streams[case]
        block = range(int(start), min(int(start) + _BLOCK, rounds))
        auto = learners[case]
        began = time.process_time()
        if part == "predict":
            for i in block:
                auto.predict_one(rows[i])
        else:
            for i in block:
                auto.predict_one(rows[i])
                auto.learn_one(rows[i], labels[i])
        print(json.dumps({"seconds": time.process_time() - began, "rows": len(block)}), flush=True)


def paired(trees: dict[str, Path], warmup: int, rounds: int, cases: list[str]
           ) -> dict[str, dict[str, dict[str, float]]]:
    """For each case of ``cases`` and part (round, predict), the CPU microseconds per row of each tree's
    learner, from one child process per tree serving blocks alternately (ABBA: each tree first in every
    other pair)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    code = (f"import runpy; m = runpy.run_path({str(Path(__file__).resolve())!r}); "
            f"m['serve_paired']({warmup}, {rounds}, {cases!r})")
    children = {}
    for label, tree in trees.items():
        child_process = subprocess.Popen([sys.executable, "-c", code], env={**env, "PYTHONPATH": str(tree)},
                                         cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        children[label] = child_process
    try:
        for label, child_process in children.items():
            assert child_process.stdout is not None
            imported = json.loads(child_process.stdout.readline())["kons"]
            if not imported.startswith(str(trees[label].resolve())):
                raise RuntimeError(f"the child imported {imported}, not the kons of {trees[label]}")
        seconds = {case: {part: dict.fromkeys(trees, 0.0) for part in ("round", "predict")} for case in cases}
        order = list(trees)
        for n, start in enumerate(range(0, rounds, _BLOCK)):
            for case in cases:
                for part in ("predict", "round"):  # a block's rows predicted alone first, then played
                    for label in (order if n % 2 == 0 else order[::-1]):
                        child_process = children[label]
                        assert child_process.stdin is not None and child_process.stdout is not None
                        child_process.stdin.write(f"{case} {part} {start}\n")
                        child_process.stdin.flush()
                        seconds[case][part][label] += json.loads(child_process.stdout.readline())["seconds"]
    finally:
        for child_process in children.values():
            if child_process.stdin is not None:
                child_process.stdin.close()
            child_process.wait()
    return {case: {part: {label: 1e6 * s / rounds for label, s in by_tree.items()}
                   for part, by_tree in parts.items()} for case, parts in seconds.items()}


def paired_report(trees: dict[str, Path], warmup: int, rounds: int, repeats: int,
                  cases: list[str]) -> list[str]:
    """The paired comparison's table: per case and part, each tree's CPU time per row (the median of
    ``repeats`` paired runs) and the ratio of this checkout's to the old one's (the median of the runs'
    ratios, each of one run's paired blocks)."""
    from benchmarks.common import markdown_table

    runs = [paired(trees, warmup, rounds, cases) for _ in range(repeats)]
    new, old = trees
    rows = []
    for case in cases:
        for part in ("round", "predict"):
            times = {label: statistics.median(run[case][part][label] for run in runs) for label in trees}
            ratios = [run[case][part][new] / run[case][part][old] for run in runs]
            rows.append([case, part, f"{times[old]:.0f}", f"{times[new]:.0f}",
                         f"**{statistics.median(ratios):.2f}**", ", ".join(f"{r:.2f}" for r in ratios)])
    average = " / ".join(f"{v:.2f}" for v in os.getloadavg())
    return ["", f"## Paired: {warmup} warm-up rounds, then {rounds} rows per case ({len(runs)} runs; "
            f"load average at the end {average})", "",
            f"Both checkouts' learners are alive at once, one process each; every block of {_BLOCK} rows is "
            "timed in CPU seconds (`time.process_time`) in one, then the other, the first alternating "
            "(ABBA). A round is `predict_one` then `learn_one` of the row (a service's predict, then its "
            "feedback); predict is `predict_one` alone on the same rows before they are learnt.", "",
            *markdown_table(["case", "part", f"{old} (us/row)", f"{new} (us/row)", "ratio",
                             "ratio of each run"], rows)]


def main(argv: list[str] | None = None) -> None:
    from benchmarks.common import REPO, command_line, git_commit, machine_summary, markdown_table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="a checkout of the code to compare with (e.g. main)")
    parser.add_argument("--warmup", type=int, nargs="+", default=[150, 600],
                        help="warm-up rounds of each case (150: dictionaries growing; 600: full)")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--task", choices=("regression", "binary"), default="regression")
    parser.add_argument("--predict", action="store_true", help="time predict_one then learn_one per row")
    parser.add_argument("--paired", action="store_true",
                        help="instead of the floor: the five cases of issue 36 (regression d = 8 and 50, "
                        "binary, 10 classes, records), round and predict, paired against --old")
    parser.add_argument("--old-name", help="the old checkout's name in the report (default: its commit)")
    parser.add_argument("--paired-warmup", type=int, default=1000, help="rounds learnt before --paired's")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES), metavar="CASE",
                        help=f"--paired's cases (default: all of {', '.join(CASES)})")
    parser.add_argument("--out", type=Path, help="folder for auto_round.md (else: stdout only)")
    args = parser.parse_args(argv)
    if args.paired and not args.old:
        parser.error("--paired needs --old")
    commit = git_commit(("kons", "benchmarks"))
    old_commit = ""
    if args.old:
        head = ["git", "rev-parse", "--short", "HEAD"]
        old_commit = subprocess.run(head, cwd=args.old, capture_output=True, text=True).stdout.strip()
        old_commit = args.old_name or old_commit or args.old.name
    trees = {"this checkout": REPO, **({"old": args.old} if args.old else {})}
    command = command_line("benchmarks.auto_round", argv, outputs=("--out",))
    lines = [
        "# An `auto` round against its numerical floor",
        "",
        f"Command: `OPENBLAS_NUM_THREADS=1 {command}` at commit {commit}"
        + (f"; old: {old_commit}" if old_commit else "") + f". Machine: {machine_summary()}.",
        "",
        f"Dimension {DIM}, {args.task}"
        + (", each round `predict_one` then `learn_one`" if args.predict else "")
        + f"; after the warm-up rounds, {args.rounds} rounds timed in blocks alternating with "
        f"their floor; medians of {args.repeats} repeats, the checkouts alternating. On a shared machine the "
        "ratios are the result, not the times.",
    ]
    if args.paired:
        lines[-1] = (f"The old checkout is {old_commit}. Each learner is mature: {args.paired_warmup} rounds "
                     "learnt before any is timed. On a shared machine the ratios are the result, not the "
                     "times.")
        lines[0] = "# A mature `auto`'s round and predict, paired against another checkout"
        lines += paired_report({"this checkout": REPO, old_commit or "old": args.old}, args.paired_warmup,
                               args.rounds, args.repeats, args.cases)
    for warmup in ([] if args.paired else args.warmup):
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label in trees}
        for _ in range(args.repeats):
            for label, tree in trees.items():
                runs[label].append(_run_child(tree.resolve(), warmup, args.rounds, args.task, args.predict))
        median = {label: {key: statistics.median(r[key] for r in rs)
                          for key in ("round_us", "floor_us", "state_bytes")}
                  for label, rs in runs.items()}
        rows = [[label, f"{m['round_us']:.0f}", f"{m['floor_us']:.0f}",
                 f"{m['round_us'] / m['floor_us']:.2f}", f"{m['state_bytes']:.0f}"]
                for label, m in median.items()]
        average = " / ".join(f"{v:.2f}" for v in os.getloadavg())
        lines += [
            "",
            f"## {warmup} warm-up rounds (Nystrom dictionaries at the end: "
            f"{runs['this checkout'][-1]['dictionary_sizes']}, bound 200; alive at the end: "
            "{} bases, {} generations' linear models, {} threshold model; load average {})".format(
                *runs['this checkout'][-1]['alive'], average),
            "",
            *markdown_table(["code", "round (us)", "floor (us)", "round / floor", "state bytes"], rows),
        ]
        if args.old:
            new, old = median["this checkout"], median["old"]
            ratio = new["round_us"] / old["round_us"]
            normalised = (new["round_us"] / new["floor_us"]) / (old["round_us"] / old["floor_us"])
            lines += ["", f"Round time, this checkout / old: **{ratio:.2f}** (each run's round divided by "
                      f"its own floor, the same code in both, load-independent: {normalised:.2f}); "
                      f"state bytes: **{new['state_bytes'] / old['state_bytes']:.2f}**."]
        each = ["{}: {}".format(label, ", ".join(f"{r['round_us']:.0f}/{r['floor_us']:.0f}" for r in rs))
                for label, rs in runs.items()]
        lines += ["", "Every repeat (round us / floor us): " + "; ".join(each) + "."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out and args.paired:
        from benchmarks.provenance import provenance, publish

        publish(args.out, "auto_round_paired", provenance(("kons", "benchmarks/auto_round.py")), text)
    elif args.out:
        (args.out / "auto_round.md").write_text(text)


if __name__ == "__main__":
    main()
