"""The state of the threshold model since a declared change (two classes): its learner is built at its
first start, so a learner that never declared a change holds and saves none; saved before, at and long
after that start it goes on exactly; a state saved while the model was built with the grid loads; held, it
does not start (a held learner keeps its size), and the growth bound counts the learner its start builds."""

from __future__ import annotations

import numpy as np
import pytest

import kons
import kons._state
from kons.auto.experts.newton import _new_bins_base
from kons.preprocessing import nested_blob
from tests.kons.auto_internals import grid_of
from tests.kons.streams import goes_on_identically
from tests.kons.test_fresh_bins import CHANGE, _fresh, _learnt, _stream


def _started_at(X: np.ndarray, y: np.ndarray) -> int:
    """The round the threshold model first starts at on the stream (the change's first declaration)."""
    model = _learnt(X, y, CHANGE)
    for r, (x, t) in enumerate(zip(X[CHANGE:], y[CHANGE:], strict=True), CHANGE + 1):
        model.learn_one(x, t)
        if _fresh(grid_of(model)).start >= 0:
            return r
    raise AssertionError("no change declared")


@pytest.mark.parametrize("classes", [2, 10])
def test_a_learner_that_never_declared_a_change_saves_no_learner_for_it(classes: int) -> None:
    X, y = _stream(CHANGE)
    labels = y if classes == 2 else np.digitize(X[:, 0], np.quantile(X[:, 0], np.linspace(0, 1, 11)[1:-1]))
    model = _learnt(X, labels, CHANGE)
    grid = grid_of(model)
    assert grid.changes == 0 and _fresh(grid).start == -1 and _fresh(grid).model is None
    header, arrays = kons._state.decode(model.to_bytes())
    assert "fresh_bins_base" not in arrays and header["scalars"]["fresh_bins"] == -1
    assert _fresh(grid).nbytes() == 0


def test_saved_before_at_and_after_its_start_it_goes_on_identically() -> None:
    X, y = _stream(CHANGE + 400)
    start = _started_at(X, y)
    for saved_at in (CHANGE - 50, start, start + 200):  # not started, started that round, long after
        goes_on_identically(_learnt(X, y, saved_at), X, y, saved_at)


def test_a_state_saved_with_the_learner_built_before_its_start_loads_and_goes_on_as_today_s() -> None:
    X, y = _stream(CHANGE + 300)
    model = _learnt(X, y, CHANGE - 50)
    grid = grid_of(model)
    header, arrays = kons._state.decode(model.to_bytes())
    # as a state saved while the model was built with the grid: a new learner, not started
    arrays["fresh_bins_base"] = nested_blob(_new_bins_base(grid, _fresh(grid).bins))
    earlier = kons.load(kons._state.encode(header, arrays))
    assert earlier.to_bytes() == model.to_bytes()  # (the new learner not kept)
    for x, t in zip(X[CHANGE - 50:], y[CHANGE - 50:], strict=True):
        assert earlier.predict_one(x) == model.predict_one(x)
        assert earlier.learn_one(x, t) == model.learn_one(x, t)
    assert earlier.to_bytes() == model.to_bytes() and _fresh(grid_of(earlier)).start > CHANGE


def test_held_it_does_not_start_and_unheld_its_learner_is_counted_in_the_growth() -> None:
    X, y = _stream(CHANGE + 300)
    held, free = _learnt(X, y, CHANGE), _learnt(X, y, CHANGE)
    held.hold_growth(True)
    size = held.state_nbytes()
    bound, free_size = free.max_growth_nbytes(300), free.state_nbytes()
    assert bound >= 8 * _fresh(grid_of(free)).bins.dim ** 2  # (its learner's inverse curvature, at least)
    for x, t in zip(X[CHANGE:], y[CHANGE:], strict=True):
        held.learn_one(x, t)
        free.learn_one(x, t)
    assert grid_of(held).changes >= 1 and _fresh(grid_of(held)).start == -1 and held.state_nbytes() == size
    assert _fresh(grid_of(free)).start > CHANGE and free.state_nbytes() - free_size <= bound
