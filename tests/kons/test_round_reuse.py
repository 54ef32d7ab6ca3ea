"""A learning round right after the prediction of the same row (a service's predict, then its feedback) takes
the prediction's row again (:meth:`kons.auto.grid.Grid.inputs`): it plays and leaves the state exactly as a
learning round alone, and only the very same row, bit for bit, is taken again."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kons
from kons.auto.grid import Grid


def _rows(task: str, n: int = 400) -> tuple[list[Any], list[Any]]:
    rng = np.random.default_rng(4)
    X = rng.normal(size=(n, 4)) * [1.0, 10.0, 0.1, 1.0]
    y = np.sin(X[:, 0]) + X[:, 2] * 5.0 + 0.1 * rng.normal(size=n)
    if task == "records":  # missing values and a category
        return ([{"a": None if i % 7 == 0 else float(r[0]), "b": float(r[1]), "c": float(r[2]),
                  "kind": "xy"[i % 2]} for i, r in enumerate(X)], list(y))
    if task == "classes":
        return list(X), [int(v) for v in np.digitize(y, [-0.5, 0.5])]
    return list(X), list(y)


@pytest.mark.parametrize("task", ["regression", "records", "classes"])
def test_a_round_after_its_prediction_plays_as_the_round_alone(task: str) -> None:
    rows, targets = _rows(task)
    learner_task = "classification" if task == "classes" else "regression"
    predicted, alone = kons.Auto(task=learner_task), kons.Auto(task=learner_task)
    for x, target in zip(rows, targets, strict=True):
        predicted.predict_one(x)
        assert predicted.learn_one(x, target) == alone.learn_one(x, target)
    assert predicted.to_bytes() == alone.to_bytes()


def test_a_row_written_into_the_predicted_array_is_learnt_as_itself() -> None:
    """A caller that reuses its buffer (predicts a row, writes the next one into the same array, learns it)
    plays and leaves the state as the rounds alone: no expert knows a row by its array."""
    rows, targets = _rows("classes", 600)
    predicted, alone = kons.Auto(task="classification"), kons.Auto(task="classification")
    buffer = np.zeros(4)
    for i, (x, target) in enumerate(zip(rows, targets, strict=True)):
        buffer[:] = rows[i - 1]
        predicted.predict_one(buffer)
        buffer[:] = x
        assert predicted.learn_one(buffer, target) == alone.learn_one(x, target)
    assert predicted.to_bytes() == alone.to_bytes()


def test_only_the_very_same_row_is_taken_again() -> None:
    rows, targets = _rows("regression")
    learner = kons.Auto()
    for x, target in zip(rows[:300], targets[:300], strict=True):
        learner.learn_one(x, target)
    grid = learner._grid
    assert isinstance(grid, Grid)
    x = np.array([0.5, 0.0, -0.25, 1.0])
    z = learner._prep.scaled(x)
    assert isinstance(z, np.ndarray)
    row, _ = grid.inputs(z, x)
    assert grid.inputs(z.copy(), x.copy())[0] is row  # equal arrays, other objects: the same row
    assert all(isinstance(form, np.ndarray) and not form.flags.writeable  # the experts read it only
               for form in row.forms.values())
    signed = x.copy()
    signed[1] = -0.0  # equal to 0.0, another row bit for bit
    assert grid.inputs(z, signed)[0] is not row
    learner.learn_one(x, 0.0)  # a round learnt: the grid's state changed, the row is made again
    assert grid.inputs(learner._prep.scaled(x), x)[0] is not row
