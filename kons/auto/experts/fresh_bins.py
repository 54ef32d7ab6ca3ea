"""The linear model on the quantile thresholds of the raw features started afresh at a declared change on two
classes (:class:`FreshThresholds`), beside the one that learns every row (:mod:`kons.auto.experts.newton`).

The threshold model of every row has learnt the old concept with a curvature summed over all its rows, so
its steps after a change are small; a fresh ``auto`` started at the change (the oracle of
``benchmarks/drift.py``) has a fresh one, which led its mixture after Agrawal's changes of function, where
no expert of ``auto`` came near it (``docs/drift.md``, "A fresh threshold model at a declared change"). The
old one stays: a concept that returns finds it where it was.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kons.auto.experts.bins import QuantileBins
from kons.auto.experts.newton import ThresholdExpert, _new_bins_base
from kons.auto.experts.protocol import Expert, GridContext
from kons.base import Learner
from kons.errors import StateFormatError
from kons.preprocessing import nested_blob, restore_nested

__all__ = ["FreshThresholds", "build_fresh_bins", "renewed_fresh_bins", "restore_fresh_bins"]


class FreshThresholds(ThresholdExpert):
    """A threshold model started at round ``start`` (-1: not started, out of the mixture until the first
    change declared on two classes). Its thresholds are those of the threshold model of every row, which
    saves them."""

    def __init__(self, bins: QuantileBins, base: Learner, start: int = -1) -> None:
        super().__init__(bins, base)
        self.start = start

    def nbytes(self) -> int:
        return self.base.state_nbytes()

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        """Its learner as ``<name>_base`` (the thresholds are saved by the threshold model of every row)."""
        return {f"{name}_base": nested_blob(self.base)}

    def scalars(self) -> Any:
        return self.start


def build_fresh_bins(grid: GridContext) -> list[Expert] | None:
    """A threshold model not started yet, for classes, if the grid has thresholds."""
    bins = grid.quantile_bins
    if bins is None or not grid.mixture.binary:
        return None
    return [FreshThresholds(bins, _new_bins_base(grid, bins))]


def renewed_fresh_bins(grid: GridContext, old: FreshThresholds, rounds: int) -> list[Expert]:
    """A threshold model started now (round ``rounds``) on the thresholds of ``old``, which it replaces."""
    return [FreshThresholds(old.bins, _new_bins_base(grid, old.bins), rounds)]


def restore_fresh_bins(grid: GridContext, built: list[Expert] | None, arrays: dict[str, np.ndarray],
                       scalars: dict[str, Any]) -> list[Expert] | None:
    """The threshold model saved (its round of start in ``scalars``) on the saved thresholds; none in a
    state saved before there was one (it goes on without it)."""
    if "fresh_bins_base" not in arrays or "bins_edges" not in arrays:
        return None
    restored = restore_nested(arrays["fresh_bins_base"])
    bins = QuantileBins.restored(arrays)
    fresh = _new_bins_base(grid, bins)
    if type(fresh) is not type(restored) or fresh.get_params() != restored.get_params():
        raise StateFormatError("the fresh quantile thresholds' learner does not match the grid.")
    start = scalars.get("fresh_bins", -1)
    if not isinstance(start, int) or start < -1:
        raise StateFormatError("the fresh quantile thresholds' start is not a round.")
    return [FreshThresholds(bins, restored, start)]
