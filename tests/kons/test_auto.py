"""kons.Auto: the self-tuning mixture on raw data (save/restore, determinism, labels, the mixture's bound)."""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import pytest

import kons
from kons.auto import Auto
from kons.auto.learner import REGRESSION_BOUND, SCORE_BOUND
from kons.auto.mixture import MIX_BOUND, RATES, Mixture
from kons.preprocessing import TARGET_BOUND, WARMUP_ROWS
from tests.streams import load_stream


@functools.cache
def _raw_regression(n: int = 300) -> tuple[np.ndarray, np.ndarray]:
    data = load_stream("cadata", n)
    return data.X * np.geomspace(1e-2, 1e4, data.X.shape[1]) + 3e3, 9e4 * data.y + 2e5


@functools.cache
def _raw_binary(n: int = 300) -> tuple[np.ndarray, np.ndarray]:
    data = load_stream("breast-cancer", n)
    return data.X * 250.0 - 40.0, data.y > 0  # booleans


def test_auto_is_the_registered_default_and_takes_no_tuning() -> None:
    learner = kons.learner_from_params("auto", {})
    assert type(learner) is Auto and kons.LEARNERS["auto"] is Auto
    assert learner.get_params() == {"task": "regression", "C": None, "seed": 0, "dim": None}


def test_auto_learns_raw_regression_better_than_the_running_mean() -> None:
    X, y = _raw_regression()
    learner = Auto()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        played = learner.learn_many(X, y)
    means = np.concatenate([[0.0], np.cumsum(y)[:-1] / np.arange(1, len(y))])
    assert np.mean((played - y) ** 2) < 0.7 * np.mean((means - y) ** 2)
    stats = learner.stats()
    assert math.isclose(sum(stats["weights"].values()), 1.0, rel_tol=1e-9)
    assert stats["leader"] == max(stats["weights"], key=stats["weights"].get)
    assert "ons+intercept(raw, eta x1)" in stats["weights"] and "constant" in stats["weights"]


def test_auto_classifies_boolean_labels_with_probabilities() -> None:
    X, y = _raw_binary()
    learner = Auto(task="classification")
    played = learner.learn_many(X, y)
    assert np.mean((played[100:] > 0) != y[100:]) < 0.08
    p = learner.predict_proba_one(X[0])
    assert 0.0 < p < 1.0 and math.isclose(p, 1.0 / (1.0 + math.exp(-learner.predict_one(X[0]))))
    ints = Auto(task="classification").learn_many(X, y.astype(int))
    signs = Auto(task="classification").learn_many(X, np.where(y, 1.0, -1.0))
    assert np.array_equal(played, ints) and np.array_equal(played, signs)


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_auto_save_and_restore_continue_bit_identically(task: str) -> None:
    X, y = _raw_binary(140) if task == "classification" else _raw_regression(140)
    for cut in (0, 3, WARMUP_ROWS - 1, WARMUP_ROWS, 90):
        original = Auto(task=task, seed=3)
        original.learn_many(X[:cut], y[:cut])
        blob = original.to_bytes()
        restored = kons.load(blob)
        assert type(restored) is Auto and restored.to_bytes() == blob
        assert restored.stats() == original.stats()
        assert np.array_equal(original.learn_many(X[cut:], y[cut:]), restored.learn_many(X[cut:], y[cut:]))
        assert original.to_bytes() == restored.to_bytes()


def test_auto_runs_are_deterministic() -> None:
    X, y = _raw_regression(120)
    first, second = Auto(seed=5), Auto(seed=5)
    assert np.array_equal(first.learn_many(X, y), second.learn_many(X, y))
    assert first.to_bytes() == second.to_bytes()


def test_damaged_nested_state_is_a_state_format_error() -> None:
    X, y = _raw_regression(60)
    learner = Auto()
    learner.learn_many(X, y)
    header, arrays = kons._state.decode(learner.to_bytes())
    arrays["base0"] = arrays["base0"][:-5]
    with pytest.raises(kons.StateFormatError):
        kons.load(kons._state.encode(header, arrays))
    header, arrays = kons._state.decode(learner.to_bytes())
    arrays["mix_log_weights"] = arrays["mix_log_weights"][:, :-1]
    with pytest.raises(kons.StateFormatError):
        kons.load(kons._state.encode(header, arrays))


def _mixture(binary: bool, experts: int) -> Mixture:
    """Auto's mixture alone, as Auto builds it: weights over ``experts`` uniform."""
    return Mixture(binary=binary, bound=SCORE_BOUND if binary else REGRESSION_BOUND, experts=experts)


@pytest.mark.parametrize("binary", [False, True])
def test_aggregating_algorithm_pays_at_most_log_k_over_the_best_expert(binary: bool) -> None:
    """Vovk's bound with the switching rates mixed: L_AA <= min_i L_i + (ln(K) + ln(R)) / eta, R rates
    (0 among them), eta = 1/(2 B^2) (squared) or 1 (log loss)."""
    rng = np.random.default_rng(0)
    K, T, B = 7, 2000, MIX_BOUND
    mixture = _mixture(binary, K)
    truth = np.clip(rng.normal(size=T), -B, B)
    noise = np.array([0.1, 0.4, 0.8, 1.2, 2.0, 3.0, 0.6])
    total, expert_losses = 0.0, np.zeros(K)
    for t in range(T):
        plays = np.clip(truth[t] + noise * rng.normal(size=K) + noise * 0.5, -B, B)
        if binary:
            y = 1.0 if rng.random() < 1.0 / (1.0 + math.exp(-2.0 * truth[t])) else -1.0
            losses = np.logaddexp(0.0, -y * plays)
            total += math.log1p(math.exp(-y * mixture.mix(plays)))
        else:
            y = float(np.clip(truth[t] + 0.3 * rng.normal(), -B, B))
            losses = (plays - y) ** 2
            total += (mixture.mix(plays) - y) ** 2
        expert_losses += losses
        mixture.update(plays, y)
    eta = 1.0 if binary else 1.0 / (2.0 * B * B)
    assert total <= expert_losses.min() + (math.log(K) + math.log(len(RATES))) / eta + 1e-9
    assert total < np.mean(expert_losses)  # and it does learn which expert to follow


@pytest.mark.parametrize("binary", [False, True])
def test_the_loss_of_one_play_is_that_of_the_plays_bit_for_bit(binary: bool) -> None:
    rng = np.random.default_rng(3)
    mixture = _mixture(binary, 3)
    for _ in range(2000):
        played = float(rng.normal() * 10.0 ** rng.uniform(-3.0, 3.0))
        t = float(rng.choice([-1.0, 1.0])) if binary else float(rng.normal() * 10.0 ** rng.uniform(-2.0, 2.0))
        units = None if binary or rng.random() < 0.5 else (float(rng.normal()), float(rng.uniform(0.1, 5.0)))
        one, of_plays = mixture.loss(played, t, units), mixture.losses(np.array([played]), t, units)
        assert type(one) is float and one.hex() == float(of_plays[0]).hex()


@pytest.mark.parametrize(("binary", "bound"), [(False, REGRESSION_BOUND), (True, SCORE_BOUND)])
def test_the_mixture_plays_beyond_its_interval_up_to_the_bases_bound(binary: bool, bound: float) -> None:
    """Bases that agree beyond [-MIX_BOUND, MIX_BOUND] are followed there, up to the bases' bound."""
    mixture = _mixture(binary, 3)
    mixture.switching.log_weights[:] = np.log([0.2, 0.3, 0.5])
    inside = (MIX_BOUND + bound) / 2.0
    assert MIX_BOUND < inside < bound
    assert mixture.mix(np.full(3, -inside)) == pytest.approx(-inside, rel=1e-9)
    assert mixture.mix(np.full(3, inside)) == pytest.approx(inside, rel=1e-9)
    assert mixture.mix(np.full(3, 2.0 * bound)) == pytest.approx(bound, rel=1e-9)


@pytest.mark.parametrize("binary", [False, True])
def test_warmup_plays_the_bayesian_linear_model_of_the_buffered_rows(binary: bool) -> None:
    """Before the width is known: the primal posterior mean (Z'Z + d I)^{-1} Z'(t - mean), from scratch."""
    X, y = _raw_binary() if binary else _raw_regression()
    n = WARMUP_ROWS // 2
    learner = Auto(task="classification" if binary else "regression")
    learner.learn_many(X[:n], y[:n])
    rows = X[:n]
    std = rows.std(axis=0)
    Z = np.divide(rows - rows.mean(axis=0), std, out=np.zeros_like(rows), where=std > 0)
    z = np.divide(X[n] - rows.mean(axis=0), std, out=np.zeros(X.shape[1]), where=std > 0)
    t = np.where(y[:n], 1.0, -1.0) if binary else y[:n].astype(float)
    scale = 1.0 if binary else t.std()
    w = np.linalg.solve(Z.T @ Z + X.shape[1] * np.eye(X.shape[1]), Z.T @ (t - t.mean()) / scale)
    f = float(np.clip(z @ w, -TARGET_BOUND, TARGET_BOUND))
    expected = float(np.clip(t.mean() + f, -TARGET_BOUND, TARGET_BOUND)) if binary else t.mean() + scale * f
    assert learner.predict_one(X[n]) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_warmup_beats_the_prior_on_a_linear_stream() -> None:
    """The warm-up's plays on a noiseless linear stream: far below the running mean's squared error."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(WARMUP_ROWS, 3)) * [1.0, 10.0, 100.0] + 5.0
    y = X @ np.array([2.0, 0.3, 0.01])
    played = Auto().learn_many(X, y)
    running_mean = np.array([y[:i].mean() if i else 0.0 for i in range(len(y))])
    assert np.mean((played[4:] - y[4:]) ** 2) < 0.5 * np.mean((running_mean[4:] - y[4:]) ** 2)
