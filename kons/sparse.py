r"""Sparse examples: ``indices`` and ``values`` of the non-zero features of a ``dim``-dimensional vector.

The learners that declare ``accepts_sparse`` (the linear ones, :class:`~kons.ONS`, :class:`~kons.FDSON`,
:class:`~kons.RPSON`, :class:`~kons.OjaSON`, :class:`~kons.AdaGrad`, :class:`~kons.OGD`, and the
preprocessed ones, :class:`~kons.Auto` and :class:`~kons.preprocessing.Preprocessed`) accept a
:class:`SparseVector`, a
plain dict ``{"indices": [...], "values": [...]}`` (optionally with ``"dim"``, as the service sends it
in JSON), or a one-row :mod:`scipy.sparse` matrix wherever they accept a dense 1-D array. The example is
validated once, at the boundary (:func:`as_sparse`): indices are integers in ``[0, dim)`` without
repeats (they are sorted, so the order in which they are given never changes a result), values are
finite and as many as the indices.

Examples
--------
>>> from kons.sparse import SparseVector, as_sparse
>>> v = as_sparse({"indices": [7, 2], "values": [1.5, -1.0]}, dim=10)
>>> v.indices.tolist(), v.values.tolist(), v.dim, len(v)
([2, 7], [-1.0, 1.5], 10, 10)
>>> v.to_dense()[[2, 7]].tolist()
[-1.0, 1.5]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kons._validation import check_feature_values
from kons.errors import InvalidInputError

__all__ = ["SparseVector", "as_sparse", "is_sparse_input"]


@dataclass(frozen=True, eq=False)
class SparseVector:
    """A validated sparse vector (build it with :func:`as_sparse` or :meth:`from_dense`).

    Attributes
    ----------
    indices : ndarray of int64, shape (s,)
        Sorted, distinct positions in ``[0, dim)``.
    values : ndarray of float64, shape (s,)
        The finite values at those positions (explicit zeros are kept).
    dim : int
        Length of the dense vector; ``len(v) == dim``.
    """

    indices: np.ndarray
    values: np.ndarray
    dim: int

    def __post_init__(self) -> None:
        checked = _validated(self.indices, self.values, self.dim)
        object.__setattr__(self, "indices", checked[0])
        object.__setattr__(self, "values", checked[1])
        object.__setattr__(self, "dim", checked[2])

    @classmethod
    def trusted(cls, indices: np.ndarray, values: np.ndarray, dim: int) -> SparseVector:
        """A vector of parts the library built valid itself (sorted distinct int64 ``indices`` in
        ``[0, dim)``, as many finite float64 ``values``, arrays no one writes to, made read-only here): as the
        checked constructor would store them, without its checks (a row coded on every round)."""
        vector = object.__new__(cls)
        indices.flags.writeable = False
        values.flags.writeable = False
        object.__setattr__(vector, "indices", indices)
        object.__setattr__(vector, "values", values)
        object.__setattr__(vector, "dim", dim)
        return vector

    def __len__(self) -> int:
        return self.dim

    @property
    def nnz(self) -> int:
        """Number of stored entries ``s``."""
        return len(self.indices)

    def to_dense(self) -> np.ndarray:
        """The dense (dim,) float64 array."""
        dense = np.zeros(self.dim)
        dense[self.indices] = self.values
        return dense

    @classmethod
    def from_dense(cls, x: Any) -> SparseVector:
        """The non-zero entries of a dense 1-D array."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 1:
            raise InvalidInputError(f"x must be 1-D; got an array of shape {x.shape}.")
        index = np.flatnonzero(x)
        return cls(index, x[index], len(x))

    def __repr__(self) -> str:
        return f"SparseVector(nnz={self.nnz}, dim={self.dim})"


def dense(x: np.ndarray | SparseVector) -> np.ndarray:
    """The dense array of a row that may be sparse (a dense row as it is, not copied)."""
    return x.to_dense() if isinstance(x, SparseVector) else x


def _validated(indices: Any, values: Any, dim: Any) -> tuple[np.ndarray, np.ndarray, int]:
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
        raise InvalidInputError(f"a sparse example needs an int dimension >= 1; got {dim!r}.")
    try:
        raw_index = np.asarray(indices)
        vals = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"sparse 'indices'/'values' must be sequences of numbers: {exc}") from None
    if raw_index.ndim != 1 or vals.ndim != 1:
        raise InvalidInputError("sparse 'indices' and 'values' must be 1-D sequences.")
    if len(raw_index) != len(vals):
        raise InvalidInputError(
            f"sparse 'indices' and 'values' differ in length ({len(raw_index)} != {len(vals)})."
        )
    integral = raw_index.dtype.kind in "iu" or (
        raw_index.dtype.kind == "f" and bool(np.all(np.isfinite(raw_index)))
        and bool(np.all(raw_index == np.round(raw_index)))
    )
    if len(raw_index) and not integral:
        raise InvalidInputError("sparse 'indices' must be integers.")
    index = raw_index.astype(np.int64)
    if len(index) and (index.min() < 0 or index.max() >= dim):
        raise InvalidInputError(f"sparse 'indices' must lie in [0, {int(dim)}).")
    check_feature_values(vals)
    order = np.argsort(index, kind="stable")
    index, vals = index[order], vals[order]
    if len(index) > 1 and np.any(index[1:] == index[:-1]):
        raise InvalidInputError("sparse 'indices' must not repeat.")
    index.flags.writeable = False
    vals.flags.writeable = False
    return index, vals, int(dim)


#: The sparse forms that are Python types of their own, and dense rows' types (none of them sparse).
_SPARSE_TYPES = (SparseVector, dict)
_DENSE_TYPES = frozenset({np.ndarray, list, tuple})


def is_sparse_input(x: Any) -> bool:
    """Whether ``x`` is one of the accepted sparse forms (SparseVector, dict, scipy.sparse row)."""
    if isinstance(x, _SPARSE_TYPES):
        return True
    # (a dense row, the common case, without reading its type's module)
    return type(x) not in _DENSE_TYPES and type(x).__module__.startswith("scipy.sparse")


def as_sparse(x: Any, dim: int | None) -> SparseVector:
    """Validate a sparse example against the learner's dimension ``dim`` (None: not yet known).

    Accepts a :class:`SparseVector`, a dict with ``"indices"``, ``"values"`` and optionally ``"dim"``,
    or a one-row :mod:`scipy.sparse` matrix. Raises :class:`~kons.errors.InvalidInputError` naming the
    problem; never modifies ``x``.
    """
    if isinstance(x, dict):
        unknown = sorted(set(x) - {"indices", "values", "dim"})
        if unknown or "indices" not in x or "values" not in x:
            raise InvalidInputError(
                "a sparse example is a dict with keys 'indices' and 'values' (and optionally 'dim'); "
                f"got keys {sorted(x)}."
            )
        given = x.get("dim", dim)
        if given is None:
            raise InvalidInputError(
                "a sparse example needs a known dimension: give the learner's 'dim' parameter, "
                "learn a dense example first, or include 'dim'."
            )
        vector = SparseVector(x["indices"], x["values"], given)
    elif isinstance(x, SparseVector):
        vector = x
    else:
        vector = _from_scipy(x)
    if dim is not None and vector.dim != dim:
        raise InvalidInputError(f"x must have dimension {dim}; got {vector.dim}.")
    return vector


def _from_scipy(x: Any) -> SparseVector:
    try:
        row = x.tocsr(copy=True)
    except AttributeError:
        raise InvalidInputError(f"unsupported sparse input of type {type(x).__name__}.") from None
    if row.ndim != 2 or row.shape[0] != 1:
        raise InvalidInputError(f"a scipy.sparse example must have one row; got shape {row.shape}.")
    row.sum_duplicates()
    return SparseVector(row.indices, row.data, int(row.shape[1]))
