"""``Auto.state_nbytes`` (the size the service asks after every round, counted from shapes) is the sum of the
arrays the learner actually saves, each shared dictionary once, at every round of streams with restarts and
generations, naps, ten classes and records, and after a restore."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import kons
from kons.auto.experts.fresh_bins import FreshThresholds
from kons.auto.experts.newton import LearnerExpert, ThresholdExpert
from kons.auto.grid import Grid
from kons.base import Learner, arrays_nbytes
from kons.kernel.nystrom_kons import dictionaries_saved_apart
from tests.kons.streams import linear_then_flipped

#: Rounds between two checks (every round would make the test slow; any stride not dividing the streams'
#: events lands on rounds of every kind).
STRIDE = 7


def _gathered_nbytes(learner: Learner) -> int:
    """A nested learner's bytes from the arrays it gathers (inside :func:`dictionaries_saved_apart`, a
    Nystrom learner's without the dictionary its composite saves)."""
    return (arrays_nbytes(learner._arrays()) if learner._has_model else 0) + learner._conformal_nbytes()


def _saved_nbytes(grid: Grid) -> int:
    """The grid's size from the arrays it saves: the experts', the dictionaries saved apart, its own."""
    nested = grid._nested_learners()  # as grid.arrays() saves them
    total = arrays_nbytes(grid.own_arrays())
    with dictionaries_saved_apart(nested, "dictionary_") as dictionaries:
        total += arrays_nbytes(dictionaries)
        for slot, expert in grid.alive():
            if isinstance(expert, FreshThresholds):  # (its thresholds saved by the threshold model's; no
                # learner before it starts)
                total += _gathered_nbytes(expert.model.base) if expert.model is not None else 0
            elif isinstance(expert, ThresholdExpert):  # (a LearnerExpert too)
                total += _gathered_nbytes(expert.base) + arrays_nbytes(expert.bins.arrays())
            elif isinstance(expert, LearnerExpert):
                total += _gathered_nbytes(expert.base)
            else:
                total += arrays_nbytes(expert.arrays(grid.layout[slot]))
    return total


def _reference(learner: kons.Auto) -> int:
    grid = learner._grid
    return (learner._prep.nbytes() + (_saved_nbytes(grid) if grid is not None and learner._prep.ready else 0)
            + learner._conformal_nbytes())


def _checked(learner: kons.Auto, rows: Iterator[tuple[Any, Any]]) -> kons.Auto:
    """Learn the rows, checking the size against the reference every :data:`STRIDE` rounds; the learner."""
    for r, (x, y) in enumerate(rows):
        learner.learn_one(x, y)
        if r % STRIDE == 0:
            assert learner.state_nbytes() == _reference(learner), r
    restored = kons.load(learner.to_bytes())
    assert isinstance(restored, kons.Auto)
    assert restored.state_nbytes() == learner.state_nbytes() == _reference(restored)
    return restored


def test_the_size_of_a_regression_with_generations_is_that_of_its_saved_arrays() -> None:
    X, y = linear_then_flipped(900, 300)
    learner = _checked(kons.Auto(seed=0), iter(zip(X, y.tolist(), strict=True)))
    grid = learner._grid
    assert grid is not None and grid.changes >= 1  # generations were started
    _checked(learner, iter(zip(X[:60], y[:60].tolist(), strict=True)))  # the restored one, continued


@pytest.mark.parametrize("classes", [2, 10])
def test_the_size_of_a_classifier_napping_or_of_ten_classes_is_that_of_its_saved_arrays(classes: int) -> None:
    rng = np.random.default_rng(5)
    X = rng.normal(size=(700, 6))
    score = X @ rng.normal(size=6)
    labels = np.digitize(score, np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1]))
    labels[400:] = (labels[400:] + 1) % classes  # a change: restarts
    learner = kons.Auto(task="classification", seed=0)
    learner.track_coverage(0.9)  # the conformal component counts too
    _checked(learner, iter(zip(X, [f"c{k}" for k in labels], strict=True)))


def test_the_size_of_a_records_learner_is_that_of_its_saved_arrays() -> None:
    rng = np.random.default_rng(9)
    rows = [({"a": float(v), "kind": f"k{int(k)}", **({"late": 1.0} if r > 150 else {})}, float(v) * 2.0 + k)
            for r, (v, k) in enumerate(zip(rng.normal(size=400), rng.integers(0, 6, size=400), strict=True))]
    _checked(kons.Auto(seed=0), iter(rows))
