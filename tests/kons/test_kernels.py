"""Kernels against per-pair formulas written out in loops."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import numpy as np
import pytest

import kons
from kons.kernels import KERNELS, RBF, Kernel, Laplacian, Linear, Polynomial, kernel_from_dict

EPS = np.finfo(np.float64).eps


def direct(kernel: Kernel, x: np.ndarray, p: np.ndarray) -> float:
    """One kernel value from its textbook formula, one coordinate at a time."""
    if isinstance(kernel, RBF):
        return math.exp(-kernel.gamma * sum((a - b) ** 2 for a, b in zip(x, p, strict=True)))
    if isinstance(kernel, Laplacian):
        return math.exp(-kernel.gamma * sum(abs(a - b) for a, b in zip(x, p, strict=True)))
    dot = sum(a * b for a, b in zip(x, p, strict=True))
    if isinstance(kernel, Polynomial):
        return float((kernel.scale * dot + kernel.coef0) ** kernel.degree)
    assert isinstance(kernel, Linear)
    return float(dot)


KERNEL_CASES = [
    RBF(gamma=0.7),
    RBF(gamma=3.0),
    Laplacian(gamma=0.4),
    Polynomial(degree=3, coef0=0.5, scale=0.2),
    Polynomial(degree=1, coef0=0.0, scale=2.0),
    Linear(),
]


def _points(rng: np.random.Generator, n: int = 25, d: int = 5) -> np.ndarray:
    return rng.normal(size=(n, d))


@pytest.mark.parametrize("kernel", KERNEL_CASES, ids=repr)
def test_row_diag_gram_match_the_formula(kernel: Kernel) -> None:
    rng = np.random.default_rng(1)
    P, Q = _points(rng), _points(rng, n=7)
    sq = (P * P).sum(axis=1)
    for x in Q:
        expected = np.array([direct(kernel, x, p) for p in P])
        np.testing.assert_allclose(kernel.row(x, P, sq), expected, rtol=1e-12, atol=1e-14)
        assert kernel.diag(x) == pytest.approx(direct(kernel, x, x), rel=1e-13)
    G = kernel.gram(Q, P)
    assert G.shape == (len(Q), len(P))
    expected = np.array([[direct(kernel, q, p) for p in P] for q in Q])
    np.testing.assert_allclose(G, expected, rtol=1e-12, atol=1e-14)
    # An empty block of stored points gives an empty row.
    assert kernel.row(Q[0], P[:0], sq[:0]).shape == (0,)


@pytest.mark.parametrize("offset", [0.0, 30.0, 1e3])
def test_rbf_near_duplicates(offset: float) -> None:
    """``||p||^2 - 2 p'x + ||x||^2`` cancels for close points; the error must stay at rounding level."""
    kernel = RBF(gamma=2.0)
    rng = np.random.default_rng(2)
    x = offset + rng.normal(size=6)
    P = np.vstack([x, x + 1e-9, x - 1e-7 * rng.normal(size=6), x + 1e-4, x + 1e-2 * rng.normal(size=6)])
    sq = (P * P).sum(axis=1)
    row = kernel.row(x, P, sq)
    assert np.all((row >= 0.0) & (row <= 1.0))
    assert kernel.diag(x) == 1.0
    for value, p, p_sq in zip(row, P, sq, strict=True):
        expected = direct(kernel, x, p)
        # Absolute error of the expanded distance: a few ulps of the norms involved, times gamma.
        bound = 8 * len(x) * EPS * kernel.gamma * (p_sq + x @ x) + 4 * EPS
        assert abs(value - expected) <= bound, (value, expected, bound)
    if offset == 0.0:  # small norms: the near-duplicates are resolved to full relative accuracy
        expected_row = np.array([direct(kernel, x, p) for p in P])
        np.testing.assert_allclose(row, expected_row, rtol=0, atol=1e-14)


@pytest.mark.parametrize("kernel", KERNEL_CASES, ids=repr)
def test_to_dict_round_trip(kernel: Kernel) -> None:
    spec = kernel.to_dict()
    assert spec["name"] == kernel.name
    again = kernel_from_dict(json.loads(json.dumps(spec)))
    assert type(again) is type(kernel)
    assert again == kernel and hash(again) == hash(kernel)
    assert again.to_dict() == spec
    P = _points(np.random.default_rng(3))
    sq = (P * P).sum(axis=1)
    assert np.array_equal(again.row(P[0], P, sq), kernel.row(P[0], P, sq))
    assert kernel_from_dict(kernel) is kernel


def test_kernels_with_different_parameters_differ() -> None:
    assert RBF(gamma=1.0) != RBF(gamma=2.0)
    assert RBF(gamma=1.0) != Laplacian(gamma=1.0)  # type: ignore[comparison-overlap]  # kinds differ on purpose
    assert set(KERNELS) == {"rbf", "laplacian", "polynomial", "linear"}


@pytest.mark.parametrize(
    "build",
    [
        lambda: RBF(gamma=0.0),
        lambda: RBF(gamma=-1.0),
        lambda: RBF(gamma=float("nan")),
        lambda: RBF(gamma=float("inf")),
        lambda: RBF(gamma="1"),  # type: ignore[arg-type]  # a wrong type on purpose
        lambda: RBF(gamma=True),
        lambda: Laplacian(gamma=0),
        lambda: Polynomial(degree=0),
        lambda: Polynomial(degree=2.5),  # type: ignore[arg-type]  # a wrong type on purpose
        lambda: Polynomial(degree=33),
        lambda: Polynomial(coef0=-1.0),
        lambda: Polynomial(scale=0.0),
        lambda: kernel_from_dict({"name": "sigmoid"}),
        lambda: kernel_from_dict({"name": "rbf", "sigma": 1.0}),
        lambda: kernel_from_dict({"name": "rbf", "gamma": -2.0}),
        lambda: kernel_from_dict({"name": "linear", "gamma": 1.0}),
        lambda: kernel_from_dict({"gamma": 1.0}),
        lambda: kernel_from_dict("rbf"),
        lambda: kernel_from_dict(None),
    ],
)
def test_invalid_parameters_raise(build: Callable[[], object]) -> None:
    with pytest.raises(kons.InvalidParameterError) as info:
        build()
    assert isinstance(info.value, ValueError)
