"""The linear model on the quantile thresholds of the raw features started afresh at a declared change on two
classes (:class:`FreshThresholds`), beside the one that learns every row (:mod:`kons.auto.experts.newton`).

The threshold model of every row has learnt the old concept with a curvature summed over all its rows, so
its steps after a change are small; a fresh ``auto`` started at the change (the oracle of
``benchmarks/drift.py``) has a fresh one, which led its mixture after Agrawal's changes of function, where
no expert of ``auto`` came near it (``docs/drift-log.md``, "A fresh threshold model at a declared change").
The old one stays: a concept that returns finds it where it was.

Its learner is built when it first starts: a learner that never declares a change (and every one on three
classes or more, where it never starts) holds and saves none, only the round of start -1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kons.auto.experts.bins import QuantileBins
from kons.auto.experts.newton import ThresholdExpert, _new_bins_base, _restored_bins_base
from kons.auto.experts.protocol import Expert, GridContext, LearnsInItsPlays, Row, in_play
from kons.base import Learner
from kons.errors import StateFormatError
from kons.preprocessing import nested_blob

__all__ = ["FreshThresholds", "build_fresh_bins", "renewed_fresh_bins", "restore_fresh_bins"]


class FreshThresholds(LearnsInItsPlays):
    """A threshold model started at round ``start`` on the thresholds ``bins`` (those of the threshold model
    of every row, which saves them), learning with ``base``; not started (``start`` -1, ``base`` None) it
    has no model and is out of the mixture until the first change declared on two classes.

    It plays alone (the one expert of its kind), through its :attr:`model` once started: the grid plays
    only the experts in the mixture."""

    plays_together = None

    def __init__(self, bins: QuantileBins, base: Learner | None = None, start: int = -1) -> None:
        self.bins, self.start = bins, start
        self.model = ThresholdExpert(bins, base) if base is not None else None

    def _started(self) -> ThresholdExpert:
        assert self.model is not None  # (it enters the mixture when it starts, and plays only in it)
        return self.model

    def predict(self, row: Row) -> float:
        return self._started().predict(row)

    def learn(self, row: Row, target: float) -> float:
        return self._started().learn(row, target)

    def probabilities(self, row: Row, classes: int) -> np.ndarray:
        return self._started().probabilities(row, classes)

    def learn_class(self, row: Row, label: int, classes: int) -> np.ndarray:
        return self._started().learn_class(row, label, classes)

    def widen(self, classes: int) -> None:
        """Its model's classes (none before it starts: it is built with the grid's)."""
        if self.model is not None:
            self.model.widen(classes)

    def hold_growth(self, held: bool) -> None:
        """Nothing: a fixed-size learner (held, the grid starts none where there was none)."""

    def nbytes(self) -> int:
        return self.model.base.state_nbytes() if self.model is not None else 0

    def growth_nbytes(self, rounds: int) -> int:
        """0: the grid counts the learner a start builds (:meth:`~kons.auto.grid.Grid.growth_nbytes`)."""
        return 0

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        """Its learner as ``<name>_base``, none before it starts (the thresholds are saved by the threshold
        model of every row)."""
        return {f"{name}_base": nested_blob(self.model.base)} if self.model is not None else {}

    def scalars(self) -> Any:
        return self.start


def build_fresh_bins(grid: GridContext) -> list[Expert] | None:
    """A threshold model not started yet, for classes, if the grid has thresholds."""
    bins = grid.quantile_bins
    if bins is None or not grid.mixture.binary:
        return None
    return [FreshThresholds(bins)]


def renewed_fresh_bins(grid: GridContext, old: FreshThresholds, rounds: int) -> list[Expert]:
    """A threshold model started now (round ``rounds``) on the thresholds of ``old``, which it replaces."""
    return [FreshThresholds(old.bins, _new_bins_base(grid, old.bins), rounds)]


def restore_fresh_bins(grid: GridContext, built: list[Expert] | None, arrays: dict[str, np.ndarray],
                       scalars: dict[str, Any]) -> list[Expert] | None:
    """The threshold model saved (its round of start in ``scalars``) on the saved thresholds; none in a
    state saved before there was one (it goes on without it). Not started, its learner is not read: a state
    saved while the model was built with the grid holds a new one, which its start replaces."""
    if "fresh_bins" not in scalars or "bins_edges" not in arrays:
        return None
    start = scalars["fresh_bins"]
    if not isinstance(start, int) or start < -1:
        raise StateFormatError("the fresh quantile thresholds' start is not a round.")
    bins = QuantileBins.restored(arrays)
    if start == -1:
        if in_play(grid, "fresh_bins"):
            raise StateFormatError("the fresh quantile thresholds play before they started.")
        return [FreshThresholds(bins)]
    if "fresh_bins_base" not in arrays:
        raise StateFormatError("the fresh quantile thresholds started without a learner.")
    base = _restored_bins_base(grid, bins, arrays["fresh_bins_base"], "the fresh quantile thresholds")
    return [FreshThresholds(bins, base, start)]
