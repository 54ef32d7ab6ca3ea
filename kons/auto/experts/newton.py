"""The grid's Newton learners as experts: a Nystrom or ONS member on a form of the row
(:class:`LearnerExpert`), and the ONS model on the quantile thresholds of the raw row
(:class:`ThresholdExpert`, :mod:`kons.auto.experts.bins`). Each plays through the learner's unchecked
round: the grid checked the row's forms once for all of them."""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from kons._multinomial import MultinomialRounds, clipped_scores, multinomial_rounds, reference_softmaxes
from kons.auto.experts.bins import QuantileBins, bins_columns
from kons.auto.experts.protocol import Expert, Form, GridContext, LearnsInItsPlays, Row, guarded_probabilities
from kons.base import Learner
from kons.errors import NumericalError, StateFormatError
from kons.linear.ons import ONS
from kons.preprocessing import STEP, nested_blob, restore_nested
from kons.sparse import SparseVector

__all__ = ["LearnerExpert", "ThresholdExpert", "bins_class_column_nbytes", "build_bins", "played_together",
           "restore_bins"]


def _scored(base: Learner, row: np.ndarray | SparseVector) -> np.ndarray:
    """A base's class probabilities for ``row``, nothing learnt (kept by the base for the learning round
    of the row)."""
    return multinomial_rounds(base)._class_probabilities(row)


def played_together(experts: list[tuple[int, LearnerExpert]], row: Row, probabilities: np.ndarray) -> None:
    """Each expert's :meth:`~LearnerExpert.probabilities` for ``row`` into its slot's row of
    ``probabilities`` (experts, K), bit for bit, each kept by its learner for the learning round of the row
    as its own play would be: the learners' margins one by one, then the clipping and the softmaxes of all
    of them at once, one numpy call a step where each expert's own play makes one of each (calls that
    weigh most in a multinomial prediction). An expert whose round overflows leaves its row as it is (the
    grid's uniform probabilities, which :func:`guarded_probabilities` plays)."""
    slots: list[int] = []
    played: list[tuple[MultinomialRounds, np.ndarray | SparseVector, np.ndarray]] = []
    bounds: list[float] = []
    for slot, expert in experts:
        # (the learners were made multinomial when they were widened: no multinomial_rounds check a play)
        learner, x = expert.base, expert.input(row)
        base = cast(MultinomialRounds, learner)
        try:
            margins = base._class_margins(x)
        except NumericalError:
            continue
        played.append((base, x, margins))
        slots.append(slot)
        bounds.append(learner.C)
    if not slots:
        return
    stacked = np.array([margins for _, _, margins in played])
    # (one bound for all, as the grid's learners have: a float, which numpy broadcasts for less)
    bound = bounds[0] if bounds.count(bounds[0]) == len(bounds) else np.array(bounds)[:, None]
    scores = clipped_scores(stacked, bound)
    together = reference_softmaxes(scores)
    scores.flags.writeable = together.flags.writeable = False
    # a learner whose scores the bound left as they were keeps that it was so: its round's step then skips
    # the clipping's term (kons._multinomial.newton_outputs)
    unclipped = np.logical_and.reduce(scores == stacked, axis=1).tolist()
    for (base, x, margins), own_scores, own, kept in zip(played, scores, together, unclipped, strict=True):
        base._keep_class_play(x, margins, own_scores, own, kept)
    probabilities[slots] = together


class LearnerExpert(LearnsInItsPlays):
    """A kons learner on the form ``form`` of the row (a grid member, or a restarted copy of one)."""

    plays_together = staticmethod(played_together)

    def __init__(self, base: Learner, form: Form) -> None:
        self.base, self.form = base, form

    def input(self, row: Row) -> np.ndarray | SparseVector:
        return row.forms[self.form]

    # (:func:`guarded`'s fallback written out: every round plays each of these experts twice)
    def predict(self, row: Row) -> float:
        try:
            return self.base._predict_checked(self.input(row))
        except NumericalError:
            return 0.0

    def learn(self, row: Row, target: float) -> float:
        try:
            return self.base._learn_checked(self.input(row), target)
        except NumericalError:
            return 0.0

    def probabilities(self, row: Row, classes: int) -> np.ndarray:
        return guarded_probabilities(_scored, classes, self.base, self.input(row))

    def learn_class(self, row: Row, label: int, classes: int) -> np.ndarray:
        return guarded_probabilities(self.base._learn_class_checked, classes, self.input(row), label)

    def widen(self, classes: int) -> None:
        multinomial_rounds(self.base)._widen(classes - 1)

    def hold_growth(self, held: bool) -> None:
        self.base.hold_growth(held)

    def nbytes(self) -> int:
        return self.base.state_nbytes()

    def growth_nbytes(self, rounds: int) -> int:
        return self.base.max_growth_nbytes(rounds)

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        return {name: nested_blob(self.base)}

    def scalars(self) -> Any:
        return None


class ThresholdExpert(LearnerExpert):
    """The linear model on the quantile thresholds ``bins`` of the raw features: it takes the thresholds'
    code of the raw row; a fixed-size learner, so its growth is neither held nor counted."""

    def __init__(self, bins: QuantileBins, base: Learner) -> None:
        super().__init__(base, (False, True))
        self.bins = bins
        self._coded: tuple[Row, SparseVector] | None = None  # the last row and its code

    def input(self, row: Row) -> SparseVector:
        """The thresholds' code of the raw row, coded once for a row played and then learnt (the grid
        hands the same :class:`Row` to both)."""
        if self._coded is None or self._coded[0] is not row:
            self._coded = row, self.bins.code(row.raw())
        return self._coded[1]

    def hold_growth(self, held: bool) -> None:
        """Nothing: a fixed-size learner."""

    def nbytes(self) -> int:
        return self.base.state_nbytes() + self.bins.nbytes

    def growth_nbytes(self, rounds: int) -> int:
        return 0

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        """Its learner as ``<name>_base`` (``bins_base``) and the thresholds' own arrays (``bins_edges``,
        ``bins_counts``)."""
        return {f"{name}_base": nested_blob(self.base), **self.bins.arrays()}


def _new_bins_base(grid: GridContext, bins: QuantileBins) -> Learner:
    """A fresh linear model on the quantile thresholds ``bins``: ONS with the raw linear member's
    regulariser and step."""
    base = ONS(loss=grid.loss, alpha=float(grid.linear_dim + 1), eta=STEP[grid.loss], C=grid.bound,
               dim=bins.dim)
    if grid.classes > 2:
        multinomial_rounds(base)._widen(grid.classes - 1)
    return base


def build_bins(grid: GridContext) -> list[Expert] | None:
    """The linear model on the thresholds of the grid's warm-up rows, if it has them."""
    bins = grid.quantile_bins
    return None if bins is None else [ThresholdExpert(bins, _new_bins_base(grid, bins))]


def restore_bins(grid: GridContext, built: list[Expert] | None, arrays: dict[str, np.ndarray],
                 scalars: dict[str, Any]) -> list[Expert] | None:
    """The quantile thresholds and their linear model; none in a state saved without them."""
    if "bins_edges" not in arrays:
        return None
    bins = QuantileBins.restored(arrays)
    base = _restored_bins_base(grid, bins, arrays["bins_base"], "the quantile thresholds")
    return [ThresholdExpert(bins, base)]


def _restored_bins_base(grid: GridContext, bins: QuantileBins, blob: np.ndarray, owner: str) -> Learner:
    """The linear model on the thresholds ``bins`` saved as ``blob``; one that is not the grid's own
    (:func:`_new_bins_base`, but for its state) is refused with :class:`~kons.errors.StateFormatError`,
    which names its ``owner``."""
    restored = restore_nested(blob)
    fresh = _new_bins_base(grid, bins)
    if type(fresh) is not type(restored) or fresh.get_params() != restored.get_params():
        raise StateFormatError(f"{owner}' learner does not match the grid.")
    return restored


def bins_class_column_nbytes(dim: int) -> int:
    """The most bytes one more class adds to the linear model on the quantile thresholds of rows of
    ``dim`` features: a weight a column."""
    return 8 * bins_columns(dim)
