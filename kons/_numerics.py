"""Numerics shared by the kernel and the linear learners.

Growable buffers and an append-only Cholesky factor (each grows geometrically and exposes views of its
used prefix, so a round costs what the algorithm needs and never a copy of the whole state), the in-place
rank-one downdate of a dense matrix, the ridge leverage of a round, and the step-size schedules of the
first-order learners.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from scipy.linalg.blas import dsymv, dsyr, dtpsv

from kons.errors import NumericalError

__all__ = [
    "MIN_CAPACITY",
    "SCHEDULES",
    "SMALLEST_NORMAL",
    "TINY",
    "GrowableRows",
    "GrowableVector",
    "PackedCholesky",
    "SymmetricMatrix",
    "check_finite",
    "check_finite_vector",
    "clip",
    "divided_outer_bound",
    "ridge_leverage",
    "scaled_outer_bound",
    "scaled_outer_peak",
    "scheduled_step",
    "subtract_scaled_outer",
]

#: Rows a growable buffer allocates for its first row.
MIN_CAPACITY = 16
#: Floor of a quadratic form that is positive in exact arithmetic but may round to zero or below: a
#: division by it then overflows, and the round is rejected instead of dividing by zero.
TINY = 1e-300
#: The smallest positive normal float64: the floor of a probability whose log is taken, and of a weight
#: kept as a log (a state holds finite numbers only: one that underflowed to 0 would have the log -inf).
SMALLEST_NORMAL = float(np.finfo(float).tiny)
#: Step-size schedules of the first-order learners: ``eta`` or ``eta / sqrt(t)`` in round ``t``.
SCHEDULES = ("constant", "inverse_sqrt")
#: Elements of the row block :func:`subtract_scaled_outer` computes at a time (256 KiB: it stays in cache).
_OUTER_BLOCK = 32768
# The BLAS wrappers take their arguments by position only, each named in a comment: f2py parses keyword
# arguments more slowly than a small product of a round computes, and every base makes a few such calls.
_YES = 1
_NO = 0


def clip(value: float, low: float, high: float) -> float:
    """``min(max(value, low), high)``, bit for bit (a NaN, a signed zero and the object returned
    included), without the two builtins' calls when ``value`` lies inside, as nearly every play does
    (a round clips several plays)."""
    return value if low <= value <= high else min(max(value, low), high)


def check_finite(*parts: Any, bound: float = np.inf) -> None:
    """Raise :class:`NumericalError` unless every float/array in ``parts`` is finite and below ``bound``."""
    unbounded = bound == math.inf
    for part in parts:
        # also False for NaN (the largest of values with a NaN is NaN); a float is checked without
        # numpy's dispatch (a round checks several)
        if isinstance(part, float):
            within = abs(part) < bound
        elif isinstance(part, np.ndarray):  # (the ufunc's reduction: ndarray.max wraps it in Python)
            if unbounded and part.dtype.kind == "f":
                # The sum of the squares (one BLAS dot, no temporary) is finite only if every element is:
                # the exact test below runs only when it is not (an element is not, or the sum overflowed).
                flat = part if part.ndim == 1 else part.ravel("K")  # (a vector's dot needs no view)
                if math.isfinite(flat.dot(flat)):
                    continue
            within = part.size == 0 or float(np.maximum.reduce(np.abs(part), axis=None)) < bound
        else:
            within = bool((np.abs(part) < bound).all())
        if not within:
            raise NumericalError("the round would put a non-finite or overflowing number into the state.")


def check_finite_vector(vector: np.ndarray, *scalars: float) -> None:
    """:func:`check_finite` of a float array and floats (a Newton round's new weights, a vector or the
    (m, K-1) matrix of the multinomial round, and the numbers of its update), deciding as it does; the
    common case, all finite, without its dispatch on each part's type (every base of a mixture checks its
    round)."""
    flat = vector if vector.ndim == 1 else vector.ravel("K")  # (as check_finite takes an array)
    if math.isfinite(flat.dot(flat)):  # (finite only if every element is)
        for scalar in scalars:
            if not math.isfinite(scalar):
                break
        else:
            return
    check_finite(vector, *scalars)


def scaled_outer_peak(scale: float, v: np.ndarray) -> float:
    r"""The largest :math:`|s\,(v_i v_j)|` as :func:`subtract_scaled_outer` rounds it: O(d), not O(d^2).

    Rounding to nearest is monotone and symmetric, so no element exceeds :math:`|s|\,(m\,m)` with
    :math:`m = \max_i |v_i|`, and the diagonal element of that :math:`i` equals it: the peak is finite
    exactly when every element is, and NaN when one is (a NaN in ``v`` or ``s``, or :math:`0 \cdot \infty`).
    ``check_finite`` on it thus decides as on the whole :math:`s\,v v^\top`, before the matrix is touched.
    """
    largest = float(np.maximum.reduce(np.abs(v), axis=None)) if v.size else 0.0
    return abs(scale) * (largest * largest)


def scaled_outer_bound(scale: float, v: np.ndarray) -> float:
    r"""A number finite exactly when :func:`scaled_outer_peak` is: :math:`|s|\,\|v\|^2` (one BLAS dot, no
    temporary), which bounds each :math:`|s\,(v_i v_j)|` as rounded (a sum of squares rounds to no less
    than its largest term), and the exact peak only when that bound is not finite (an element is not, or
    the sum overflowed). A round's check takes it: one call where the peak makes two."""
    bound = abs(scale) * v.dot(v)
    return bound if bound < math.inf else scaled_outer_peak(scale, v)


def divided_outer_bound(v: np.ndarray, divisor: float) -> float:
    r"""A number finite only when every :math:`(v_i v_j) / c` (``divisor`` :math:`c`) is as rounded:
    :math:`\|v\|^2 / |c|` (one BLAS dot, O(d)), which bounds each (a sum of squares rounds to no less than
    its largest term, and a rounded quotient grows with its dividend); infinite for :math:`c` 0 or NaN. A
    round's check takes it in place of the (d, d) matrix's own, which it needs only when this is not
    finite (an element is not, or the sum overflowed)."""
    magnitude = abs(divisor)
    return float(v.dot(v)) / magnitude if magnitude > 0.0 else math.inf


def subtract_scaled_outer(matrix: np.ndarray, scale: float, v: np.ndarray) -> None:
    r""":math:`M \leftarrow M - s\,(v v^\top)` in place, bit for bit ``M - scale * np.outer(v, v)``.

    Each element is rounded as there (:math:`v_i v_j`, times :math:`s`, subtracted from :math:`M_{ij}`),
    but through a row block of at most ``_OUTER_BLOCK`` elements instead of two (d, d) temporaries, whose
    allocation and memory traffic were most of an ONS round. The caller checks
    :func:`scaled_outer_peak` first (a non-finite update would leave the matrix half written), and ``v``
    is not a view of ``matrix`` (the blocks already written would change it).
    """
    d = len(v)
    rows = max(1, _OUTER_BLOCK // max(d, 1))
    if rows >= d:  # one block: no slicing, which is most of the cost of a small matrix's update
        update = np.multiply(v[:, None], v)
        update *= scale
        matrix -= update
        return
    buffer = np.empty((rows, d))
    for start in range(0, d, rows):
        block = buffer[: min(rows, d - start)]
        np.multiply(v[start : start + len(block), None], v, out=block)
        block *= scale
        matrix[start : start + len(block)] -= block


def ridge_leverage(ridge: float) -> float:
    """:math:`r / (1 + r)`, the leverage of a round with ridge ratio ``r >= 0`` (1 when ``r`` overflows)."""
    return ridge / (1.0 + ridge) if math.isfinite(ridge) else 1.0


def scheduled_step(eta: float, schedule: str, t: int) -> float:
    """The step of round ``t >= 1`` under ``schedule`` (one of :data:`SCHEDULES`)."""
    return eta if schedule == "constant" else eta / math.sqrt(t)


def _triangle_side(length: int) -> int:
    """``m`` with ``m (m + 1) / 2 == length`` (the side of a packed triangle); ValueError if none."""
    side = (math.isqrt(8 * length + 1) - 1) // 2
    if side * (side + 1) // 2 != length:
        raise ValueError("packed length is not a triangular number")
    return side


@functools.lru_cache(maxsize=8)
def _lower_positions(size: int) -> np.ndarray:
    """Where the lower triangle of a Fortran-ordered (size, size) array lies in its memory, row after row
    (read-only; kept for the few sizes in use: ``np.tril_indices`` costs more than the copy it indexes)."""
    rows, columns = np.tril_indices(size)
    positions: np.ndarray = columns * size + rows
    positions.flags.writeable = False
    return positions


def _grown(arr: np.ndarray, needed: int) -> np.ndarray:
    """``arr`` if it holds ``needed`` rows, else a copy with at least double the capacity."""
    if needed <= arr.shape[0]:
        return arr
    bigger = np.empty((max(needed, 2 * arr.shape[0], MIN_CAPACITY), *arr.shape[1:]), dtype=arr.dtype)
    bigger[: arr.shape[0]] = arr
    return bigger


class GrowableVector:
    """A 1-D array with amortised O(1) append; ``view`` is the used prefix (writable)."""

    def __init__(self, values: np.ndarray | None = None, dtype: type = np.float64) -> None:
        values = np.zeros(0, dtype=dtype) if values is None else np.asarray(values, dtype=dtype)
        self.n = len(values)
        self._data = _grown(np.empty(0, dtype=dtype), self.n)
        self._data[: self.n] = values

    def append(self, value: float) -> None:
        self._data = _grown(self._data, self.n + 1)
        self._data[self.n] = value
        self.n += 1

    def extend(self, values: np.ndarray) -> None:
        end = self.n + len(values)
        self._data = _grown(self._data, end)
        self._data[self.n : end] = values
        self.n = end

    @property
    def view(self) -> np.ndarray:
        return self._data[: self.n]


class GrowableRows:
    """Stored points (n, d) with their squared norms, appended one row at a time."""

    def __init__(
        self, dim: int, rows: np.ndarray | None = None, sq_norms: np.ndarray | None = None
    ) -> None:
        rows = np.zeros((0, dim)) if rows is None else np.asarray(rows, dtype=np.float64)
        self.n = len(rows)
        self._data = _grown(np.empty((0, dim)), self.n)
        self._data[: self.n] = rows
        if sq_norms is None:
            sq_norms = np.array([float(x @ x) for x in rows])
        elif len(sq_norms) != self.n:
            raise ValueError("points and their squared norms differ in number")
        # Saved, not recomputed, on restore: a different summation order would change the last bit.
        self.sq_norms = GrowableVector(sq_norms)

    def append(self, x: np.ndarray) -> None:
        self._data = _grown(self._data, self.n + 1)
        self._data[self.n] = x
        self.sq_norms.append(float(x @ x))
        self.n += 1

    @property
    def view(self) -> np.ndarray:
        return self._data[: self.n]


class _PackedTriangle:
    """One triangle of a square matrix stored row after row (row-major packed lower), grown at the end.

    This is the column-major packed *upper* layout of BLAS, so a matrix of size ``m`` is a contiguous
    prefix of the buffer that the packed BLAS routines use in place.
    """

    def __init__(self, packed: np.ndarray | None = None) -> None:
        packed = np.zeros(0) if packed is None else np.asarray(packed, dtype=np.float64)
        self.size = _triangle_side(len(packed))
        self._packed = GrowableVector(packed)

    @property
    def packed(self) -> np.ndarray:
        """The used prefix of the packed storage (for saving)."""
        return self._packed.view

    def _lower(self) -> np.ndarray:
        """The stored triangle as a dense (size, size) lower-triangular array."""
        dense = np.zeros((self.size, self.size))
        dense[np.tril_indices(self.size)] = self.packed
        return dense


class PackedCholesky(_PackedTriangle):
    r"""Lower-triangular factor :math:`L` of an SPD matrix that grows by one row and column at a time.

    Rows of :math:`L` are stored one after the other (row-major packed lower, which is the column-major
    packed *upper* storage of :math:`L^\top`), so the factor of size ``m`` is a contiguous prefix of the
    buffer and BLAS ``dtpsv`` solves with it in place: O(m^2) per solve, no copy, no refactorisation.
    """

    def solve(self, b: np.ndarray) -> np.ndarray:
        """:math:`L^{-1} b` (forward substitution); ``b`` has length ``size`` and is not modified."""
        if self.size == 0:
            return np.zeros(0)
        # (BLAS reads the triangle of ``size`` at the start of the buffer: no view of it is made)
        # (n, ap, x, incx, offx, lower, trans)
        solution: np.ndarray = dtpsv(self.size, self._packed._data, b, 1, 0, _NO, _YES)
        return solution

    def append(self, row: np.ndarray, diagonal: float) -> None:
        """Add the row ``[row, diagonal]`` (``row`` = :math:`L^{-1} e` for the new column ``e``)."""
        self._packed.extend(row)
        self._packed.append(diagonal)
        self.size += 1

    def to_dense(self) -> np.ndarray:
        """The (size, size) factor as a dense array (for tests and diagnostics)."""
        return self._lower()


class SymmetricMatrix:
    r"""A symmetric matrix held dense, saved as one triangle packed (the layout of :class:`PackedCholesky`).

    The lower triangle lives in a Fortran-ordered (size, size) array whose other triangle is never read
    nor written: BLAS ``dsymv`` and ``dsyr`` on it read and write that triangle only, so the matrix is
    exactly symmetric, and they cost less than ``dspmv``/``dspr`` on the packed triangle
    (``benchmarks/results/auto_round_paired.md``) for twice its memory. :meth:`packed` gives the
    triangle row after row, the form that is saved; :meth:`extended` appends a row and a column that are
    zero off the diagonal (a new array).
    """

    def __init__(self, packed: np.ndarray | None = None) -> None:
        packed = np.zeros(0) if packed is None else np.asarray(packed, dtype=np.float64)
        self.size = size = _triangle_side(len(packed))
        dense = np.zeros(size * size)
        dense[_lower_positions(size)] = packed
        self._dense = dense.reshape((size, size), order="F")

    @property
    def packed(self) -> np.ndarray:
        """The lower triangle packed row after row (a new array: for saving)."""
        packed: np.ndarray = self._dense.reshape(-1, order="F")[_lower_positions(self.size)]
        return packed

    @property
    def packed_nbytes(self) -> int:
        """The bytes of :meth:`packed`, without gathering it."""
        return self.size * (self.size + 1) // 2 * self._dense.itemsize

    def matvec(self, x: np.ndarray) -> np.ndarray:
        """:math:`S x` for ``x`` of length ``size`` (a new array)."""
        if self.size == 0:
            return np.zeros(0)
        # (alpha, a, x, beta, y, offx, incx, offy, incy, lower)
        product: np.ndarray = dsymv(1.0, self._dense, x, 0.0, None, 0, 1, 0, 1, _YES)
        return product

    def rank_one_update(self, coefficient: float, x: np.ndarray) -> None:
        r""":math:`S \leftarrow S + c\, x x^\top` in place (exactly symmetric: one triangle is stored)."""
        if self.size:
            # (in place, the array being Fortran-ordered; kept as returned, lest a copy take the update)
            # (alpha, x, lower, incx, offx, n, a, overwrite_a)
            self._dense = dsyr(coefficient, x, _YES, 1, 0, len(x), self._dense, _YES)

    def extended(self, diagonal: float) -> SymmetricMatrix:
        """A new matrix ``[[S, 0], [0, diagonal]]`` of size ``size + 1``; ``self`` is unchanged."""
        grown = SymmetricMatrix()
        grown.size = size = self.size + 1
        grown._dense = np.zeros((size, size), order="F")
        grown._dense[: self.size, : self.size] = self._dense
        grown._dense[self.size, self.size] = diagonal
        return grown

    def to_dense(self) -> np.ndarray:
        """The (size, size) matrix as a full array (for tests and diagnostics)."""
        lower = np.tril(self._dense)
        dense: np.ndarray = lower + np.tril(lower, -1).T
        return dense
