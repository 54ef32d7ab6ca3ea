"""The saved state of a mature ``auto``: its bytes, and the CPU time to save and load it, against other
checkouts.

For each case (regression on 8 and on 50 features, binary and 10-class classification on 8, regression on
records with a category and missing values) one child process per checkout builds the same learner on the
same rows (enough for the grid's Nystrom dictionaries to fill), then measures ``len(to_bytes())``, the
blob's size after ``zlib`` at level 1 (for reference: the service stores snapshots uncompressed), and the
CPU time of ``to_bytes()`` and of ``kons.load`` (medians over ``--saves`` calls each). The checkouts run
one after the other per case, ``--repeats`` times, alternating, so that their timings see the same load;
the bytes do not depend on it. Run it with one BLAS thread::

    mkdir -p /tmp/base469 && git archive 469cdfb | tar -x -C /tmp/base469
    OPENBLAS_NUM_THREADS=1 python -m benchmarks.state_bytes --old /tmp/base469 --names 469cdfb --out DIR

Its pages carry the provenance of this checkout's ``kons`` (:mod:`benchmarks.provenance`); the other
checkouts are named in the command.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

#: What the run measures in this checkout (its pages' provenance).
SOURCES = ("kons", "benchmarks/state_bytes.py")
#: case -> (task, features, rows learnt before saving)
CASES: dict[str, tuple[str, int, int]] = {
    "regression, d = 8": ("regression", 8, 1500),
    "regression, d = 50": ("regression", 50, 1500),
    "binary, d = 8": ("classification", 8, 1500),
    "10 classes, d = 8": ("classification", 8, 1500),
    "records (5 numbers, a category, gaps)": ("regression", 6, 1500),
}


def _rows(case: str, n: int) -> tuple[list[Any], list[Any]]:
    """The rows and targets of ``case``: features on unequal scales, a target mixing a sine and a bounded
    product (classes: above its median, or its deciles; records: a category that shifts it)."""
    dim = CASES[case][1]
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, dim)) * rng.choice([0.1, 1.0, 5.0, 30.0], size=dim)
    y = np.sin(X[:, 0]) + X[:, 1] * X[:, 2] / (1.0 + np.abs(X[:, 1])) + 0.1 * rng.normal(size=n)
    if case.startswith("records"):
        kinds = np.array(["red", "green", "blue"])[rng.integers(0, 3, size=n)]
        y += (kinds == "red") * 1.5
        rows: list[Any] = [{**{f"x{k}": None if rng.random() < 0.05 else float(X[i, k]) for k in range(5)},
                            "colour": str(kinds[i])} for i in range(n)]
        return rows, list(y)
    if case.startswith("binary"):
        return list(X), [bool(v) for v in y > np.median(y)]
    if case.startswith("10 classes"):
        return list(X), [int(v) for v in np.digitize(y, np.quantile(y, np.linspace(0.1, 0.9, 9)))]
    return list(X), list(y)


def child(case: str, rows: int, saves: int) -> dict[str, Any]:
    """In a child process on a checkout's ``kons``: the state bytes and save/load times of the learner of
    ``rows`` rows."""
    import kons

    task = CASES[case][0]
    X, y = _rows(case, rows)
    learner = kons.Auto(task=task, seed=0)
    for x, target in zip(X, y, strict=True):
        learner.learn_one(x, target)
    save, load = [], []
    for _ in range(saves):
        start = time.process_time()
        blob = learner.to_bytes()
        middle = time.process_time()
        kons.load(blob)
        save.append(middle - start)
        load.append(time.process_time() - middle)
    grid = learner._grid
    assert grid is not None  # built after the warm-up
    sizes = [b.stats()["dictionary_size"] for b in grid.bases if hasattr(b, "max_dictionary")]
    return {"kons": kons.__file__, "bytes": len(blob), "zlib": len(zlib.compress(blob, 1)),
            "save_ms": 1e3 * statistics.median(save), "load_ms": 1e3 * statistics.median(load),
            "dictionaries": sizes, "changes": learner.stats()["changes"]}


def _run_child(tree: Path, case: str, rows: int, saves: int) -> dict[str, Any]:
    """:func:`child` in a fresh process importing the ``kons`` of ``tree``, with one BLAS thread."""
    from benchmarks.common import blas_env

    this = str(Path(__file__).resolve())
    code = ("import json, runpy, sys; "
            f"print(json.dumps(runpy.run_path({this!r})['child'](*json.loads(sys.argv[1]))))")
    env = {**os.environ, **blas_env(1), "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", code, json.dumps([case, rows, saves])], cwd=tree, env=env,
                          check=True, capture_output=True, text=True)
    measured: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    if Path(measured["kons"]).parents[1] != tree:
        raise RuntimeError(f"the child imported {measured['kons']}, not the kons of {tree}")
    return measured


def _commit_of(tree: Path) -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True)
    return head.stdout.strip() or tree.name


def main(argv: list[str] | None = None) -> None:
    from benchmarks.common import REPO, command_line, machine_summary, markdown_table
    from benchmarks.provenance import provenance, publish

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, nargs="*", default=[],
                        help="checkouts of the code to compare with, oldest first")
    parser.add_argument("--names", nargs="*", default=[], help="a name for each --old checkout")
    parser.add_argument("--cases", nargs="*", choices=list(CASES), default=list(CASES))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--saves", type=int, default=5, help="saves and loads timed per run")
    parser.add_argument("--rows", type=int, help="rows learnt in every case (else: each case's own)")
    parser.add_argument("--out", type=Path, help="folder for state_bytes.md (else: stdout only)")
    args = parser.parse_args(argv)
    stamp = provenance(SOURCES)  # the code the children of this checkout import, as the run starts
    names = args.names or [_commit_of(tree) for tree in args.old]
    trees = {**dict(zip(names, args.old, strict=True)), "this checkout": REPO}
    command = command_line("benchmarks.state_bytes", argv, outputs=("--out",))
    loads: list[float] = []
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for case in args.cases:
        results[case] = {label: [] for label in trees}
        for repeat in range(args.repeats):
            for label, tree in (list(trees.items()) if repeat % 2 == 0 else list(trees.items())[::-1]):
                results[case][label].append(_run_child(tree.resolve(), case, args.rows or CASES[case][2],
                                                       args.saves))
            loads.append(os.getloadavg()[0])
    header = ["case", *(f"bytes, {label}" for label in trees), *(f"this / {label}" for label in names),
              "zlib(1) bytes, this checkout", f"save (ms) {' / '.join(trees)}",
              f"load (ms) {' / '.join(trees)}", "dictionaries (this checkout)"]
    rows = []
    for case, runs in results.items():
        first = {label: rs[0] for label, rs in runs.items()}
        mine = first["this checkout"]
        median = {label: {key: statistics.median(r[key] for r in rs) for key in ("save_ms", "load_ms")}
                  for label, rs in runs.items()}
        rows.append([case, *(f"{first[label]['bytes']:,}" for label in trees),
                     *(f"{mine['bytes'] / first[label]['bytes']:.3f}" for label in names),
                     f"{mine['zlib']:,}",
                     " / ".join(f"{median[label]['save_ms']:.1f}" for label in trees),
                     " / ".join(f"{median[label]['load_ms']:.1f}" for label in trees),
                     str(sorted(set(mine["dictionaries"]))) + f", {mine['changes']} changes"])
    lines = [
        "# The saved state of a mature `auto`",
        "",
        f"Command: `OPENBLAS_NUM_THREADS=1 {command}` at commit {stamp['commit'][:7]}"
        + (" (with local changes)" if stamp["dirty"] else "")
        + "".join(f"; {label}: {tree}" for label, tree in zip(names, args.old, strict=True))
        + f". Machine: {machine_summary()}; load average {min(loads):.1f}-{max(loads):.1f} over the run.",
        "",
        "Each case's learner learns the same rows in every checkout (the Nystrom dictionaries full, bound "
        "200: their sizes in the last column); bytes are `len(to_bytes())` (the same in every repeat); save "
        f"and load are CPU times, medians of {args.saves} calls in each of {args.repeats} runs per "
        "checkout, then of the runs, the checkouts alternating. The service stores snapshots as they are; "
        "zlib at level 1 is for reference.",
        "",
        *markdown_table(header, rows),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        publish(args.out, "state_bytes", stamp, text, {"command": command, "trees": {
            label: str(tree) for label, tree in trees.items()}, "results": results})


if __name__ == "__main__":
    main()
