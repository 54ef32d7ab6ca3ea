"""KONS and Sketched-KONS against independent references on real data.

* Linear kernel: KONS is explicit-feature ONS with the prediction projection (docs/kons-math.md, "The round").
* RBF kernel: KONS is ONS on the empirical kernel map (explicit features ``F F' = K``).
* ``gamma = 1``: Sketched-KONS is KONS, bit for bit.
* Forced coins: Sketched-KONS is ONS whose ``A`` takes only the rounds with ``z_t = 1`` (linear kernel),
  and the dual form recomputed from scratch every round (RBF kernel).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from kons import KONS, SketchedKONS
from kons.base import Learner
from kons.kernels import RBF, Linear
from kons.losses import get_loss
from tests.reference import (
    Trace,
    dual_bruteforce,
    empirical_features,
    explicit_ons,
    forced_coin_learner,
    rbf_gram,
    relative_gap,
    unclipped_run,
)
from tests.streams import load_stream

# Observed gaps are 1e-15 .. 1e-12 (two different but both backward-stable solvers); 1e-9 leaves room
# for other BLAS builds while still catching any error in the update formulas.
TOL = 1e-9
ALPHA = 1.0


@dataclass(frozen=True)
class Case:
    data: str
    loss: str
    C: float
    n: int
    clip_labels: bool = False  # squared loss with labels in [-C, C]: clipped plays that hit the label

    @property
    def eta(self) -> float:
        return get_loss(self.loss).curvature(self.C)

    def stream(self) -> tuple[np.ndarray, np.ndarray]:
        data = load_stream(self.data, self.n)
        y = np.clip(data.y, -self.C, self.C) if self.clip_labels else data.y
        return data.X, y


LINEAR_CASES = [
    Case("housing", "squared", 1.0, 400),
    Case("cadata", "squared", 0.8, 500),
    Case("cadata", "squared", 1.0, 500, clip_labels=True),
    Case("australian", "logistic", 0.5, 400),
    Case("diabetes", "squared_hinge", 1.5, 500),
]


def _assert_matches(learner_y_bar: np.ndarray, played: np.ndarray, ref: Trace) -> None:
    assert relative_gap(learner_y_bar, ref.y_bar) <= TOL
    assert relative_gap(played, ref.y_hat) <= TOL


def _assert_exercises_clipping(ref: Trace) -> None:
    """The stream must exercise the projection step on some rounds and not on others."""
    assert 0 < ref.clipped.sum() < len(ref.clipped)


def _assert_storage(learner: Learner, ref: Trace, joined: np.ndarray) -> None:
    """Stored points are the rounds with a non-zero dual coefficient; the dictionary is ``joined``."""
    stats = learner.stats()
    assert stats["rounds"] == len(ref.y_hat)
    assert stats["stored_points"] == len(ref.y_hat) - ref.unstored.sum()
    assert stats["dictionary_size"] == joined.sum()


@pytest.mark.parametrize("case", LINEAR_CASES, ids=lambda c: f"{c.data}-{c.loss}-C{c.C}")
def test_linear_kons_is_explicit_ons(case: Case) -> None:
    X, y = case.stream()
    ref = explicit_ons(X, y, loss=case.loss, alpha=ALPHA, eta=case.eta, C=case.C)
    _assert_exercises_clipping(ref)
    learner = KONS(kernel=Linear(), loss=case.loss, alpha=ALPHA, C=case.C)
    assert learner.stats()["eta"] == case.eta
    y_bar, played = unclipped_run(learner, X, y)
    _assert_matches(y_bar, played, ref)
    _assert_storage(learner, ref, ~ref.zero_gradient)
    if case.loss == "squared_hinge" or case.clip_labels:
        # Zero-gradient rounds without clipping (beta = 0: not stored) and with clipping (beta = -h/s:
        # stored, but not in the dictionary) both occur in these streams.
        assert ref.unstored.any() or case.clip_labels
        assert (ref.zero_gradient & ref.clipped).any()
    if case.loss == "squared_hinge":
        assert learner.stats()["stored_points"] < learner.stats()["rounds"]


@pytest.mark.parametrize(
    "case", [Case("housing", "squared", 1.0, 300), Case("australian", "squared_hinge", 1.5, 300)],
    ids=lambda c: f"{c.data}-{c.loss}",
)
def test_rbf_kons_is_ons_on_the_empirical_kernel_map(case: Case) -> None:
    X, y = case.stream()
    gamma = 0.1
    ref = explicit_ons(empirical_features(X, rbf_gram(gamma)), y, loss=case.loss, alpha=ALPHA,
                       eta=case.eta, C=case.C)
    _assert_exercises_clipping(ref)
    learner = KONS(kernel=RBF(gamma=gamma), loss=case.loss, alpha=ALPHA, C=case.C)
    y_bar, played = unclipped_run(learner, X, y)
    _assert_matches(y_bar, played, ref)
    _assert_storage(learner, ref, ~ref.zero_gradient)


@pytest.mark.parametrize(
    "case", [Case("cadata", "squared", 1.0, 300), Case("australian", "squared_hinge", 1.5, 300)],
    ids=lambda c: f"{c.data}-{c.loss}",
)
def test_sketched_with_gamma_one_is_kons_bit_for_bit(case: Case) -> None:
    X, y = case.stream()
    params: dict[str, Any] = {"kernel": RBF(gamma=0.2), "loss": case.loss, "alpha": ALPHA, "C": case.C}
    exact = KONS(**params)
    sketched = SketchedKONS(**params, gamma=1.0, beta=0.5, seed=11)
    assert np.array_equal(exact.learn_many(X, y), sketched.learn_many(X, y))
    exact_stats, sketched_stats = exact.stats(), sketched.stats()
    assert sketched_stats.pop("kors_size") > 0
    exact_stats.pop("kors_size")
    assert exact_stats == sketched_stats
    probe = load_stream(case.data, case.n + 50).X[case.n :]
    assert np.array_equal(exact.predict_many(probe), sketched.predict_many(probe))


def _coins(n: int, rate: float, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(n) < rate


@pytest.mark.parametrize(
    "case", [Case("housing", "squared", 1.0, 300), Case("australian", "squared_hinge", 1.5, 300),
             Case("diabetes", "logistic", 0.5, 300)],
    ids=lambda c: f"{c.data}-{c.loss}",
)
def test_forced_coins_linear_is_ons_on_the_selected_rounds(case: Case) -> None:
    X, y = case.stream()
    z = _coins(case.n, 0.3, seed=5)
    ref = explicit_ons(X, y, loss=case.loss, alpha=ALPHA, eta=case.eta, C=case.C, z=z)
    _assert_exercises_clipping(ref)
    learner = forced_coin_learner(z, kernel=Linear(), loss=case.loss, alpha=ALPHA, C=case.C, seed=3)
    y_bar, played = unclipped_run(learner, X, y)
    _assert_matches(y_bar, played, ref)
    # A coin is drawn exactly on the rounds with a non-zero gradient.
    assert learner.coin_rounds == np.flatnonzero(~ref.zero_gradient).tolist()
    _assert_storage(learner, ref, z & ~ref.zero_gradient)
    # Control: the same coins ignored (exact ONS) give a visibly different run.
    assert relative_gap(played, explicit_ons(X, y, loss=case.loss, alpha=ALPHA, eta=case.eta,
                                             C=case.C).y_hat) > 1e-3


@pytest.mark.parametrize(
    "case", [Case("cadata", "squared", 1.0, 300, clip_labels=True),
             Case("australian", "squared_hinge", 1.5, 300)],
    ids=lambda c: f"{c.data}-{c.loss}",
)
def test_forced_coins_rbf_is_the_dual_form_recomputed(case: Case) -> None:
    X, y = case.stream()
    z = _coins(case.n, 0.25, seed=8)
    gamma = 0.3
    ref = dual_bruteforce(X, y, rbf_gram(gamma), loss=case.loss, alpha=ALPHA, eta=case.eta, C=case.C, z=z)
    _assert_exercises_clipping(ref)
    assert (ref.zero_gradient & ref.clipped).any()  # beta = -h/s: stored, not in the dictionary
    learner = forced_coin_learner(z, kernel=RBF(gamma=gamma), loss=case.loss, alpha=ALPHA, C=case.C,
                                  seed=4)
    y_bar, played = unclipped_run(learner, X, y)
    _assert_matches(y_bar, played, ref)
    assert learner.coin_rounds == np.flatnonzero(~ref.zero_gradient).tolist()
    _assert_storage(learner, ref, z & ~ref.zero_gradient)
    if case.loss == "squared_hinge":
        assert ref.unstored.any()
        assert learner.stats()["stored_points"] < learner.stats()["rounds"]
