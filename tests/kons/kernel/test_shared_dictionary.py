"""NystromKONS learners that share one dictionary (:func:`kons.kernel.nystrom_kons.share_dictionaries`,
as ``auto``'s grid does) play exactly as the same learners alone, bit for bit, whatever their coins."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import pytest

import kons
from kons import NystromKONS
from kons._multinomial import multinomial_rounds
from kons.kernel.nystrom_kons import share_dictionaries
from tests.kons.kernel.test_nystrom_kons import ForcedJoins

PARAMS: dict[str, Any] = {"kernel": {"name": "rbf", "gamma": 0.5}, "alpha": 1.0, "C": 2.0, "seed": 5,
                          "max_dictionary": 30, "dim": 3}
STEPS = (0.01, 0.1, 1.0)


def _stream(n: int = 300) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(n, 3))
    return X, np.sin(2.0 * X[:, 0]) + 0.1 * rng.normal(size=n)


def _learners(cls: type[NystromKONS] = NystromKONS, **overrides: Any) -> list[NystromKONS]:
    return [cls(**{**PARAMS, "eta": eta, **overrides}) for eta in STEPS]


def _played(learners: Sequence[NystromKONS], X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each round, every learner predicts then learns the row (a grid's order); the plays, by learner."""
    plays = []
    for x, target in zip(X, y, strict=True):
        plays.append([learner.predict_one(x) for learner in learners]
                     + [learner.learn_one(x, target) for learner in learners])
    return np.array(plays)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_sharers_play_as_alone_bit_for_bit(loss: str) -> None:
    X, y = _stream()
    y = y if loss == "squared" else np.where(y > 0.0, 1.0, -1.0)
    alone = _learners(loss=loss)
    shared = _learners(loss=loss)
    share_dictionaries(shared)
    assert shared[0]._kors is shared[1]._kors is shared[2]._kors
    np.testing.assert_array_equal(_played(shared, X, y), _played(alone, X, y))
    assert [learner.to_bytes() for learner in shared] == [learner.to_bytes() for learner in alone]
    assert shared[0]._kors is shared[2]._kors and shared[0]._kors.size == 30  # still one, full


def test_multinomial_sharers_that_play_first_learn_as_alone_bit_for_bit() -> None:
    """Sharers of the multinomial round that play each row before learning it (their learning rounds take
    the play's scores and probabilities) learn and end as learners alone that never played."""
    X, y = _stream()
    labels = np.digitize(y, [-0.5, 0.5])
    runs = []
    for play in (False, True):
        learners = _learners(loss="logistic")
        for learner in learners:
            multinomial_rounds(learner)._widen(2)
        if play:
            share_dictionaries(learners)
        learnt = []
        for x, label in zip(X, labels, strict=True):
            if play:
                for learner in learners:
                    learner._class_probabilities(x)
            learnt += [learner._learn_class_checked(x, int(label)) for learner in learners]
        runs.append((np.array(learnt), [learner.to_bytes() for learner in learners]))
    np.testing.assert_array_equal(runs[1][0], runs[0][0])
    assert runs[1][1] == runs[0][1]


def test_a_sharer_whose_coins_differ_takes_its_own_copy() -> None:
    """One learner's coins keep rows 40 and 41 out that the others take: it goes on alone, exactly."""
    X, y = _stream()
    def forced(joins: set[int]) -> ForcedJoins:
        learner = ForcedJoins(**{**PARAMS, "eta": 0.1})
        learner.joins, learner.coin_rounds = frozenset(joins), []
        return learner
    everyone = set(range(0, 60, 2))
    runs = []
    for share in (False, True):
        learners = [forced(everyone), forced(everyone - {40, 42}), forced(everyone)]
        if share:
            share_dictionaries(learners)
        runs.append((_played(learners, X, y), [learner.to_bytes() for learner in learners], learners))
    np.testing.assert_array_equal(runs[1][0], runs[0][0])
    assert runs[1][1] == runs[0][1]
    learners = runs[1][2]
    assert learners[0]._kors is learners[2]._kors and learners[1]._kors is not learners[0]._kors


def test_only_equal_dictionaries_are_shared() -> None:
    X, y = _stream(50)
    young, old = _learners()[:2]
    old.learn_many(X, y)
    other_width = NystromKONS(**{**PARAMS, "kernel": {"name": "rbf", "gamma": 2.0}})
    share_dictionaries([old, young, other_width])
    assert young._kors is not old._kors and other_width._kors is not young._kors


def test_auto_shares_three_dictionaries_across_its_eight_kernel_members_and_after_a_load() -> None:
    X, y = _stream(400)
    model = kons.Auto(seed=0)
    model.learn_many(np.column_stack([X, X[:, :1] ** 2]), y)
    loaded = cast(kons.Auto, kons.load(model.to_bytes()))
    for learner in (model, loaded):
        assert learner._grid is not None
        bases = [base for base in learner._grid.bases if isinstance(base, NystromKONS)]
        assert len(bases) == 8
        assert len({id(base._kors) for base in bases}) == 3
    assert loaded.to_bytes() == model.to_bytes()


def test_auto_with_three_classes_plays_as_with_each_members_own_dictionary() -> None:
    """The multinomial round (the members' score columns) on shared dictionaries, from before the grid's
    dictionaries are full to after: the same probabilities and the same state as with private copies."""
    X, y = _stream(500)
    labels = [f"class {i}" for i in np.digitize(y, [-0.5, 0.5])]
    shared = kons.Auto(task="classification", seed=0)
    shared.learn_many(X[:150], labels[:150])
    alone = cast(kons.Auto, kons.load(shared.to_bytes()))
    assert alone._grid is not None
    for base in alone._grid.bases:
        if isinstance(base, NystromKONS):
            base._detach()
    assert len({id(base._kors) for base in alone._grid.bases if isinstance(base, NystromKONS)}) == 8
    for x, label in zip(X[150:], labels[150:], strict=True):
        assert shared.predict_proba_dict_one(x) == alone.predict_proba_dict_one(x)
        shared.learn_one(x, label)
        alone.learn_one(x, label)
    # the private copies are saved one each; loaded, the equal ones are shared again and saved once
    assert len(shared.classes) == 3 and shared.to_bytes() == kons.load(alone.to_bytes()).to_bytes()


def test_a_full_dictionary_lets_korss_factor_go_once_no_sharer_still_fills_it() -> None:
    """KORS's weights and factor serve only its proposals: a full dictionary keeps its points alone, in
    memory as in the saved state, but only once every sharer has stopped filling it: here one learner's
    coin keeps out the very row that fills it (row 58, the 30th member), so that learner still needs the
    factor of the first 29 for its own copy, which it takes at its next round, before the shared one goes."""
    X, y = _stream(100)
    everyone = set(range(0, 60, 2))
    runs = []
    for share in (False, True):
        learners = [ForcedJoins(**{**PARAMS, "eta": eta}) for eta in STEPS]
        for learner, joins in zip(learners, (everyone, everyone - {58}, everyone), strict=True):
            learner.joins, learner.coin_rounds = frozenset(joins), []
        if share:
            share_dictionaries(learners)
        plays = []
        for i, (x, target) in enumerate(zip(X, y, strict=True)):
            plays.append([learner.learn_one(x, target) for learner in learners])
            if share and i == 58:  # the last member joined: the second, behind, still shares the dictionary
                assert learners[0]._kors.size == 30 and learners[1]._kors is learners[0]._kors
                assert not learners[0]._kors.retired
            if share and i == 59:  # the second took its own copy: the shared one lets KORS's factor go
                assert learners[1]._kors is not learners[0]._kors and learners[1]._kors.size == 29
                assert learners[0]._kors.retired and not learners[1]._kors.retired
        runs.append((np.array(plays), [learner.to_bytes() for learner in learners], learners))
    np.testing.assert_array_equal(runs[1][0], runs[0][0])
    assert runs[1][1] == runs[0][1]
    for learners in (runs[0][2], runs[1][2]):
        assert all(learner._kors.retired == (learner._size == 30) for learner in learners)
        assert learners[0]._kors.arrays().keys() == {"kors_points", "kors_sq_norms"}
