"""NystromKONS against Sketched-KONS at equal settings, in both regimes of the benchmark protocol.

Also the growth rule of NystromKONS: *extend* the Newton state by one coordinate when the dictionary
grows (the learner) against PROS-N-KONS's *restart* (``u = 0``, ``A = alpha I`` at every growth; a
subclass defined here).

Every learner gets the same settings: RBF kernel, ``alpha = 1``, ``eta`` = the loss's curvature at ``C``,
``C = 3`` and the squared loss for regression, ``C = 1`` and the logistic loss for classification, KORS
``beta = 1``, ``epsilon = 0.5``, ``seed = 0`` (Sketched-KONS ``gamma = 0``; NystromKONS
``max_dictionary = 500``). Rows are scored by progressive validation (predict, then learn) as in
:mod:`benchmarks.quality` (same scored segment, :func:`benchmarks.quality.split_rows`).

* **paper** regime: :func:`kons.datasets.load_dataset` (whole-data z-scoring), RBF width from the
  median rule of :mod:`benchmarks.methods`.
* **raw** regime: rows as in the files; features and regression targets are z-scored *online* with the
  mean and deviation of the rows seen before the current one (a learner predicts in those units and its
  prediction is mapped back), the same wrapper for every learner; RBF width ``1 / (2 d)``, the median
  rule's value for z-scored data, so that nothing is computed from rows not yet seen.

Metrics as in the protocol: regression MSE divided by the variance of the scored targets, classification
error rate of ``sign(prediction)``.

Example::

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.nystrom_quality --T 5000 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import kons
from benchmarks import registry
from benchmarks.common import results_dir
from benchmarks.methods import median_gamma
from benchmarks.provenance import provenance, stamp_json, stamp_markdown
from benchmarks.quality import CLASSIFICATION, REGRESSION, split_rows
from kons._numerics import SymmetricMatrix
from kons.datasets import load_dataset
from kons.kernels import RBF
from kons.losses import get_loss

__all__ = ["OnlineScaler", "RestartingNystromKONS", "main", "score"]


class RestartingNystromKONS(kons.NystromKONS):
    """PROS-N-KONS's phases: every growth of the dictionary restarts the Newton state (not registered)."""

    def _grown(self, weights: np.ndarray, inverse: SymmetricMatrix) -> tuple[np.ndarray, SymmetricMatrix]:
        size = len(weights) + 1
        identity = np.eye(size)[np.tril_indices(size)] / self.alpha
        return np.zeros(size), SymmetricMatrix(identity)


#: label -> (class, parameters beyond the common ones); the first is the baseline, the second the learner.
LEARNERS: dict[str, tuple[type[kons.Learner], dict[str, Any]]] = {
    "SketchedKONS": (kons.SketchedKONS, {"gamma": 0.0}),
    "NystromKONS": (kons.NystromKONS, {}),
    "NystromKONS restart": (RestartingNystromKONS, {}),
    "NystromKONS j<=256": (kons.NystromKONS, {"max_dictionary": 256}),
    "NystromKONS j<=500": (kons.NystromKONS, {"max_dictionary": 500}),
}


class OnlineScaler:
    """Running mean and deviation (Welford) of the rows seen so far; ``scale`` uses only past rows."""

    def __init__(self, dim: int) -> None:
        self.n = 0
        self.mean = np.zeros(dim)
        self.m2 = np.zeros(dim)

    def scale(self, x: np.ndarray) -> np.ndarray:
        std = np.sqrt(self.m2 / self.n) if self.n > 1 else np.ones_like(self.mean)
        return (x - self.mean) / np.where(std > 0, std, 1.0)

    def unscale(self, z: np.ndarray) -> np.ndarray:
        std = np.sqrt(self.m2 / self.n) if self.n > 1 else np.ones_like(self.mean)
        return z * np.where(std > 0, std, 1.0) + self.mean

    def update(self, x: np.ndarray) -> None:
        self.n += 1
        delta = x - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (x - self.mean)


def score(learner: kons.Learner, X: np.ndarray, y: np.ndarray, regression: bool, online: bool) -> float:
    """Progressive-validation metric of ``learner`` on ``X, y`` (online z-scoring if ``online``)."""
    features = OnlineScaler(X.shape[1]) if online else None
    target = OnlineScaler(1) if online and regression else None
    played = np.empty(len(y))
    for t, (x, label) in enumerate(zip(X, y, strict=True)):
        z = features.scale(x) if features else x
        if target is not None:
            label_z = float(target.scale(np.array([label]))[0])
            played[t] = float(target.unscale(np.array([learner.learn_one(z, label_z)]))[0])
            target.update(np.array([label]))
        else:
            played[t] = learner.learn_one(z, label)
        if features:
            features.update(x)
    if regression:
        return float(np.mean((played - y) ** 2) / np.var(y))
    return float(np.mean(np.sign(played) != y))


def run(name: str, T: int, regime: str) -> dict[str, Any]:
    data = load_dataset(name, standardize=(regime == "paper"))
    scored, _ = split_rows(len(data.y), T, 2000)
    X, y = data.X[:scored], data.y[:scored]
    regression = data.task == "regression"
    C = 3.0 if regression else 1.0
    loss = "squared" if regression else "logistic"
    gamma = median_gamma(X) if regime == "paper" else 1.0 / (2 * X.shape[1])
    common = {"kernel": RBF(gamma=gamma), "loss": loss, "alpha": 1.0, "eta": get_loss(loss).curvature(C),
              "C": C, "beta": 1.0, "epsilon": 0.5, "seed": 0}
    row: dict[str, Any] = {"data": name, "regime": regime, "task": data.task, "rows": scored,
                           "dim": X.shape[1], "rbf_gamma": gamma, "results": {}}
    for label, (cls, extra) in LEARNERS.items():
        learner = cls(**common, **extra)
        start = time.perf_counter()
        metric = score(learner, X, y, regression, online=(regime == "raw"))
        stats = learner.stats()
        row["results"][label] = {"metric": metric, "seconds": time.perf_counter() - start,
                                 "dictionary": stats["dictionary_size"], "stored": stats["stored_points"],
                                 "state_bytes": len(learner.to_bytes())}
        print(f"  {name} {regime} {label}: {metric:.4f} ({row['results'][label]['seconds']:.1f} s, "
              f"dictionary {stats['dictionary_size']}, stored {stats['stored_points']})", flush=True)
    return row


def write_markdown(path: Path, rows: list[dict[str, Any]], meta: dict[str, Any],
                   stamp: dict[str, Any]) -> None:
    base, ours, *variants = list(LEARNERS)
    lines = [
        "# NystromKONS vs Sketched-KONS (equal settings); growth rule and dictionary bound",
        "",
        f"Command: `{meta['command']}`",
        "",
        f"Machine: {meta['machine']}. Seconds are wall time on 2 cores shared with other jobs (noisy).",
        "",
        "Settings (every learner): RBF, alpha = 1, eta = curvature of the loss at C, C = 3 with the squared "
        "loss (regression) or C = 1 with the logistic loss (classification), KORS beta = 1, epsilon = 0.5, "
        "seed 0; Sketched-KONS gamma = 0; NystromKONS at its defaults unless the column says otherwise "
        "(`restart`: PROS-N-KONS's restart of the Newton state at every growth instead of the extension; "
        "`j<=N`: max_dictionary = N). Regimes as in bench-protocol.md: *paper* = whole-data z-scoring and "
        "the median-rule RBF width; *raw* = rows as in the files, features and regression targets z-scored "
        "online from the rows before (the same wrapper for every learner), RBF width 1/(2d). Metric: "
        "regression MSE / variance of the scored targets, classification error rate (lower is better). "
        "`rel` = NystromKONS / Sketched-KONS - 1 (negative: NystromKONS better).",
        "",
        f"| data set | regime | rows | {base} | {ours} | rel | " + " | ".join(variants)
        + " | dictionary S / N | stored S / N | state bytes S / N | seconds S / N |",
        "|---" * (10 + len(variants)) + "|",
    ]
    for row in rows:
        r = row["results"]
        rel = r[ours]["metric"] / r[base]["metric"] - 1.0 if r[base]["metric"] > 0 else float("nan")
        lines.append(
            f"| {row['data']} | {row['regime']} | {row['rows']} | {r[base]['metric']:.4f} | "
            f"{r[ours]['metric']:.4f} | {100 * rel:+.1f}% | "
            + " | ".join(f"{r[v]['metric']:.4f}" for v in variants)
            + f" | {r[base]['dictionary']} / {r[ours]['dictionary']} | {r[base]['stored']} / "
            f"{r[ours]['stored']} | {r[base]['state_bytes']:,} / {r[ours]['state_bytes']:,} | "
            f"{r[base]['seconds']:.1f} / {r[ours]['seconds']:.1f} |")
    lines += ["", "## Summary", "", *_summary(rows), ""]
    path.write_text(stamp_markdown("\n".join(lines), stamp))


def _summary(rows: list[dict[str, Any]]) -> list[str]:
    """Counts read off the table: within 5%, better, worse; extend vs restart; the bound 256 vs 500."""
    base, ours, restart, small, large = list(LEARNERS)

    def rel(row: dict[str, Any], a: str, b: str) -> float:
        change: float = row["results"][a]["metric"] / row["results"][b]["metric"] - 1.0
        return change

    worse = [f"{r['data']} ({r['regime']}, {100 * rel(r, ours, base):+.1f}%)" for r in rows
             if rel(r, ours, base) > 0.05]
    better = sum(rel(r, ours, base) < 0.0 for r in rows)
    extend_wins = sum(r["results"][ours]["metric"] < r["results"][restart]["metric"] for r in rows)
    bound = max(rows, key=lambda r: rel(r, small, large))
    return [
        f"* NystromKONS vs Sketched-KONS: better on {better} of {len(rows)} (data set, regime) pairs, "
        f"within 5% or better on {len(rows) - len(worse)}; more than 5% worse on: "
        + (", ".join(worse) or "none") + ".",
        f"* Growth rule: extending the Newton state beats restarting it on {extend_wins} of {len(rows)}.",
        f"* Bound: max_dictionary = 256 instead of 500 costs at most {100 * rel(bound, small, large):+.1f}% "
        f"({bound['data']}, {bound['regime']}).",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild OUT/nystrom_quality.md from OUT/nystrom_quality.json")
    parser.add_argument("--T", type=int, default=5000)
    parser.add_argument("--datasets", default=",".join(REGRESSION + CLASSIFICATION))
    parser.add_argument("--regimes", default="paper,raw")
    parser.add_argument("--out", type=Path, default=None,
                        help="where results go (default: a new temporary directory)")
    args = parser.parse_args(argv)
    args.out = results_dir(args.out, "nystrom_quality")
    if args.report_only:
        raw = json.loads((args.out / "nystrom_quality.json").read_text())
        write_markdown(args.out / "nystrom_quality.md", raw["rows"], raw["meta"], raw["provenance"])
        return 0
    stamp = provenance(registry.sources_of("nystrom_quality.md") or ())  # the code imported now is what runs
    rows = []
    for regime in args.regimes.split(","):
        for name in args.datasets.split(","):
            rows.append(run(name, args.T, regime))
    meta = {
        "command": "OPENBLAS_NUM_THREADS=1 python -m benchmarks.nystrom_quality "
                   + shlex.join(sys.argv[1:] if argv is None else argv),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
                   f"numpy {np.__version__}, load average at the end "
                   + " / ".join(f"{v:.1f}" for v in os.getloadavg()),
    }
    (args.out / "nystrom_quality.json").write_text(
        json.dumps(stamp_json({"meta": meta, "rows": rows}, stamp), indent=1))
    write_markdown(args.out / "nystrom_quality.md", rows, meta, stamp)
    print(f"wrote {args.out / 'nystrom_quality.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
