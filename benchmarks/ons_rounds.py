"""The cost of an ONS round on wide sparse rows and on dense ones, this checkout against another.

ONS keeps the (d, d) inverse of its second-order matrix and downdates it by a rank-one term each round
(:func:`kons._numerics.subtract_scaled_outer`), whatever the row's sparsity: at d = 2,000 that is 4 million
numbers a round. Each case runs in a fresh process per checkout, the checkouts alternating, several
times, so that both see the same machine load; a case reports the median over repetitions of the median
round (after a warm-up), and the ratio baseline / this checkout::

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.ons_rounds --baseline PATH --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks import registry
from benchmarks.common import REPO, command_line, git_commit, machine_summary, markdown_table
from benchmarks.provenance import provenance, publish

#: (dimension, sparse rows (1% of the features non-zero) or dense, timed rounds)
CASES = ((500, True, 200), (2000, True, 60), (200, False, 400), (8, False, 2000))
WARM_UP = 20
DENSITY = 0.01

_CHILD = r"""
import json, sys, time
import numpy as np
import kons
from kons import SparseVector
d, sparse, rounds, warm_up, density, seed = (int(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3]),
                                             int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]))
rng = np.random.default_rng(seed)
X = rng.normal(size=(rounds + warm_up, d))
if sparse:
    X[rng.random(X.shape) >= density] = 0.0
rows = [SparseVector.from_dense(x) for x in X] if sparse else list(X)
y = rng.choice([-1.0, 1.0], size=len(rows))
learner = kons.ONS(loss="logistic", dim=d)
times = []
for t, (x, label) in enumerate(zip(rows, y)):
    start = time.perf_counter()
    learner.learn_one(x, label)
    if t >= warm_up:
        times.append(time.perf_counter() - start)
print(json.dumps({"module": kons.__file__, "median_s": sorted(times)[len(times) // 2]}))
"""


def _median_round(checkout: Path, d: int, sparse: bool, rounds: int, seed: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(checkout), "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(d), "1" if sparse else "0", str(rounds),
                           str(WARM_UP), str(DENSITY), str(seed)],
                          cwd=checkout, env=env, capture_output=True, text=True, check=True)
    answer = json.loads(done.stdout)
    if not answer["module"].startswith(str(checkout)):
        raise RuntimeError(f"{checkout} imported kons from {answer['module']}")
    return float(answer["median_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="another checkout, measured alike")
    parser.add_argument("--repeats", type=int, default=7, help="processes per case and checkout")
    parser.add_argument("--out", type=Path, default=None, help="write ons_rounds.md there")
    args = parser.parse_args()
    stamp = provenance(registry.sources_of("ons_rounds.md") or ())
    checkouts = {"this checkout": REPO, "baseline": args.baseline.resolve()}
    rows = []
    for d, sparse, rounds in CASES:
        medians: dict[str, list[float]] = {name: [] for name in checkouts}
        for seed in range(args.repeats):
            order = list(checkouts.items()) if seed % 2 else list(checkouts.items())[::-1]
            for name, checkout in order:
                medians[name].append(_median_round(checkout, d, sparse, rounds, seed))
        now, before = (statistics.median(medians[name]) for name in checkouts)
        rows.append((str(d), f"sparse, {DENSITY:.0%} non-zero" if sparse else "dense", str(rounds),
                     f"{before * 1e3:.3f}", f"{now * 1e3:.3f}", f"{before / now:.2f}x"))
        print(*rows[-1], flush=True)
    baseline_commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkouts["baseline"],
                                     capture_output=True, text=True).stdout.strip() or "unknown"
    lines = [
        "# ONS rounds on wide sparse rows and on dense ones",
        "",
        f"`{command_line('benchmarks.ons_rounds', outputs=['--out'])}` at {git_commit()}; baseline "
        f"`{args.baseline}` at commit `{baseline_commit}`; {machine_summary()}. Logistic ONS with its "
        f"defaults, standard normal features, labels +-1; {WARM_UP} untimed rounds, then the median "
        f"round of each process; the median over {args.repeats} processes per checkout, alternated.",
        "",
        *markdown_table(["d", "rows", "rounds timed", "baseline ms/round", "this checkout ms/round",
                         "baseline / this"], rows, "llrrrr"),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        publish(args.out, "ons_rounds", stamp, text)


if __name__ == "__main__":
    main()
