"""The in-place rank-one downdate of :mod:`kons._numerics` against the expression it replaces, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import kons
from kons import SparseVector
from kons._numerics import (
    _OUTER_BLOCK,
    divided_outer_bound,
    scaled_outer_bound,
    scaled_outer_peak,
    subtract_scaled_outer,
)

# odd sizes, and sizes around the row block: one block (181 rows), a short last block (182, 257, 1000),
# blocks ending exactly at d (256)
SIZES = [1, 2, 7, 181, 182, 183, 256, 257, 1000]


@pytest.mark.parametrize("d", SIZES)
@pytest.mark.parametrize("scale", [0.0, 1.0, 0.37, -2.5e-3, 1e300, -1e-300])
@pytest.mark.parametrize("block", [_OUTER_BLOCK, 1, 50])  # 1: one row per block; 50: a few rows
def test_subtract_scaled_outer_is_the_outer_product_expression_bit_for_bit(
    d: int, scale: float, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("kons._numerics._OUTER_BLOCK", block)
    rng = np.random.default_rng(d)
    matrix = rng.normal(size=(d, d)) * rng.lognormal(0.0, 3.0, size=(d, d))
    v = rng.normal(size=d) * rng.lognormal(0.0, 3.0, size=d)
    v[rng.random(d) < 0.2] = 0.0
    with np.errstate(over="ignore", invalid="ignore"):  # 1e300 overflows some elements: inf in both
        expected = matrix - scale * np.outer(v, v)
        subtract_scaled_outer(matrix, scale, v)
    assert matrix.tobytes() == expected.tobytes()


def test_subtract_scaled_outer_updates_a_view_in_place() -> None:
    rng = np.random.default_rng(0)
    base = rng.normal(size=(9, 9))
    expected = base.copy()
    expected[2:7, 2:7] -= 0.5 * np.outer(base[0, :5], base[0, :5])
    v = base[0, :5].copy()
    subtract_scaled_outer(base[2:7, 2:7], 0.5, v)
    assert base.tobytes() == expected.tobytes()


@pytest.mark.parametrize(
    ("scale", "v"),
    [(1.0, [1.0, -3.0, 2.0]), (-2.0, [0.0, 0.0]), (1e-300, [1e200, 1.0]), (0.0, [1e200, 1.0]),
     (np.inf, [0.0, 1.0]), (np.inf, [0.0, 0.0]), (np.nan, [1.0]), (1.0, [np.nan, 1.0]), (1.0, [np.inf]),
     (1e300, [1e5, -1e4]), (1.0, [1e154, 1e154]), (1.0, [1e154, 1e154, 1e154]), (-1e-300, [1e200, 1e200]),
     (1e-10, [1e160, 0.0])],
)
def test_the_peak_is_finite_exactly_when_every_element_of_the_update_is(scale: float, v: list[float]) -> None:
    arr = np.array(v)
    with np.errstate(over="ignore", invalid="ignore"):
        update = scale * np.outer(arr, arr)
        peak = scaled_outer_peak(scale, arr)
        bound = scaled_outer_bound(scale, arr)
    assert bool(np.isfinite(update).all()) == bool(np.isfinite(peak)) == bool(np.isfinite(bound))
    if np.isfinite(peak):
        assert peak == np.max(np.abs(update))



@pytest.mark.parametrize(
    ("divisor", "v"),
    [(1.0, [1.0, -3.0, 2.0]), (-2.0, [0.0, 0.0]), (1e-300, [1e200, 1.0]), (1e-300, [1e-5, 1.0]), (0.0, [1.0]),
     (-0.0, [0.0]), (np.nan, [1.0]), (np.inf, [1e200, 1.0]), (1.0, [np.nan, 1.0]), (1.0, [np.inf]),
     (1e10, [1e154, 1e154]), (-1e300, [1e200, 1e200]), (3.0, [1e-200, -1e-200])],
)
def test_the_divided_bound_is_finite_only_when_every_element_of_the_shrink_is(divisor: float, v: list[float]
                                                                             ) -> None:
    """A finite :func:`divided_outer_bound` spares the check of ``outer(v, v) / divisor`` (the recent
    linear model's shrink): every element is then finite, and no larger than the bound."""
    arr = np.array(v)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        shrink = np.multiply.outer(arr, arr)
        shrink /= divisor
        bound = divided_outer_bound(arr, divisor)
        squared_norm = arr @ arr
    if np.isfinite(bound):
        assert np.isfinite(shrink).all() and bound >= np.max(np.abs(shrink))
    else:  # an element is not finite, or the squared norm overflowed
        assert not np.isfinite(shrink).all() or not np.isfinite(squared_norm)

def _rows(n: int, d: int, sparse: bool, seed: int) -> list[np.ndarray | SparseVector]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * rng.lognormal(0.0, 1.0, size=d)
    if sparse:
        X[rng.random(X.shape) < 0.9] = 0.0
        return [SparseVector.from_dense(x) for x in X]
    return list(X)


def _ons_stream_bytes(rows: list[np.ndarray | SparseVector], classes: int, seed: int) -> bytes:
    """The state after binary rounds (labels +-1), or multinomial ones on ``classes > 2`` (as ``auto``
    drives them), of a logistic ONS."""
    rng = np.random.default_rng(seed)
    learner = kons.ONS(loss="logistic", alpha=0.5, dim=300)
    if classes > 2:
        learner._widen(classes - 1)
    for x in rows:
        if classes > 2:
            learner._learn_class_checked(x, int(rng.integers(classes)))
        else:
            learner.learn_one(x, float(rng.choice([-1.0, 1.0])))
    return learner.to_bytes()


def _outer_expression(matrix: np.ndarray, scale: float, v: np.ndarray) -> None:
    """The update :func:`subtract_scaled_outer` replaced, with its two (d, d) temporaries."""
    matrix -= scale * np.outer(v, v)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("classes", [2, 4])
def test_ons_streams_are_byte_identical_to_the_outer_product_update(
    sparse: bool, classes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = _rows(150, 300, sparse, seed=classes)
    in_place = _ons_stream_bytes(rows, classes, seed=classes)
    monkeypatch.setattr("kons.linear.ons.subtract_scaled_outer", _outer_expression)
    assert in_place == _ons_stream_bytes(rows, classes, seed=classes)


def test_a_multinomial_round_whose_update_overflows_is_rejected() -> None:
    """v v' overflows although shrink v v' would not: the round is refused, A^{-1} stays finite."""
    learner = kons.ONS(loss="logistic", alpha=1e-6, dim=3)
    learner._widen(2)
    before = learner.to_bytes()
    with pytest.raises(kons.NumericalError):
        learner._learn_class_checked(np.array([3e149, 0.0, 0.0]), 1)
    assert learner.to_bytes() == before


_EDGE = float(np.sqrt(np.finfo(float).max))  # about 1.34e154: the largest value whose square is finite


@pytest.mark.parametrize(
    "values",
    [[], [0.0], [1.0, -2.0], [np.nan], [1.0, np.inf], [-np.inf], [_EDGE], [_EDGE, 0.0], [_EDGE, 1e150],
     [0.5 * _EDGE] * 4, [0.5 * _EDGE] * 5, [0.25 * _EDGE] * 17, [1e300], [-1e200, 1.0], [1e154] * 2],
)
def test_feature_values_are_decided_by_finite_values_and_squared_norm(values: list[float]) -> None:
    """The fast path (the largest magnitude against a bound) refuses exactly what the two checks it
    spares do: a non-finite value, else a squared norm that overflows; and says which."""
    from kons._validation import check_feature_values
    from kons.errors import InvalidInputError

    arr = np.array(values, dtype=float)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = None if not np.isfinite(arr).all() else np.isfinite(arr @ arr)
    if expected is None:
        with pytest.raises(InvalidInputError, match="non-finite"):
            check_feature_values(arr)
    elif not expected:
        with pytest.raises(InvalidInputError, match="squared norm overflows"):
            check_feature_values(arr)
    else:
        check_feature_values(arr)


@pytest.mark.filterwarnings("error")  # a numpy RuntimeWarning would reach a service's stderr
@pytest.mark.parametrize("values, refused", [([1e300], True), ([_EDGE, _EDGE], True),
                                             ([1e200, -1e200, 1.0], True), ([0.7 * _EDGE], False),
                                             ([0.5 * _EDGE] * 3, False)])
def test_huge_finite_values_are_decided_silently_at_every_entry(
    values: list[float], refused: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    """Huge finite values at the public entries, outside a round's numerics context (numpy's default
    floating-point handling, which warns of an overflow): a dense row, a sparse one and a record whose
    squared norm overflows are refused with the check's error, the others accepted, and nothing reaches
    stderr."""
    d = len(values)
    rows = [(kons.Auto(), np.array(values)), (kons.ONS(dim=d), {"indices": list(range(d)), "values": values}),
            (kons.Auto(), {f"k{i}": v for i, v in enumerate(values)})]
    with np.errstate(all="warn"):
        for learner, x in rows:
            if refused:
                with pytest.raises(kons.InvalidInputError, match="its squared norm overflows float64"):
                    learner.check_round(x, 1.0)
            else:
                learner.check_round(x, 1.0)
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("part", [np.zeros(0), np.array([1.0, -3.0]), np.array([[1.0], [np.nan]]),
                                  np.array([np.inf, 0.0]), np.array([-np.inf]), np.array([2.0, 5.0]), 4.0,
                                  float("nan"), np.float64(1e300)])
def test_check_finite_decides_as_every_element_below_the_bound(part: float | np.ndarray) -> None:
    from kons._numerics import check_finite
    from kons.errors import NumericalError

    for bound in (np.inf, 3.0):
        within = bool((np.abs(part) < bound).all())
        if within:
            check_finite(part, bound=bound)
        else:
            with pytest.raises(NumericalError):
                check_finite(part, bound=bound)


@pytest.mark.parametrize("vector", [np.zeros(0), np.array([1.0, -3.0]), np.array([np.nan, 0.0]),
                                    np.array([np.inf]), np.array([1e200, 1e200]), np.array([[1.0], [2.0]])])
@pytest.mark.parametrize("scalars", [(), (2.0,), (0.5, float("inf")), (float("nan"), 1.0),
                                     (np.float64(3.0),)])
def test_check_finite_vector_decides_as_check_finite(vector: np.ndarray, scalars: tuple[float, ...]) -> None:
    from kons._numerics import check_finite, check_finite_vector
    from kons.errors import NumericalError

    with np.errstate(over="ignore"):  # (as inside a round: a squared norm may overflow)
        try:
            check_finite(vector, *scalars)
        except NumericalError:
            with pytest.raises(NumericalError):
                check_finite_vector(vector, *scalars)
        else:
            check_finite_vector(vector, *scalars)
