"""A generation started at a declared change keeps its own scale of the target (issue 39): its statistics
against the pooled moments of its prior and its rows, its plays in the learner's units, ``auto`` on a
target whose level and spread jump, the state through restarts, and a state saved before it; the prior
that fades and the scale of the concept since the change, whose units the mixture weighs the experts in
(a target whose spread shrinks), and a state saved before them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import kons
from kons.auto import Auto
from kons.auto.config import GRID
from kons.auto.experts.recent import RecentExpert, RecentLinear
from kons.auto.mixture import Mixture
from kons.auto.restarts import (
    YOUNG_BASES,
    FadingTargets,
    Generation,
    GenerationTargets,
    _not_wider,
    young_slots,
)
from kons.errors import StateFormatError
from tests.reference import restored_in_step


def test_the_generation_s_scale_is_the_pooled_moments_of_its_prior_and_its_rows() -> None:
    rng = np.random.default_rng(0)
    prior_mean, prior_std, prior = 3.0, 2.0, 1.5
    ys = 40.0 + 7.0 * rng.normal(size=25)
    targets = GenerationTargets(prior_mean, prior_std, prior)
    for k, y in enumerate(ys, start=1):
        t, stats = targets.target(float(y))
        targets.commit(stats)
        seen = ys[:k]
        mean = (prior * prior_mean + seen.sum()) / (prior + k)
        m2 = prior * prior_std**2 + prior * (prior_mean - mean) ** 2 + ((seen - mean) ** 2).sum()
        std = np.sqrt(m2 / (prior + k))
        assert targets.mean == pytest.approx(mean, rel=1e-12)
        assert targets.std == pytest.approx(std, rel=1e-12)
        assert t == pytest.approx((y - mean) / std, rel=1e-12)


def test_a_play_in_the_generation_s_units_is_the_same_target_in_the_learner_s() -> None:
    targets = GenerationTargets(100.0, 5.0, 1.0)
    # 100 + 5 * 2 = 110 in the user's units; the learner standardises by 50 and 20: 3
    assert targets.play(2.0, 50.0, 20.0, bound=20.0) == pytest.approx(3.0)
    assert targets.play(2.0, 50.0, 20.0, bound=2.5) == 2.5  # clipped to the mixture's bound
    assert targets.play(2.0, 50.0, 0.0, bound=20.0) == 2.0  # no scale yet: as played


def test_the_generation_s_linear_model_re_expressed_is_the_model_of_its_targets_in_the_new_units() -> None:
    # each round the scale moves (GenerationTargets: its first rounds) before the model learns the round's
    # target in the new units (Generation.move_scale): it is the model of every target in the scale reached
    rng = np.random.default_rng(3)
    X = np.hstack([rng.normal(size=(30, 3)), np.ones((30, 1))])
    ys = 60.0 + 9.0 * X[:, :3] @ np.array([1.0, -2.0, 0.5]) + rng.normal(size=30)
    followed = RecentLinear(3, intercept_scale=5.0, clip=20.0)
    generation = Generation(0, [], [], RecentExpert(followed), GenerationTargets(5.0, 2.0, 8.0))
    targets = generation.targets
    assert targets is not None
    for x, y in zip(X, ys, strict=True):
        t, stats = targets.target(float(y))
        generation.move_scale(stats)
        assert np.array_equal(targets.array(), np.array(stats))
        followed.learn(x, t)
    at_once = RecentLinear(3, intercept_scale=5.0, clip=20.0)
    for x, y in zip(X, ys, strict=True):
        at_once.learn(x, (y - targets.mean) / targets.std)
    np.testing.assert_allclose(followed.b, at_once.b, rtol=1e-9, atol=1e-9)
    assert followed.predict(X[0]) == pytest.approx(at_once.predict(X[0]), rel=1e-9)


def test_a_generation_s_linear_model_out_of_play_keeps_its_targets_in_the_generation_s_units() -> None:
    """The generation's scale moves in every round, its linear model playing or not: the targets it learnt
    move with it, so that it plays in the scale's units when it enters again."""
    X, y = _jumping()
    learner = Auto()
    for k in range(len(y)):
        learner.learn_one(X[k], y[k])
        if learner.changes_detected:
            break
    grid = learner._grid
    assert grid is not None and grid.last_change == grid.rounds
    g, generation = next((g, generation) for g, generation in enumerate(grid.young)
                         if generation is not None and generation.start == grid.rounds)
    model, targets = generation.recent, generation.targets
    assert model is not None and targets is not None
    grid.mixture.switching.leave([young_slots(g)[YOUNG_BASES]])
    b, mean, std = model.b[:, 0].copy(), targets.mean, targets.std
    learner.learn_many(X[k + 1:k + 41], y[k + 1:k + 41])
    assert grid.young[g] is generation and not grid.mixture.switching.active[young_slots(g)[YOUNG_BASES]]
    assert abs(targets.mean - mean) > 0.1 * std  # the scale moved
    # it learnt no row: the same targets, in the units the scale reached
    expected = (std * b + (mean - targets.mean) * model.sum) / targets.std
    np.testing.assert_allclose(model.b[:, 0], expected, rtol=1e-9, atol=1e-9)


def test_a_saved_scale_that_is_not_one_is_refused() -> None:
    assert GenerationTargets.restored(np.array([3.0, 1.0, 2.0])).std == pytest.approx(np.sqrt(2.0 / 3.0))
    for bad in (np.array([0.0, 1.0, 2.0]), np.array([3.0, 1.0, -1.0]), np.array([3.0, 1.0])):
        with pytest.raises(StateFormatError):
            GenerationTargets.restored(bad)


def _linear(n: int, seed: int, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Raw rows of 3 features and a linear target of theirs at ``level``."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) * [1.0, 20.0, 0.1] + [0.0, 300.0, 5.0]
    return X, 10.0 * X[:, 0] + 0.5 * (X[:, 1] - 300.0) + rng.normal(size=n) + level


def _jumping(n: int = 1600, change: int = 800) -> tuple[np.ndarray, np.ndarray]:
    """Raw rows of a linear target whose sign flips at round ``change``, its level rising by 300 and its
    spread growing 4 times there."""
    X, y = _linear(n, 7, 50.0)
    y[change:] = 4.0 * (100.0 - y[change:]) + 300.0
    return X, y


def test_the_generation_started_at_the_change_learns_the_new_concept_s_scale() -> None:
    X, y = _jumping()
    learner = Auto()
    learner.learn_many(X, y)
    grid = learner._grid
    assert grid is not None and grid.targets is not None and learner.stats()["changes"] >= 1
    generation = min((g for g in grid.young if g is not None), key=lambda g: g.start)
    assert 800 < generation.start < 830 and generation.targets is not None
    after = y[800:]
    # its scale: the new concept's (its first weight, 8 rows at the learner's, pulls it by a little), where
    # the learner's pools both concepts
    assert abs(generation.targets.mean - after.mean()) < 0.1 * after.std()
    # (its deviation keeps 8 rows' worth of the pooled scale's, 8 (S^2 + (M - m)^2) / n: 28% here)
    assert generation.targets.std == pytest.approx(after.std(), rel=0.35)
    assert abs(grid.targets.mean - after.mean()) > after.std() and grid.targets.std > 2.0 * after.std()


def test_the_change_s_kernel_copies_learn_in_a_scale_that_forgets_the_last_concept() -> None:
    X, y = _jumping()
    learner = Auto()
    learner.learn_many(X, y)
    grid = learner._grid
    assert grid is not None
    generation = min((g for g in grid.young if g is not None), key=lambda g: g.start)
    kernel, own = generation.kernel_targets, generation.targets
    assert kernel is not None and own is not None
    kinds = [GRID[i][1] for i in generation.members]
    assert [generation.targets_of(j) is kernel for j in range(len(generation.members) + 1)] == [
        *(kind == "nystrom" for kind in kinds), False]  # the linear copy and the linear model: its own
    after = y[-round(kernel.count):]  # the rows since the change's estimated onset
    assert 800 <= len(y) - len(after) < generation.start
    # the prior's weight faded, the rows' moments alone (the replayed ones as the learner's scale keeps
    # them); the generation's own keeps 8 rows of the learner's
    assert kernel.mean == pytest.approx(after.mean(), abs=0.01 * after.std())
    assert kernel.std == pytest.approx(after.std(), rel=0.01)
    assert abs(own.std - after.std()) > 0.05 * after.std()


def test_the_kernel_copies_fade_the_last_concept_only_after_a_change_that_did_not_widen_the_target() -> None:
    # kept targets standardised by a learner's deviation 2: the rows since the onset spread 2 x 5 = 10 about
    # their own mean, as the last concept's scale does; 12 is wider; one row has no spread to compare
    last = GenerationTargets(40.0, 10.0, 8.0)

    def grid(kept: list[float]) -> Any:  # the two attributes of a Grid that the rule reads
        return SimpleNamespace(targets=GenerationTargets(0.0, 2.0, 100.0),
                               kept=SimpleNamespace(targets=lambda: np.array([9.0, *kept])))

    assert _not_wider(grid([3.0, -5.0, 5.0]), last, 2)
    assert _not_wider(grid([-1.0, 1.0]), last, 2)
    assert not _not_wider(grid([-6.0, 6.0]), last, 2)
    assert not _not_wider(grid([0.0]), last, 1)


def test_a_state_saved_before_the_kernel_copies_had_their_scale_goes_on_in_the_generation_s() -> None:
    X, y = _jumping()
    learner = Auto()
    learner.learn_many(X[:1000], y[:1000])
    header, arrays = kons._state.decode(learner.to_bytes())
    assert any(name.endswith("_kernel_targets") for name in arrays)
    old = kons.load(kons._state.encode(header, {name: array for name, array in arrays.items()
                                                 if not name.endswith("_kernel_targets")}))
    assert isinstance(old, Auto) and old._grid is not None
    assert all(g is None or g.kernel_targets is None for g in old._grid.young)
    assert np.isfinite(old.learn_many(X[1000:1100], y[1000:1100])).all()


@pytest.mark.slow
def test_auto_with_generations_of_their_own_scale_saves_and_restores_bit_identically() -> None:
    X, y = _jumping()
    original = Auto(seed=3)
    copies = restored_in_step(original, X, y, [790, 810, 900, 1400])
    assert [copy.to_bytes() for copy in copies] == [original.to_bytes()] * 4
    _, arrays = kons._state.decode(original.to_bytes())
    assert any(name.endswith("_targets") and name.startswith("young") for name in arrays)
    assert any(name.endswith("_kernel_targets") for name in arrays)
    assert "concept_scale" in arrays


def test_a_state_saved_before_the_generations_had_their_own_scale_goes_on_without_it() -> None:
    """A regression state without the grid's ``own_targets`` (as every one saved before) keeps the old
    rule through its next change: its generations learn the learner's standardised target, and it plays
    as the same state under the new rule up to the change."""
    X, y = _jumping()
    learner = Auto()
    learner.learn_many(X[:600], y[:600])
    header, arrays = kons._state.decode(learner.to_bytes())
    del header["scalars"]["own_targets"]
    old = kons.load(kons._state.encode(header, arrays))
    assert isinstance(old, Auto) and old._grid is not None and old._grid.targets is None
    new = kons.load(learner.to_bytes())
    plays_old, plays_new = old.learn_many(X[600:], y[600:]), new.learn_many(X[600:], y[600:])
    assert old.stats()["changes"] >= 1 and all(g is None or g.targets is None for g in old._grid.young)
    declared = 600 + int(np.flatnonzero(plays_old != plays_new)[0])
    assert declared > 800  # the same plays until a generation starts after the change
    _, saved = kons._state.decode(old.to_bytes())
    assert not any(name.startswith("young") and name.endswith("_targets") for name in saved)
    assert "own_targets" not in kons._state.decode(old.to_bytes())[0]["scalars"]


def test_a_fading_scale_is_the_pooled_moments_of_its_rows_and_a_prior_of_fading_weight() -> None:
    rng = np.random.default_rng(1)
    prior_mean, prior_std, prior, fade = 300.0, 80.0, 8.0, 5.0
    ys = 40.0 + 7.0 * rng.normal(size=60)
    targets = FadingTargets(prior_mean, prior_std, prior, fade)
    assert (targets.mean, targets.std) == (prior_mean, prior_std)
    for k, y in enumerate(ys, start=1):
        t, stats = targets.target(float(y))
        targets.commit(stats)
        seen, weight = ys[:k], prior * np.exp(-k / fade)
        mean = (weight * prior_mean + seen.sum()) / (weight + k)
        m2 = weight * prior_std**2 + weight * (prior_mean - mean) ** 2 + ((seen - mean) ** 2).sum()
        std = np.sqrt(m2 / (weight + k))
        assert targets.mean == pytest.approx(mean, rel=1e-9)
        assert targets.std == pytest.approx(std, rel=1e-9)
        assert t == pytest.approx((y - mean) / std, rel=1e-9)
    # faded: the rows' own moments, where a fixed prior would still hold the old spread
    assert targets.std == pytest.approx(ys.std(), rel=2e-3)
    fixed = GenerationTargets(prior_mean, prior_std, prior)
    for y in ys:
        fixed.commit(fixed.target(float(y))[1])
    assert fixed.std > 5.0 * ys.std()
    assert np.allclose(targets.fixed().array(), fixed.array(), rtol=1e-9)  # the same, the prior kept
    # a play in its units is the same target in the learner's, as GenerationTargets'
    expected = (targets.mean + 2.0 * targets.std - 50.0) / 20.0
    assert targets.play(2.0, 50.0, 20.0, bound=20.0) == pytest.approx(expected)


def test_a_saved_fading_scale_that_is_not_one_is_refused() -> None:
    saved = FadingTargets(1.0, 2.0, 8.0, 8.0)
    saved.commit((3.0, 1.5, 0.5))
    assert np.array_equal(FadingTargets.restored(saved.array()).array(), saved.array())
    for k, bad in ((0, 0.0), (2, -1.0), (3, 0.0), (4, -1.0), (6, -1.0), (1, np.nan)):
        array = saved.array()
        array[k] = bad
        with pytest.raises(StateFormatError):
            FadingTargets.restored(array)
    with pytest.raises(StateFormatError):
        FadingTargets.restored(saved.array()[:6])


def test_the_mixture_in_other_units_is_the_same_mixture_mapped_there_and_back() -> None:
    rng = np.random.default_rng(2)
    preds, t = rng.normal(size=6), 0.3
    offset, factor = -0.4, 0.05
    weights = rng.dirichlet(np.ones(6))
    plain, mapped = Mixture(binary=False, bound=20.0, experts=6), Mixture(binary=False, bound=20.0, experts=6)
    played = mapped.mix(preds, weights, (offset, factor))
    assert played == pytest.approx(offset + factor * plain.mix((preds - offset) / factor, weights))
    assert mapped.spread() == pytest.approx(factor * plain.spread())
    assert np.allclose(mapped.losses(preds, t, (offset, factor)),
                       plain.losses((preds - offset) / factor, (t - offset) / factor))
    # without units, as before
    assert plain.mix(preds, weights) == Mixture(binary=False, bound=20.0, experts=6).mix(preds, weights, None)


def _shrinking(n: int = 1600, change: int = 800) -> tuple[np.ndarray, np.ndarray]:
    """Raw rows of a linear target whose spread falls 20 times at round ``change``, its level by 300."""
    X, y = _linear(n, 11, 400.0)
    y[change:] = 0.05 * (y[change:] - 400.0) + 100.0
    return X, y


def test_after_a_shrink_the_mixture_weighs_the_experts_in_the_new_concept_s_units() -> None:
    X, y = _shrinking()
    learner = Auto()
    learner.learn_many(X, y)
    grid = learner._grid
    assert grid is not None and grid.targets is not None and grid.concept is not None
    declared = learner.last_change_round
    assert declared is not None and 800 < declared < 850
    after = y[900:]
    # (its own rows start at the change's estimated onset, a few rows early: they widen it, by 3 here)
    assert grid.concept.std < 4.0 * after.std() and abs(grid.concept.mean - after.mean()) < after.std()
    units = grid.units()
    assert units is not None and units[1] == pytest.approx(grid.concept.std / grid.targets.std)
    assert units[1] < 0.05  # where the learner's scale pools the spread before the change
    # a generation started since learns on the same prior and rows, the prior's weight kept
    for generation in (g for g in grid.young if g is not None and g.start > declared):
        assert generation.targets is not None
        fixed = grid.concept.fixed()
        assert generation.targets.mean == pytest.approx(fixed.mean, rel=1e-6)


def test_a_state_saved_before_the_concept_s_scale_goes_on_without_it() -> None:
    """A regression state without the grid's ``concept_scale`` (as every one saved before) keeps the rule it
    was saved under through its next change: the mixture in the learner's units, its generations' scales
    from the learner's; and it plays as the same state under the new rule up to the change."""
    X, y = _shrinking()
    learner = Auto()
    learner.learn_many(X[:600], y[:600])
    header, arrays = kons._state.decode(learner.to_bytes())
    del header["scalars"]["concept_scale"]
    old = kons.load(kons._state.encode(header, arrays))
    assert isinstance(old, Auto) and old._grid is not None and not old._grid.keeps_concept
    new = kons.load(learner.to_bytes())
    plays_old, plays_new = old.learn_many(X[600:], y[600:]), new.learn_many(X[600:], y[600:])
    assert old.stats()["changes"] >= 1 and old._grid.concept is None and old._grid.units() is None
    assert 600 + int(np.flatnonzero(plays_old != plays_new)[0]) > 800
    header, saved = kons._state.decode(old.to_bytes())
    assert "concept_scale" not in saved and "concept_scale" not in header["scalars"]
