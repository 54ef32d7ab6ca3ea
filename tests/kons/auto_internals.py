"""Reaching into a trained :class:`kons.Auto` for the tests that check its grid's state."""

from __future__ import annotations

import kons
from kons.auto.grid import Grid


def grid_of(learner: kons.Learner) -> Grid:
    """The grid of an ``auto`` learner past its warm-up (fails the test otherwise)."""
    assert isinstance(learner, kons.Auto)
    grid = learner._grid
    assert grid is not None
    return grid
