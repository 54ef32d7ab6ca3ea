"""River's multi-class peers (benchmarks/multiclass.py) answer the same in every process: their classes
reach River as ints, whose set order does not follow the process's hash seed as strings' does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: Every answer (class and probabilities) of River's tree and KNN on image_segments' first rows.
PLAY = """
from benchmarks import multiclass
X, y = multiclass.STREAMS["image_segments"](0)
for method in ("River HoeffdingAdaptiveTree", "River KNNClassifier"):
    runner = multiclass.METHODS[method](sorted(set(y), key=str))
    for x, label in zip(X[:400], y[:400]):
        predicted, proba = runner.step(x, label)
        print(predicted, sorted(proba.items()))
"""


def _answers(hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", PLAY], cwd=REPO, env=env, check=True, capture_output=True,
                          text=True).stdout


@pytest.mark.timeout(120)
def test_river_peers_on_named_classes_answer_the_same_under_any_hash_seed() -> None:
    pytest.importorskip("river")
    first = _answers("1")
    assert first.count("\n") == 800
    assert _answers("2") == first
