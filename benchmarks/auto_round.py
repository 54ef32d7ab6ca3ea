"""An ``auto`` round against its numerical floor, and against the code of another checkout.

Issue 18 asks for an :class:`kons.Auto` round within 2x of the BLAS and numpy calls it needs. This
benchmark times, in one child process per checkout, ``learn_one`` on a stream of dimension 8 after a
warm-up (the Nystrom bases then hold their steady-state dictionaries) and, on the same states and rows,
the *floor*: the numerical calls that round makes, issued directly with no Python around them (per
Nystrom base the kernel rows of the embedding and of KORS, the triangular solves, the packed
matrix-vector product and rank-one update, the dot products; per ONS base the product with
:math:`A^{-1}`, the dots and the outer product; the scalers, the signed log, the forms and the mixture's
exponentials). The rank-one updates are applied to scratch copies, so the floor changes no state.

The checkouts run alternately (``--repeats`` times each), so that both see the same machine load; the
report gives microseconds per round (medians of the repeats), the round/floor ratio of each checkout
and the before/after ratio. Run it with one BLAS thread::

    git worktree add /tmp/kons-old main   # the code to compare with
    OPENBLAS_NUM_THREADS=1 python -m benchmarks.auto_round --old /tmp/kons-old --out DIR
"""

from __future__ import annotations

import argparse
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


def _floor_round(auto: Any, x: np.ndarray, scratch: dict[int, np.ndarray]) -> None:
    """The numerical calls of one ``auto`` round on ``x``, without the Python around them."""
    from scipy.linalg.blas import dspmv, dspr, dtpsv

    scaler, log_scaler = auto._prep.scaler, auto._grid.log_scaler
    views = []
    for s, row in ((scaler, x), (log_scaler, np.sign(x) * np.log1p(np.abs(x)))):
        delta = row - s.mean
        mean = s.mean + delta / (s.count + 1)
        std = np.sqrt((s.m2 + delta * (row - mean)) / (s.count + 1))
        views.append(np.divide(row - mean, std, out=np.zeros(DIM), where=std > 0))
    with_intercept = [np.append(v, 1.0) for v in views]
    plays = np.zeros(len(auto._grid.bases) + 1)
    work: np.ndarray | None  # a scratch copy (None: not made yet for this base)
    for i, (base, (log, linear)) in enumerate(zip(auto._grid.bases, auto._grid.views, strict=True)):
        z = (with_intercept if linear else views)[log]
        if linear:
            v = base._Ainv @ z
            s = z @ v
            plays[i] = z @ base._u
            _ = base._u - 0.1 * v
            work = scratch.setdefault(i, base._Ainv.copy())
            work -= 1e-9 * np.outer(v, v)
            continue
        gamma, j = base.kernel.gamma, base._factor.size
        points = base._kors.points
        dist = points.sq_norms.view - 2.0 * (points.view @ z)
        dist += z @ z
        k = np.exp(-gamma * np.maximum(dist, 0.0))
        phi = dtpsv(j, base._factor.packed, k, lower=0, trans=1)
        plays[i] = phi @ base._weights
        if j < base.max_dictionary:  # KORS's proposal: the same kernel row, its own solve
            u = dtpsv(j, base._kors._chol.packed, base._kors._weights.view * k, lower=0, trans=1)
            _ = u @ u
        v = dspmv(j, 1.0, base._inverse.packed, phi, lower=0)
        s = phi @ v
        _ = base._weights - 0.1 * v
        _ = (v * v).max(initial=0.0)
        work = scratch.get(i)
        if work is None or len(work) != len(base._inverse.packed):  # the dictionary grew: a new copy
            work = scratch[i] = base._inverse.packed.copy()
        dspr(j, -1e-12, v, work, lower=0, overwrite_ap=1)
    w = np.exp(auto._grid.mixture.log_weights - auto._grid.mixture.log_weights.max())
    w /= w.sum()
    log_w = np.log(np.maximum(w, 1e-300))
    for y in (-3.0, 3.0):
        np.logaddexp.reduce(log_w - 0.05 * (plays - y) ** 2)
    _ = auto._grid.mixture.log_weights - (plays - 0.5) ** 2 / 18.0


def child(warmup: int, rounds: int) -> dict[str, Any]:
    """Time ``learn_one`` and the floor of the same rounds, in this process's ``kons``."""
    import kons
    from kons._blas import one_blas_thread

    X, y = _stream(warmup + rounds)
    auto = kons.Auto()
    auto.learn_many(X[:warmup], y[:warmup])
    rest_X, rest_y = X[warmup:], y[warmup:]
    scratch: dict[int, np.ndarray] = {}
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
            auto.learn_one(x, label)
        floor, round_ = floor + middle - start, round_ + time.perf_counter() - middle
    floor, round_ = floor / rounds, round_ / rounds
    assert auto._grid is not None  # built by the warm-up
    sizes = [b.stats()["dictionary_size"] for b in auto._grid.bases if hasattr(b, "max_dictionary")]
    return {"kons": kons.__file__, "round_us": round_ * 1e6, "floor_us": floor * 1e6,
            "dictionary_sizes": sizes}


def _run_child(tree: Path, warmup: int, rounds: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree), "OPENBLAS_NUM_THREADS": "1"}
    code = (f"import json, runpy; m = runpy.run_path({str(Path(__file__).resolve())!r}); "
            f"print(json.dumps(m['child']({warmup}, {rounds})))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=tree)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if not result["kons"].startswith(str(tree.resolve())):
        raise RuntimeError(f"the child imported {result['kons']}, not the kons of {tree}")
    return result


def main(argv: list[str] | None = None) -> None:
    from benchmarks.common import REPO, command_line, git_commit, machine_summary, markdown_table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="a checkout of the code to compare with (e.g. main)")
    parser.add_argument("--warmup", type=int, nargs="+", default=[150, 600],
                        help="warm-up rounds of each case (150: dictionaries growing; 600: full)")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="folder for auto_round.md (else: stdout only)")
    args = parser.parse_args(argv)
    commit = git_commit(("kons", "benchmarks"))
    old_commit = ""
    if args.old:
        head = ["git", "rev-parse", "--short", "HEAD"]
        old_commit = subprocess.run(head, cwd=args.old, capture_output=True, text=True).stdout.strip()
    trees = {"this checkout": REPO, **({"old": args.old} if args.old else {})}
    command = command_line("benchmarks.auto_round", argv, outputs=("--out",))
    lines = [
        "# An `auto` round against its numerical floor",
        "",
        f"Command: `OPENBLAS_NUM_THREADS=1 {command}` at commit {commit}"
        + (f"; old: {old_commit}" if old_commit else "") + f". Machine: {machine_summary()}.",
        "",
        f"Dimension {DIM}; after the warm-up rounds, {args.rounds} rounds timed in blocks alternating with "
        f"their floor; medians of {args.repeats} repeats, the checkouts alternating. On a shared machine the "
        "ratios are the result, not the times.",
    ]
    for warmup in args.warmup:
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label in trees}
        for _ in range(args.repeats):
            for label, tree in trees.items():
                runs[label].append(_run_child(tree.resolve(), warmup, args.rounds))
        median = {label: {key: statistics.median(r[key] for r in rs) for key in ("round_us", "floor_us")}
                  for label, rs in runs.items()}
        rows = [[label, f"{m['round_us']:.0f}", f"{m['floor_us']:.0f}",
                 f"{m['round_us'] / m['floor_us']:.2f}"] for label, m in median.items()]
        average = " / ".join(f"{v:.2f}" for v in os.getloadavg())
        lines += [
            "",
            f"## {warmup} warm-up rounds (Nystrom dictionaries at the end: "
            f"{runs['this checkout'][-1]['dictionary_sizes']}, bound 200; load average {average})",
            "",
            *markdown_table(["code", "round (us)", "floor (us)", "round / floor"], rows),
        ]
        if args.old:
            new, old = median["this checkout"], median["old"]
            ratio = new["round_us"] / old["round_us"]
            normalised = (new["round_us"] / new["floor_us"]) / (old["round_us"] / old["floor_us"])
            lines += ["", f"Round time, this checkout / old: **{ratio:.2f}** (each run's round divided by "
                      f"its own floor, the same code in both, load-independent: {normalised:.2f})."]
        each = ["{}: {}".format(label, ", ".join(f"{r['round_us']:.0f}/{r['floor_us']:.0f}" for r in rs))
                for label, rs in runs.items()]
        lines += ["", "Every repeat (round us / floor us): " + "; ".join(each) + "."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        (args.out / "auto_round.md").write_text(text)


if __name__ == "__main__":
    main()
