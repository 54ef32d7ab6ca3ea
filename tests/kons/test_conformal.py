"""Conformal intervals and prediction sets (:mod:`kons.conformal`): the tracking against a slow reference,
the coverage guarantee on drifting streams, persistence and replay, bad asks."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import kons
from kons.conformal import LEVERAGE_EXPONENT, MAX_LEVELS, RING, SCALE_WEIGHT, SPREAD_EXPONENT, STEP, Conformal
from kons.errors import InvalidParameterError, StateFormatError


def _drifting(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A linear target whose noise grows with |x_0| and whose scale triples half-way."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = X @ [1.0, 2.0, -1.0] + rng.normal(size=n) * (0.2 + np.abs(X[:, 0]))
    y[n // 2:] *= 3.0
    return X, y


def _reference_intervals(plays: list[float], ys: list[float], spreads: list[float], coverage: float,
                         exponent: float = SPREAD_EXPONENT) -> list[tuple[float, float] | None]:
    """The intervals of every round, recomputed from the definitions of :mod:`kons.conformal` in plain Python:
    the recent means as explicit weighted sums, the threshold tracked from the normal default."""
    from statistics import NormalDist

    q = NormalDist().inv_cdf((1.0 + coverage) / 2.0) * math.sqrt(math.pi / 2.0)
    out: list[tuple[float, float] | None] = []
    residuals: list[float] = []
    for t, (play, y, spread) in enumerate(zip(plays, ys, spreads, strict=True)):
        if t == 0:
            out.append(None)
        else:
            weights = [SCALE_WEIGHT * (1.0 - SCALE_WEIGHT) ** (t - 1 - i) for i in range(t)]
            total = sum(weights)
            m = sum(w * r for w, r in zip(weights, residuals, strict=True)) / total
            d = sum(w * s for w, s in zip(weights, spreads[:t], strict=True)) / total
            scale = m * ((spread + d) / (2.0 * d)) ** exponent if d > 0.0 else m
            out.append((play - max(q, 0.0) * scale, play + max(q, 0.0) * scale))
            score = abs(y - play) / scale
            q += STEP["interval"] * (float(score > q) - (1.0 - coverage))
        residuals.append(abs(y - play))
    return out


@pytest.mark.parametrize("algorithm", ["auto", "ons"])
def test_the_intervals_are_the_definitions_recomputed_slowly(algorithm: str) -> None:
    X, y = _drifting(400)
    learner = kons.Auto() if algorithm == "auto" else kons.learner_from_params("ons", {})
    plays, spreads, answered = [], [], []
    for x, target in zip(X, y, strict=True):
        played = learner.learn_round(x, target, coverage=0.9)
        plays.append(played.value)
        spreads.append(learner._spread())
        answered.append(played.interval)
        assert played.interval is not None
        assert played.covered == (played.interval[0] <= target <= played.interval[1])
    assert (np.array(spreads) > 0).any()  # auto's experts disagree, ONS's rows have their leverage
    exponent = SPREAD_EXPONENT if algorithm == "auto" else LEVERAGE_EXPONENT  # auto's spread, ONS's leverage
    reference = _reference_intervals(plays, list(y), spreads, 0.9, exponent)
    for got, want in zip(answered[1:], reference[1:], strict=True):
        assert got is not None and want is not None
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_a_drifting_stream_is_covered_at_each_level_and_the_bound_holds() -> None:
    X, y = _drifting(3000)
    learner = kons.learner_from_params("ons", {})
    coverages = (0.8, 0.9, 0.95)
    missed: dict[float, list[bool]] = {c: [] for c in coverages}
    for x, target in zip(X, y, strict=True):
        intervals = {c: learner.predict_interval_one(x, c) for c in coverages}
        learner.learn_one(x, target)
        for c, (low, high) in intervals.items():
            missed[c].append(not low <= target <= high)
    assert learner._conformal is not None
    scores = learner._conformal.scores  # the recent ones; the largest seen bounds B from below
    for c in coverages:
        rate = float(np.mean(missed[c][1:]))
        assert abs(rate - (1.0 - c)) < 0.015, (c, rate)
        # the theorem, with B the largest score of the stream (at least the kept ones' largest)
        assert abs(rate - (1.0 - c)) <= (scores.max() + STEP["interval"]) / (STEP["interval"] * 2999)


def test_the_width_follows_auto_s_own_uncertainty() -> None:
    rng = np.random.default_rng(1)
    X = rng.uniform(-3.0, 3.0, size=(2500, 1))
    y = np.sin(X[:, 0]) + rng.normal(size=2500) * np.where(X[:, 0] > 0, 1.0, 0.05)
    learner = kons.Auto()
    for x, target in zip(X, y, strict=True):
        learner.learn_round(x, target, coverage=0.9)
    noisy = [np.diff(learner.predict_interval_one([v], 0.9))[0] for v in (1.0, 2.0, 2.5)]
    quiet = [np.diff(learner.predict_interval_one([v], 0.9))[0] for v in (-1.0, -2.0, -2.5)]
    assert min(noisy) > max(quiet)


SECOND_ORDER = ("ons", "fd_son", "rp_son", "oja_son", "kons", "sketched_kons", "nystrom_kons")


def _explicit_leverage(A: np.ndarray, x: np.ndarray) -> float:
    return float(x @ np.linalg.inv(A) @ x)


def _kernel_leverage(learner: kons.Learner, points: np.ndarray, scales: np.ndarray, x: np.ndarray) -> float:
    r""":math:`\phi^\top (\alpha I + \sum_s c_s^2 \phi_s \phi_s^\top)^{-1} \phi` in the feature space, by
    Woodbury on the explicit Gram matrix: :math:`(k(x,x) - k^\top C (\alpha I + C K C)^{-1} C k) / \alpha`."""
    kernel, alpha = learner.kernel, learner.alpha  # type: ignore[attr-defined]
    K = kernel.gram(points, points)
    k = kernel.gram(x[None, :], points)[0]
    inner = alpha * np.eye(len(points)) + scales[:, None] * K * scales[None, :]
    ck = scales * k
    return float((kernel.diag(x) - ck @ np.linalg.solve(inner, ck)) / alpha)


def _reference_leverage(algorithm: str, learner: Any, X: np.ndarray, y: np.ndarray, plays: list[float],
                        x: np.ndarray) -> float:
    """The row's leverage under the learner's matrix, built explicitly (from the stream where the
    matrix is a function of it; from the sketch's own factors for the sketches) and inverted densely."""
    alpha, d = learner.alpha, len(x)
    gdots = np.array([learner._loss.derivative(p, t) for p, t in zip(plays, y, strict=True)])
    if algorithm == "ons":  # A = alpha I + eta sum gdot^2 x x'
        return _explicit_leverage(alpha * np.eye(d) + learner._eta * (X.T * gdots**2) @ X, x)
    if algorithm == "rp_son":  # A = alpha I + S'S
        return _explicit_leverage(alpha * np.eye(d) + learner._S.T @ learner._S, x)
    if algorithm == "fd_son":  # S = [D V; G], V = F Z
        S = np.vstack([learner._D[:, None] * (learner._basis.F @ learner._basis.Z),
                       learner._Gd[:len(learner._g_index)]])
        return _explicit_leverage(alpha * np.eye(d) + S.T @ S, x)
    if algorithm == "oja_son":  # A = alpha I + V' (t Lambda) V
        V = learner._basis.F @ learner._basis.Z
        return _explicit_leverage(alpha * np.eye(d) + (V.T * (learner._t * learner._lam)) @ V, x)
    if algorithm == "kons":  # every round with a gradient, c = sqrt(eta) gdot
        keep = gdots != 0.0
        return _kernel_leverage(learner, X[keep], math.sqrt(learner._eta) * gdots[keep], x)
    if algorithm == "sketched_kons":  # the dictionary's rounds only (which joined: the learner's coins)
        index = learner._dict_index.view
        return _kernel_leverage(learner, X[index], learner._dict_scale.view, x)
    # nystrom_kons: phi = L^{-1} k_D with L L' = K_DD, A^{-1} in the embedding, alpha off it
    points = learner._kors._points.view
    phi = np.linalg.solve(np.linalg.cholesky(learner.kernel.gram(points, points)),
                          learner.kernel.gram(x[None, :], points)[0])
    inside = float(phi @ learner._inverse.to_dense() @ phi)
    return inside + (float(learner.kernel.diag(x)) - float(phi @ phi)) / float(alpha)


@pytest.mark.parametrize("algorithm", SECOND_ORDER)
def test_a_second_order_learner_s_spread_is_the_leverage_of_its_matrix_inverted_explicitly(
        algorithm: str) -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(120, 4)) * 0.5
    y = np.tanh(X @ [1.0, -0.5, 0.3, 0.0]) + 0.1 * rng.normal(size=120)
    params: dict[str, Any] = {"preprocess": False, "sketch_size": 3} if algorithm.endswith("_son") else {
        "preprocess": False}
    if "kons" in algorithm:
        params["kernel"] = {"name": "rbf", "gamma": 0.5}
    learner: Any = kons.learner_from_params(algorithm, params)
    plays: list[float] = []
    for i, (x, target) in enumerate(zip(X, y, strict=True)):
        predicted = learner.predict_round(x, 0.9)
        spread = learner._spread() if i else None  # the row's leverage on the state before the round
        learnt = learner.learn_round(x, target, 0.9)
        assert learnt.interval == predicted.interval or not i  # the same state, the same interval
        assert spread is None or learner._spread() == spread
        plays.append(learnt.value)
    for probe in rng.normal(size=(5, 4)) * [0.5, 0.5, 0.5, 3.0]:
        learner.predict_round(probe, 0.9)
        reference = _reference_leverage(algorithm, learner, X, y, plays, probe)
        assert learner._spread() == pytest.approx(math.sqrt(reference), rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("algorithm", [*SECOND_ORDER, "ogd", "kernel_ogd"])
def test_every_preprocessed_learner_answers_a_round_the_interval_predicted_on_its_state(
        algorithm: str) -> None:
    X, y = _drifting(300)
    learner = kons.learner_from_params(algorithm, {})
    spreads = []
    for i, (x, target) in enumerate(zip(X, y, strict=True)):
        predicted = learner.predict_round(x, 0.9)
        learnt = learner.learn_round(x, target, 0.9)
        assert learnt.interval == predicted.interval or i == 0, i  # (round 0: the range, before C moves)
        spreads.append(learner._spread())
    # a first-order learner has one width for every row; a second-order one follows its leverage
    assert (np.array(spreads) > 0).any() == (algorithm in SECOND_ORDER)


def test_a_linear_learner_s_interval_widens_where_its_rows_were_thin() -> None:
    rng = np.random.default_rng(2)
    X = rng.normal(size=(1500, 3)) * [1.0, 1.0, 0.05]  # the third feature barely moves
    y = X @ [1.0, -1.0, 2.0] + 0.3 * rng.normal(size=1500)
    learner = kons.learner_from_params("ons", {})
    for x, target in zip(X, y, strict=True):
        learner.learn_round(x, target, coverage=0.9)
    usual = np.diff(learner.predict_interval_one([0.5, -0.5, 0.0], 0.9))[0]
    thin = np.diff(learner.predict_interval_one([0.5, -0.5, 0.5], 0.9))[0]  # 10 sd along the thin one
    assert thin > 1.2 * usual


def test_asking_an_interval_does_not_move_the_plays() -> None:
    X, y = _drifting(600)
    plain, asked = kons.Auto(), kons.Auto()
    for x, target in zip(X, y, strict=True):
        assert asked.learn_round(x, target, coverage=0.8).value == plain.learn_one(x, target)
        assert asked.predict_interval_one(x, 0.95) is not None
    assert asked.predict_one(X[0]) == plain.predict_one(X[0])


@pytest.mark.parametrize(("rounds", "algorithm"), [(100, "auto"), (RING + 300, "auto"), (100, "ons"),
                                                   (RING + 300, "nystrom_kons"), (100, "fd_son")])
def test_saved_restored_and_replayed_bit_identically(rounds: int, algorithm: str) -> None:
    X, y = _drifting(rounds + 60)
    learner = kons.Auto() if algorithm == "auto" else kons.learner_from_params(algorithm, {})
    for i in range(rounds):
        learner.learn_round(X[i], y[i], coverage=0.9 if i % 2 else 0.8)
    learner.predict_interval_one(X[0], 0.95)
    blob = learner.to_bytes()
    restored = kons.load(blob)
    assert restored.to_bytes() == blob
    for i in range(rounds, rounds + 60):
        a = learner.learn_round(X[i], y[i], coverage=0.95)
        b = restored.learn_round(X[i], y[i], coverage=0.95)
        assert a == b
    assert restored.to_bytes() == learner.to_bytes()


def test_a_learner_never_asked_saves_what_it_saved_before() -> None:
    X, y = _drifting(50)
    learner = kons.learner_from_params("ons", {})
    learner.learn_many(X, y)
    header, arrays = kons._state.decode(learner.to_bytes())
    assert "conformal" not in header and not any(name.startswith("conformal") for name in arrays)


def test_the_state_stays_bounded_however_many_coverages_are_asked() -> None:
    X, y = _drifting(RING + 50)
    learner = kons.learner_from_params("ons", {})
    for i, (x, target) in enumerate(zip(X, y, strict=True)):
        learner.learn_round(x, target, coverage=0.5 + 0.01 * (i % 40))
    conformal = learner._conformal
    assert conformal is not None and len(conformal.levels) == MAX_LEVELS and conformal.kept == RING
    size = len(learner.to_bytes())
    for x, target in zip(X, y, strict=True):
        learner.learn_round(x, target, coverage=0.9)
    assert abs(len(learner.to_bytes()) - size) < 100  # the header's floats may take a few digits more


def test_prediction_sets_cover_and_hold_the_most_probable_classes_first() -> None:
    rng = np.random.default_rng(2)
    X = rng.normal(size=(2500, 2))
    labels = np.where(X[:, 0] + 0.7 * rng.normal(size=2500) > 0, "a", np.where(X[:, 1] > 0, "b", "c"))
    learner = kons.Auto(task="classification")
    covered = []
    for x, label in zip(X, labels, strict=True):
        probabilities = learner.predict_proba_dict_one(x)
        asked = learner.predict_set_one(x, 0.9)
        played = learner.learn_round(x, label, coverage=0.9)
        if label in probabilities:  # a new class: the round plays a distribution the prediction had not
            assert played.prediction_set == asked
            ranked = [probabilities[c] for c in asked]
            assert ranked == sorted(ranked, reverse=True)
        assert played.prediction_set is not None
        assert played.covered == (label in played.prediction_set)
        covered.append(label in played.prediction_set)
    assert abs(np.mean(covered[100:]) - 0.9) < 0.015
    restored = kons.load(learner.to_bytes())
    assert restored.predict_set_one(X[0], 0.9) == learner.predict_set_one(X[0], 0.9)


@pytest.mark.parametrize("coverage", [0.0, 1.0, -0.5, 1.5, math.nan, "0.9", True, None])
def test_a_coverage_outside_the_open_unit_interval_is_refused(coverage: object) -> None:
    learner = kons.Auto()
    with pytest.raises(InvalidParameterError, match="coverage"):
        learner.predict_interval_one([1.0], coverage)  # type: ignore[arg-type]
    assert learner._conformal is None


def test_the_wrong_answer_asked_is_refused_with_what_the_learner_gives() -> None:
    with pytest.raises(InvalidParameterError, match="prediction sets"):
        kons.Auto(task="classification").predict_interval_one([1.0], 0.9)
    with pytest.raises(InvalidParameterError, match="intervals"):
        kons.Auto().predict_set_one([1.0], 0.9)
    with pytest.raises(InvalidParameterError, match="neither"):
        kons.learner_from_params("ons", {"loss": "logistic"}).predict_round([1.0], 0.9)


def test_a_corrupted_conformal_state_is_a_state_format_error() -> None:
    learner = kons.learner_from_params("ons", {})
    X, y = _drifting(30)
    for x, target in zip(X, y, strict=True):
        learner.learn_round(x, target, coverage=0.9)
    header, arrays = kons._state.decode(learner.to_bytes())
    bad = dict(arrays, conformal_scores=arrays["conformal_scores"][:-1])
    with pytest.raises(StateFormatError):
        kons.load(kons._state.encode(header, bad))
    with pytest.raises(StateFormatError):
        kons.load(kons._state.encode({**header, "conformal": {"kind": "nope"}}, arrays))


def test_an_untracked_coverage_is_answered_from_the_kept_scores() -> None:
    conformal = Conformal("interval")
    for score in np.linspace(0.0, 1.0, 101):
        conformal.learn(float(score))
    assert conformal.threshold(0.5) == pytest.approx(0.5, abs=0.011)
    assert len(conformal.levels) == 0


def test_an_untracked_coverage_covers_as_asked_over_a_long_stationary_stream() -> None:
    # issue 38: 80% asked of a learner tracking 90% was seen covering 70% over 50 rounds, within the noise
    # of 50 rounds (a binomial standard deviation of 5.7 points). Over 3,000 exchangeable rounds the
    # ring's split-conformal quantile covers within 0.3 point of the target (docs/intervals.md); the
    # margin, 2 points, is 2.7 standard deviations of 3,000 rounds at 80%.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 3))
    y = X @ [1.0, 2.0, -1.0] + rng.normal(size=3000) * (0.2 + np.abs(X[:, 0]))
    learner = kons.learner_from_params("ons", {})
    learner.track_coverage(0.9)
    covered: dict[float, list[bool]] = {0.8: [], 0.95: []}
    for x, target in zip(X, y, strict=True):
        for coverage, hits in covered.items():
            interval = learner.predict_round(x, coverage).interval
            assert interval is not None
            hits.append(interval[0] <= target <= interval[1])
        learner.learn_one(x, target)
    assert learner._conformal is not None and list(learner._conformal.levels) == [0.9]  # none tracked
    for coverage, hits in covered.items():
        assert abs(float(np.mean(hits[1:])) - coverage) < 0.02, (coverage, np.mean(hits[1:]))


def test_predict_round_never_changes_the_learner() -> None:
    X, y = _drifting(300)
    learner = kons.learner_from_params("ons", {})
    assert learner.predict_round(X[0], 0.9).interval == (0.0, 0.0)  # nothing learnt: the range, C = 0
    assert learner._conformal is None
    for x, target in zip(X, y, strict=True):
        learner.learn_round(x, target, coverage=0.9)
    blob = learner.to_bytes()
    tracked = learner.predict_round(X[0], 0.9)
    untracked = learner.predict_round(X[0], 0.5)
    assert learner.to_bytes() == blob
    assert tracked.interval == learner.predict_interval_one(X[0], 0.9)
    assert untracked.interval is not None and tracked.interval is not None
    assert untracked.interval[1] - untracked.interval[0] < tracked.interval[1] - tracked.interval[0]


def test_a_round_asked_an_untracked_coverage_leaves_the_state_as_the_tracked_ones_make_it() -> None:
    X, y = _drifting(300)
    asked, plain = kons.learner_from_params("ons", {}), kons.learner_from_params("ons", {})
    for learner in (asked, plain):
        learner.track_coverage(0.9)
    for i, (x, target) in enumerate(zip(X, y, strict=True)):
        answered = asked.learn_round(x, target, coverage=0.5 + 0.1 * (i % 5), track=False)
        plain.learn_one(x, target)
        assert answered.interval is not None
    assert asked.to_bytes() == plain.to_bytes()
