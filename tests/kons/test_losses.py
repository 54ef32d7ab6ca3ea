"""Losses: values against closed forms, derivatives against finite differences, Assumption 2's bound."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kons
from kons.losses import (
    LOSSES,
    PROBABILITY_FLOOR,
    binary_distribution,
    get_loss,
    log_loss,
    predicted,
    probability,
    sigmoid,
    top_label,
)

# Independent closed forms of the values (numpy, not the package's code paths).
VALUES: dict[str, Callable[[Any, Any], Any]] = {
    "squared": lambda y_hat, y: (y_hat - y) ** 2,
    "logistic": lambda y_hat, y: np.logaddexp(0.0, -y * y_hat),
    "squared_hinge": lambda y_hat, y: np.maximum(0.0, 1.0 - y * y_hat) ** 2,
    "hinge": lambda y_hat, y: np.maximum(0.0, 1.0 - y * y_hat),
}
BINARY = {"logistic", "squared_hinge", "hinge"}
KINKED = {"squared_hinge", "hinge"}  # kink at y * y_hat = 1


def _cases(name: str) -> list[tuple[float, float]]:
    labels = [-1.0, 1.0] if name in BINARY else [-2.3, -0.4, 0.0, 1.7]
    grid = np.linspace(-40.0, 40.0, 161) if name == "logistic" else np.linspace(-4.0, 4.0, 161)
    cases = []
    for y in labels:
        for y_hat in grid:
            if name in KINKED and abs(1.0 - y * y_hat) < 1e-2:
                continue
            cases.append((float(y_hat), y))
    return cases


def test_registry_holds_the_four_losses() -> None:
    assert set(LOSSES) == set(VALUES)
    with pytest.raises(kons.InvalidParameterError):
        get_loss("absolute")


@pytest.mark.parametrize("name", sorted(VALUES))
def test_value_matches_closed_form(name: str) -> None:
    loss = get_loss(name)
    for y_hat, y in _cases(name):
        assert loss.value(y_hat, y) == pytest.approx(float(VALUES[name](y_hat, y)), rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("name", sorted(VALUES))
def test_derivative_matches_central_differences(name: str) -> None:
    loss = get_loss(name)
    h = 1e-5
    for y_hat, y in _cases(name):
        fd = (float(VALUES[name](y_hat + h, y)) - float(VALUES[name](y_hat - h, y))) / (2 * h)
        assert loss.derivative(y_hat, y) == pytest.approx(fd, rel=1e-6, abs=1e-8), (y_hat, y)


def test_logistic_is_finite_at_extreme_margins() -> None:
    loss = get_loss("logistic")
    for margin in (-1e4, -800.0, 800.0, 1e4):
        assert np.isfinite(loss.value(margin, 1.0)) and np.isfinite(loss.derivative(margin, 1.0))
    assert loss.value(-800.0, 1.0) == pytest.approx(800.0)
    assert loss.derivative(-800.0, 1.0) == pytest.approx(-1.0)
    assert loss.derivative(800.0, 1.0) == pytest.approx(0.0, abs=1e-300)


def _asm2_gap(name: str, sigma: float, C: float) -> float:
    r"""Smallest value of :math:`\ell(w) - \ell(u) - \ell'(u)(w-u) - \frac{\sigma}{2}(\ell'(u)(w-u))^2`.

    Over a grid of ``u, w`` in ``[-C, C]`` and the labels the loss allows (squared: ``|y| <= C``).
    """
    value = VALUES[name]
    grid = np.linspace(-C, C, 121)
    labels = [-1.0, 1.0] if name in BINARY else np.linspace(-C, C, 9)
    u, w = np.meshgrid(grid, grid, indexing="ij")
    loss = get_loss(name)
    worst = np.inf
    for y in labels:
        slope = np.vectorize(loss.derivative)(u, y)
        linear = slope * (w - u)
        gap = value(w, y) - value(u, y) - linear - 0.5 * sigma * linear**2
        worst = min(worst, float(gap.min()))
    return worst


@pytest.mark.parametrize("C", [0.25, 0.5, 1.0, 2.0, 3.0, 10.0])
@pytest.mark.parametrize("name", ["squared", "logistic", "squared_hinge"])
def test_curvature_satisfies_assumption_2(name: str, C: float) -> None:
    sigma = get_loss(name).curvature(C)
    assert sigma > 0.0
    assert _asm2_gap(name, sigma, C) >= -1e-9 * max(1.0, C * C)


@pytest.mark.parametrize("C", [0.5, 1.0, 3.0])
def test_squared_curvature_is_the_papers_constant_and_tight(C: float) -> None:
    sigma = get_loss("squared").curvature(C)
    assert sigma == pytest.approx(1.0 / (8.0 * C * C), rel=1e-15)
    # The constant is the largest one: 10% more violates the bound somewhere on the grid.
    assert _asm2_gap("squared", 1.1 * sigma, C) < -1e-6


@pytest.mark.parametrize("C", [0.5, 1.0, 3.0])
def test_squared_hinge_curvature_is_tight(C: float) -> None:
    sigma = get_loss("squared_hinge").curvature(C)
    assert _asm2_gap("squared_hinge", 1.1 * sigma, C) < -1e-6


def test_hinge_has_no_curvature() -> None:
    assert get_loss("hinge").curvature(1.0) == 0.0
    with pytest.raises(kons.InvalidParameterError):
        kons.KONS(loss="hinge")  # eta has no default without curvature
    assert kons.KONS(loss="hinge", eta=0.1).eta == 0.1


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("label", [0.0, 0.5, -2.0, 2.0, 1.0000001])
def test_binary_losses_reject_other_labels(name: str, label: float) -> None:
    loss = get_loss(name)
    with pytest.raises(kons.InvalidInputError) as info:
        loss.check_label(label)
    assert isinstance(info.value, ValueError)
    assert loss.check_label(1.0) == 1.0 and loss.check_label(-1.0) == -1.0


def test_squared_accepts_any_real_label() -> None:
    assert get_loss("squared").check_label(0.37) == 0.37


# ----------------------------------------------------------------- distributions over classes
def test_sigmoid_is_the_logistic_derivative_bit_for_bit() -> None:
    """The sigmoid of a score equals the logistic loss's derivative at label -1 (which the service used
    before) for every float, both signs and past overflow."""
    logistic = get_loss("logistic")
    scores = [0.0, -0.0, 1e-300, -1e-300, 5e-324, 36.7, -36.7, 709.0, -709.0, 710.0, -745.2, 1e308, -1e308]
    scores += list(np.random.default_rng(0).normal(scale=20.0, size=2000))
    for s in scores:
        assert sigmoid(float(s)) == logistic.derivative(float(s), -1.0), s


def test_a_binary_distribution_is_the_learners_own() -> None:
    """From the score played, the distribution ``auto`` gives for the same row (one class: all of it)."""
    learner = kons.Auto(task="classification")
    rng = np.random.default_rng(1)
    learner.learn_one(rng.normal(size=3), "no")
    x = rng.normal(size=3)
    assert binary_distribution(learner.classes, learner.predict_one(x)) == [("no", 1.0)]
    for _ in range(40):
        x = rng.normal(size=3)
        learner.learn_one(x, "yes" if x[0] > 0 else "no")
    for _ in range(20):
        x = rng.normal(size=3)
        expected = list(zip(learner.classes, learner.predict_proba_by_class_one(x).tolist(), strict=True))
        assert binary_distribution(learner.classes, learner.predict_one(x)) == expected


def test_pairs_keep_true_and_one_apart_where_a_dict_cannot() -> None:
    pairs = [(1, 0.2), (True, 0.7), ("1", 0.1)]
    assert [probability(pairs, label) for label in (1, True, "1", 1.0, False)] == [0.2, 0.7, 0.1, 0.2, 0.0]
    assert probability({1: 0.2, "1": 0.8}, True) == 0.2  # a dict's own lookup: True is its key 1
    assert log_loss(pairs, True) == log_loss({"t": 0.7}, "t") == pytest.approx(-np.log(0.7))
    assert log_loss(pairs, "absent") == -np.log(PROBABILITY_FLOOR)
    assert top_label(pairs) is True and top_label([]) is None
    assert top_label([("a", 0.5), ("b", 0.5)]) == "a"  # the first on a tie
    assert [predicted(pairs, label) for label in (True, 1, "b")] == [True, False, False]
    assert not predicted([("a", 0.5), ("b", 0.5)], "a")  # a tie predicts nothing
    assert predicted([("only", 1.0)], "only") and predicted({"a": 0.9, "b": 0.1}, "a")
