"""Naps of the grid's own members (:data:`kons.auto.config.MEMBER_NAP_WEIGHT`): a member whose weight has
stayed negligible for NAP_ROUNDS rounds leaves the mixture, its learner called no more, and enters again at
the grid's prior at the next change declared, as the kinds that nap do; a learner saved mid-nap goes on as it
would. On the stream below the raw view's member of width factor 1 and step 10 naps while its sharers of the
same dictionary at steps 0.1 and 1 play on and grow it: it wakes on its own copy of the members it took
(docs/auto-log.md, "The members nap")."""

from __future__ import annotations

from typing import Any, cast

import pytest

import kons
import kons.auto.grid
from kons.auto.config import GRID, MEMBER_NAP_WEIGHT, NAP_ROUNDS
from kons.auto.experts.newton import LearnerExpert
from kons.auto.grid import GRID_PRIOR, Grid
from kons.auto.mixture import Mixture
from kons.kernel.nystrom_kons import NystromKONS
from kons.preprocessing import nested_blob
from tests.kons.streams import goes_on_identically, linear_then_flipped

FLIP = 1600
#: The member that naps first on the stream, and the members sharing its dictionary.
NAPPER = GRID.index(("raw", "nystrom", 1.0, 10.0))
LARGER_DICTIONARY = 400
SHARERS = [GRID.index(("raw", "nystrom", 1.0, step)) for step in (0.1, 1.0)]


def _sharers_sizes(grid: Grid) -> list[int]:
    """The sizes of the embeddings of the napper's sharers."""
    return [cast(NystromKONS, grid.members[i].base)._size for i in SHARERS]


@pytest.fixture(autouse=True)
def larger_dictionaries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dictionaries that still grow while a member naps (at MAX_DICTIONARY they are full by then)."""
    monkeypatch.setattr(kons.auto.grid, "MAX_DICTIONARY", LARGER_DICTIONARY)


def test_a_negligible_member_naps_uncalled_and_wakes_at_a_change(monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[LearnerExpert] = []
    for method in ("predict", "learn"):
        original = getattr(LearnerExpert, method)

        def counted(self: LearnerExpert, *args: Any, _original: Any = original) -> Any:
            called.append(self)
            return _original(self, *args)

        monkeypatch.setattr(LearnerExpert, method, counted)
    entered: list[tuple[list[int], Any]] = []
    enter = Mixture.enter

    def entering(self: Mixture, slots: list[int], prior: Any) -> None:
        entered.append((list(slots), prior))
        enter(self, slots, prior)

    monkeypatch.setattr(Mixture, "enter", entering)
    X, y = linear_then_flipped(FLIP + 100, FLIP)
    learner = kons.Auto()
    napped = woke = None
    sharers_learnt = False
    for r, (x, t) in enumerate(zip(X, y, strict=True)):
        grid = learner._grid
        before = None
        if grid is not None:
            base = grid.members[NAPPER].base
            before = (grid.naps[grid.layout[NAPPER]][1], grid.mixture.weights()[NAPPER],
                      nested_blob(base).tobytes(), _sharers_sizes(grid))
        called.clear()
        entered.clear()
        learner.learn_one(x, t)
        grid = learner._grid
        if before is None or grid is None:
            continue
        was_napping, weight, blob, sizes = before
        napping = bool(grid.naps[grid.layout[NAPPER]][1])
        in_play = bool(grid.mixture.switching.active[NAPPER])
        member = grid.members[NAPPER]
        if napping:
            assert not in_play
            if was_napping:  # neither called nor learning, while its sharers learn
                assert not any(expert is member for expert in called)
                assert nested_blob(member.base).tobytes() == blob
                sharers_learnt |= _sharers_sizes(grid) != sizes
            else:  # it naps now: below MEMBER_NAP_WEIGHT for NAP_ROUNDS rounds in play
                napped = r
                assert weight < MEMBER_NAP_WEIGHT
        elif was_napping:  # a change was declared this round: back at once, at the grid's prior
            woke = r
            assert grid.last_change == grid.rounds and in_play
            assert ([NAPPER], GRID_PRIOR) in entered
        else:
            assert in_play
            assert any(expert is member for expert in called)
    assert napped is not None and woke is not None and NAP_ROUNDS < napped < FLIP <= woke
    assert sharers_learnt  # its dictionary grew while it napped (its sharers' rows it did not take)


@pytest.mark.parametrize("saved_at", [1500, FLIP + 20])  # napping; after the change, in play again
def test_a_learner_saved_with_a_napping_member_plays_on_bit_identically(saved_at: int) -> None:
    X, y = linear_then_flipped(FLIP + 300, FLIP)
    learner = kons.Auto()
    for x, t in zip(X[:saved_at], y[:saved_at], strict=True):
        learner.learn_one(x, t)
    grid = learner._grid
    assert grid is not None and grid.naps[grid.layout[NAPPER]][1] == (saved_at < FLIP)
    copy = kons.Auto.from_bytes(learner.to_bytes())
    assert copy._grid is not None and copy._grid.naps == grid.naps
    goes_on_identically(learner, X, y, saved_at)
