"""Light members (docs/auto.md#light_weight-light_rounds-and-light_every): a member of the grid whose weight
has stayed below LIGHT_WEIGHT for LIGHT_ROUNDS rounds (MANY_CLASSES_LIGHT_ROUNDS on three classes or more),
once its learner no longer grows, learns only every LIGHT_EVERY-th row of regression or of three classes or
more; it plays every round, and learns every row again once its weight rises or a change is declared. Two
classes count no light rounds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kons
from kons.auto.config import GRID, LIGHT_EVERY, LIGHT_ROUNDS, LIGHT_WEIGHT, MANY_CLASSES_LIGHT_ROUNDS
from kons.auto.grid import Grid
from kons.errors import StateFormatError
from kons.preprocessing import nested_blob
from tests.kons.auto_internals import grid_of
from tests.kons.streams import linear_then_flipped

ROWS, FLIP = 2200, 1800


def _blobs(grid: Grid) -> list[bytes]:
    return [nested_blob(member.base).tobytes() for member in grid.members]


def _three_classes(rows: int, flip: int) -> tuple[np.ndarray, np.ndarray]:
    """The linear target's terciles as three classes, their order reversed at round ``flip``."""
    X, y = linear_then_flipped(rows, rows)
    labels = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))
    labels[flip:] = 2 - labels[flip:]
    return X, labels


#: The tasks whose members go light: a stream that the Newton and linear members learn, changed at FLIP, and
#: the light rounds after which a member rests.
TASKS = {"regression": (linear_then_flipped, "regression", LIGHT_ROUNDS),
         "three classes": (_three_classes, "classification", MANY_CLASSES_LIGHT_ROUNDS)}


@pytest.mark.parametrize("task", TASKS)
def test_a_light_member_learns_every_few_rows_and_all_again_at_a_change(task: str) -> None:
    stream, kind, rounds = TASKS[task]
    X, y = stream(ROWS, FLIP)
    learner = kons.Auto(task=kind)
    skipped = learnt_light = 0
    for x, t in zip(X, y, strict=True):
        grid = learner._grid
        before = None if grid is None else (list(grid.light), _blobs(grid),
                                            [member.growth_nbytes(1) != 0 for member in grid.members])
        learner.learn_one(x, t)
        grid = learner._grid
        if before is None or grid is None:
            continue
        light, blobs, growing = before
        after, weights = _blobs(grid), grid._weights()  # (the round's weights, which count it)
        for slot in range(len(GRID)):
            counted = grid.light[slot]
            if grid.last_change == grid.rounds or weights[slot] >= LIGHT_WEIGHT:
                assert counted == 0
            else:
                assert counted == light[slot] + 1
            rests = (light[slot] >= rounds and (light[slot] - rounds) % LIGHT_EVERY != 0
                     and not growing[slot])
            if rests:  # it played, learning nothing
                assert after[slot] == blobs[slot]
                skipped += 1
            elif light[slot] >= rounds and not growing[slot]:
                learnt_light += 1
    grid = grid_of(learner)
    assert grid.changes >= 1
    # the members went light before the change, and learnt one light row in LIGHT_EVERY
    assert skipped > 0 and learnt_light > 0
    assert skipped == pytest.approx((LIGHT_EVERY - 1) * learnt_light, rel=0.1)


def test_a_light_member_held_learns_every_row_again_once_its_growth_is_let_go() -> None:
    X, y = linear_then_flipped(ROWS, FLIP)
    learner = kons.Auto()
    learner.hold_growth(True)  # from the start: the members' dictionaries stop short of full
    released = 1400
    rested = set()
    for i, (x, t) in enumerate(zip(X[:released], y[:released], strict=True)):
        before = None if learner._grid is None or i < released - LIGHT_EVERY else _blobs(learner._grid)
        learner.learn_one(x, t)
        if before is not None:
            rested |= {slot for slot, blob in enumerate(_blobs(grid_of(learner))) if blob == before[slot]}
    grid = grid_of(learner)
    learner.hold_growth(False)
    growing = {slot for slot, member in enumerate(grid.members)
               if grid.light[slot] >= LIGHT_ROUNDS and member.growth_nbytes(1) != 0}
    assert growing & rested  # held, they rested as learners that no longer grow
    for x, t in zip(X[released:released + LIGHT_EVERY], y[released:released + LIGHT_EVERY], strict=True):
        before = _blobs(grid)
        learner.learn_one(x, t)
        after = _blobs(grid)
        assert all(after[slot] != before[slot] for slot in growing)


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("saved_at", [1500, FLIP + 5])  # members light; all learning after the change
def test_a_learner_saved_with_light_members_plays_on_bit_identically(task: str, saved_at: int) -> None:
    stream, kind, rounds = TASKS[task]
    X, y = stream(ROWS, FLIP)
    learner = kons.Auto(task=kind)
    for x, t in zip(X[:saved_at], y[:saved_at], strict=True):
        learner.learn_one(x, t)
    grid = grid_of(learner)
    if saved_at < FLIP:
        assert any(count > rounds and (count - rounds) % LIGHT_EVERY for count in grid.light)
    copy = kons.Auto.from_bytes(learner.to_bytes())
    assert grid_of(copy).light == grid.light
    for x, t in zip(X[saved_at:], y[saved_at:], strict=True):
        if kind == "regression":
            assert learner.predict_one(x) == copy.predict_one(x)
            assert learner.learn_one(x, t) == copy.learn_one(x, t)
        else:  # the classes' probabilities
            assert learner.predict_proba_dict_one(x) == copy.predict_proba_dict_one(x)
            assert learner.learn_proba_one(x, t) == copy.learn_proba_one(x, t)
    assert learner.to_bytes() == copy.to_bytes()


def _learnt_with_light_members() -> kons.Auto:
    """A regression learner after a change, some of its members counting light rounds."""
    X, y = linear_then_flipped(1200, FLIP)
    learner = kons.Auto()
    for x, t in zip(X, y, strict=True):
        learner.learn_one(x, t)
    assert any(grid_of(learner).light)
    return learner


@pytest.mark.parametrize("wrong", [
    lambda light: light[:-1],  # one member's count missing
    lambda light: [*light, 0],  # one count too many
    lambda light: [light[0] + 0.5, *light[1:]],  # not a count (int() would load it as one)
    lambda light: [float(light[0]), *light[1:]],  # a float, even a whole one
    lambda light: [True, *light[1:]],
    lambda light: [-1, *light[1:]],
    lambda light: [str(light[0]), *light[1:]],
], ids=["short", "long", "fraction", "float", "bool", "negative", "string"])
def test_light_rounds_saved_wrong_are_refused(wrong: Callable[[list[int]], list[Any]]) -> None:
    learner = _learnt_with_light_members()
    grid = grid_of(learner)
    grid.light = wrong(grid.light)
    with pytest.raises(StateFormatError, match="light rounds"):
        kons.Auto.from_bytes(learner.to_bytes())


def test_a_state_saved_before_light_rounds_loads_with_every_member_learning() -> None:
    learner = _learnt_with_light_members()
    grid = grid_of(learner)
    grid.light = [0] * len(GRID)  # as a state saved before: nothing saved
    state = learner.to_bytes()
    assert b'"light"' not in state
    copy = kons.Auto.from_bytes(state)
    assert grid_of(copy).light == [0] * len(GRID)
    copy.learn_one(np.ones(5), 1.0)


def test_two_classes_count_no_light_rounds() -> None:
    X, y = linear_then_flipped(1200, FLIP, labels=True)
    learner = kons.Auto(task="classification")
    for x, t in zip(X, y, strict=True):
        learner.learn_one(x, t)
    grid = grid_of(learner)
    assert (grid.mixture.weights()[:len(GRID)] < LIGHT_WEIGHT).any()  # members a regression grid would count
    assert grid.light == [0] * len(GRID)
