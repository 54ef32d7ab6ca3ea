"""Reaching into a trained :class:`kons.Auto` for the tests that check its grid's state."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pytest

import kons
from kons.auto.grid import Grid
from kons.base import Learner
from kons.preprocessing import nested_blob


def grid_of(learner: kons.Learner) -> Grid:
    """The grid of an ``auto`` learner past its warm-up (fails the test otherwise)."""
    assert isinstance(learner, kons.Auto)
    grid = learner._grid
    assert grid is not None
    return grid


@dataclass
class NapWalk:
    """The rounds at which a napping kind first napped and last woke over a stream (:func:`walk_naps`)."""

    napped: int | None = None
    woke: int | None = None


def walk_naps(learner: kons.Auto, rows: Iterable[tuple[Any, float]], name: str, slot: int,
              base_of: Callable[[Grid], Learner], label_shown: Callable[[dict[str, float]], bool],
              nap_weight: float, start_prior: float) -> NapWalk:
    """Learn ``rows`` one by one and check, each round, what a kind that naps (first slot ``name`` of the
    grid's naps, mixture slot ``slot``) promises: napping, it is out of the mixture and of ``stats()``'s
    weights (``label_shown`` finds it there) and its learner (``base_of``) neither learns nor plays; it naps
    only below ``nap_weight``; woken, a change was declared that round and it is back at ``start_prior``;
    otherwise it is in play (from the grid's start)."""
    walk = NapWalk()
    for r, (row, target) in enumerate(rows):
        grid = learner._grid
        before = None
        if grid is not None:
            nap = grid.naps[name][1]
            learnt = nested_blob(base_of(grid)).tobytes() if nap else None
            before = (nap, float(grid.mixture.weights()[slot]), learnt)
        learner.learn_one(row, target)
        grid = learner._grid
        if before is None or grid is None:
            continue
        was_napping, weight, learnt = before
        napping = bool(grid.naps[name][1])
        in_play = bool(grid.mixture.switching.active[slot])
        if napping:
            assert not in_play and not label_shown(learner.stats()["weights"])
            if was_napping:  # it neither learns nor plays
                assert nested_blob(base_of(grid)).tobytes() == learnt
            elif walk.napped is None:  # it naps now: below its nap weight
                walk.napped = r
                assert weight < nap_weight
        elif was_napping:  # a change was declared this round: back at once, at its start prior
            walk.woke = r
            assert grid.last_change == grid.rounds and in_play
            assert grid.mixture.weights()[slot] == pytest.approx(start_prior)
        else:
            assert in_play
    return walk
