r"""The quantile-threshold view of :class:`~kons.Auto`: each raw feature coded by the thresholds it passes.

A row :math:`x` becomes the indicators :math:`[x_j > e_{j,k}]` of every feature ``j`` and every threshold
:math:`e_{j,k}` of that feature (the "thermometer" code of its quantile bin), plus the constant 1: a linear
model of it is an additive piecewise-constant model :math:`b + \sum_j f_j(x_j)`, each :math:`f_j` a step
function with its steps at the thresholds. It represents what a smooth kernel on the whole row struggles
with: a target that depends on one raw feature through thresholds (Agrawal's loan functions, on age and
salary) or on categories coded as integers.

The thresholds are the distinct quantiles of each raw feature over the warm-up rows, taken among the
values seen (so an integer-coded category's thresholds are categories), fixed from then on (a threshold
that moved would move what every learnt weight means), none at a feature's largest value (no value seen
passes it), so a feature with a single value has none. A feature left out of a record's round (NaN,
:mod:`kons.records`) passes no threshold: it adds nothing to the model, as it adds nothing to the linear
models on the standardised row.

The columns are bounded: at most :data:`MAX_COLUMNS` thresholds over all features and
:data:`MAX_THRESHOLDS` per feature, so the linear model on them costs at most as much as one on
:data:`MAX_COLUMNS` + 1 features, whatever the rows.
"""

from __future__ import annotations

import numpy as np

from kons.auto.config import MAX_COLUMNS, MAX_THRESHOLDS
from kons.base import arrays_nbytes
from kons.sparse import SparseVector

__all__ = ["MAX_COLUMNS", "MAX_THRESHOLDS", "QuantileBins", "bins_columns", "thresholds_per_feature"]



def thresholds_per_feature(dim: int) -> int:
    """The thresholds each of ``dim`` features may have: 0 when the view would exceed its budget with one."""
    return min(MAX_THRESHOLDS, MAX_COLUMNS // dim)


def bins_columns(dim: int) -> int:
    """The view's columns at most (with the constant) for rows of ``dim`` features; 0 when there is no such
    view (:func:`thresholds_per_feature`)."""
    thresholds = thresholds_per_feature(dim)
    return dim * thresholds + 1 if thresholds else 0


class QuantileBins:
    """The thresholds of each feature (``edges[j]``, increasing and distinct) and the code of a row."""

    def __init__(self, edges: list[np.ndarray]) -> None:
        self.edges = edges
        self.offsets = np.cumsum([0, *(len(e) for e in edges)])
        self.dim = int(self.offsets[-1]) + 1  # the thresholds' indicators, then the constant
        self._constant = np.array([self.dim - 1], dtype=np.int64)  # the constant's index
        self._ones = np.ones(self.dim)  # a code's values are a prefix (np.ones is a Python function)
        self._ones.flags.writeable = False
        # the thresholds as a (features, most thresholds) table padded with +inf, which no value passes:
        # a row is coded by whole-array operations (a loop over the features cost as much as the
        # threshold model's Newton step)
        widest = max((len(e) for e in edges), default=0)
        self._table = np.full((len(edges), widest), np.inf)
        for row, e in zip(self._table, edges, strict=True):
            row[:len(e)] = e
        # the indicator of each cell of the table (feature j's k-th threshold: offsets[j] + k; a padding
        # cell's is never taken), in the table's shape
        self._indicators = (self.offsets[:-1, None] + np.arange(widest)).astype(np.int64)
        # the bytes of :meth:`arrays`, fixed with the thresholds: counted once, not gathered at each size
        self.nbytes = arrays_nbytes(self.arrays())

    @classmethod
    def from_rows(cls, rows: np.ndarray) -> QuantileBins:
        """The distinct inner quantiles of ``thresholds_per_feature + 1`` equal bins of each column of
        ``rows`` among its values (NaN left out; as many features as columns, a count that must allow at
        least one threshold)."""
        count = thresholds_per_feature(rows.shape[1])
        levels = np.arange(1, count + 1) / (count + 1)
        edges = []
        for column in rows.T:
            values = column[~np.isnan(column)]
            quantiles = np.unique(np.quantile(values, levels, method="lower")) if len(values) else np.empty(0)
            edges.append(quantiles[quantiles < values.max()] if len(values) else quantiles)
        return cls(edges)

    def code(self, x: np.ndarray) -> SparseVector:
        """The indicators of the thresholds each feature of ``x`` passes (``x_j > e``), and the constant 1."""
        # the thresholds passed: the first ones of each feature (NaN passes none), whose cells the mask
        # picks in the table's order, the indicators' (one boolean index where the cells' positions and
        # then their indicators took two)
        indices = np.concatenate((self._indicators[self._table < x[:, None]], self._constant))
        # (sorted, distinct, in range)
        return SparseVector.trusted(indices, self._ones[:len(indices)], self.dim)

    def arrays(self) -> dict[str, np.ndarray]:
        """The thresholds, concatenated, and each feature's count."""
        return {"bins_edges": np.concatenate(self.edges), "bins_counts": np.diff(self.offsets)}

    @classmethod
    def restored(cls, arrays: dict[str, np.ndarray]) -> QuantileBins:
        counts = arrays["bins_counts"].astype(np.int64)
        return cls(np.split(arrays["bins_edges"], np.cumsum(counts)[:-1]))
