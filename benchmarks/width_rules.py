"""Which default RBF width on preprocessed raw data: the median heuristic against 1/d, 0.5/d and gamma = 1.

Each rule replaces :func:`kons.preprocessing.median_width` (the only difference between the runs: same
warm-up, same standardisation, same learners at ``learner_from_params(name, {})``), on the first ``n`` raw
rows of each data set (bench-protocol order); metric as in :mod:`benchmarks.raw_regime`. Prints one
line per (data set, rule, learner) and the geometric mean of each rule's ratio to the best rule.

    python -m benchmarks.width_rules --n 3000
"""

from __future__ import annotations

import argparse
import collections
import math

import numpy as np

import kons
import kons.preprocessing as preprocessing
from benchmarks.quality import CLASSIFICATION, REGRESSION
from kons.datasets import load_dataset

RULES = {
    "median": preprocessing.median_width,
    "1/d": lambda Z: 1.0 / Z.shape[1],
    "0.5/d": lambda Z: 0.5 / Z.shape[1],
    "gamma=1": lambda Z: 1.0,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=3000)
    args = parser.parse_args()
    table: dict[tuple[str, str], dict[str, float]] = collections.defaultdict(dict)
    for name in REGRESSION + CLASSIFICATION:
        data = load_dataset(name, args.n, standardize=False)
        regression = data.task == "regression"
        for rule, width in RULES.items():
            preprocessing.median_width = width
            for algorithm in ("nystrom_kons", "sketched_kons"):
                learner = kons.learner_from_params(algorithm, {} if regression else {"loss": "logistic"})
                played = learner.learn_many(data.X, data.y)
                metric = (np.mean((played - data.y) ** 2) / np.var(data.y) if regression
                          else np.mean(np.sign(played) != data.y))
                table[name, algorithm][rule] = float(metric)
                print(name, rule, algorithm, round(float(metric), 4), flush=True)
        preprocessing.median_width = RULES["median"]
    for rule in RULES:
        ratios = [runs[rule] / min(runs.values()) for runs in table.values()]
        mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"{rule}: geometric mean ratio to the best rule {mean:.4f}, worst {max(ratios):.3f}")


if __name__ == "__main__":
    main()
