r"""The grid of :class:`~kons.Auto`: its base learners on two views of the row, the generations of
restarted copies that follow a change, the linear model on the quantile thresholds of the raw features
(:mod:`kons.auto.experts.bins`), and their :class:`~kons.auto.mixture.Mixture` with the constant
prediction. Why these members, and the regret statement for the restarts: ``docs/auto.md``."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kons._multinomial import multinomial_rounds, reference_softmax
from kons.auto.detectors import ErrorChangeDetector, LossChangeDetector, change_span
from kons.auto.experts.bins import QuantileBins, thresholds_per_feature
from kons.auto.experts.neighbours import RecentNeighbours
from kons.auto.experts.recent import RecentLinear
from kons.auto.experts.tree import HoeffdingTree
from kons.auto.mixture import Mixture
from kons.auto.restarts import Probation, RecentRounds
from kons.base import Learner, arrays_nbytes
from kons.errors import NumericalError, StateFormatError
from kons.kernel.nystrom_kons import NystromKONS
from kons.linear.ons import ONS
from kons.preprocessing import (
    STEP,
    TARGET_BOUND,
    FeatureScaler,
    ScalerStats,
    checked_form,
    nested_blob,
    restore_nested,
    with_intercept,
)
from kons.sparse import SparseVector, dense

__all__ = ["BINS_SLOT", "CHANGE_ENTRY_PRIOR", "ENTRY_PRIOR", "GENERATIONS", "GRID", "MAX_DICTIONARY",
           "PROBATION_PRIOR", "PROBATION_ROUNDS", "REPLAY_ROWS", "RESTART_DELAYS", "YOUNG_BASES",
           "YOUNG_LINEAR", "YOUNG_SIZE"]

#: The base learners: (view, kind, width factor, step factor). Views: the standardised row ("raw") and
#: the standardised signed log ``sign(x) log(1 + |x|)`` of the row ("log", for heavy-tailed features such
#: as counts, sizes and durations); widths are multiples of the view's median-heuristic width, steps of
#: the preprocessing's default step for the loss.
GRID = (
    *(("raw", "nystrom", wf, sf) for wf in (1.0, 4.0) for sf in (0.1, 1.0, 10.0)),
    ("log", "nystrom", 1.0, 0.1),
    ("log", "nystrom", 1.0, 1.0),
    ("raw", "ons", 1.0, 1.0),
    ("raw", "ons", 1.0, 10.0),
    ("log", "ons", 1.0, 1.0),
)
#: The members of :data:`GRID` restarted at the changes the mixture's detector declares
#: (Follow-the-Leading-History's idea, Hazan and Seshadhri 2009, with starts at detected changes rather
#: than at every round): the linear bases of both views at the default step, and the kernel member of
#: the grid that weighs most under the switching rate 0, taken at the default step too (the geometry of
#: the rows, which picks the view and the width, tends to outlast a change of concept; the small step that
#: wins a long stationary stretch learns a new concept slowly: on ``benchmarks/drift.py``'s recurring
#: Friedman stream the heaviest member, at a tenth of the step, restarted had a relative MSE of 0.27 over
#: the 1,000 rounds after the change, the same member at the default step 0.24).
YOUNG_LINEAR = (GRID.index(("raw", "ons", 1.0, 1.0)), GRID.index(("log", "ons", 1.0, 1.0)))
#: The kernel members restarted: the heaviest ones at the restart under the switching rate 0 (their losses
#: since round 1; the rates that switch follow whichever member did best lately). Measured on
#: ``benchmarks/drift.py``'s Agrawal stream, whose first change is declared at round 1038: ranked by the
#: mixture's weights the copy took the raw view at width x1 (that member, at ten times the step, 0.163 of
#: the weight; the width x4 one, at a tenth of the step, 0.006) and the window after the first change was
#: 1.15 of the oracle; ranked under the rate 0, width x4 and 1.07 (0.2147 -> 0.2077 over the whole
#: stream; every other stream of the benchmark unchanged). Two of them, because which geometry suits the
#: new concept is not known at the change, and the one that suited the old concept is only a guess: on
#: the recurring Friedman stream (change declared at round 1524) the one copy, the raw view at width x1,
#: left the 1,000 rounds after the change at 1.10 of the oracle (whose fresh grid soon led with the log
#: view's kernel), the copies of the raw and log views at width x1 at 1.06 (0.2746 -> 0.2625; the copy of
#: the log view alone 1.07, but its second window 1.06 instead of 1.02). Every other window of
#: ``benchmarks/drift.py`` within 0.01 of the oracle ratio; a generation costs one more Nystrom round.
YOUNG_KERNELS = 2
#: A generation's copies in a state saved while it copied one kernel member (its slots' layout then).
_ONE_KERNEL_BASES = len(YOUNG_LINEAR) + 1
#: Restarted copies of grid members in a generation.
YOUNG_BASES = len(YOUNG_LINEAR) + YOUNG_KERNELS
#: A generation's experts: its copies, then the Bayesian linear model of the rows since it started
#: (:class:`~kons.auto.experts.recent.RecentLinear`, the warm-up a fresh ``auto`` plays, which fits a new
#: linear concept within a few rows where the copies' Newton steps need tens).
YOUNG_SIZE = YOUNG_BASES + 1
#: Generations alive at once (a new one replaces the one started first at a declared change, else the
#: lighter-weighted: :meth:`Grid._replaced_generation`).
GENERATIONS = 2
#: Rounds kept for the generation started at a declared change to learn before it plays: the rows since
#: the change's estimated onset (:func:`~kons.auto.detectors.change_span`), at most this many. A generation
#: started at the change's true round instead of the round it was declared (18 rounds later) put the
#: window after the recurring Friedman stream's second change at 0.99 of the oracle instead of 1.16;
#: started 10 rounds before it, 1.09. So the onset must be estimated to the round, not to a block.
REPLAY_ROWS = 192
#: Rounds after a detected change at which a generation starts: at once, then again when a gradual
#: change is over (a start inside the transition learns from both concepts).
RESTART_DELAYS = (0, 128, 512)
#: The prior weight of each expert of a generation started when a change is declared (under every
#: switching rate): together 0.75 (0.6 while a generation had four experts), so the experts that knew the
#: old concept keep 0.25 of theirs. The switching rates cannot move the weight there quickly: after a long
#: stationary stretch their own weights are all on the rate 0 (on ``benchmarks/drift.py``'s flipped linear
#: target, 0.83 of the weight was still on the old leader 20 rounds after the change with an entry at
#: 0.01). When the second kernel copy came, 0.12 each (0.6 together, as before) put that target's last
#: window at 1.19 of the oracle, 0.15 at 1.06. A false alarm costs the old experts at most
#: :math:`\ln(1/0.25)/\eta` (measured: ``benchmarks/results/drift_stationary.md``).
CHANGE_ENTRY_PRIOR = 0.15
#: The prior weight each expert of that generation is moved to when its first round goes against it, a
#: likely false alarm, until its evidence passes the mixture's (:class:`~kons.auto.restarts.Probation`):
#: together 0.25, so a false alarm costs the old experts about :math:`\ln(1/0.75)/\eta` instead of
#: :math:`\ln 4/\eta`. The false alarm on stationary raw power_plant (round 2,888) put its relative MSE
#: 1.08% above the figure before the detectors (0.1953 against 0.1932); tried at 0.05, 0.1934. Entering
#: at 0.05 outright was tried too and kept power_plant at 0.1932, but the flipped linear target's last
#: window went from 1.06 to 1.51 of the oracle: 95% of that was the one play at the change's first row
#: (squared error 19.5 instead of 4.6), made with 0.25 of the weight on the fresh experts instead of 0.75
#: (``docs/drift.md``). So the first round is always played at :data:`CHANGE_ENTRY_PRIOR`.
PROBATION_PRIOR = 0.05
#: Rounds after the change's declaration within which a demoted generation can take back the weight of
#: an entry at :data:`CHANGE_ENTRY_PRIOR`: the true changes of ``benchmarks/drift.py`` whose first round
#: went against their generation took it back within 2-13 rounds.
PROBATION_ROUNDS = 64
#: The prior weight of each expert of the generations started :data:`RESTART_DELAYS` rounds after the
#: change (for a gradual change): small, the generation before is there already.
ENTRY_PRIOR = 0.01
#: Dictionary bound of each Nystrom base (bounded cost per round).
MAX_DICTIONARY = 200
#: A grid member: (view, kind, width factor, step factor).
Member = tuple[str, str, float, float]
#: The mixture's slot of the linear model on the quantile thresholds of the raw features
#: (:mod:`kons.auto.experts.bins`), after the grid, the constant and the generations of restarted bases (last,
#: so that a state saved before it existed keeps its slots where they were).
BINS_SLOT = len(GRID) + 1 + GENERATIONS * YOUNG_SIZE
#: The slot of the k nearest of the last rows (:class:`~kons.auto.experts.neighbours.RecentNeighbours`), after
#: the quantile thresholds'.
NEIGHBOURS_SLOT = BINS_SLOT + 1
#: Rows the local expert keeps, and its neighbours.
NEIGHBOUR_ROWS = 1000
NEIGHBOURS = 5
#: Rows the local expert holds before it plays: it sleeps (its slot empty, weight 0) until then, and
#: enters the mixture at :data:`NEIGHBOURS_PRIOR`, the others keeping their proportions of the rest, as a
#: delayed generation enters. A vote over a few rows is a poor estimate, which only cost where the
#: kernel bases lead (ionosphere, 351 rows, +1.8% error, and german.numer, 1,000 rows, +1.2%, while it
#: played from the first round); asleep until its window was full (1,000 rows) it cost nothing there,
#: but on ``benchmarks/drift.py``'s RBF drift it lost what it is for (0.0922 error overall instead of
#: 0.0767, 0.0970 over the window after the change instead of 0.0860: the kernel bases had the weight by
#: then, and an entry at 0.15 did no better, 0.0905); after 200 rows, 0.0767 and 0.0860, after 500,
#: 0.0885 and 0.0930.
NEIGHBOURS_WAKE_ROWS = 200
#: Features above which there is no local expert (nor on sparse rows, whose dense copies it would keep):
#: its window is 8 x rows bytes a feature, where a Nystrom base's size is bounded by its dictionary: +14%
#: of ``auto``'s state at 100 features, +21% at 200, +24% at 400 (its round alone 34, 47 and 62 us, 3-5%
#: of ``auto``'s, measured on 2 shared cores). No stream it was measured to help has more than 10
#: features (the stationary sets at most 123), and in many dimensions a Euclidean neighbourhood of the
#: last rows says less and less (distances concentrate).
NEIGHBOURS_MAX_DIM = 200
#: The local expert's prior weight: small (as a delayed generation's, ENTRY_PRIOR), since on stationary
#: data it rarely leads, and a prior p costs the other experts only ln(1 / (1 - p)) ~ p nats of regret,
#: it ln(1 / p) ~ 4.6 nats to take the lead where it predicts best. Playing from the first round:
#: rbf_gradual 0.0767 overall with 0.01, 0.0752 with the members' 1/15; diabetes +1.1% and spambase +1.6%
#: of before with 1/15, +0.0% and +0.3% with 0.01. Awake after 200 rows, 0.001 changed no stationary set
#: of the 14 small ones (ionosphere +1.8%: one prediction at 0.5007 instead of 0.4999, the expert at
#: 0.0023 of the weight) and put rbf_gradual at 0.0770.
NEIGHBOURS_PRIOR = ENTRY_PRIOR
#: The grace periods of the Hoeffding trees (:mod:`kons.auto.experts.tree`, classification only), one slot
#: each after the local expert's: which of Agrawal's concepts one tree fits depends on its grace period, three
#: together were ahead of River's ARF in every window (``docs/drift.md``, the trees' section).
TREE_GRACES = (50, 200, 400)
TREE_SLOTS = [NEIGHBOURS_SLOT + 1 + i for i in range(len(TREE_GRACES))]
#: Rows the trees learn before they play, and their prior weight together once they do.
TREE_WAKE_ROWS = 200
TREE_PRIOR = ENTRY_PRIOR
#: Features above which there are no trees (their arrays are leaves x classes x features).
TREE_MAX_DIM = 200
#: Leaves of a tree at most.
MAX_TREE_LEAVES = 64
#: The mixture's slots.
_EXPERTS = TREE_SLOTS[-1] + 1
#: The form of the row the linear model of a generation takes: the standardised view with the intercept.
_RECENT_FORM = (False, True)
#: The form the local expert takes: the standardised view, dense.
_NEIGHBOURS_FORM = (False, False)
_KERNEL_MEMBERS = [i for i, member in enumerate(GRID) if member[1] == "nystrom"]


def _neighbours_row(forms: dict[tuple[bool, bool], np.ndarray | SparseVector]) -> np.ndarray:
    """The row the local expert takes: its form is dense (:meth:`Grid.views_forms`), which ``dense`` tells
    the type checker at the cost of an ``isinstance``."""
    return dense(forms[_NEIGHBOURS_FORM])


def _binary_target(index: float) -> float:
    """The label -1 or +1 of the binary model for a kept class index 0 or 1."""
    return 1.0 if index > 0.0 else -1.0


def _guarded(call: Callable[..., float], *args: Any) -> float:
    """A base's play, or 0 (the mean) when its round overflows: the base is then left as it was, and
    the other bases and the mixture go on, so that one base's numerics never reject the round."""
    try:
        return call(*args)
    except NumericalError:
        return 0.0


def _guarded_probabilities(call: Callable[..., np.ndarray], classes: int, *args: Any) -> np.ndarray:
    """A base's class probabilities, or the uniform ones when its round overflows (as :func:`_guarded`)."""
    try:
        return call(*args)
    except NumericalError:
        return np.full(classes, 1.0 / classes)


def _scored(base: Learner, row: np.ndarray | SparseVector) -> np.ndarray:
    """A base's class probabilities for ``row``, nothing learnt."""
    return reference_softmax(multinomial_rounds(base)._class_scores(row))


def signed_log(x: np.ndarray | SparseVector) -> np.ndarray | SparseVector:
    """:math:`\\mathrm{sign}(x)\\log(1 + |x|)`, elementwise (zeros stay zeros)."""
    if isinstance(x, SparseVector):
        return SparseVector(x.indices, np.sign(x.values) * np.log1p(np.abs(x.values)), x.dim)
    logged: np.ndarray = np.sign(x) * np.log1p(np.abs(x))
    return logged


def standardised(rows: list[np.ndarray | SparseVector], dim: int) -> np.ndarray:
    """The rows standardised by their own statistics (for the median width of a view)."""
    scaler = FeatureScaler(dim, isinstance(rows[0], SparseVector))
    for row in rows:
        scaler.transform(row, commit=True)
    return np.stack([scaler.standardise(dense(row)) for row in rows])


def _base_name(view: str, kind: str, width_factor: float, step_factor: float) -> str:
    """A grid member's name in :meth:`Auto.stats`'s weights."""
    if kind == "ons":
        return f"ons+intercept({view}, eta x{step_factor:g})"
    return f"nystrom_kons({view}, width x{width_factor:g}, eta x{step_factor:g})"


def _form(member: Member) -> tuple[bool, bool]:
    """The form of the row a member takes: (the log view?, with the intercept?)."""
    return member[0] == "log", member[1] == "ons"


def _young_slots(generation: int) -> range:
    """The mixture's slots of a generation of restarted bases."""
    start = len(GRID) + 1 + generation * YOUNG_SIZE
    return range(start, start + YOUNG_SIZE)


@dataclass
class _ThresholdModel:
    """The quantile thresholds of the raw features and the linear model on their code (the mixture's
    :data:`BINS_SLOT`): one thing, there or not."""

    bins: QuantileBins
    base: Learner

    def code(self, x: np.ndarray | SparseVector) -> SparseVector:
        """The thresholds' code of the raw row ``x``."""
        return self.bins.code(dense(x))


@dataclass
class _Generation:
    """Copies of members of :data:`GRID` (their indices) started afresh at round ``start``, and the linear
    model of the rows since then (None in a generation saved before it existed, whose slot stays empty)."""

    start: int
    members: list[int]
    bases: list[Learner]
    recent: RecentLinear | None


#: The earlier layouts of the mixture's slots, oldest first: each one's width and where the slots added
#: after it go (inactive, at weight 0, so that a learner saved then goes on as it would have). A saved
#: state is brought forward one layout at a time (:func:`_in_current_layout`).
_FIRST_GENERATION = len(GRID) + 1  # the first generation's first slot
_EARLIER_LAYOUTS: tuple[tuple[int, list[int]], ...] = (
    # before the generations had a linear model (their slots _ONE_KERNEL_BASES wide): a slot after
    # each generation's copies
    (_FIRST_GENERATION + GENERATIONS * _ONE_KERNEL_BASES,
     [_FIRST_GENERATION + (g + 1) * _ONE_KERNEL_BASES for g in range(GENERATIONS)]),
    # before the quantile-threshold view: its slot at the end
    (_FIRST_GENERATION + GENERATIONS * (_ONE_KERNEL_BASES + 1),
     [_FIRST_GENERATION + GENERATIONS * (_ONE_KERNEL_BASES + 1)]),
    # while a generation copied one kernel member: a slot for each further copy, before its linear model
    (_FIRST_GENERATION + 1 + GENERATIONS * (_ONE_KERNEL_BASES + 1),
     [_FIRST_GENERATION + g * (_ONE_KERNEL_BASES + 1) + _ONE_KERNEL_BASES
      for g in range(GENERATIONS) for _ in range(YOUNG_KERNELS - 1)]),
    # before the local expert: its slot at the end
    (NEIGHBOURS_SLOT, [NEIGHBOURS_SLOT]),
    # before the trees: their slots at the end
    (TREE_SLOTS[0], [TREE_SLOTS[0]] * len(TREE_GRACES)),
)


def _in_current_layout(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The mixture's arrays (``mix_log_weights``, ``mix_active``) in today's layout of slots, from any of
    :data:`_EARLIER_LAYOUTS`; the other arrays, and arrays of today's layout, as they are."""
    for width, insert_at in _EARLIER_LAYOUTS:
        if arrays["mix_active"].shape == (width,):
            log_weights, active = arrays["mix_log_weights"], arrays["mix_active"]
            arrays = {**arrays, "mix_log_weights": np.insert(log_weights, insert_at, 0.0, axis=1),
                      "mix_active": np.insert(active, insert_at, False)}
    return arrays


def bins_columns(dim: int) -> int:
    """The quantile-threshold view's columns at most (with the constant) for rows of ``dim`` features; 0
    when there is no such view (:func:`~kons.auto.experts.bins.thresholds_per_feature`)."""
    thresholds = thresholds_per_feature(dim)
    return dim * thresholds + 1 if thresholds else 0


def class_column_nbytes(dim: int) -> int:
    """The most bytes one more class adds to a grid on rows of ``dim`` features: a weight column in every
    base, as long as the base may become (an ONS base's ``dim + 1`` weights, a Nystrom base's full
    dictionary), and in every slot a restarted copy of the longest may take; a generation's linear model
    scores every class (``K`` columns of ``dim + 1``, the binary model one), so its first widening adds
    two columns: counted twice."""
    lengths = [dim + 1 if kind == "ons" else MAX_DICTIONARY for _, kind, _, _ in GRID]
    trees = len(TREE_GRACES) * MAX_TREE_LEAVES * (5 * dim + 1) if dim <= TREE_MAX_DIM else 0
    return 8 * (sum(lengths) + bins_columns(dim) + GENERATIONS * (YOUNG_BASES * max(lengths) + 2 * (dim + 1))
                + trees)


def _full_nbytes(base: Learner, rounds: int) -> int:
    """A base's bytes after ``rounds`` more rounds, at most."""
    return base.state_nbytes() + base.max_growth_nbytes(rounds)


class Grid:
    """The grid's learners on their views of the row, the log view's scaler, the restarted copies and
    their :class:`Mixture` with the constant prediction: :class:`Auto`'s model once the kernel widths are
    known.

    The mixture's slots: the members of :data:`GRID`, the constant, then :data:`GENERATIONS` generations
    of :data:`YOUNG_SIZE` restarted copies (empty slots until a generation starts). A
    :class:`~kons.auto.detectors.LossChangeDetector` on the mixture's loss (and, for classes, an
    :class:`~kons.auto.detectors.ErrorChangeDetector` on its errors) starts a generation at each change
    declared and :data:`RESTART_DELAYS` rounds after it, in an empty generation's slots, else the older
    generation's at a declared change and the lighter-weighted one's at a delayed restart, so at most
    ``GENERATIONS x YOUNG_SIZE`` copies are alive. Then the linear model on the quantile thresholds of
    the raw features (``bins``, from the warm-up rows; none on sparse rows or too many features, its slot
    then empty), and last the local expert (:data:`NEIGHBOURS` nearest of the last
    :data:`NEIGHBOUR_ROWS` rows; asleep until it holds :data:`NEIGHBOURS_WAKE_ROWS`, none on sparse rows
    or above :data:`NEIGHBOURS_MAX_DIM` features).
    """

    def __init__(self, *, loss: str, dim: int, bound: float, seed: int, widths: tuple[float, float],
                 held: bool, log_scaler: FeatureScaler, binary: bool, bins: QuantileBins | None) -> None:
        self.loss, self.dim, self.bound, self.seed, self.widths = loss, dim, bound, seed, widths
        self.held = held
        self.log_scaler = log_scaler
        self.classes = 2  # the classes the bases play: 2 is the binary model, one score
        self.bases = [self.new_base(member) for member in GRID]
        self.young: list[_Generation | None] = [None] * GENERATIONS
        self.mixture = Mixture(binary=binary, bound=bound, experts=_EXPERTS, active=len(GRID) + 1)
        self.detector = LossChangeDetector()
        self.errors = ErrorChangeDetector()
        self.kept = RecentRounds(REPLAY_ROWS, dim)
        self.rounds = 0
        self.changes = 0
        self.last_change = -1
        self.restarts_due = 0  # of RESTART_DELAYS after the last change
        self.probation: Probation | None = None  # of the generation started at the last change
        self.leader = 0
        self.leader_since = 0
        self.forms = sorted({_form(member) for member in GRID})
        self.thresholds = _ThresholdModel(bins, self.new_bins_base(bins)) if bins is not None else None
        if self.thresholds is not None:  # in play from the start, with the grid's prior
            self.mixture.enter([BINS_SLOT], 1.0 / (len(GRID) + 2))
        self.neighbours = (RecentNeighbours(NEIGHBOUR_ROWS, dim, k=NEIGHBOURS,
                                            clip=TARGET_BOUND if binary else bound)
                           if not log_scaler.sparse and dim <= NEIGHBOURS_MAX_DIM else None)
        self.trees = ([HoeffdingTree(dim, 2, grace=grace, max_leaves=MAX_TREE_LEAVES)
                       for grace in TREE_GRACES]
                      if binary and dim <= TREE_MAX_DIM else None)
        for tree in self.trees or []:
            tree.held = held

    def new_base(self, member: Member) -> Learner:
        """A fresh learner of a grid member (with the grid's growth hold)."""
        view, kind, width_factor, step_factor = member
        eta = STEP[self.loss] * step_factor
        base: Learner
        if kind == "ons":
            base = ONS(loss=self.loss, alpha=float(self.dim + 1), eta=eta, C=self.bound, dim=self.dim + 1)
        else:
            gamma = self.widths[view == "log"] * width_factor
            base = NystromKONS(kernel={"name": "rbf", "gamma": gamma}, loss=self.loss, alpha=1.0, eta=eta,
                               C=self.bound, max_dictionary=MAX_DICTIONARY, seed=self.seed, dim=self.dim)
        base.hold_growth(self.held)
        if self.classes > 2:
            multinomial_rounds(base)._widen(self.classes - 1)
        return base

    def new_bins_base(self, bins: QuantileBins) -> Learner:
        """A fresh linear model on the quantile thresholds ``bins``: ONS with the raw linear member's
        regulariser and step."""
        base = ONS(loss=self.loss, alpha=float(self.dim + 1), eta=STEP[self.loss], C=self.bound, dim=bins.dim)
        if self.classes > 2:
            multinomial_rounds(base)._widen(self.classes - 1)
        return base

    def _playing_neighbours(self) -> RecentNeighbours | None:
        """The local expert if it plays (awake: in the mixture since its window filled), else None."""
        return self.neighbours if self.mixture.switching.active[NEIGHBOURS_SLOT] else None

    def _keep_asleep(self, form: np.ndarray, target: float) -> None:
        """A round of the local expert (if there is one) while it sleeps: it keeps the row, and enters the
        mixture (from the next round on) once it holds :data:`NEIGHBOURS_WAKE_ROWS` rows."""
        if self.neighbours is None:
            return
        self.neighbours.keep(form, target)
        if self.neighbours.count >= NEIGHBOURS_WAKE_ROWS:
            self.mixture.enter([NEIGHBOURS_SLOT], NEIGHBOURS_PRIOR)

    def _playing_trees(self) -> list[tuple[int, HoeffdingTree]]:
        """The trees in play: (mixture slot, tree)."""
        if self.trees is None or not self.mixture.switching.active[TREE_SLOTS[0]]:
            return []
        return list(zip(TREE_SLOTS, self.trees, strict=True))

    def _tree_score(self, tree: HoeffdingTree, x: np.ndarray) -> float:
        """A binary tree's play: the log-odds of its probabilities, clipped as the bases' scores."""
        p = tree.predict_proba(x)
        score = math.log(max(p[1], 1e-300) / max(p[0], 1e-300))
        return min(max(score, -TARGET_BOUND), TARGET_BOUND)

    def _grow_trees(self, x: np.ndarray, label: int) -> None:
        """Every tree learns the row; they enter the mixture once they have learnt TREE_WAKE_ROWS."""
        if self.trees is None:
            return
        for tree in self.trees:
            tree.widen(self.classes)
            tree.learn(x, label)
        if not self.mixture.switching.active[TREE_SLOTS[0]] and \
                self.trees[0].rows_learnt >= TREE_WAKE_ROWS:
            self.mixture.enter(TREE_SLOTS, TREE_PRIOR / len(TREE_GRACES))

    def _members(self) -> list[tuple[int, Member, Learner]]:
        """The alive learners: (mixture slot, grid member, learner)."""
        alive = [(i, member, base) for i, (member, base) in enumerate(zip(GRID, self.bases, strict=True))]
        for g, generation in enumerate(self.young):
            if generation is not None:
                slots = _young_slots(g)[:len(generation.members)]
                alive += [(slot, GRID[i], base) for slot, i, base in
                          zip(slots, generation.members, generation.bases, strict=True)]
        return alive

    def _recent(self) -> list[tuple[int, RecentLinear]]:
        """The generations' linear models: (mixture slot, model)."""
        return [(_young_slots(g)[YOUNG_BASES], generation.recent) for g, generation in enumerate(self.young)
                if generation is not None and generation.recent is not None]

    def new_recent(self) -> RecentLinear:
        """A generation's linear model: on the standardised row with the intercept, its intercept's prior
        spread the mixture's interval, its scores clipped as the bases' (as the warm-up's, in log-odds)."""
        recent = RecentLinear(self.dim, intercept_scale=TARGET_BOUND,
                              clip=TARGET_BOUND if self.mixture.binary else self.bound)
        if self.classes > 2:
            recent.widen(self.classes)
        return recent

    def inputs(self, z: np.ndarray | SparseVector, x: np.ndarray | SparseVector
               ) -> tuple[dict[tuple[bool, bool], np.ndarray | SparseVector], ScalerStats]:
        """Each form of the row the bases take (:meth:`views_forms`, the log view's dense one kept for a
        replay) and the log view's pending statistics (:meth:`FeatureScaler.pending`)."""
        zlog, log_stats = self.log_scaler.pending(signed_log(x))
        return self.views_forms(z, zlog), log_stats

    def views_forms(self, z: np.ndarray | SparseVector, zlog: np.ndarray | SparseVector
                    ) -> dict[tuple[bool, bool], np.ndarray | SparseVector]:
        """Each form of the row the bases take (the standardised view ``z`` or the signed-log view
        ``zlog``, dense or with the intercept), computed and checked once for all the bases that take it."""
        forms = {}
        for log, linear in self.forms:
            view = zlog if log else z
            forms[log, linear] = checked_form(with_intercept(view) if linear else dense(view))
        return forms

    # The bases take the checked forms through their unchecked round (_learn_checked), inside the
    # numerics context the mixture's round entered once; an empty slot plays 0 at weight 0.
    def predict(self, z: np.ndarray | SparseVector, x: np.ndarray | SparseVector, constant: float) -> float:
        forms, _ = self.inputs(z, x)
        preds = np.zeros(_EXPERTS)
        preds[len(GRID)] = constant
        for slot, member, base in self._members():
            preds[slot] = _guarded(base._predict_checked, forms[_form(member)])
        for slot, recent in self._recent():
            preds[slot] = _guarded(recent.predict, forms[_RECENT_FORM])
        if (thresholds := self.thresholds) is not None:
            preds[BINS_SLOT] = _guarded(thresholds.base._predict_checked, thresholds.code(x))
        if (neighbours := self._playing_neighbours()) is not None:
            preds[NEIGHBOURS_SLOT] = neighbours.predict(_neighbours_row(forms), self.mixture.binary)
        for slot, tree in self._playing_trees():
            preds[slot] = self._tree_score(tree, dense(x))
        return self.mixture.mix(preds)

    def learn(self, z: np.ndarray | SparseVector, t: float, x: np.ndarray | SparseVector,
              constant: float) -> float:
        forms, log_stats = self.inputs(z, x)
        plays = np.zeros(_EXPERTS)
        plays[len(GRID)] = constant
        for slot, member, base in self._members():
            plays[slot] = _guarded(base._learn_checked, forms[_form(member)], t)
        for slot, recent in self._recent():
            plays[slot] = _guarded(recent.learn, forms[_RECENT_FORM], t)
        if (thresholds := self.thresholds) is not None:
            plays[BINS_SLOT] = _guarded(thresholds.base._learn_checked, thresholds.code(x), t)
        neighbours = self._playing_neighbours()
        if neighbours is not None:
            plays[NEIGHBOURS_SLOT] = neighbours.learn(_neighbours_row(forms), t, self.mixture.binary)
        for slot, tree in self._playing_trees():
            plays[slot] = self._tree_score(tree, dense(x))
        self.log_scaler.commit(log_stats)
        played = self.mixture.mix(plays)
        self.mixture.update(plays, t)
        if self.mixture.binary:  # after the update: trees that enter now play from the next round
            self._grow_trees(dense(x), int(t > 0.0))
        loss = float(self.mixture.losses(np.array([played]), t)[0])
        if self.probation is not None:
            self._step_trial(self.mixture.losses(plays, t), loss)
        if neighbours is None:
            self._keep_asleep(_neighbours_row(forms), RecentNeighbours.kept_target(t, self.mixture.binary))
        if self.mixture.binary:  # the labels -1 and +1 kept as the class indices 0 and 1
            error = float(played * t <= 0.0)
            self._keep(forms, float(t > 0.0), loss, error)
            self._track(loss, error)
        else:
            self._keep(forms, t, loss, 0.0)
            self._track(loss, None)
        return played

    def _keep(self, forms: dict[tuple[bool, bool], np.ndarray | SparseVector], target: float, loss: float,
              error: float) -> None:
        """Keep the round for a replay: both views as the kernel members took them (dense: the ring's
        arrays are, and a sparse row's dense copies were made for those members already)."""
        self.kept.add(dense(forms[False, False]), dense(forms[True, False]), target, loss, error)

    def _step_trial(self, losses: np.ndarray, loss: float) -> None:
        """The round's step of the trial of the generation started at the last change (its experts'
        ``losses`` and the mixture's ``loss``, weighted by the mixture's learning rate)."""
        assert self.probation is not None
        if not self.probation.observe(self.mixture.switching, losses, loss):
            self.probation = None

    def _track(self, loss: float, error: float | None) -> None:
        """After a round whose mixture's loss (times its learning rate) was ``loss`` and, for classes, whose
        play was wrong (``error`` 1) or right (0): the detectors, the restarts they schedule, and the
        leader."""
        self.rounds += 1
        level, baseline = self.detector.level, self.errors.baseline  # the levels before a change
        risen = self.detector.update(loss)
        # both detectors see every round (their levels follow the stream), either declares
        span = 0
        if (self.errors.update(error) if error is not None else False) or risen:
            self.changes += 1
            self.last_change = self.rounds
            self.restarts_due = len(RESTART_DELAYS)
            span = change_span(self.detector.steps(self.kept.losses(), level) if risen
                               else self.errors.steps(self.kept.errors(), baseline))
        if self.restarts_due and self.rounds == self.last_change + RESTART_DELAYS[-self.restarts_due]:
            self.restarts_due -= 1
            self._restart(span)
        leader = int(np.argmax(self.mixture.weights()))
        if leader != self.leader:
            self.leader, self.leader_since = leader, self.rounds

    def _restart(self, span: int) -> None:
        """Start a generation (:data:`YOUNG_LINEAR`, the views and widths of the :data:`YOUNG_KERNELS` kernel
        members heaviest under the switching rate 0 at the default step, and the linear model of the rows
        from now on) in the slots :meth:`_replaced_generation` picks, at :data:`CHANGE_ENTRY_PRIOR` when
        the change has just been declared (then on trial: :class:`~kons.auto.restarts.Probation`), else at
        :data:`ENTRY_PRIOR`; while the growth is held, only in place of a generation (fresh copies, held,
        are no larger than those they replace: the slots' kinds are fixed), so that a held learner keeps
        its size. The generation first learns the last ``span`` rounds kept (this one
        included): the rows since the declared change's estimated onset."""
        weights = self.mixture.weights()
        g = self._replaced_generation(weights)
        if g is None:
            return
        # ranked by their weights under the switching rate 0 (their losses since round 1): the geometry
        # outlasts the concept, and the rates that switch follow whichever member did best lately
        lasting = self.mixture.switching.log_weights[0]
        heaviest = sorted(_KERNEL_MEMBERS, key=lambda i: -float(lasting[i]))
        at_default_step = dict.fromkeys(GRID.index((*GRID[i][:3], 1.0)) for i in heaviest)
        # held, the copies replace a generation's one for one (one saved with fewer copies keeps fewer)
        replaced = self.young[g]
        kernels = (len(replaced.members) - len(YOUNG_LINEAR) if self.held and replaced is not None
                   else YOUNG_KERNELS)
        members = [*YOUNG_LINEAR, *list(at_default_step)[:kernels]]
        generation = _Generation(self.rounds, members, [self.new_base(GRID[i]) for i in members],
                                 self.new_recent())
        self._replay(generation, span)
        self.young[g] = generation
        slots = _young_slots(g)  # a generation with fewer copies (held) leaves its last copies' slots empty
        entering = [*slots[:len(members)], slots[YOUNG_BASES]]
        if self.probation is not None and not set(self.probation.slots).isdisjoint(entering):
            self.probation = None  # its generation is gone
        if self.rounds == self.last_change:
            self.mixture.enter(entering, CHANGE_ENTRY_PRIOR)
            self.probation = Probation(entering, entry=CHANGE_ENTRY_PRIOR, low=PROBATION_PRIOR,
                                       rounds=PROBATION_ROUNDS)
        else:
            self.mixture.enter(entering, ENTRY_PRIOR)
        if self.leader in _young_slots(g):
            self.leader_since = self.rounds

    def _replaced_generation(self, weights: np.ndarray) -> int | None:
        """The generation a restart takes: an empty one (not while the growth is held), else, at the round
        a change is declared, the one started first, else the lighter-weighted; None if there is none.

        At a declared change both generations learnt concepts the change has ended, the older from further
        back (which the grid's own members cover already), and the weight it holds is the old concepts'
        weight, which the mixture would take hundreds of rounds to move off it. Measured on
        ``benchmarks/drift.py``'s gradual Friedman drift: replacing the lighter kept the generation
        started at round 1593 through the second change (declared at 3204), which then held 0.38-0.80 of
        the weight while playing 0.56 relative MSE over rounds 3500-4000 (the grid's best member 0.32),
        and replaced the one started at 2105 instead."""
        started = [(k, generation) for k, generation in enumerate(self.young) if generation is not None]
        if len(started) < GENERATIONS and not self.held:
            return next(k for k, generation in enumerate(self.young) if generation is None)
        if not started:
            return None
        if self.rounds == self.last_change:
            return min(started, key=lambda pair: pair[1].start)[0]
        return min(started, key=lambda pair: float(weights[_young_slots(pair[0])].sum()))[0]

    def _replay(self, generation: _Generation, rounds: int) -> None:
        """``generation`` learns the last ``rounds`` rounds kept, as if it had started before them (what it
        plays on them is not scored: the mixture has seen those rounds)."""
        recent = generation.recent
        assert recent is not None  # a new generation has its linear model
        sparse, classes = self.log_scaler.sparse, self.classes
        for z, zlog, target in self.kept.last(rounds):
            views = (SparseVector.from_dense(z), SparseVector.from_dense(zlog)) if sparse else (z, zlog)
            forms = self.views_forms(*views)
            bases = [(base, forms[_form(GRID[i])]) for i, base in
                     zip(generation.members, generation.bases, strict=True)]
            if classes > 2:
                for base, form in bases:
                    _guarded_probabilities(base._learn_class_checked, classes, form, int(target))
                _guarded_probabilities(recent.learn_class, classes, forms[_RECENT_FORM], int(target))
            else:
                t = _binary_target(target) if self.mixture.binary else target
                for base, form in bases:
                    _guarded(base._learn_checked, form, t)
                _guarded(recent.learn, forms[_RECENT_FORM], t)

    # The multinomial model (three classes or more): every base plays the clipped scores of classes 1..
    # against class 0 (kons._multinomial), the constant its class frequencies; an empty slot the uniform
    # probabilities, at weight 0.
    def probabilities(self, z: np.ndarray | SparseVector, x: np.ndarray | SparseVector,
                      constant: np.ndarray) -> np.ndarray:
        forms, _ = self.inputs(z, x)
        experts = np.full((_EXPERTS, len(constant)), 1.0 / len(constant))
        experts[len(GRID)] = constant
        for slot, member, base in self._members():
            experts[slot] = _guarded_probabilities(_scored, self.classes, base, forms[_form(member)])
        for slot, recent in self._recent():
            experts[slot] = _guarded_probabilities(recent.probabilities, self.classes, forms[_RECENT_FORM])
        if (thresholds := self.thresholds) is not None:
            experts[BINS_SLOT] = _guarded_probabilities(_scored, self.classes, thresholds.base,
                                                        thresholds.code(x))
        if (neighbours := self._playing_neighbours()) is not None:
            experts[NEIGHBOURS_SLOT] = neighbours.probabilities(_neighbours_row(forms), self.classes)
        for slot, tree in self._playing_trees():
            tree.widen(self.classes)
            experts[slot] = tree.predict_proba(dense(x))[:len(constant)]
        return self.mixture.mix_probabilities(experts)

    def learn_class(self, z: np.ndarray | SparseVector, label: int, x: np.ndarray | SparseVector,
                    constant: np.ndarray) -> np.ndarray:
        """A round with ``len(constant)`` classes (the bases widened to them first, which cannot fail
        once the inputs are checked); the mixture's probabilities played."""
        forms, log_stats = self.inputs(z, x)
        classes = len(constant)
        if classes > self.classes:
            for _, _, base in self._members():
                multinomial_rounds(base)._widen(classes - 1)
            for _, recent in self._recent():
                recent.widen(classes)
            if self.thresholds is not None:
                multinomial_rounds(self.thresholds.base)._widen(classes - 1)
            self.classes = classes
        experts = np.full((_EXPERTS, classes), 1.0 / classes)
        experts[len(GRID)] = constant
        for slot, member, base in self._members():
            experts[slot] = _guarded_probabilities(base._learn_class_checked, classes, forms[_form(member)],
                                                   label)
        for slot, recent in self._recent():
            experts[slot] = _guarded_probabilities(recent.learn_class, classes, forms[_RECENT_FORM], label)
        if (thresholds := self.thresholds) is not None:
            experts[BINS_SLOT] = _guarded_probabilities(thresholds.base._learn_class_checked, classes,
                                                        thresholds.code(x), label)
        neighbours = self._playing_neighbours()
        if neighbours is not None:
            experts[NEIGHBOURS_SLOT] = neighbours.learn_class(_neighbours_row(forms), label, classes)
        for slot, tree in self._playing_trees():
            tree.widen(classes)
            experts[slot] = tree.predict_proba(dense(x))
        self.log_scaler.commit(log_stats)
        played = self.mixture.mix_probabilities(experts)
        self.mixture.update_probabilities(experts, label)
        self._grow_trees(dense(x), label)  # after the update: trees that enter now play from the next round
        loss, error = float(self.mixture.class_losses(played, label)), float(np.argmax(played) != label)
        if self.probation is not None:
            self._step_trial(self.mixture.class_losses(experts, label), loss)
        if neighbours is None:
            self._keep_asleep(_neighbours_row(forms), float(label))
        self._keep(forms, float(label), loss, error)
        self._track(loss, error)
        return played

    def hold_growth(self, held: bool) -> None:
        self.held = held
        for tree in self.trees or []:
            tree.held = held
        for _, _, base in self._members():
            base.hold_growth(held)

    def names(self) -> list[str]:
        """The mixture's experts' names (an empty slot's is its member's with "not started")."""
        names = [*(_base_name(*member) for member in GRID), "constant"]
        for g, generation in enumerate(self.young):
            if generation is None:
                names += [f"restarted copy {j} of generation {g}, not started" for j in range(YOUNG_SIZE)]
                continue
            start = generation.start
            names += [f"{_base_name(*GRID[i])} restarted at round {start}" for i in generation.members]
            names += [f"restarted copy {j} of generation {g}, none: saved before it existed"
                      for j in range(len(generation.members), YOUNG_BASES)]
            names.append(f"bayesian_linear(raw) of the rows since round {start}"
                         + (" (none: saved before it existed)" if generation.recent is None else ""))
        names.append("ons+intercept(quantile thresholds)" + ("" if self.thresholds is not None else ", none"))
        names.append(f"{NEIGHBOURS} nearest of the last {NEIGHBOUR_ROWS} rows(raw)"
                     + ("" if self.neighbours is not None else ", none"))
        names += [f"hoeffding_tree(raw, grace {grace})" + ("" if self.trees is not None else ", none")
                  for grace in TREE_GRACES]
        return names

    def stats(self) -> dict[str, Any]:
        w = self.mixture.weights()
        names = self.names()
        alive = self.mixture.switching.active
        sizes = [b.stats() for _, _, b in self._members()]
        return {"weights": {n: float(v) for n, v, on in zip(names, w, alive, strict=True) if on},
                "leader": names[self.leader],
                "leader_since": self.leader_since,
                "changes": self.changes,
                "last_change_round": self.last_change if self.last_change >= 0 else None,
                "switching_rates": {f"{r:g}": float(v) for r, v in
                                    zip(self.mixture.switching.rates, self.mixture.switching.rate_weights(),
                                        strict=True)},
                # the largest base (each base stores at most one point per round); the total is memory
                "stored_points": int(max(s["stored_points"] for s in sizes)),
                "dictionary_size": int(max(s["dictionary_size"] for s in sizes)),
                "stored_points_all_bases": int(sum(s["stored_points"] for s in sizes))}

    def own_arrays(self) -> dict[str, np.ndarray]:
        """The mixture's own arrays: its weights, the log view's scaler, the rounds kept and the quantile
        thresholds."""
        return {**self.mixture.switching.arrays(), **self.log_scaler.arrays("log"), **self.kept.arrays(),
                **(self.neighbours.arrays() if self.neighbours is not None else {}),
                **{name: array for i, tree in enumerate(self.trees or []) for name, array in
                   tree.state(f"tree{i}").items()},
                **(self.thresholds.bins.arrays() if self.thresholds is not None else {})}

    def nbytes(self) -> int:
        return (sum(b.state_nbytes() for _, _, b in self._members())
                + (self.thresholds.base.state_nbytes() if self.thresholds is not None else 0)
                + sum(recent.nbytes() for _, recent in self._recent()) + arrays_nbytes(self.own_arrays()))

    def growth_nbytes(self, rounds: int) -> int:
        """The bases' growth, each young slot's counted as if a fresh copy replaced it and grew (a
        generation's linear model has a fixed size: counted where a generation has none yet)."""
        grown = sum(b.max_growth_nbytes(rounds) for b in self.bases)
        grown += sum(tree.growth_nbytes(rounds) for tree in self.trees or [])  # nothing while held
        # held, restarts only replace generations, by copies no larger (see _restart): only a generation
        # saved without its linear model grows, by one
        recent = self.new_recent().nbytes()
        grown += recent * sum(generation.recent is None if generation is not None else not self.held
                              for generation in self.young)
        if self.held:
            return grown
        largest = max(_full_nbytes(base, rounds) for base in self.bases)  # any member may be copied
        for generation in self.young:
            bases = generation.bases if generation is not None else []
            grown += largest * (YOUNG_BASES - len(bases))  # empty slots, filled at a restart
            grown += sum(max(largest, _full_nbytes(base, rounds)) - base.state_nbytes() for base in bases)
        return grown

    def arrays(self) -> dict[str, np.ndarray]:
        young = {f"young{g}_{j}": nested_blob(b) for g, generation in enumerate(self.young)
                 if generation is not None for j, b in enumerate(generation.bases)}
        recent = {f"young{g}_recent_{name}": array for g, generation in enumerate(self.young)
                  if generation is not None and generation.recent is not None
                  for name, array in generation.recent.arrays().items()}
        grid = {f"base{i}": nested_blob(b) for i, b in enumerate(self.bases)}
        if self.thresholds is not None:
            grid["bins_base"] = nested_blob(self.thresholds.base)
        return {**grid, **young, **recent, **self.own_arrays()}

    def scalars(self) -> dict[str, Any]:
        return {"widths": list(self.widths), "log_count": self.log_scaler.count,
                "young": [[generation.start, *generation.members] if generation is not None else []
                          for generation in self.young],
                "detector": self.detector.state(),
                "error_detector": self.errors.state(),
                "tracking": [self.rounds, self.changes, self.last_change, self.restarts_due, self.leader,
                             self.leader_since],
                "kept": self.kept.scalars(),
                **({"neighbours": self.neighbours.scalars()} if self.neighbours is not None else {}),
                **({"probation": self.probation.state()} if self.probation is not None else {})}

    def restore(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any], rounds: int) -> None:
        """Load the state :meth:`arrays` and :meth:`scalars` saved into this grid after ``rounds`` rounds,
        built with the saved widths (its bases must match the restored ones)."""
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
        self.bases = [self._restored(arrays[f"base{i}"], member) for i, member in enumerate(GRID)]
        self.young = [_Generation(generation[0], generation[1:],
                                  [self._restored(arrays[f"young{g}_{j}"], GRID[i])
                                   for j, i in enumerate(generation[1:])], self._restored_recent(arrays, g))
                      if generation else None for g, generation in enumerate(young)]
        self._restore_bins(arrays)
        migrated = _in_current_layout(arrays)
        if not self.mixture.switching.restore(migrated):
            raise StateFormatError("the mixture weights do not match the grid.")
        self.detector.restore(scalars["detector"])
        if "error_detector" in scalars:
            self.errors.restore(scalars["error_detector"])
        else:  # saved before it existed: its level learnt afresh from the restored round
            self.errors = ErrorChangeDetector()
        (self.rounds, self.changes, self.last_change, self.restarts_due, self.leader,
         self.leader_since) = (int(v) for v in scalars["tracking"])
        if "kept" in scalars:  # saved before the rounds were kept: none kept yet
            self.kept.restore(arrays, scalars["kept"])
        self._restore_neighbours(arrays, scalars)
        self._restore_trees(arrays)
        self._restore_probation(scalars)

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
        young = {slot for g in range(GENERATIONS) for slot in _young_slots(g)}
        if not set(probation.slots) <= young or not self.mixture.switching.active[probation.slots].all():
            raise StateFormatError("the trial of a generation does not match the grid.")
        self.probation = probation

    def _restore_neighbours(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        """The local expert's window (none kept yet in a state saved before it existed); it plays only
        if it exists and holds :data:`NEIGHBOURS_WAKE_ROWS` rows."""
        if "neighbours" in scalars:
            if self.neighbours is None:
                raise StateFormatError("the kept neighbours do not match the grid.")
            self.neighbours.restore(arrays, scalars["neighbours"])
        if self.mixture.switching.active[NEIGHBOURS_SLOT] and (
                self.neighbours is None or self.neighbours.count < NEIGHBOURS_WAKE_ROWS):
            raise StateFormatError("the local expert plays before it holds enough rows.")

    def _restore_trees(self, arrays: dict[str, np.ndarray]) -> None:
        """The trees (none learnt yet in a state saved before they existed); they play only if they
        exist."""
        if self.trees is not None and "tree0_ints" in arrays:
            for i, tree in enumerate(self.trees):
                tree.restore(arrays, f"tree{i}")
        elif "tree0_ints" in arrays:
            raise StateFormatError("the trees do not match the grid.")
        if self.mixture.switching.active[TREE_SLOTS[0]] and self.trees is None:
            raise StateFormatError("the trees play where there are none.")

    def _restore_bins(self, arrays: dict[str, np.ndarray]) -> None:
        """The quantile thresholds and their linear model; none in a state saved without them."""
        if "bins_edges" not in arrays:
            self.thresholds = None
            return
        bins = QuantileBins.restored(arrays)
        restored = restore_nested(arrays["bins_base"])
        fresh = self.new_bins_base(bins)
        if type(fresh) is not type(restored) or fresh.get_params() != restored.get_params():
            raise StateFormatError("the quantile thresholds' learner does not match the grid.")
        self.thresholds = _ThresholdModel(bins, restored)

    def _restore_aggregating(self, arrays: dict[str, np.ndarray], rounds: int) -> None:
        """A state saved before the switching weights (issue 20): the grid's bases and the aggregating
        algorithm's weights, which become the weights under every switching rate; no change declared
        yet, the leader leading since the load."""
        self.bases = [self._restored(arrays[f"base{i}"], member) for i, member in enumerate(GRID)]
        log_weights = arrays["log_weights"]
        if log_weights.shape != (len(GRID) + 1,):
            raise StateFormatError("the mixture weights do not match the grid.")
        self.mixture.switching.log_weights[:, :len(GRID) + 1] = log_weights - np.logaddexp.reduce(log_weights)
        self.rounds, self.leader, self.leader_since = rounds, int(np.argmax(log_weights)), rounds

    def _restored_recent(self, arrays: dict[str, np.ndarray], generation: int) -> RecentLinear | None:
        """Generation ``generation``'s linear model, None if it was saved without one."""
        prefix = f"young{generation}_recent_"
        if f"{prefix}P" not in arrays:
            return None
        recent = self.new_recent()
        recent.restore({name.removeprefix(prefix): array for name, array in arrays.items()
                        if name.startswith(prefix)})
        return recent

    def _restored(self, blob: np.ndarray, member: Member) -> Learner:
        restored = restore_nested(blob)
        fresh = self.new_base(member)
        if type(fresh) is not type(restored) or fresh.get_params() != restored.get_params():
            raise StateFormatError("a nested base learner does not match the grid.")
        return restored

