r"""The grid of :class:`~kons.Auto`: its base learners on two views of the row, the generations of
restarted copies that follow a change, the other kinds of experts (:data:`EXPERTS`: the linear model on
the quantile thresholds of the raw features, :mod:`kons.auto.experts.bins`, and on two classes the one
started afresh at a declared change, :mod:`kons.auto.experts.fresh_bins`; the local expert; the Hoeffding
trees and the forest for classes; the target's last values and the linear model of every row for
regression; the kernel member on a record's numbers at their wide width where the warm-up heard a name),
and their :class:`~kons.auto.mixture.Mixture` with the constant prediction. Why these
members, and the regret statement for the restarts: ``docs/auto.md``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import is_
from typing import Any, TypeVar, cast

import numpy as np
from scipy.special import chdtrc, fdtrc

from kons._multinomial import multinomial_rounds
from kons._state import saved_counts
from kons.auto.config import (
    CHANGE_ENTRY_PRIOR,
    CHANGE_LABEL_ROUNDS,
    ENTRY_PRIOR,
    FOREST_PRIOR,
    FOREST_TREES,
    FRESH_BINS_KEPT,
    FRESH_BINS_PRIOR,
    GENERATIONS,
    GRID,
    LAGS,
    LAGS_BURST,
    LAGS_LONG,
    LAGS_LONG_PRIOR,
    LAGS_PRIOR,
    LIGHT_EVERY,
    LIGHT_ROUNDS,
    LIGHT_WEIGHT,
    LONE_TARGET_DEVIATIONS,
    MANY_CLASSES_LIGHT_ROUNDS,
    MAX_DICTIONARY,
    MIX_EARLY_ROUNDS,
    NAME_EVIDENCE_LEVEL,
    NAP_ROUNDS,
    NAP_WEIGHT,
    NEIGHBOUR_ROWS,
    NEIGHBOURS,
    NEIGHBOURS_NAP_WEIGHT,
    NEIGHBOURS_PRIOR,
    NUMBERS_WIDTH,
    PROBATION_PRIOR,
    PROBATION_ROUNDS,
    REGRESSION_LONE_LOSS,
    REGRESSION_LOSS_THRESHOLD,
    REPLAY_ROWS,
    RESTART_DELAYS,
    TREE_GRACES,
    TREE_PRIOR,
    WIDE_NUMBERS_NAP_WEIGHT,
    WIDE_NUMBERS_STEP,
    YOUNG_KERNEL_PLAY,
    YOUNG_LINEAR,
)
from kons.auto.detectors import ErrorChangeDetector, LabelChangeDetector, LossChangeDetector, change_span
from kons.auto.experts.bins import QuantileBins
from kons.auto.experts.forest import build_forest, forest_class_column_nbytes, restore_forest
from kons.auto.experts.fresh_bins import (
    FreshThresholds,
    build_fresh_bins,
    renewed_fresh_bins,
    restore_fresh_bins,
)
from kons.auto.experts.lags import LastTarget, build_lags, build_long_lags, restore_lags, restore_long_lags
from kons.auto.experts.neighbours import RecentNeighbours, build_neighbours, restore_neighbours
from kons.auto.experts.newton import (
    LearnerExpert,
    bins_class_column_nbytes,
    build_bins,
    restore_bins,
)
from kons.auto.experts.protocol import Expert, Form, PlayTogether, Row, by_play, in_play
from kons.auto.experts.recent import RecentExpert, RecentLinear, build_linear, restore_linear
from kons.auto.experts.tree import build_trees, restore_trees, trees_class_column_nbytes
from kons.auto.mixture import ChangeLabel, Mixture, Units
from kons.auto.restarts import (
    YOUNG_BASES,
    YOUNG_SIZE,
    FadingTargets,
    Generation,
    GenerationTargets,
    Probation,
    RecentRounds,
    TargetScale,
    restart,
    young_slots,
)
from kons.auto.slots import generation_slots, in_layout, member_slots, saved_order
from kons.base import Learner, arrays_nbytes
from kons.errors import StateFormatError
from kons.kernel.nystrom_kons import (
    NystromKONS,
    dictionaries_restored,
    dictionaries_saved_apart,
    repeated_dictionary_nbytes,
    share_dictionaries,
)
from kons.linear.ons import ONS
from kons.preprocessing import (
    STEP,
    TARGET_BOUND,
    WARMUP_ROWS,
    FeatureScaler,
    ScalerStats,
    TargetScaler,
    checked_form,
    restore_nested,
    with_intercept,
)
from kons.sparse import SparseVector, dense

__all__ = [
    "CHANGE_ENTRY_PRIOR",
    "ENTRY_PRIOR",
    "EXPERTS",
    "GENERATIONS",
    "GRID",
    "MAX_DICTIONARY",
    "PROBATION_PRIOR",
    "PROBATION_ROUNDS",
    "REPLAY_ROWS",
    "RESTART_DELAYS",
    "YOUNG_BASES",
    "YOUNG_LINEAR",
    "YOUNG_SIZE",
    "Grid",
    "Kind",
]

#: A generation's copies in a state saved while it copied one kernel member (its slots' layout then).
_ONE_KERNEL_BASES = len(YOUNG_LINEAR) + 1
#: A grid member: (view, kind, width factor, step factor).
Member = tuple[str, str, float, float]
#: The experts in play that play their class probabilities alone, and the others by how they play together
#: (:func:`~kons.auto.experts.protocol.by_play`).
_Groups = tuple[list[tuple[int, Expert]], dict[PlayTogether, list[tuple[int, Expert]]]]
#: A generation's scale of the target, its own or its kernel copies' (:meth:`Grid._restored_scale`).
_Scale = TypeVar("_Scale", GenerationTargets, FadingTargets)
#: The form of the row the linear model of a generation takes: the standardised view with the intercept.
_RECENT_FORM = RecentExpert.form
#: The prefix of the arrays of the Nystrom learners' dictionaries in a saved grid (each saved once).
_DICTIONARY_PREFIX = "dictionary_"
#: The first slots of the kinds on the target's last values: not experts of the row (_played_weights).
_OF_THE_SERIES = ("target_last", "target_long_lags")
#: The last slots of the layout, added by later releases, that a state leaves out while they are out of
#: play (:meth:`Grid._mixture_arrays`), last first.
_SAVED_WITHOUT_WHILE_OUT = ("wide_numbers", "target_long_lags")


def signed_log(x: np.ndarray | SparseVector) -> np.ndarray | SparseVector:
    """:math:`\\mathrm{sign}(x)\\log(1 + |x|)`, elementwise (zeros stay zeros)."""
    if isinstance(x, SparseVector):
        return SparseVector(x.indices, np.sign(x.values) * np.log1p(np.abs(x.values)), x.dim)
    logged: np.ndarray = np.sign(x) * np.log1p(np.abs(x))
    return logged


def standardised(rows: list[np.ndarray | SparseVector], dim: int, groups: tuple[np.ndarray, ...] = (),
                 omits_groups: bool = False, gaps: np.ndarray | None = None) -> np.ndarray:
    """The rows standardised by their own statistics (for the median width of a view; ``groups``,
    ``omits_groups`` and ``gaps`` as :class:`FeatureScaler`'s)."""
    scaler = FeatureScaler(dim, isinstance(rows[0], SparseVector), groups, omits_groups, gaps)
    for row in rows:
        scaler.transform(row, commit=True)
    return np.stack([scaler.standardise(dense(row)) for row in rows])


def _sharpen(weights: np.ndarray, slots: np.ndarray | list[int], power: float) -> None:
    """The weights of ``slots`` raised to ``power`` among themselves, in place, their sum kept."""
    of_slots = weights[slots]
    if not of_slots.max() > 0.0:  # (weights that underflowed: nothing to sharpen)
        return
    raised = (of_slots / of_slots.max()) ** power  # (relative to the largest: no underflow)
    weights[slots] = raised * (of_slots.sum() / raised.sum())


def _sharpen_groups(weights: np.ndarray, groups: list[np.ndarray], power: float) -> None:
    """The total weights of the ``groups`` of slots raised to ``power`` among themselves, in place, their
    sum kept, each group's weights scaled to its new total."""
    totals = np.array([float(weights[group].sum()) for group in groups])
    if not totals.max() > 0.0:
        return
    raised = (totals / totals.max()) ** power
    for group, total, new in zip(groups, totals, raised * (totals.sum() / raised.sum()), strict=True):
        if total > 0.0:
            weights[group] *= new / total


def _favour(weights: np.ndarray, slots: np.ndarray, favoured: list[int], factor: float) -> None:
    """The weights of ``favoured`` (some of ``slots``) times ``factor`` against the other slots', in place,
    the sum of ``slots`` kept."""
    total = float(weights[slots].sum())
    weights[favoured] *= factor
    moved = float(weights[slots].sum())
    if moved > 0.0:
        weights[slots] *= total / moved


def _base_name(view: str, kind: str, width_factor: float, step_factor: float) -> str:
    """A grid member's name in :meth:`Auto.stats`'s weights."""
    if kind == "ons":
        return f"ons+intercept({view}, eta x{step_factor:g})"
    return f"nystrom_kons({view}, width x{width_factor:g}, eta x{step_factor:g})"


def _sizes(base: Learner) -> tuple[int, int]:
    """The stored points and dictionary size of ``base``, as its ``stats()`` counts them, without its other
    counters."""
    sizes = base._model_stats() if base._has_model else {}
    return sizes.get("stored_points", 0), sizes.get("dictionary_size", 0)


#: The views of a :data:`Form`: the standardised row, its signed log, the standardised row without a
#: record's categorical names (their coordinates at 0, as the log view's scaler standardises them), and
#: the standardised row without the names that said nothing of the target on the warm-up's rows.
_RAW, _LOG, _NUMBERS, _QUIET = 0, 1, 2, 3


def _form(member: Member, numbers: bool = False, quiet: bool = False) -> Form:
    """The form of the row a member takes: (its view, with the intercept?); ``numbers``: the raw view's
    kernel members of width :data:`NUMBERS_WIDTH` take it without the categorical names; ``quiet``: the
    other raw kernel members take it without the names that said nothing (:func:`silent_names`)."""
    view, kind, width_factor, _ = member
    if view == "log":
        return _LOG, kind == "ons"
    if numbers and kind == "nystrom":
        if width_factor == NUMBERS_WIDTH:
            return _NUMBERS, False
        if quiet:
            return _QUIET, False
    return _RAW, kind == "ons"


def silent_names(rows: list[np.ndarray], targets: list[float], groups: tuple[np.ndarray, ...],
                 classes: bool, level: float = NAME_EVIDENCE_LEVEL) -> tuple[int, ...]:
    """The indices of the categorical names (``groups``: each one's one-hot coordinates) whose categories
    say nothing of the target on the warm-up's ``rows`` and ``targets``: those whose test of independence
    does not reject it at ``level``. A regression target: the one-way analysis of variance of the target
    across the name's categories (its F test); classes: the G test of independence of the label and the
    category. A row that has none of the name's coordinates (a record before the name was first given)
    is a category of its own; a name with one category in the rows, or as many as the rows, says nothing
    the rows could tell."""
    X = np.nan_to_num(np.stack(rows))
    y = np.asarray(targets, dtype=float)
    labels = np.unique(y, return_inverse=True)[1]
    silent = []
    for g, group in enumerate(groups):
        coords = X[:, group]
        category = np.unique(np.where(coords.max(axis=1) > 0, coords.argmax(axis=1), -1),
                             return_inverse=True)[1]
        k = category.max() + 1
        p = 1.0
        if 1 < k < len(y):
            p = _g_test(category, labels) if classes else _f_test(category, y, k)
        if not p < level:  # (a p-value of NaN, a constant target: nothing said)
            silent.append(g)
    return tuple(silent)


def _f_test(category: np.ndarray, y: np.ndarray, k: int) -> float:
    """The p-value of the one-way analysis of variance of ``y`` across the ``k`` categories (as
    ``scipy.stats.f_oneway``; scipy.special's distribution alone, not scipy.stats, whose import a learner
    would carry)."""
    counts = np.bincount(category, minlength=k)
    means = np.bincount(category, weights=y, minlength=k) / counts
    between = float(counts @ (means - y.mean()) ** 2)
    within = float(np.sum((y - means[category]) ** 2))
    if within == 0.0:
        return 0.0 if between > 0.0 else float("nan")
    return float(fdtrc(k - 1, len(y) - k, between / (k - 1) / (within / (len(y) - k))))


def _g_test(category: np.ndarray, labels: np.ndarray) -> float:
    """The p-value of the G test of independence of the labels and the categories (as
    ``scipy.stats.chi2_contingency(..., correction=False, lambda_="log-likelihood")``)."""
    table = np.zeros((category.max() + 1, labels.max() + 1))
    np.add.at(table, (category, labels), 1.0)
    if table.shape[1] < 2:
        return float("nan")
    expected = np.outer(table.sum(axis=1), table.sum(axis=0)) / table.sum()
    seen = table > 0
    g = 2.0 * float(np.sum(table[seen] * np.log(table[seen] / expected[seen])))
    return float(chdtrc((table.shape[0] - 1) * (table.shape[1] - 1), g))


def _without(view: np.ndarray | SparseVector, groups: tuple[np.ndarray, ...]) -> np.ndarray | SparseVector:
    """``view`` with the coordinates of ``groups`` (a record's categorical names) at 0; itself without any
    (arrays, sparse rows: the same row, bit for bit)."""
    if not groups:
        return view
    numbers = dense(view).copy()
    for group in groups:
        numbers[group] = 0.0
    return numbers


def _sharing(members: list[LearnerExpert]) -> list[LearnerExpert]:
    """The grid's members (or a generation's copies), their Nystrom bases of one view and width sharing one
    dictionary: they draw the same coins (one seed, the point itself to KORS whatever the step), so they
    hold the same points and factors, and a round's kernel row, solve and KORS proposal are computed once
    for them all."""
    share_dictionaries([member.base for member in members if isinstance(member.base, NystromKONS)])
    return members


def _no_class_column(dim: int) -> int:
    """The bytes one more class adds to experts that take no room per class (a kind's default)."""
    return 0


# The kernel member on a record's numbers at their wide width (a member of the grid in all but its slot,
# so built and restored here, by the grid's own Grid.new_wide_numbers, rather than in kons.auto.experts).
def _build_wide_numbers(grid: Grid) -> list[Expert] | None:
    """The kernel member on the numbers at their width x NUMBERS_WIDTH where the warm-up heard a record's
    categorical name (:attr:`Grid.hears_names`), else none: elsewhere a member of GRID has that geometry."""
    return [LearnerExpert(grid.new_wide_numbers(), (_NUMBERS, False))] if grid.hears_names else None


def _restore_wide_numbers(grid: Grid, built: list[Expert] | None, arrays: dict[str, np.ndarray],
                          scalars: dict[str, Any]) -> list[Expert] | None:
    """The saved kernel member on the wide numbers (its dictionary saved apart, as the members'); none in
    a state saved without it (before it existed, or where the warm-up heard no name), which goes on as
    it would have. Read from the state, not from ``built``: the grid restored is built on the names known
    at the save, which may be more than the warm-up's."""
    if "wide_numbers" not in arrays:
        if in_play(grid, "wide_numbers"):
            raise StateFormatError("the wide numbers' kernel member plays where there is none.")
        return None
    if not grid.numbers or grid.numbers_width is None:
        raise StateFormatError("the wide numbers' kernel member does not match the grid.")
    with dictionaries_restored(arrays):
        restored = restore_nested(arrays["wide_numbers"])
    own = grid.new_wide_numbers()
    if type(own) is not type(restored) or own.get_params() != restored.get_params():
        raise StateFormatError("the wide numbers' kernel member does not match the grid.")
    return [LearnerExpert(restored, (_NUMBERS, False))]


def _kernel_class_column_nbytes(dim: int) -> int:
    """The most bytes one more class adds to a kernel member: a weight column of its full dictionary."""
    return 8 * MAX_DICTIONARY


@dataclass(frozen=True)
class Kind:
    """One line of :data:`EXPERTS`: a kind of expert after the generations, in the mixture's slots
    ``slots`` (named as its state is saved), shown in :meth:`Auto.stats` as ``labels``.

    ``build``: its experts for a grid (one per slot), or None where there are none (the slots then empty).
    ``start_prior``: each one's prior weight, if they play from the grid's start; else they sleep, and
    enter together at ``wake_prior`` each once the first is :meth:`~Expert.ready`. ``observes``: when in
    a learning round their :meth:`~Expert.observe` comes, ``"update"`` (right after the mixture's update) or
    ``"round"`` (at the round's end, after the trial of a generation). ``restore``: its experts from a
    saved state (``built``: the grid's fresh ones), checked against the mixture's slots. ``naps``: once in
    play, they nap together (neither learn nor play, out of the mixture) when their weight has stayed
    below ``nap_weight`` for :data:`NAP_ROUNDS` rounds, and wake at the next change declared, to enter
    again as they entered first: sleepers once ready, a kind in play from the start at once, at
    ``start_prior`` (:meth:`Grid._doze`). ``class_column_nbytes``: the most bytes one more
    class adds to its experts on rows of a given number of features (:func:`class_column_nbytes`; none
    for experts that take no room per class). ``observes_napping``: napping, they still observe the rounds
    (a window of rows kept fresh for when they wake), only neither play nor enter. ``naps_among_classes``:
    False for a kind that naps only while the mixture has no label vote (one score: regression, two
    classes); among three classes or more it is a voter of the label of fewest errors, whose worth its
    weight in the mixture does not measure, and it stays (or wakes) in play. ``wakes_with``: the first slot
    of the kind it enters with, at ``wake_prior``, right after that kind (sleepers that are never ready
    themselves).
    ``build``, ``restore`` and ``class_column_nbytes`` live with the kind's adapter, in its module of
    :mod:`kons.auto.experts`, and take the grid as a :class:`~kons.auto.experts.protocol.GridContext`.
    """

    slots: tuple[str, ...]
    labels: tuple[str, ...]
    build: Callable[[Grid], list[Expert] | None]
    restore: Callable[[Grid, list[Expert] | None, dict[str, np.ndarray], dict[str, Any]], list[Expert] | None]
    start_prior: float | None = None
    wake_prior: float | np.ndarray = 0.0
    observes: str = "round"
    naps: bool = False
    nap_weight: float = NAP_WEIGHT
    class_column_nbytes: Callable[[int], int] = _no_class_column
    observes_napping: bool = False
    naps_among_classes: bool = True
    wakes_with: str | None = None


#: The experts after the generations, one line a kind, in the order of their slots (a kind added later
#: goes last, so that a state saved before it keeps its slots where they were: :mod:`kons.auto.slots`).
EXPERTS: tuple[Kind, ...] = (
    # the linear model on the quantile thresholds of the raw features: in play from the start, with the
    # grid's prior; it does not nap: a slow learner, its weight can come back long after it was
    # negligible (docs/auto.md#nap_weight-and-nap_rounds)
    Kind(("bins",), ("ons+intercept(quantile thresholds)",), build_bins, restore_bins,
         start_prior=1.0 / (len(GRID) + 2), class_column_nbytes=bins_class_column_nbytes),
    # the local expert: asleep until its window holds NEIGHBOURS_WAKE_ROWS rows; it naps as the trees,
    # but below its own weight, NEIGHBOURS_NAP_WEIGHT (its ranking of the window costs much of a round
    # where it rarely holds weight), still keeping the rows, so that it wakes on a window as fresh as if
    # it had stayed; not among three classes or more, where its labels may lead the vote while its
    # probabilities hold no weight
    Kind(("neighbours",), (f"{NEIGHBOURS} nearest of the last {NEIGHBOUR_ROWS} rows(raw)",),
         build_neighbours, restore_neighbours, wake_prior=NEIGHBOURS_PRIOR, naps=True,
         nap_weight=NEIGHBOURS_NAP_WEIGHT, observes_napping=True, naps_among_classes=False),
    # the Hoeffding trees (classes): they learn every row and enter together after TREE_WAKE_ROWS
    Kind(tuple(f"tree{i}" for i in range(len(TREE_GRACES))),
         tuple(f"hoeffding_tree(raw, grace {grace})" for grace in TREE_GRACES), build_trees, restore_trees,
         wake_prior=TREE_PRIOR / len(TREE_GRACES), observes="update", naps=True,
         class_column_nbytes=trees_class_column_nbytes),
    # the target's last values (regression): the last target, and it corrected by an autoregression on
    # the LAGS last; asleep until the last target beats the mean, then at LAGS_PRIOR, the autoregression's
    # less the share of the second one (target_long_lags)
    Kind(("target_last", "target_lags"),
         ("the last target", f"the last target + bayesian_linear(its {LAGS} last)"),
         build_lags, restore_lags, wake_prior=np.array([LAGS_PRIOR, LAGS_PRIOR - LAGS_LONG_PRIOR])),
    # the Bayesian linear model of every row (regression): least squares, whose step no large residual
    # shrinks (an ONS member's curvature grows with its squared gradients: a heavy tail freezes it); in
    # play from the start with the grid's prior
    Kind(("linear",), ("bayesian_linear(raw) of every row",), build_linear, restore_linear,
         start_prior=1.0 / (len(GRID) + 2)),
    # the aggregated Mondrian forest (three classes or more): it learns every row and enters after
    # FOREST_WAKE_ROWS
    Kind(("forest",), (f"aggregated_mondrian_forest(raw, {FOREST_TREES} trees)",), build_forest,
         restore_forest, wake_prior=FOREST_PRIOR, observes="update", naps=True,
         class_column_nbytes=forest_class_column_nbytes),
    # the linear model on the quantile thresholds started afresh at a change declared on two classes: out of
    # the mixture until then (it neither sleeps nor starts: Grid._renew_fresh_bins enters it)
    Kind(("fresh_bins",), ("ons+intercept(quantile thresholds) since a declared change",), build_fresh_bins,
         restore_fresh_bins, class_column_nbytes=bins_class_column_nbytes),
    # the second autoregression, on the LAGS_LONG last targets (regression): it enters with the experts
    # on the last targets, at LAGS_LONG_PRIOR, and keeps nothing before
    Kind(("target_long_lags",), (f"the last target + bayesian_linear(its {LAGS_LONG} last)",),
         build_long_lags, restore_long_lags, wake_prior=LAGS_LONG_PRIOR, wakes_with="target_last"),
    # the kernel member on a record's numbers at their width x NUMBERS_WIDTH where the warm-up heard a
    # name (the wide members then take the numbers at the narrow width): in play from the start with the
    # grid's prior, it naps below WIDE_NUMBERS_NAP_WEIGHT (docs/auto-log.md, "A systematic tuning set for
    # item 5 (session 22)")
    Kind(("wide_numbers",),
         (f"nystrom_kons(numbers, width x{NUMBERS_WIDTH:g}, eta x{WIDE_NUMBERS_STEP:g})",),
         _build_wide_numbers, _restore_wide_numbers, start_prior=1.0 / (len(GRID) + 2), naps=True,
         nap_weight=WIDE_NUMBERS_NAP_WEIGHT, class_column_nbytes=_kernel_class_column_nbytes),
)


def layout(kinds: tuple[Kind, ...]) -> tuple[str, ...]:
    """The mixture's slots, by name (:mod:`kons.auto.slots`): the members, the constant, the generations,
    then the experts of ``kinds``."""
    return (*member_slots(len(GRID)), "constant",
            *(name for g in range(GENERATIONS) for name in generation_slots(g, YOUNG_BASES)),
            *(name for kind in kinds for name in kind.slots))


def class_column_nbytes(dim: int) -> int:
    """The most bytes one more class adds to a grid on rows of ``dim`` features: a weight column in every
    base, as long as the base may become (an ONS base's ``dim + 1`` weights, a Nystrom base's full
    dictionary), and in every slot a restarted copy of the longest may take; a generation's linear model
    scores every class (``K`` columns of ``dim + 1``, the binary model one), so its first widening adds
    two columns: counted twice; and what each kind of :data:`EXPERTS` says its experts take."""
    lengths = [dim + 1 if kind == "ons" else MAX_DICTIONARY for _, kind, _, _ in GRID]
    return (8 * (sum(lengths) + GENERATIONS * (YOUNG_BASES * max(lengths) + 2 * (dim + 1)))
            + sum(kind.class_column_nbytes(dim) for kind in EXPERTS))


def _full_nbytes(base: Learner, rounds: int) -> int:
    """A base's bytes after ``rounds`` more rounds, at most."""
    return base.state_nbytes() + base.max_growth_nbytes(rounds)


@dataclass(frozen=True)
class _PredictedRow:
    """The :class:`Row` the grid's experts last took, what it was made of (``z`` and ``x``, copies where
    they could change) and the state of the grid it was made in (its rounds and its log view's scaler)."""

    rounds: int
    log_count: int
    z: np.ndarray
    x: np.ndarray
    row: Row
    log_stats: ScalerStats

    @classmethod
    def of(cls, grid: Grid, z: np.ndarray | SparseVector, x: np.ndarray | SparseVector, row: Row,
           log_stats: ScalerStats) -> _PredictedRow | None:
        if not isinstance(z, np.ndarray) or not isinstance(x, np.ndarray):
            return None
        return cls(grid.rounds, grid.log_scaler.count, z.copy(), x.copy(), row, log_stats)

    def matches(self, grid: Grid, z: np.ndarray | SparseVector, x: np.ndarray | SparseVector) -> bool:
        """Whether the row of ``z`` and ``x`` in ``grid`` now is this one, bit for bit (a zero's sign and a
        missing value's NaN too)."""
        return (grid.rounds == self.rounds and grid.log_scaler.count == self.log_count
                and isinstance(z, np.ndarray) and isinstance(x, np.ndarray)
                and z.shape == self.z.shape and x.shape == self.x.shape
                and z.tobytes() == self.z.tobytes() and x.tobytes() == self.x.tobytes())


class Grid:
    """The grid's learners on their views of the row, the log view's scaler, the restarted copies and
    their :class:`Mixture` with the constant prediction: :class:`Auto`'s model once the kernel widths are
    known.

    The mixture's slots (:func:`layout`): the members of :data:`GRID`, the constant, then
    :data:`GENERATIONS` generations of :data:`YOUNG_SIZE` restarted copies (empty slots until a generation
    starts), then the experts of :data:`EXPERTS`. A :class:`~kons.auto.detectors.LossChangeDetector` on the
    mixture's loss (and, for classes, an :class:`~kons.auto.detectors.ErrorChangeDetector` on its errors)
    starts a generation at each change declared and :data:`RESTART_DELAYS` rounds after it, in an empty
    generation's slots, else the older generation's at a declared change and the lighter-weighted one's at
    a delayed restart, so at most ``GENERATIONS x YOUNG_SIZE`` copies are alive. Every round is one loop
    over the experts in play (:meth:`playing`).
    """

    def __init__(self, *, loss: str, dim: int, bound: float, seed: int, widths: tuple[float, float],
                 held: bool, log_scaler: FeatureScaler, binary: bool, bins: QuantileBins | None,
                 centred: bool = True, targets: TargetScaler | None = None,
                 features: FeatureScaler | None = None, early: bool = False, numbers: bool = False,
                 numbers_width: float | None = None, linear_keys: int | None = None,
                 silent: tuple[int, ...] = (), quiet_width: float | None = None) -> None:
        self.loss, self.dim, self.bound, self.seed, self.widths = loss, dim, bound, seed, widths
        #: Whether the raw view's kernel members of width :data:`NUMBERS_WIDTH` leave a record's categorical
        #: names out (:func:`_form`); False, as a grid saved before, they see them.
        self.numbers = numbers
        #: The median-heuristic width of the warm-up's rows without a record's categorical names, which the
        #: members that leave them out take as it is: the width the raw view's members at factor 1 would
        #: have on the same records without the names, so that a name that says nothing costs the mixture
        #: no geometry it would have had without it; where every name said nothing (:attr:`silent`), that
        #: width times NUMBERS_WIDTH, as on the records without them. None (arrays, records with no
        #: categorical name by the warm-up's end, a grid saved before): the raw view's width times
        #: NUMBERS_WIDTH.
        self.numbers_width = numbers_width
        #: The categorical names that said nothing of the target on the warm-up's rows (:func:`silent_names`),
        #: each by one of its coordinates, which the raw view's narrow kernel members leave out, at
        #: :attr:`quiet_width`: the geometry of the records without them. Empty (arrays, no such name, a grid
        #: saved before): they see every name, at the raw view's width.
        self.silent = silent
        self.quiet_width = quiet_width
        self._silent_of: tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]] | None = None
        #: The coordinates the linear models' regularisers count (:attr:`linear_dim`) when they are not the
        #: width: a regression record's keys times LINEAR_DIM_PER_KEY at the warm-up's end. None (arrays,
        #: sparse rows, classification, a grid saved before): the width.
        self.linear_keys = linear_keys
        #: Whether the first rounds play the mixture's weights sharpened (regression,
        #: :meth:`_played_weights`); False, as a grid saved before, they play the mixture's own.
        self.early = early
        #: Whether a generation's first rounds play its own experts' weights sharpened among themselves, as
        #: a fresh learner's first rounds do (:meth:`_played_weights`); False, as a grid saved before, they
        #: play the mixture's own.
        self.young_early = early
        #: The learner's target scaler (regression), whose statistics before a round standardise its
        #: plays: a generation started at a change then keeps its own scale of the target
        #: (:class:`~kons.auto.restarts.GenerationTargets`); None, as a grid saved before, it does not.
        self.targets = targets
        #: The scale of the target since the last declared change (regression), whose units the mixture
        #: weighs the experts in (:meth:`units`): None until a change is declared, and in a grid saved
        #: before it had one (:attr:`keeps_concept` False: it goes on as it was saved).
        self.concept: FadingTargets | None = None
        self.keeps_concept = targets is not None
        #: The learner's feature scaler (regression), whose statistics before a round standardise the row
        #: the linear models play on (:attr:`Row.before`); None (classification) they play on the row as
        #: the others take it.
        self.features = features
        self.held = held
        self.log_scaler = log_scaler
        self.quantile_bins = bins  # the thresholds of the warm-up rows, if any
        self.classes = 2  # the classes the bases play: 2 is the binary model, one score
        self.members = _sharing([LearnerExpert(self.new_base(member), self._form(member)) for member in GRID])
        self.young: list[Generation | None] = [None] * GENERATIONS
        self._alive: list[tuple[int, Expert]] = []
        self._weights_now = np.zeros(0)
        self._weights_of: tuple[np.ndarray, np.ndarray] | None = None  # the arrays _weights_now is of
        self._sharpened: tuple[np.ndarray, np.ndarray] | None = None  # _played_weights' of _weights_now
        self._alive_of: tuple[Any, ...] = ()  # what _alive was listed from (alive())
        self._names: list[str] = []
        self._names_of: list[tuple[int, Expert]] | None = None  # the alive() list _names is of
        self._predicted_row: _PredictedRow | None = None  # the last row the experts took (inputs())
        # the alive() list and the mixture's flags that playing() listed from, its list and its slots
        self._playing: tuple[list[tuple[int, Expert]], bytes, list[tuple[int, Expert]], set[int]] | None
        self._playing = None
        # the playing() list by_play() grouped last, and its groups (read, never written to)
        self._grouped: tuple[list[tuple[int, Expert]], _Groups] | None = None
        self._scaled: tuple[list[tuple[int, Expert]], dict[int, TargetScale]] | None = None  # (alive())
        self.kinds = EXPERTS
        self.layout = layout(self.kinds)
        self.slot = {name: i for i, name in enumerate(self.layout)}
        self._kind_slots = {kind.slots[0]: [self.slot[name] for name in kind.slots] for kind in self.kinds}
        # the slots of the experts of the row (all but the target's last values'): those whose weights the
        # first rounds sharpen (_played_weights)
        self._of_the_row = np.ones(len(self.layout), dtype=bool)
        self._of_the_row[[slot for first in _OF_THE_SERIES
                          for slot in self._kind_slots.get(first, [])]] = False
        # the kind of the experts on the last targets, and the last target's slot: a burst plays it alone
        # (_played_weights), with these weights, built once
        self._lags_kind = self._kind_index("target_last")
        self._last_target_slot = self.slot["target_last"]
        self._last_target_alone: np.ndarray | None = None
        self.mixture = Mixture(binary=binary, bound=bound, experts=len(self.layout), active=len(GRID) + 1,
                               centred=centred)
        # regression declares a shrink of the target sooner (its threshold's note), and a far move on its
        # first row (the lone loss's); classes keep the default
        self.detector = (LossChangeDetector() if binary
                         else LossChangeDetector(threshold=REGRESSION_LOSS_THRESHOLD,
                                                 lone=REGRESSION_LONE_LOSS))
        self.errors = ErrorChangeDetector()
        # two classes (a regression grid has no labels; a classifier's stays as its classes widen, unfed)
        self.labels = LabelChangeDetector() if binary else None
        self.kept = RecentRounds(REPLAY_ROWS, dim)
        self.rounds = 0
        self.changes = 0
        self.last_change = -1
        self.restarts_due = 0  # of RESTART_DELAYS after the last change
        self.probation: Probation | None = None  # of the generation started at the last change
        self.leader = 0
        self.leader_since = 0
        #: The label of the round last played or predicted (classification: :meth:`Mixture.label`).
        self.voted = 0
        self.forms = self._forms()
        self.experts: list[list[Expert] | None] = []  # of each kind of EXPERTS
        for kind in self.kinds:
            experts = kind.build(self)
            for expert in experts or []:
                expert.hold_growth(held)
            if experts is not None and kind.start_prior is not None:
                self.mixture.enter(self._slots(kind), kind.start_prior)
            self.experts.append(experts)
        # of each kind that naps and has experts, by its first slot: [rounds in a row in play below
        # NAP_WEIGHT, napping]
        self.naps: dict[str, list[int]] = self._no_naps()
        #: Of each member of GRID, the rounds in a row its weight has stayed below LIGHT_WEIGHT, counted
        #: from the last declared change (:meth:`_weigh_members`, :meth:`_learns`).
        self.light = [0] * len(GRID)
        #: Of each member of GRID, whether its learner was seen to have stopped growing (:meth:`_learns`).
        self.stopped_growing = [False] * len(GRID)

    def _no_naps(self) -> dict[str, list[int]]:
        """The naps of the kinds that nap and have experts: none napping, no round counted."""
        return {kind.slots[0]: [0, 0] for kind, experts in zip(self.kinds, self.experts, strict=True)
                if kind.naps and experts is not None}

    @property
    def bases(self) -> list[Learner]:
        """The members' learners, in the order of :data:`GRID`."""
        return [member.base for member in self.members]

    def _slots(self, kind: Kind) -> list[int]:
        """The mixture's slots of ``kind`` (listed once: every round's observation and doze take them)."""
        return self._kind_slots[kind.slots[0]]

    def experts_of(self, name: str) -> list[Expert] | None:
        """The experts of the kind of :data:`EXPERTS` whose first slot is ``name`` (``"bins"``,
        ``"neighbours"``, ``"tree0"``, ...), None if this grid has none (read-only: to inspect them, or for
        a kind's build to find those of a kind before it)."""
        return self.experts[self._kind_index(name)]

    @property
    def kept_targets(self) -> Callable[[], np.ndarray]:
        # (the kept rounds' own method: an expert that holds it holds no reference back to the grid, whose
        # learner then needs no cyclic collection to be freed)
        return self.kept.targets

    def _forms(self) -> list[Form]:
        """The forms of the row the members take, and the raw view's dense form, which the kept rows and
        the local expert read whichever member takes it."""
        return sorted({self._form(member) for member in GRID} | {(_RAW, False)})

    def _form(self, member: Member) -> Form:
        """The form of the row ``member`` takes in this grid (:func:`_form`)."""
        return _form(member, self.numbers, bool(self.silent))

    @property
    def _silent_groups(self) -> tuple[np.ndarray, ...]:
        """The coordinates of the names that said nothing (:attr:`silent`), with the categories they have
        taken since (a name's coordinates never move, but its group grows, and a name seen with one
        category at the warm-up may become a group before it)."""
        groups = self.log_scaler.groups
        kept = self._silent_of
        if kept is None or kept[0] is not groups:
            silent = np.array(self.silent)
            kept = self._silent_of = groups, tuple(group for group in groups if np.isin(group, silent).any())
        return kept[1]

    def _kind_index(self, name: str) -> int:
        """Where the kind whose first slot is ``name`` sits in :attr:`kinds` (and :attr:`experts`)."""
        return next(k for k, kind in enumerate(self.kinds) if kind.slots[0] == name)

    def new_base(self, member: Member) -> Learner:
        """A fresh learner of a grid member (with the grid's growth hold)."""
        view, kind, width_factor, step_factor = member
        if kind == "ons":
            base = ONS(loss=self.loss, alpha=float(self.linear_dim + 1), eta=STEP[self.loss] * step_factor,
                       C=self.bound, dim=self.dim + 1)
            return self._fresh(base)
        of = self._form(member)[0]
        if of == _QUIET:
            assert self.quiet_width is not None  # (given with silent, which makes the quiet form)
            gamma = self.quiet_width * width_factor
        elif of == _NUMBERS and self.numbers_width is not None:
            gamma = self.numbers_width
        else:
            gamma = self.widths[view == "log"] * width_factor
        return self._kernel(gamma, step_factor)

    @property
    def hears_names(self) -> bool:
        """Whether the warm-up heard a record's categorical name (one not :attr:`silent`), so that the
        wide members take its numbers at the narrow width (:attr:`numbers_width`): the grid then has the
        kernel member on the numbers at their width x NUMBERS_WIDTH (``wide_numbers``, :data:`EXPERTS`).
        Asked when the grid is built at the warm-up's end, whose names the scaler's groups are then."""
        return (self.numbers and self.numbers_width is not None
                and len(self.silent) < len(self.log_scaler.groups))

    def new_wide_numbers(self) -> Learner:
        """A fresh kernel member on the numbers at their width x NUMBERS_WIDTH, at the step factor
        WIDE_NUMBERS_STEP (a grid whose warm-up heard a name: :attr:`hears_names`)."""
        assert self.numbers_width is not None  # (a grid of records with names)
        return self._kernel(self.numbers_width * NUMBERS_WIDTH, WIDE_NUMBERS_STEP)

    def _kernel(self, gamma: float, step_factor: float) -> Learner:
        """A fresh Nystrom learner of the grid's kernel of width ``gamma`` at ``step_factor``."""
        return self._fresh(NystromKONS(kernel={"name": "rbf", "gamma": gamma}, loss=self.loss, alpha=1.0,
                                       eta=STEP[self.loss] * step_factor, C=self.bound,
                                       max_dictionary=MAX_DICTIONARY, seed=self.seed, dim=self.dim))

    def _fresh(self, base: Learner) -> Learner:
        """``base`` with the grid's growth hold, widened to its classes."""
        base.hold_growth(self.held)
        if self.classes > 2:
            multinomial_rounds(base)._widen(self.classes - 1)
        return base

    @property
    def linear_dim(self) -> int:
        """The coordinates the linear models' regularisers count: ONS's ``alpha`` is one more, the Bayesian
        linear prior's precision of a weight this many (the width, or :attr:`linear_keys`)."""
        return self.dim if self.linear_keys is None else self.linear_keys

    @property
    def weight_variance(self) -> float:
        """The Bayesian linear models' ``weight_variance`` on the standardised row, which spreads over the
        width: 1 / :attr:`linear_dim` a weight."""
        return self.dim / self.linear_dim

    def new_members(self, indices: list[int]) -> list[LearnerExpert]:
        """Fresh experts of the grid members ``GRID[i]`` for ``i`` in ``indices``, their equal dictionaries
        shared (:func:`_sharing`: copies of one geometry at several steps learn the same rows)."""
        return _sharing([LearnerExpert(self.new_base(GRID[i]), self._form(GRID[i]))
                         for i in indices])

    def new_recent(self) -> RecentLinear:
        """A generation's linear model: on the standardised row with the intercept, its intercept's prior
        spread the mixture's interval, its scores clipped as the bases' (as the warm-up's, in log-odds)."""
        recent = RecentLinear(self.dim, intercept_scale=TARGET_BOUND, weight_variance=self.weight_variance,
                              clip=TARGET_BOUND if self.mixture.binary else self.bound)
        if self.classes > 2:
            recent.widen(self.classes)
        return recent

    def _members(self) -> list[tuple[int, Member, Learner]]:
        """The alive learners of the members and their copies: (mixture slot, grid member, learner)."""
        alive = [(i, member, expert.base) for i, (member, expert) in enumerate(zip(GRID, self.members,
                                                                                     strict=True))]
        for g, generation in enumerate(self.young):
            if generation is not None:
                slots = young_slots(g)[:len(generation.members)]
                alive += [(slot, GRID[i], base) for slot, i, base in
                          zip(slots, generation.members, generation.bases, strict=True)]
        return alive

    def _recent(self) -> list[tuple[int, RecentLinear]]:
        """The generations' linear models: (mixture slot, model)."""
        return [(young_slots(g)[YOUNG_BASES], generation.recent) for g, generation in enumerate(self.young)
                if generation is not None and generation.recent is not None]

    def alive(self) -> list[tuple[int, Expert]]:
        """Every expert there is, in play or asleep: (mixture slot, expert), by slot; the same list until
        the members, a generation or the kinds' experts are replaced (a restart, a restore), which it
        holds on to, so that a new one is never taken for the old."""
        of = (self.members, self.experts, *self.young)
        if len(of) != len(self._alive_of) or not all(map(is_, of, self._alive_of)):  # (no generator's frame)
            self._alive, self._alive_of = self._listed(), of
        return self._alive

    def _listed(self) -> list[tuple[int, Expert]]:
        alive: list[tuple[int, Expert]] = list(enumerate(self.members))
        for g, generation in enumerate(self.young):
            if generation is not None:
                alive += generation.experts(g)
        for kind, experts in zip(self.kinds, self.experts, strict=True):
            if experts is not None:
                alive += zip(self._slots(kind), experts, strict=True)
        return alive

    def _weights(self) -> np.ndarray:
        """The mixture's weights, computed once for each state of its arrays (which every change of them
        replaces): a round's play takes those the last round's leader was found with, a prediction too."""
        switching = self.mixture.switching
        of = self._weights_of
        if of is None or of[0] is not switching.log_weights or of[1] is not switching.log_rate_weights:
            self._weights_now = switching.weights()
            self._weights_now.flags.writeable = False
            self._weights_of = (switching.log_weights, switching.log_rate_weights)
        return self._weights_now

    def _played_weights(self) -> np.ndarray:
        """The weights a regression round plays with: until round :data:`~kons.auto.config.MIX_EARLY_ROUNDS`
        the weights of the experts of the row raised to ``MIX_EARLY_ROUNDS / round`` and scaled back to the
        mixture's weight of them all (their first rounds' differences in loss are small against the
        mixture's rate, and the best of them held little weight for hundreds of rounds), the experts of the
        target's last values at the mixture's own (sharpened against them, the many experts of the row
        that forecast a series' trend and season together, each at a small weight, were left out of the
        play; sharpened among themselves, the last target and its autoregression, alike in their first
        rounds, followed the noise: docs/series.md); then the mixture's own. After them, a generation
        younger than ``MIX_EARLY_ROUNDS`` rounds (:attr:`young_early`) plays its own experts' weights raised
        to ``MIX_EARLY_ROUNDS / (its age + 1)`` among themselves, as a fresh learner started at its birth
        would play them (the oracle of ``benchmarks/drift.py`` does), and its total weight and the other
        experts' of the row raised to that power against each other (the others in their proportions, the
        lags at the mixture's own): the generation carries the play once it weighs more than they do, and
        gives it back once they weigh more (docs/drift-log.md, "A generation's first rounds"); within the
        generation, each kernel copy's weight then counts :data:`~kons.auto.config.YOUNG_KERNEL_PLAY` times
        against its linear models' (the copies of one geometry stand for a fresh grid's many kernel
        members). Before all that, a round in a burst (:meth:`_in_burst`) plays the last target alone. A
        view, not state: the weights' updates, the leader and the experts' naps take the mixture's own, so
        once the grid and its generations are past their first rounds, and out of a burst, it plays as
        without it."""
        if self._in_burst():
            return self._last_target_weights()
        weights = self._weights()
        if not self.early or self.rounds < WARMUP_ROWS:  # (the warm-up's replay too)
            return weights
        kept = self._sharpened
        if kept is not None and kept[0] is weights:
            return kept[1]
        sharpened = weights
        if self.rounds + 1 < MIX_EARLY_ROUNDS:
            sharpened = weights.copy()
            _sharpen(sharpened, self._of_the_row, MIX_EARLY_ROUNDS / (self.rounds + 1))
        elif self.young_early:
            for g, generation in enumerate(self.young):
                if generation is None:
                    continue
                age = self.rounds - generation.start
                if age + 1 >= MIX_EARLY_ROUNDS:
                    continue
                sharpened = weights.copy() if sharpened is weights else sharpened
                young = np.array([slot for slot, _ in generation.experts(g)])
                others = self._of_the_row.copy()
                others[young] = False
                power = MIX_EARLY_ROUNDS / (age + 1)
                _sharpen_groups(sharpened, [young, np.flatnonzero(others)], power)
                _sharpen(sharpened, young, power)
                _favour(sharpened, young, generation.kernel_slots(g), YOUNG_KERNEL_PLAY)
        if sharpened is not weights:
            sharpened.flags.writeable = False
        self._sharpened = weights, sharpened
        return sharpened

    def _in_burst(self) -> bool:
        """Whether the last target, awake, lies beyond :data:`~kons.auto.config.LAGS_BURST` deviations of
        the target's running mean: a burst beyond the rows seen, which the experts of the row forecast as
        the level they learnt and the autoregressions, fitted on the smaller moves before it, as a rebound
        (on water_flow, the first burst's rounds cost the series more than its whole excess over the last
        target: docs/series.md#a-burst-plays-the-last-target). Rows in no order never wake the last target."""
        lags = self.experts[self._lags_kind]
        if lags is None or not self.mixture.switching.active[self._last_target_slot]:
            return False
        return abs(float(cast(LastTarget, lags[0]).lags[0])) > LAGS_BURST

    def _last_target_weights(self) -> np.ndarray:
        """The weights that play the last target alone (read only, so the mixture keeps its play)."""
        alone = self._last_target_alone
        if alone is None:
            alone = np.zeros(len(self.layout))
            alone[self._last_target_slot] = 1.0
            alone.flags.writeable = False
            self._last_target_alone = alone
        return alone

    def playing(self) -> list[tuple[int, Expert]]:
        """The experts that play this round: those in the mixture (not asleep, not napping)."""
        return self._in_play()[0]

    def _in_play(self) -> tuple[list[tuple[int, Expert]], set[int]]:
        """:meth:`playing` and its slots, listed again only when the experts or those in the mixture change
        (a round's prediction and learning take the same; the lists are read, never written to)."""
        alive, switching = self.alive(), self.mixture.switching
        active = switching.active.tobytes()  # (written in place when an expert enters or leaves)
        kept = self._playing
        if kept is None or kept[0] is not alive or kept[1] != active:
            flags = switching.active.tolist()  # (a list's items: indexing numpy costs more)
            playing = [(slot, expert) for slot, expert in alive if flags[slot]]
            kept = self._playing = alive, active, playing, {slot for slot, _ in playing}
        return kept[2], kept[3]

    def _played_alone_and_together(self) -> _Groups:
        """:func:`~kons.auto.experts.protocol.by_play` of :meth:`playing`, grouped again only when that is
        listed again (every multinomial prediction groups them)."""
        playing, kept = self.playing(), self._grouped
        if kept is None or kept[0] is not playing:
            kept = self._grouped = playing, by_play(playing)
        return kept[1]

    def inputs(self, z: np.ndarray | SparseVector, x: np.ndarray | SparseVector) -> tuple[Row, ScalerStats]:
        """The round's :class:`Row` (:meth:`views_forms`, the log view's dense one kept for a replay) and the
        log view's pending statistics (:meth:`FeatureScaler.pending`). A learning round right after the
        prediction of the same dense row (a service's predict, then its feedback) takes the prediction's
        :class:`Row` again, so that the experts recognise it (:class:`_PredictedRow`)."""
        predicted = self._predicted_row
        if predicted is not None and predicted.matches(self, z, x):
            return predicted.row, predicted.log_stats
        zlog, log_stats = self.log_scaler.pending(signed_log(x))
        features, before = self.features, None
        if features is not None and not features.sparse:
            before = features.standardised_before(dense(x))
            if before is not None:  # the experts read it, none writes to it
                before.flags.writeable = False
        row = Row(self.views_forms(z, zlog), x, before)
        self._predicted_row = _PredictedRow.of(self, z, x, row, log_stats)
        return row, log_stats

    def views_forms(self, z: np.ndarray | SparseVector, zlog: np.ndarray | SparseVector
                    ) -> dict[Form, np.ndarray | SparseVector]:
        """Each form of the row the bases take (the standardised view ``z``, the signed-log view ``zlog``, or
        ``z`` without a record's categorical names; dense or with the intercept), computed and checked once
        for all the bases that take it: a view's check is its intercept form's (the constant 1 adds nothing a
        check refuses)."""
        forms: dict[Form, np.ndarray | SparseVector] = {}
        checked: dict[int, np.ndarray | SparseVector] = {}
        for of, linear in self.forms:
            view = checked.get(of)
            if view is None:  # (sorted: the raw view is checked before the views without the names)
                view = checked[of] = (_without(checked[_RAW], self.log_scaler.groups) if of == _NUMBERS
                                      else _without(checked[_RAW], self._silent_groups) if of == _QUIET
                                      else checked_form(zlog if of == _LOG else z))
            if of == _NUMBERS and view is checked[_RAW]:  # no names to leave out: the raw view's form
                forms[of, linear] = forms[_RAW, linear]
                continue
            form = with_intercept(view) if linear else dense(view)
            if isinstance(form, np.ndarray):  # the experts read it, none writes to it
                form.flags.writeable = False
            forms[of, linear] = form
        return forms

    # The experts take the checked forms (a Nystrom or ONS member through its unchecked round), inside
    # the numerics context the mixture's round entered once; an empty slot plays 0 at weight 0.
    def predict(self, z: np.ndarray | SparseVector, x: np.ndarray | SparseVector, constant: float) -> float:
        row, _ = self.inputs(z, x)
        preds = np.zeros(len(self.layout))
        preds[len(GRID)] = constant
        scaled = self._scaled_generations()
        for slot, expert in self.playing():
            play = expert.predict(row)
            own = scaled.get(slot)
            preds[slot] = play if own is None else self._in_grid_units(own, play)
        played = self.mixture.mix(preds, self._played_weights(), self.units())
        self.voted = self.mixture.binary_label(preds, played)
        return played

    def learn(self, z: np.ndarray | SparseVector, t: float, x: np.ndarray | SparseVector,
              constant: float, y: float | None = None) -> float:
        """A round of the one-score model: ``t`` the target the members learn (standardised, or a label
        -1 or +1), ``y`` the target in the user's units (regression, for the generations' own scales)."""
        row, log_stats = self.inputs(z, x)
        plays = np.zeros(len(self.layout))
        plays[len(GRID)] = constant
        playing, in_play = self._in_play()
        scaled = self._scaled_generations() if y is not None else {}
        own_targets = {id(own): own.target(cast(float, y)) for own in scaled.values()}
        units = self.units() if y is not None else None  # the scales before the round
        for slot, expert in playing:
            own = scaled.get(slot)
            if own is None:
                plays[slot] = expert.learn(row, t) if self._learns(slot, expert) else expert.predict(row)
            elif isinstance(expert, RecentExpert):  # a generation's linear model: it plays in the units
                # before the round, and learns once its generation's scale has moved to those after it (below)
                plays[slot] = self._in_grid_units(own, expert.predict(row))
            else:
                plays[slot] = self._in_grid_units(own, expert.learn(row, own_targets[id(own)][0]))
        for g, generation in enumerate(self.young):  # (its linear model's targets moved, playing or not)
            if generation is None or id(generation.targets) not in own_targets:
                continue
            target, stats = own_targets[id(generation.targets)]
            generation.move_scale(stats)
            if generation.recent_expert is not None and young_slots(g)[YOUNG_BASES] in in_play:
                generation.recent_expert.learn_unplayed(row, target)
            kernel = generation.kernel_targets
            if kernel is not None and id(kernel) in own_targets:
                kernel.commit(own_targets[id(kernel)][1])
        if self.concept is not None and y is not None:
            self.concept.commit(self.concept.target(y)[1])
        self.log_scaler.commit(log_stats)
        weights, played_weights = self._weights(), self._played_weights()
        # the detectors, the kept rounds and the trial score the mixture's own play, so that the first
        # rounds' view (_played_weights) leaves the state as it was without it
        scored = None if played_weights is weights else self.mixture.mix(plays, weights, units)
        played = self.mixture.mix(plays, played_weights, units)  # (the last mix: the play's spread)
        scored = played if scored is None else scored
        self.voted = self.mixture.binary_label(plays, played, t)
        self.mixture.update(plays, t, units)
        binary = self.mixture.binary
        kept_target = RecentNeighbours.kept_target(t, binary)  # binary: the labels -1 and +1 as 0 and 1
        self._observe("update", row, kept_target, in_play)  # trees that enter now play from the next round
        # the detectors take the loss in the grid's units, the trial in the mixture's
        loss = self.mixture.loss(scored, t)
        if self.probation is not None:
            own_loss = loss if units is None else self.mixture.loss(scored, t, units)
            self._step_trial(self.mixture.losses(plays, t, units), own_loss)
        self._observe("round", row, kept_target, in_play)
        if binary:
            error = float(played * t <= 0.0)
            self._keep(row, kept_target, loss, error)
            self._track(loss, error, kept_target)
        else:
            self._keep(row, t, loss, 0.0)
            self._track(loss, None, typical=abs(t) <= LONE_TARGET_DEVIATIONS)
        return played

    def _scaled_generations(self) -> dict[int, TargetScale]:
        """The slots of the generations that keep their own scale of the target, to the scale each learns
        in (read only: listed again when the generations change, as :meth:`alive` is)."""
        if self.targets is None:
            return {}
        alive, kept = self.alive(), self._scaled
        if kept is None or kept[0] is not alive:
            kept = self._scaled = alive, {slot: cast(TargetScale, generation.targets_of(j))
                                          for g, generation in enumerate(self.young)
                                          if generation is not None and generation.targets is not None
                                          for j, (slot, _) in enumerate(generation.experts(g))}
        return kept[1]

    def units(self) -> Units | None:
        """The mixture's units (regression): those of the concept's scale (:attr:`concept`) from the
        grid's; None (the grid's) before a change is declared.

        The grid's own scale holds every target since the start: after a change that shrinks the
        target's spread, the experts' losses in its units are as small as the new spread is to the old,
        squared, and the mixture's weights, which move by those losses, hardly move at all; the
        generation started at the change then keeps the weight it entered with, spread over its experts
        whatever their errors (measured on ``benchmarks/drift.py``'s piecewise_scaled stream:
        ``docs/drift-log.md``)."""
        concept, targets = self.concept, self.targets
        if concept is None or targets is None or targets.std <= 0.0 or concept.std <= 0.0:
            return None
        return (concept.mean - targets.mean) / targets.std, concept.std / targets.std

    def _in_grid_units(self, own: TargetScale, f: float) -> float:
        """A generation's play ``f`` in its own scale, in the learner's standardised units before the
        round."""
        assert self.targets is not None
        return own.play(f, self.targets.mean, self.targets.std, self.bound)

    def _observe(self, when: str, row: Row, target: float, in_play: set[int]) -> None:
        """The round outside their plays of the kinds that observe ``when`` (:attr:`Kind.observes`), and
        the entry of a sleeping kind once its first expert is ready (with the kinds that wake with it)."""
        for kind, experts in zip(self.kinds, self.experts, strict=True):
            if kind.observes != when or experts is None:
                continue
            if kind.wakes_with is not None and not self.mixture.switching.active[self._slots(kind)[0]]:
                continue  # (asleep it observes nothing, and enters only with the kind it wakes with)
            napping = self._napping(kind)
            if napping and not kind.observes_napping:
                continue
            slots = self._slots(kind)
            for slot, expert in zip(slots, experts, strict=True):
                expert.observe(row, target, self.classes, slot in in_play)
            asleep = not napping and experts[0].sleeps and not self.mixture.switching.active[slots[0]]
            if asleep and experts[0].ready():
                self.mixture.enter(slots, kind.wake_prior)
                for follower, theirs in zip(self.kinds, self.experts, strict=True):
                    if follower.wakes_with == kind.slots[0] and theirs is not None:
                        self.mixture.enter(self._slots(follower), follower.wake_prior)

    def _keep(self, row: Row, target: float, loss: float, error: float) -> None:
        """Keep the round for a replay: both views as the kernel members took them (dense: the ring's
        arrays are, and a sparse row's dense copies were made for those members already)."""
        self.kept.add(dense(row.forms[False, False]), dense(row.forms[True, False]), target, loss, error)

    def _step_trial(self, losses: np.ndarray, loss: float) -> None:
        """The round's step of the trial of the generation started at the last change (its experts'
        ``losses`` and the mixture's ``loss``, weighted by the mixture's learning rate)."""
        assert self.probation is not None
        if not self.probation.observe(self.mixture.switching, losses, loss):
            self.probation = None

    def _track(self, loss: float, error: float | None, label: float | None = None, *, typical: bool = False
               ) -> None:
        """After a round whose mixture's loss (times its learning rate) was ``loss``, for classes whose
        play was wrong (``error`` 1) or right (0), and on two classes whose class index was ``label``: the
        detectors, the restarts they schedule, and the leader. ``typical``: the round's target lies within
        :data:`~kons.auto.config.LONE_TARGET_DEVIATIONS` of the targets' mean (regression), so that its loss
        alone may declare a change: a row far out in a heavy tail errs as much without one."""
        self.rounds += 1
        level, baseline = self.detector.level, self.errors.baseline  # the levels before a change
        risen = self.detector.update(loss, alone=typical)
        shifted = self._labels_shifted(label) if label is not None else 0
        # every detector sees every round (their levels follow the stream), any declares
        span, soon = 0, False
        erred = self.errors.update(error) if error is not None else False
        if erred or risen or shifted:
            # before the last change's delayed restarts are done, with every generation started since it
            soon = self.restarts_due > 0 and all(young is not None and young.start >= self.last_change
                                                 for young in self.young)
            self.changes += 1
            self.last_change = self.rounds
            self.restarts_due = len(RESTART_DELAYS)
            if self.labels is not None:  # the new concept's labels' rate learnt afresh
                self.labels = LabelChangeDetector()
            span = shifted or change_span(self.detector.steps(self.kept.losses(), level) if risen
                                          else self.errors.steps(self.kept.errors(), baseline))
            if not shifted and error is not None and (erred or self.errors.seen > self.errors.warmup):
                # on classes the onset is the errors' (ErrorChangeDetector.onset_span), whichever test
                # declared the change, while their level is one learnt before it
                span = self.errors.onset_span(self.kept.errors(), baseline, span)
        if self.restarts_due and self.rounds == self.last_change + RESTART_DELAYS[-self.restarts_due]:
            self.restarts_due -= 1
            if self.rounds == self.last_change and self.classes == 2:
                self._renew_fresh_bins()
            restart(self, span, soon=soon)
        self._follow_change_label()
        weights = self._weights()
        leader = int(weights.argmax())
        if leader != self.leader:
            self.leader, self.leader_since = leader, self.rounds
        self._doze(weights, changed=self.last_change == self.rounds)
        self._weigh_members(weights, changed=self.last_change == self.rounds)

    def _follow_change_label(self) -> None:
        """On two classes, the label after a change (:class:`~kons.auto.mixture.ChangeLabel`) starts at
        each declared change, from the weights the change's generation entered at, and ends
        :data:`CHANGE_LABEL_ROUNDS` rounds after it (at a change declared sooner, it starts again); while
        the growth is held it does not start, as the threshold model since a change does not."""
        mixture = self.mixture
        if not mixture.binary or self.classes != 2:
            mixture.change_label = None
        elif self.rounds == self.last_change and not self.held:  # (held, a learner keeps its size)
            mixture.change_label = ChangeLabel(mixture.switching)
        elif self.rounds - self.last_change >= CHANGE_LABEL_ROUNDS:
            mixture.change_label = None

    def _labels_shifted(self, label: float) -> int:
        """The labels' detector's round (this round's class index ``label``): the rounds its confirmed shift
        spans among the kept rounds (the change's estimated onset), else 0."""
        if self.labels is None or not self.labels.update(label):
            return 0
        span = self.labels.span(self.kept.targets())
        return span if self.labels.confirmed(self.kept.errors(), span) else 0

    def _renew_fresh_bins(self) -> None:
        """At a change declared on two classes, before the change's generation enters (whose trial then
        weighs the generation's own entry), the threshold model since a declared change starts afresh and
        enters at :data:`FRESH_BINS_PRIOR`, unless it started within the last :data:`FRESH_BINS_KEPT`
        rounds: one change is often declared twice (by either detector, tens of rounds apart), and the
        second start lost what the first had learnt (docs/drift-log.md). Its first start builds its learner:
        while the growth is held it starts only in place of one started, so that a held learner keeps its
        size (as a generation does: :func:`~kons.auto.restarts.restart`)."""
        k = self._kind_index("fresh_bins")
        experts = self.experts[k]
        if experts is None:
            return
        old = cast(FreshThresholds, experts[0])
        if old.start >= 0 and self.rounds - old.start < FRESH_BINS_KEPT:
            return
        if old.model is None and self.held:
            return
        # a new list of the kinds' experts: alive() lists them again
        self.experts = [*self.experts[:k], renewed_fresh_bins(self, old, self.rounds), *self.experts[k + 1:]]
        self.mixture.enter(self._slots(self.kinds[k]), FRESH_BINS_PRIOR)

    def _learns(self, slot: int, expert: Expert) -> bool:
        """Whether the expert in ``slot`` learns this row of regression or of three classes or more: all
        but a light member (a member of GRID below LIGHT_WEIGHT for LIGHT_ROUNDS rounds or more, on three
        classes or more MANY_CLASSES_LIGHT_ROUNDS) whose learner no longer grows (a Nystrom member's full
        dictionary, which its sharers' rows leave as it is, or ONS), which learns every LIGHT_EVERY-th of
        its light rounds; it plays all of them."""
        if slot >= len(GRID):
            return True
        # (classes == 2 here is regression's one score: two classes count no light rounds, _weigh_members)
        light = self.light[slot] - (LIGHT_ROUNDS if self.classes == 2 else MANY_CLASSES_LIGHT_ROUNDS)
        if light < 0 or light % LIGHT_EVERY == 0:
            return True
        if not self.stopped_growing[slot]:
            # Asked until it answers none: a learner of GRID that has stopped never grows again (a
            # dictionary never shrinks) unless its growth was held and is let go (hold_growth forgets).
            self.stopped_growing[slot] = expert.growth_nbytes(1) == 0
        return not self.stopped_growing[slot]

    def _weigh_members(self, weights: np.ndarray, changed: bool) -> None:
        """Count the rounds in a row each member of GRID has held a weight below LIGHT_WEIGHT after a
        round of regression or of three classes or more whose mixture's weights are ``weights``: none at a
        declared change (``changed``), so that every member learns each row of the new concept. Two classes
        count none: their rounds cost less, and light members lost windows of the drifts' binary tuning
        streams (docs/auto-log.md)."""
        if self.mixture.binary and self.classes == 2:
            return
        light = self.light
        for slot, weight in enumerate(weights[:len(GRID)].tolist()):
            light[slot] = light[slot] + 1 if weight < LIGHT_WEIGHT and not changed else 0

    def _napping(self, kind: Kind) -> bool:
        return kind.naps and bool(self.naps[kind.slots[0]][1])

    def _doze(self, weights: np.ndarray, changed: bool) -> None:
        """The kinds that nap (:attr:`Kind.naps`) after a round whose mixture's weights are ``weights``:
        napping, they wake at a declared change (``changed``; they learn from the next round, and enter
        as they first did: experts that sleep once ready, the others at once at their start prior); in
        play, they nap once their weight together has stayed below the kind's ``nap_weight`` for
        :data:`NAP_ROUNDS` rounds."""
        for kind, experts in zip(self.kinds, self.experts, strict=True):
            if not kind.naps or experts is None:
                continue
            nap = self.naps[kind.slots[0]]
            slots = self._slots(kind)
            voting = self.mixture.vote is not None and not kind.naps_among_classes
            if nap[1]:
                if changed or voting:
                    nap[:] = [0, 0]
                    if kind.start_prior is not None:  # (the others enter once ready: _observe)
                        self.mixture.enter(slots, kind.start_prior)
                continue
            if not self.mixture.switching.active[slots[0]]:  # not entered yet
                continue
            negligible = not voting and float(np.add.reduce(weights[slots])) < kind.nap_weight
            nap[0] = nap[0] + 1 if negligible else 0
            if nap[0] >= NAP_ROUNDS:
                self.mixture.switching.leave(slots)
                nap[:] = [0, 1]

    # The multinomial model (three classes or more): every expert plays the probabilities of the classes
    # (a Newton member the softmax of its clipped scores of classes 1.. against class 0, kons._multinomial),
    # the constant its class frequencies; an empty slot the uniform probabilities, at weight 0.
    def probabilities(self, z: np.ndarray | SparseVector, x: np.ndarray | SparseVector,
                      constant: np.ndarray) -> np.ndarray:
        row, _ = self.inputs(z, x)
        experts = np.full((len(self.layout), len(constant)), 1.0 / len(constant))
        experts[len(GRID)] = constant
        alone, together = self._played_alone_and_together()
        for slot, expert in alone:
            experts[slot] = expert.probabilities(row, self.classes)
        for play, experts_of_kind in together.items():
            play(experts_of_kind, row, experts)
        played = self.mixture.mix_probabilities(experts, self._weights())
        self.voted = self.mixture.class_label(experts, played)
        return played

    def learn_class(self, z: np.ndarray | SparseVector, label: int, x: np.ndarray | SparseVector,
                    constant: np.ndarray) -> np.ndarray:
        """A round with ``len(constant)`` classes (the experts widened to them first, which cannot fail
        once the inputs are checked); the mixture's probabilities played."""
        predicted = self._predicted_row
        row, log_stats = self.inputs(z, x)
        classes = len(constant)
        widened = classes > self.classes
        if widened:
            for _, expert in self.alive():
                expert.widen(classes)
            self.classes = classes
        experts = np.full((len(self.layout), classes), 1.0 / classes)
        experts[len(GRID)] = constant
        playing = self.playing()
        if widened or predicted is None or predicted.row is not row:  # (else its prediction played them)
            # the Newton experts' plays, kept by their learners for their rounds below (each learner
            # takes its kept play only while it is still the play of its state)
            for play, experts_of_kind in self._played_alone_and_together()[1].items():
                play(experts_of_kind, row, experts)
        for slot, expert in playing:
            experts[slot] = (expert.learn_class(row, label, classes) if self._learns(slot, expert)
                             else expert.probabilities(row, classes))  # (its play, kept by its learner)
        self.log_scaler.commit(log_stats)
        played = self.mixture.mix_probabilities(experts, self._weights())
        self.voted = self.mixture.class_label(experts, played)
        self.mixture.update_probabilities(experts, label, played)
        in_play = {slot for slot, _ in playing}
        self._observe("update", row, float(label), in_play)  # trees that enter now play from the next round
        loss, error = float(self.mixture.class_losses(played, label)), float(played.argmax() != label)
        if self.probation is not None:
            self._step_trial(self.mixture.class_losses(experts, label), loss)
        self._observe("round", row, float(label), in_play)
        self._keep(row, float(label), loss, error)
        self._track(loss, error)
        return played

    def hold_growth(self, held: bool) -> None:
        self.held = held
        self.stopped_growing = [False] * len(GRID)
        for _, expert in self.alive():
            expert.hold_growth(held)

    def names(self) -> list[str]:
        """The mixture's experts' names (an empty slot's is its member's with "not started")."""
        names = [*(_base_name(*member) for member in GRID), "constant"]
        for g, generation in enumerate(self.young):
            if generation is None:
                names += [f"restarted copy {j} of generation {g}, not started" for j in range(YOUNG_SIZE)]
                continue
            start = generation.start
            names += [f"{_base_name(*GRID[i])} restarted at round {start}" for i in generation.members]
            names += [f"restarted copy {j} of generation {g}, none: not copied (a regression generation's "
                      "last, or saved before it existed)"
                      for j in range(len(generation.members), YOUNG_BASES)]
            names.append(f"bayesian_linear(raw) of the rows since round {start}"
                         + (" (none: saved before it existed)" if generation.recent is None else ""))
        for kind, experts in zip(self.kinds, self.experts, strict=True):
            names += [label + ("" if experts is not None else ", none") for label in kind.labels]
        return names

    def stats(self) -> dict[str, Any]:
        # (the service asks for them after every round: the names are listed again only when the experts
        # are, the weights are those the next prediction takes, and each base gives only its sizes)
        alive = self.alive()
        if self._names_of is not alive:
            self._names, self._names_of = self.names(), alive
        names = self._names
        switching = self.mixture.switching
        sizes = [_sizes(b) for _, _, b in self._members()]
        weights = zip(names, self._weights().tolist(), switching.active.tolist(), strict=True)
        return {"weights": {n: v for n, v, on in weights if on},
                "leader": names[self.leader],
                "leader_since": self.leader_since,
                "changes": self.changes,
                "last_change_round": self.last_change if self.last_change >= 0 else None,
                "switching_rates": {f"{r:g}": v for r, v in
                                    zip(switching.rates, switching.rate_weights().tolist(), strict=True)},
                # the largest base (each base stores at most one point per round); the total is memory
                "stored_points": int(max(stored for stored, _ in sizes)),
                "dictionary_size": int(max(dictionary for _, dictionary in sizes)),
                "stored_points_all_bases": int(sum(stored for stored, _ in sizes))}

    def own_arrays(self) -> dict[str, np.ndarray]:
        """The grid's own arrays: the mixture's weights, the log view's scaler, the rounds kept and the
        generations' own scales of the target."""
        return {**self._mixture_arrays(), **self.log_scaler.arrays("log"), **self.kept.arrays(),
                **{f"young{g}_targets": generation.targets.array() for g, generation in enumerate(self.young)
                   if generation is not None and generation.targets is not None},
                **{f"young{g}_kernel_targets": generation.kernel_targets.array()
                   for g, generation in enumerate(self.young)
                   if generation is not None and generation.kernel_targets is not None},
                **({"concept_scale": self.concept.array()} if self.concept is not None else {})}

    def _mixture_arrays(self) -> dict[str, np.ndarray]:
        """The mixture's arrays; in the layout of an earlier release while the experts of the last slots,
        added since, are out of play (:data:`_SAVED_WITHOUT_WHILE_OUT`: the second autoregression before it
        enters, the kernel member on the wide numbers where there is none or while it naps): where they
        never play, a state as large as before them; :func:`~kons.auto.slots.in_layout` restores it."""
        arrays = self.mixture.arrays()
        active = self.mixture.switching.active
        kept = len(self.layout)
        # (a grid of other EXPERTS, whose last kind is none of those: its whole layout)
        while kept and self.layout[kept - 1] in _SAVED_WITHOUT_WHILE_OUT and not active[kept - 1]:
            kept -= 1
        if kept == len(self.layout):
            return arrays
        out = list(range(kept, len(self.layout)))  # (the vote's own slot, after them, stays the last)
        return {name: np.delete(array, out, axis=-1) if name.endswith(("_log_weights", "_active")) else array
                for name, array in arrays.items()}

    def nbytes(self) -> int:
        """The bytes of the saved arrays: the experts' and the grid's own, each dictionary once (see
        :meth:`arrays`)."""
        return (sum(expert.nbytes() for _, expert in self.alive()) + arrays_nbytes(self.own_arrays())
                - repeated_dictionary_nbytes(base for _, base in self._nested()))  # (no dict built)

    def growth_nbytes(self, rounds: int) -> int:
        """The experts' growth, each young slot's counted as if a fresh copy replaced it and grew (a
        generation's linear model has a fixed size: counted where a generation has none yet), and the
        threshold model since a declared change's learner until it starts."""
        grown = sum(b.max_growth_nbytes(rounds) for b in self.bases)
        if not self.held:  # a member that keeps a row out of a shared dictionary takes its own copy
            grown += repeated_dictionary_nbytes((base for _, base in self._nested()), growing=True)
        grown += sum(expert.growth_nbytes(rounds) for experts in self.experts
                     for expert in experts or [])  # nothing while held
        grown += self._wide_numbers_napping_nbytes()
        # held, restarts only replace generations, by copies no larger (kons.auto.restarts.restart): only
        # a generation saved without its linear model grows, by one
        recent = self.new_recent().nbytes()
        grown += recent * sum(generation.recent is None if generation is not None else not self.held
                              for generation in self.young)
        if self.targets is not None and not self.held:  # an empty generation's own scale, once started,
            # and the concept's
            grown += GenerationTargets(0.0, 0.0, 0.0).array().nbytes * self.young.count(None)
            if self.keeps_concept:  # and a declared change's generation's kernel scale, where none is
                fading = FadingTargets(0.0, 0.0, 1.0, 1.0).array().nbytes
                grown += fading * sum(generation is None or generation.kernel_targets is None
                                      for generation in self.young)
                if self.concept is None:
                    grown += fading
        if self.held:
            return grown
        grown += self._fresh_bins_start_nbytes()  # (held, it does not start: _renew_fresh_bins)
        if self.mixture.binary and self.classes == 2 and self.mixture.change_label is None:
            # the label after a change, at its next start (held, it does not start: _follow_change_label)
            grown += arrays_nbytes(ChangeLabel(self.mixture.switching).arrays())
        largest = max(_full_nbytes(base, rounds) for base in self.bases)  # any member may be copied
        for generation in self.young:
            bases = generation.bases if generation is not None else []
            grown += largest * (YOUNG_BASES - len(bases))  # empty slots, filled at a restart
            grown += sum(max(largest, _full_nbytes(base, rounds)) - base.state_nbytes() for base in bases)
        return grown

    def wide_numbers_nbytes(self, rounds: int) -> int:
        """The most bytes the kernel member on the wide numbers, built at the warm-up's end where a name is
        heard, and its slot add to this grid after ``rounds`` rounds (a records learner's grid counted
        before it is built)."""
        # (its bytes do not depend on its width)
        return _full_nbytes(self._kernel(1.0, WIDE_NUMBERS_STEP), rounds) + self._slot_nbytes()

    def _wide_numbers_napping_nbytes(self) -> int:
        """The bytes of the slot of the kernel member on the wide numbers while it naps (saved without it:
        :meth:`_mixture_arrays`), which its waking takes again; 0 without it or in play."""
        slots = self._kind_slots.get("wide_numbers")
        if (slots is None or self.experts[self._kind_index("wide_numbers")] is None
                or self.mixture.switching.active[slots[0]]):
            return 0
        return self._slot_nbytes()

    def _slot_nbytes(self) -> int:
        """The bytes one more slot adds to the mixture's saved arrays: its weight under each rate, its flag
        (and so in the label rules' weights)."""
        return sum(array[..., :1].nbytes for name, array in self.mixture.arrays().items()
                   if name.endswith(("_log_weights", "_active")))

    def _fresh_bins_start_nbytes(self) -> int:
        """The bytes the first start of the threshold model since a declared change builds (0 once started,
        on three classes or more and without one): a learner as large as the threshold model of every
        row's (the same learner on the same thresholds)."""
        fresh, bins = self.experts_of("fresh_bins"), self.experts_of("bins")
        if (fresh is None or bins is None or self.classes > 2
                or cast(FreshThresholds, fresh[0]).model is not None):
            return 0
        return cast(LearnerExpert, bins[0]).base.state_nbytes()

    def _nested(self) -> Iterator[tuple[int, Learner]]:
        """The slots and learners of the members and of the generations' copies."""
        return ((slot, expert.base) for slot, expert in self.alive() if type(expert) is LearnerExpert)

    def _nested_learners(self) -> dict[str, Learner]:
        """:meth:`_nested`'s learners by their slots' names."""
        return {self.layout[slot]: base for slot, base in self._nested()}

    def arrays(self) -> dict[str, np.ndarray]:
        """The experts' arrays, each distinct dictionary of the Nystrom learners saved once, as
        ``dictionary_<slot>_<array>`` (``slot`` the first expert's that uses it), which the learners'
        blobs name (:func:`~kons.kernel.nystrom_kons.dictionaries_saved_apart`), and the grid's own."""
        with dictionaries_saved_apart(self._nested_learners(), _DICTIONARY_PREFIX) as dictionaries:
            arrays = {name: array for slot, expert in self.alive()
                      for name, array in expert.arrays(self.layout[slot]).items()}
        return saved_order({**arrays, **dictionaries, **self.own_arrays()})

    def scalars(self) -> dict[str, Any]:
        extra = {kind.slots[0]: scalars for kind, experts in zip(self.kinds, self.experts, strict=True)
                 if experts is not None and (scalars := experts[0].scalars()) is not None}
        return {"widths": list(self.widths), "log_count": self.log_scaler.count,
                "young": [[generation.start, *generation.members] if generation is not None else []
                          for generation in self.young],
                "detector": self.detector.state(),
                "error_detector": self.errors.state(),
                **({"label_detector": self.labels.state()} if self.labels is not None else {}),
                "tracking": [self.rounds, self.changes, self.last_change, self.restarts_due, self.leader,
                             self.leader_since],
                "kept": self.kept.scalars(),
                # (none saved while no kind naps or counts toward a nap: the state before naps existed)
                **({"naps": {name: list(nap) for name, nap in self.naps.items()}}
                   if any(any(nap) for nap in self.naps.values()) else {}),
                # (none saved while no member counts light rounds: the state before they were counted)
                **({"light": list(self.light)} if any(self.light) else {}),
                **extra,
                **({"probation": self.probation.state()} if self.probation is not None else {}),
                **({"own_targets": True} if self.targets is not None else {}),
                **({"concept_scale": True} if self.keeps_concept else {}),
                **({"numbers": True} if self.numbers else {}),
                **({"numbers_width": self.numbers_width} if self.numbers_width is not None else {}),
                **({"linear_keys": self.linear_keys} if self.linear_keys is not None else {}),
                **({"silent_names": list(self.silent), "quiet_width": self.quiet_width}
                   if self.silent else {}),
                **({"young_early": True} if self.young_early else {})}

    def restore(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any], rounds: int) -> None:
        """Load the state :meth:`arrays` and :meth:`scalars` saved into this grid after ``rounds`` rounds,
        built with the saved widths (its bases must match the restored ones). A regression grid saved
        before the generations kept their own scales of the target goes on without them."""
        self._predicted_row = None
        self.stopped_growing = [False] * len(GRID)  # (the members are restored below)
        self.numbers = bool(scalars.get("numbers", False))  # (a grid saved before: its members see the names)
        self.forms = self._forms()
        for member, expert in zip(GRID, self.members, strict=True):
            expert.form = self._form(member)
        self.young_early = self.early and bool(scalars.get("young_early", False))
        if not scalars.get("own_targets", False):
            self.targets = None
        self.keeps_concept = self.targets is not None and bool(scalars.get("concept_scale", False))
        saved = arrays.get("concept_scale")
        self.concept = FadingTargets.restored(saved) if saved is not None and self.keeps_concept else None
        self.log_scaler.restore(arrays, int(scalars["log_count"]), "log")
        if "young" not in scalars:
            self._restore_aggregating(arrays, rounds)
            return
        young = [[int(v) for v in generation] for generation in scalars["young"]]
        if len(young) != GENERATIONS or any(
                generation and (not _ONE_KERNEL_BASES <= len(generation) - 1 <= YOUNG_BASES
                                or not all(0 <= i < len(GRID) for i in generation[1:]))
                for generation in young):
            raise StateFormatError("the restarted bases do not match the grid.")
        with dictionaries_restored(arrays):  # the dictionaries saved once (none before they were)
            self.members = self._restored_members(arrays)
            self.young = [Generation(generation[0], generation[1:],
                                      _sharing([self._restored(arrays[f"young{g}_{j}"], GRID[i])
                                                for j, i in enumerate(generation[1:])]),
                                      self._restored_recent(arrays, g),
                                      self._restored_scale(arrays.get(f"young{g}_targets"),
                                                           GenerationTargets.restored),
                                      self._restored_scale(arrays.get(f"young{g}_kernel_targets"),
                                                           FadingTargets.restored))
                          if generation else None for g, generation in enumerate(young)]
        mixture = in_layout(arrays, self.layout)
        if (not self.mixture.switching.restore(mixture) or not self.mixture.restore_vote(mixture)
                or not self.mixture.restore_change_label(mixture)):
            raise StateFormatError("the mixture weights do not match the grid.")
        self.detector.restore(scalars["detector"])
        if "error_detector" in scalars:
            self.errors.restore(scalars["error_detector"])
        else:  # saved before it existed: its level learnt afresh from the restored round
            self.errors = ErrorChangeDetector()
        if self.labels is not None:  # (one saved before it existed: learnt afresh likewise)
            self.labels = LabelChangeDetector()
            if "label_detector" in scalars:
                self.labels.restore(scalars["label_detector"])
        (self.rounds, self.changes, self.last_change, self.restarts_due, self.leader,
         self.leader_since) = (int(v) for v in scalars["tracking"])
        if "kept" in scalars:  # saved before the rounds were kept: none kept yet
            self.kept.restore(arrays, scalars["kept"])
        self.experts = [kind.restore(self, experts, arrays, scalars)
                        for kind, experts in zip(self.kinds, self.experts, strict=True)]
        self._restore_naps(scalars)
        self._restore_light(scalars)
        self._restore_probation(scalars)

    def _restore_light(self, scalars: dict[str, Any]) -> None:
        """The members' light rounds (none counted in a state saved before they were)."""
        saved = scalars.get("light", [0] * len(GRID))
        self.light = saved_counts(saved, len(GRID), "the members' light rounds")

    def _restore_naps(self, scalars: dict[str, Any]) -> None:
        """The naps of the kinds that nap (none napping, no round counted, in a state saved before there
        were naps; a count saved under a longer :data:`NAP_ROUNDS` naps at its next negligible round)."""
        saved = scalars.get("naps", {})
        if not isinstance(saved, dict):
            raise StateFormatError("the experts' naps are not naps.")
        naps = {name: saved_counts(saved.get(name, nap), 2, "the experts' naps")
                for name, nap in self._no_naps().items()}
        for name, (_, napping) in naps.items():
            if napping > 1 or (napping and self.mixture.switching.active[self.slot[name]]):
                raise StateFormatError("the experts' naps do not match the grid.")
        self.naps = naps

    def _restore_probation(self, scalars: dict[str, Any]) -> None:
        """The trial of the last change's generation, if one was going on (none in a state saved before
        there were trials)."""
        self.probation = None
        if "probation" not in scalars:
            return
        try:
            probation = Probation.restored(scalars["probation"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StateFormatError("the trial of a generation is not one.") from exc
        young = {slot for g in range(GENERATIONS) for slot in young_slots(g)}
        if not set(probation.slots) <= young or not self.mixture.switching.active[probation.slots].all():
            raise StateFormatError("the trial of a generation does not match the grid.")
        self.probation = probation

    def _restore_aggregating(self, arrays: dict[str, np.ndarray], rounds: int) -> None:
        """A state saved before the switching weights (issue 20): the grid's bases and the aggregating
        algorithm's weights, which become the weights under every switching rate; no change declared
        yet, the leader leading since the load."""
        self.members = self._restored_members(arrays)
        log_weights = arrays["log_weights"]
        if log_weights.shape != (len(GRID) + 1,):
            raise StateFormatError("the mixture weights do not match the grid.")
        switching = self.mixture.switching
        for kind in self.kinds:
            if kind.start_prior is not None:  # in play from the start of a grid, not of this one: none
                switching.active[self._slots(kind)] = False
                switching.log_weights[:, self._slots(kind)] = -np.inf
        self.experts = [None if kind.start_prior is not None else experts
                        for kind, experts in zip(self.kinds, self.experts, strict=True)]
        switching.log_weights[:, :len(GRID) + 1] = log_weights - np.logaddexp.reduce(log_weights)
        self._weights_of = None  # written in place
        self.rounds, self.leader, self.leader_since = rounds, int(np.argmax(log_weights)), rounds

    def _restored_members(self, arrays: dict[str, np.ndarray]) -> list[LearnerExpert]:
        """The members of :data:`GRID` saved in ``arrays``, sharing their equal dictionaries again."""
        return _sharing([self._restored(arrays[f"base{i}"], member) for i, member in enumerate(GRID)])

    def _restored_recent(self, arrays: dict[str, np.ndarray], generation: int) -> RecentExpert | None:
        """Generation ``generation``'s linear model, None if it was saved without one."""
        prefix = f"young{generation}_recent_"
        if f"{prefix}P" not in arrays:
            return None
        recent = self.new_recent()
        recent.restore({name.removeprefix(prefix): array for name, array in arrays.items()
                        if name.startswith(prefix)})
        return RecentExpert(recent)

    def _restored_scale(self, saved: np.ndarray | None, restored: Callable[[np.ndarray], _Scale]
                        ) -> _Scale | None:
        """A generation's scale of the target (its own, or its kernel copies') ``restored`` from the array
        ``saved``; None if it was saved without one (its experts then learn in the scale they had before it
        had one: the learner's, or the generation's own)."""
        return None if saved is None or self.targets is None else restored(saved)

    def _restored(self, blob: np.ndarray, member: Member) -> LearnerExpert:
        """The expert of ``member`` whose learner was saved as ``blob``, checked against the grid's own
        learner of ``member``: the fresh one it was built with (:meth:`new_base`, whose parameters a
        restored one must have), or the restored one that replaced it (one fewer learner built per base)."""
        restored = restore_nested(blob)
        own = self.members[GRID.index(member)].base
        if type(own) is not type(restored) or own.get_params() != restored.get_params():
            raise StateFormatError("a nested base learner does not match the grid.")
        return LearnerExpert(restored, self._form(member))
