"""Online preprocessing (kons.preprocessing): every algorithm at ``{}`` is safe and useful on raw data.

Raw streams are the committed protocol streams un-standardised: features times large scales plus large
offsets, targets in the hundreds of thousands, labels as {0, 1} or booleans.
"""

from __future__ import annotations

import functools
import math
import re
import warnings
from typing import cast

import numpy as np
import pytest

import kons
from kons._validation import check_feature_values
from kons.base import _round_numerics
from kons.errors import InvalidInputError
from kons.kernels import RBF
from kons.preprocessing import (
    WARMUP_ROWS,
    FeatureScaler,
    Preprocessed,
    binary_label,
    checked_form,
    median_width,
)
from tests.streams import load_stream

PAPER = sorted(n for n, c in kons.LEARNERS.items() if not c.preprocesses)
KERNEL = [n for n in PAPER if kons.LEARNERS[n].uses_kernel]


def _unstandardise(X: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.uniform(-3, 5, size=X.shape[1])
    offset = rng.choice([0.0, 1e3, -5e4, 2e6], size=X.shape[1])
    raw: np.ndarray = X * scale + offset
    return raw


@functools.cache
def _raw_regression(n: int = 400) -> tuple[np.ndarray, np.ndarray]:
    data = load_stream("cadata", n)
    return _unstandardise(data.X, 1), 1.2e5 * data.y + 2.1e5


@functools.cache
def _raw_binary(n: int = 400) -> tuple[np.ndarray, np.ndarray]:
    data = load_stream("australian", n)
    return _unstandardise(data.X, 2), (data.y > 0).astype(float)  # labels {0, 1}


def _running_mean_mse(y: np.ndarray) -> float:
    means = np.concatenate([[0.0], np.cumsum(y)[:-1] / np.arange(1, len(y))])
    return float(np.mean((means - y) ** 2))


@pytest.mark.parametrize("name", PAPER)
def test_every_algorithm_at_defaults_learns_raw_regression(name: str) -> None:
    X, y = _raw_regression()
    learner = kons.learner_from_params(name, {})
    assert isinstance(learner, Preprocessed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning would fail the test
        played = learner.learn_many(X, y)
    assert np.all(np.isfinite(played))
    mse, baseline = float(np.mean((played - y) ** 2)), _running_mean_mse(y)
    assert mse < 1.05 * baseline, (mse, baseline)
    # mapped back to the user's units and clipped to the range seen (round 1 plays 0: nothing seen yet)
    assert played[0] == 0.0 and np.all((played[1:] >= y.min()) & (played[1:] <= y.max()))


@pytest.mark.parametrize("name", PAPER)
def test_every_algorithm_at_defaults_classifies_raw_zero_one_labels(name: str) -> None:
    X, y = _raw_binary()
    learner = kons.learner_from_params(name, {"loss": "logistic"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        played = learner.learn_many(X, y)
    errors = np.mean((played > 0) != (y > 0))
    majority = min(np.mean(y), 1 - np.mean(y))
    assert errors < 0.75 * majority, (errors, majority)


def test_paper_exact_learner_fails_on_the_same_raw_stream() -> None:
    """Why preprocessing is the default: without it ONS at {} is no better than predicting 0."""
    X, y = _raw_regression()
    exact = kons.learner_from_params("ons", {"preprocess": False})
    assert type(exact) is kons.ONS
    played = exact.learn_many(X, y)
    assert np.all(np.abs(played) <= 1.0)
    assert np.mean((played - y) ** 2) > 0.9 * np.mean(y**2)


@pytest.mark.parametrize("name", ["ons", "sketched_kons", "nystrom_kons", "fd_son"])
def test_predictions_are_equivariant_to_affine_changes_of_units(name: str) -> None:
    """Standardisation and the median width make the plays independent of the units: y -> a y + b."""
    data = load_stream("housing", 200)
    plain = kons.learner_from_params(name, {}).learn_many(data.X, data.y)
    X = data.X * np.linspace(0.01, 1e4, data.X.shape[1]) - 3e3
    scaled = kons.learner_from_params(name, {}).learn_many(X, 500.0 * data.y + 7e4)
    assert plain[0] == scaled[0] == 0.0  # before any data
    np.testing.assert_allclose(scaled[1:], 500.0 * plain[1:] + 7e4, rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize("name", ["ons", "sketched_kons", "kernel_ogd", "oja_son"])
def test_play_equals_the_prediction_before_the_round(name: str) -> None:
    X, y = _raw_regression(120)
    learner = kons.learner_from_params(name, {})
    for x, label in zip(X, y, strict=True):
        predicted = learner.predict_one(x)
        assert learner.learn_one(x, label) == predicted


@pytest.mark.parametrize("name", ["ons", "sketched_kons", "nystrom_kons", "rp_son", "adagrad"])
@pytest.mark.parametrize("binary", [False, True])
def test_save_and_restore_continue_bit_identically(name: str, binary: bool) -> None:
    X, y = _raw_binary(160) if binary else _raw_regression(160)
    params = {"loss": "logistic"} if binary else {}
    for cut in (0, 1, WARMUP_ROWS - 1, WARMUP_ROWS, WARMUP_ROWS + 1, 100):
        original = kons.learner_from_params(name, params)
        original.learn_many(X[:cut], y[:cut])
        blob = original.to_bytes()
        restored = kons.load(blob)
        assert type(restored) is Preprocessed and restored.to_bytes() == blob
        assert restored.get_params() == original.get_params() and restored.stats() == original.stats()
        assert np.array_equal(original.learn_many(X[cut:], y[cut:]), restored.learn_many(X[cut:], y[cut:]))
        assert original.to_bytes() == restored.to_bytes()


def test_sparse_input_is_scaled_without_densifying() -> None:
    rng = np.random.default_rng(3)
    X = np.where(rng.random((300, 50)) < 0.1, rng.normal(size=(300, 50)) * 1e4, 0.0)
    y = np.sign(X[:, 0] + X[:, 1] + 1.0)
    rows = [{"indices": np.flatnonzero(x).tolist(), "values": x[x != 0].tolist(), "dim": 50} for x in X]
    sparse = kons.learner_from_params("ons", {"loss": "logistic"})
    played = sparse.learn_many(rows, y)
    assert np.mean(np.sign(played[100:]) != y[100:]) < 0.2
    restored = kons.load(sparse.to_bytes())
    assert np.array_equal(restored.predict_many(rows[:20]), sparse.predict_many(rows[:20]))


def test_binary_labels_in_any_form_give_the_same_run() -> None:
    X, y01 = _raw_binary(150)
    runs = []
    for labels in (y01, 2.0 * y01 - 1.0, [bool(v) for v in y01], [int(v) for v in y01]):
        runs.append(kons.learner_from_params("sketched_kons", {"loss": "logistic"}).learn_many(X, labels))
    for other in runs[1:]:
        assert np.array_equal(runs[0], other)
    assert binary_label(True) == binary_label(1) == 1.0
    assert binary_label(np.False_) == binary_label(-1) == binary_label(0) == -1.0
    for bad in (0.5, 2, -3.0, "1", None, float("nan")):
        with pytest.raises(kons.InvalidInputError):
            binary_label(bad)


def test_probability_sits_next_to_the_score() -> None:
    X, y = _raw_binary(120)
    learner = cast(Preprocessed, kons.learner_from_params("ons", {"loss": "logistic"}))
    learner.learn_many(X, y)
    for x in X[:10]:
        score, p = learner.predict_one(x), learner.predict_proba_one(x)
        assert 0.0 < p < 1.0 and math.isclose(p, 1.0 / (1.0 + math.exp(-score)), rel_tol=1e-12)
    with pytest.raises(kons.InvalidParameterError):
        cast(Preprocessed, kons.learner_from_params("ons", {})).predict_proba_one(X[0])


def test_bad_input_leaves_the_learner_unchanged_during_and_after_warmup() -> None:
    X, y = _raw_regression(60)
    learner = kons.learner_from_params("sketched_kons", {})
    for cut in (5, WARMUP_ROWS - 1, 50):
        learner.learn_many(X[learner.stats()["rounds"]:cut], y[learner.stats()["rounds"]:cut])
        before = learner.to_bytes()
        for bad_x, bad_y in ((np.full(X.shape[1], np.nan), 1.0), (X[0], float("inf")), (X[0][:3], 1.0),
                             (X[0], True)):
            with pytest.raises(kons.InvalidInputError):
                learner.learn_one(bad_x, bad_y)
            assert learner.to_bytes() == before


def test_a_row_standardised_before_it_is_taken_into_the_statistics() -> None:
    rng = np.random.default_rng(0)
    scaler = FeatureScaler(3, sparse=False)
    for row in rng.normal(size=(20, 3)) * [1.0, 100.0, 0.0] + [0.0, 50.0, 7.0]:
        scaler.transform(row, commit=True)
    x = np.array([40.0, 60.0, 7.0])
    before = scaler.standardised_before(x)
    assert before is not None
    # the statistics of the rows before it (a constant feature standardises to 0), the intercept last
    assert np.allclose(before, np.append(scaler.standardise(x), 1.0), rtol=0.0, atol=1e-12)
    assert before[2] == 0.0 and before[0] > cast(np.ndarray, scaler.transform(x, commit=False))[0]
    missing = scaler.standardised_before(np.array([np.nan, 60.0, 7.0]))
    assert missing is not None and missing[0] == 0.0 and math.isclose(missing[1], before[1], rel_tol=1e-12)
    scaler.transform(x, commit=True)  # a new state: the deviations are computed again
    again = scaler.standardised_before(x)
    assert again is not None
    assert np.allclose(again, np.append(scaler.standardise(x), 1.0), rtol=0.0, atol=1e-12)


def test_median_width_is_the_inverse_median_squared_distance() -> None:
    Z = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])  # squared distances 1, 4, 5
    assert median_width(Z) == 1.0 / 4.0
    assert median_width(np.zeros((4, 3))) == 1.0 / 3.0  # all equal: 1/d


def test_user_given_kernel_and_bound_are_kept() -> None:
    X, y = _raw_regression(80)
    learner = cast(Preprocessed, kons.learner_from_params("kons", {"kernel": {"name": "rbf", "gamma": 0.1},
                                                                   "C": 2.5e5}))
    played = learner.learn_many(X, y)
    assert cast(kons.KONS, learner._base).kernel == RBF(gamma=0.1) and learner.C == 2.5e5
    assert np.all(played <= 2.5e5)
    with pytest.raises(kons.InvalidParameterError):
        kons.learner_from_params("kons", {"preprocess": "no"})
    with pytest.raises(kons.InvalidParameterError):
        kons.learner_from_params("auto", {"preprocess": False})
    with pytest.raises(kons.InvalidParameterError):
        Preprocessed(algorithm="auto")


def test_a_form_is_checked_as_check_feature_values_checks_it() -> None:
    """checked_form (the dot of a form's squared norm, inside the round's numerics context) passes exactly
    the forms check_feature_values passes, at the overflow's edge too, and raises its error otherwise; a
    FeatureScaler tells a missing value (NaN) from an infinity or an overflowing square."""
    edge = math.sqrt(np.finfo(np.float64).max / 2.0)
    forms = [[1.0, -0.0], [], [np.nan, 1.0], [np.inf, 1.0], [-np.inf], [1e200, 1.0], [edge, edge],
             [edge, np.nextafter(edge, np.inf)], [edge * 1.0000001, edge], [0.0] * 7 + [edge * 1.5]]
    with _round_numerics():
        for values in map(np.array, forms):
            try:
                check_feature_values(values)
                expected = None
            except InvalidInputError as error:
                expected = str(error)
            if expected is None:
                assert checked_form(values) is values
            else:
                with pytest.raises(InvalidInputError, match=re.escape(expected)):
                    checked_form(values)
        for row, missing in (([np.nan, 1.0], True), ([np.inf, 1.0], False), ([1e200, 1e200], False)):
            scaler = FeatureScaler(2, False)
            scaler.transform(np.zeros(2), commit=True)
            scaler.transform(np.array(row), commit=True)
            assert (scaler.counts is not None) == missing
