"""Parameter and input validation, done once at the boundary (scikit-learn's message shape).

A learner or kernel declares the limits of its hyper-parameters once, as a class-level
``_parameter_constraints`` mapping each name to a constraint (:class:`Interval`, :class:`Integer`,
:class:`OneOf`, :class:`Flag`, :class:`NoneOr`, or any object with the :class:`Constraint` method); the
base class checks every value against it when the object is built.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from kons.errors import InvalidInputError, InvalidParameterError

__all__ = [
    "POSITIVE",
    "REGULARISER",
    "Constraint",
    "Flag",
    "Integer",
    "Interval",
    "NoneOr",
    "OneOf",
    "as_features",
    "as_label",
    "check_choice",
    "check_feature_floats",
    "check_feature_values",
    "check_int",
    "check_real",
]


def _describe(owner: str, name: str) -> str:
    return f"The {name!r} parameter of {owner}"


def check_real(
    owner: str,
    name: str,
    value: Any,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Return ``value`` as a float if it lies in the interval, else raise :class:`InvalidParameterError`."""
    left = "(" if low_open or low == -math.inf else "["
    right = ")" if high_open or high == math.inf else "]"
    interval = f"{left}{low:g}, {high:g}{right}"
    ok = isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)
    if ok:
        value = float(value)
        # Never infinite: inf/nan parameters make the numerics NaN and the JSON state unwritable.
        ok = math.isfinite(value)
        ok = ok and (value > low if low_open else value >= low)
        ok = ok and (value < high if high_open else value <= high)
    if not ok:
        raise InvalidParameterError(
            f"{_describe(owner, name)} must be a float in {interval}. Got {value!r} instead."
        )
    return float(value)


def check_int(owner: str, name: str, value: Any, *, low: int = 0, high: int | None = None) -> int:
    """Return ``value`` as an int in ``[low, high]``, else raise :class:`InvalidParameterError`."""
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool)
    ok = ok and value >= low and (high is None or value <= high)
    if not ok:
        upper = "inf" if high is None else str(high)
        raise InvalidParameterError(
            f"{_describe(owner, name)} must be an int in [{low}, {upper}]. Got {value!r} instead."
        )
    return int(value)


def check_choice(owner: str, name: str, value: Any, choices: Sequence[str]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise :class:`InvalidParameterError`."""
    if not isinstance(value, str) or value not in choices:
        raise InvalidParameterError(
            f"{_describe(owner, name)} must be one of {sorted(choices)}. Got {value!r} instead."
        )
    return value


class Constraint(Protocol):
    """The domain of one hyper-parameter."""

    def check(self, owner: str, name: str, value: Any) -> Any:
        """``value`` in canonical form, else :class:`InvalidParameterError` naming ``owner`` and ``name``."""
        ...


@dataclass(frozen=True)
class Interval:
    """A finite float in the interval from ``low`` to ``high`` (ends closed unless ``*_open``)."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False

    def check(self, owner: str, name: str, value: Any) -> float:
        return check_real(owner, name, value, low=self.low, high=self.high, low_open=self.low_open,
                          high_open=self.high_open)


@dataclass(frozen=True)
class Integer:
    """An int in ``[low, high]`` (no upper bound when ``high`` is None)."""

    low: int = 0
    high: int | None = None

    def check(self, owner: str, name: str, value: Any) -> int:
        return check_int(owner, name, value, low=self.low, high=self.high)


@dataclass(frozen=True)
class OneOf:
    """One of the strings ``choices``."""

    choices: tuple[str, ...]

    def check(self, owner: str, name: str, value: Any) -> str:
        return check_choice(owner, name, value, self.choices)


@dataclass(frozen=True)
class Flag:
    """A bool (NumPy's included)."""

    def check(self, owner: str, name: str, value: Any) -> bool:
        if not isinstance(value, bool | np.bool_):
            raise InvalidParameterError(f"{_describe(owner, name)} must be a bool. Got {value!r} instead.")
        return bool(value)


@dataclass(frozen=True)
class NoneOr:
    """None (the parameter's documented default behaviour) or a value that passes ``inner``."""

    inner: Constraint

    def check(self, owner: str, name: str, value: Any) -> Any:
        return None if value is None else self.inner.check(owner, name, value)


#: A finite float > 0 (steps, regularisers, kernel widths).
POSITIVE = Interval(low=0.0, low_open=True)
#: The ridge ``alpha`` of a second-order learner, whose state starts at ``I / alpha``. A subnormal alpha
#: makes that matrix infinite and every round fails; a tiny one makes the sketched updates lose all their
#: digits (measured on unit-scale Gaussian rounds with d=5: at 1e-8 FD-SON and RP-SON of sketch size 7
#: failed 16 and 26 of 50 rounds, at 1e-6 none did).
REGULARISER = Interval(low=1e-6)


def as_features(x: Any, dim: int | None) -> np.ndarray:
    """Return ``x`` as a finite 1-D float64 array of length ``dim`` (any length when ``dim`` is None).

    Raises :class:`InvalidInputError` naming the problem; never modifies ``x``.
    """
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"x must be a 1-D sequence of numbers: {exc}") from None
    if arr.ndim != 1:
        raise InvalidInputError(f"x must be 1-D; got an array of shape {arr.shape}.")
    if dim is not None and arr.shape[0] != dim:
        raise InvalidInputError(f"x must have dimension {dim}; got {arr.shape[0]}.")
    if arr.shape[0] == 0:
        raise InvalidInputError("x must not be empty.")
    check_feature_values(arr)
    return arr


#: The largest float64.
_LARGEST = float(np.finfo(np.float64).max)


def _safe_magnitude(count: int) -> float:
    """The magnitude below which ``count`` values are finite (NaN fails the comparison) and their squared
    norm cannot overflow: half the square root of (the largest float / their count)."""
    return 0.5 * math.sqrt(_LARGEST / count)


def check_feature_values(values: np.ndarray) -> None:
    """Raise :class:`InvalidInputError` unless the (dense or non-zero) feature values are learnable."""
    # The common case in one pass: values below the safe magnitude; the others are decided exactly below
    # (this runs for several forms of the row on every round).
    if values.size and (float(np.maximum.reduce(np.abs(values), axis=None))  # (ndarray.max wraps it)
                        < _safe_magnitude(values.size)):
        return
    if not np.isfinite(values).all():
        raise InvalidInputError("x contains a non-finite value (NaN or infinity).")
    with np.errstate(over="ignore"):  # the overflow is reported as the error below, not as a warning
        squared_norm = values @ values
    if not np.isfinite(squared_norm):
        # Kernels and sketches work with ||x||^2: an input whose square overflows cannot be learnt.
        raise InvalidInputError("x is too large: its squared norm overflows float64.")


def check_feature_floats(values: list[float]) -> None:
    """:func:`check_feature_values` of finite floats (a record's numbers), deciding as it does: its common
    case on the floats themselves, without an array (every record's round)."""
    if values and max(map(abs, values)) >= _safe_magnitude(len(values)):
        check_feature_values(np.array(values))


def as_label(y: Any) -> float:
    """Return ``y`` as a finite float, else raise :class:`InvalidInputError`."""
    if isinstance(y, bool) or not isinstance(y, int | float | np.integer | np.floating):
        raise InvalidInputError(f"y must be a number; got {type(y).__name__}.")
    value = float(y)
    if not math.isfinite(value):
        raise InvalidInputError("y must be finite; got " + repr(value) + ".")
    return value
