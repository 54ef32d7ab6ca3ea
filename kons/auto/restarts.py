r"""The restarts of :class:`~kons.Auto`'s grid: the generations of restarted copies that a declared change
starts (:class:`Generation`; :func:`restart` picks their slots and the members they copy, :func:`replay`
has them learn the rows since the change's estimated onset before they play), and what such a generation
needs around its experts. :class:`Probation` is the trial of the generation started at a declared change
(a false alarm costs the old experts what a small entry costs); :class:`RecentRounds` keeps the last
rounds the grid played (its rows in both views, the targets, the mixture's losses and errors) for the
replay; :class:`GenerationTargets` is a generation's own scale of the target (regression), so that it
learns the new concept's units rather than those of every row since the start."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kons._numerics import SMALLEST_NORMAL
from kons.auto.config import (
    CHANGE_ENTRY_PRIOR,
    CONCEPT_TARGET_FADE,
    ENTRY_PRIOR,
    GENERATION_TARGET_PRIOR,
    GENERATIONS,
    GRID,
    PROBATION_PRIOR,
    PROBATION_ROUNDS,
    YOUNG_KERNEL_STEPS,
    YOUNG_KERNELS,
    YOUNG_LINEAR,
    YOUNG_REGRESSION_LINEAR,
)
from kons.auto.experts.newton import LearnerExpert
from kons.auto.experts.protocol import Expert, Row
from kons.auto.experts.recent import RecentExpert, RecentLinear
from kons.auto.mixture import SwitchingWeights
from kons.auto.ring import Ring
from kons.base import Learner
from kons.errors import StateFormatError
from kons.sparse import SparseVector

if TYPE_CHECKING:
    from kons.auto.grid import Grid

__all__ = ["YOUNG_BASES", "YOUNG_SIZE", "FadingTargets", "Generation", "GenerationTargets", "Probation",
           "RecentRounds", "TargetScale", "replay", "restart", "young_slots"]

#: Restarted copies of grid members in a generation.
YOUNG_BASES = len(YOUNG_LINEAR) + YOUNG_KERNELS
#: A generation's experts: its copies, then the Bayesian linear model of the rows since it started
#: (:class:`~kons.auto.experts.recent.RecentLinear`, the warm-up a fresh ``auto`` plays, which fits a new
#: linear concept within a few rows where the copies' Newton steps need tens).
YOUNG_SIZE = YOUNG_BASES + 1
#: The grid's kernel members (a generation copies the heaviest of them).
_KERNEL_MEMBERS = [i for i, member in enumerate(GRID) if member[1] == "nystrom"]


def young_slots(generation: int) -> range:
    """The mixture's slots of a generation of restarted bases."""
    start = len(GRID) + 1 + generation * YOUNG_SIZE
    return range(start, start + YOUNG_SIZE)


def _binary_target(index: float) -> float:
    """The label -1 or +1 of the binary model for a kept class index 0 or 1."""
    return 1.0 if index > 0.0 else -1.0


@dataclass
class Generation:
    """Copies of members of :data:`GRID` (their indices) started afresh at round ``start``, and the linear
    model of the rows since then (None in a generation saved before it existed, whose slot stays empty);
    ``targets``, its own scale of the target (regression; None: it learns the grid's standardised target,
    as every generation did before they had one); ``kernel_targets``, the scale its kernel copies learn in
    instead (the generation started at a declared change that did not widen the target, regression; None:
    ``targets``).

    The kernel copies have no intercept and cannot be re-expressed when a scale moves (its linear model
    is): in ``targets``, whose prior (the last concept's scale) keeps its weight, they learn their first
    rows at the old concept's level and lose the weight to the linear model for the rest of the window;
    faded as the concept's scale is (:class:`FadingTargets`), the new level within tens of rows. The linear
    members keep ``targets``: the mean of a few rows is all a faded prior leaves their first rows, and on a
    linear concept they carry the play there (``docs/drift-log.md``, session 14)."""

    start: int
    members: list[int]
    copies: list[LearnerExpert]
    recent_expert: RecentExpert | None
    targets: GenerationTargets | None = None
    kernel_targets: FadingTargets | None = None

    @property
    def bases(self) -> list[Learner]:
        return [copy.base for copy in self.copies]

    @property
    def recent(self) -> RecentLinear | None:
        return None if self.recent_expert is None else self.recent_expert.model

    def _is_kernel(self, j: int) -> bool:
        """Whether its ``j``-th expert (:meth:`experts`' order) is a kernel copy."""
        return j < len(self.members) and GRID[self.members[j]][1] == "nystrom"

    def targets_of(self, j: int) -> TargetScale | None:
        """The scale its ``j``-th expert (:meth:`experts`' order) learns in."""
        if self._is_kernel(j) and self.kernel_targets is not None:
            return self.kernel_targets
        return self.targets

    def kernel_slots(self, g: int) -> list[int]:
        """The slots of its kernel copies, in generation ``g``'s slots."""
        return [slot for j, (slot, _) in enumerate(self.experts(g)) if self._is_kernel(j)]

    def move_scale(self, stats: tuple[float, float, float]) -> None:
        """Commit its scale's ``stats`` (a round's, before its experts learn the round's target in their
        units), its linear model's targets learnt so far re-expressed in them first: in its first rounds the
        scale moves from the learner's to the new concept's, and targets learnt in the units before would
        bias the fit for as many rounds again (its copies' updates cannot be re-expressed so). Whether its
        linear model plays or not: its targets are in the scale's units whenever it enters again."""
        targets, recent = self.targets, self.recent
        if targets is None:
            return
        moved = None if recent is None else targets.moved(stats)
        if recent is not None and moved is not None:
            recent.restandardise(*moved)
        targets.commit(stats)

    def experts(self, g: int) -> list[tuple[int, Expert]]:
        """Its experts, in generation ``g``'s slots: (slot, expert)."""
        slots = young_slots(g)
        # a generation saved with fewer copies leaves its last copies' slots empty
        placed: list[tuple[int, Expert]] = list(zip(slots, self.copies, strict=False))
        if self.recent_expert is not None:
            placed.append((slots[YOUNG_BASES], self.recent_expert))
        return placed


def restart(grid: Grid, span: int, *, soon: bool = False) -> None:
    """Start a generation (the copies of :func:`_copied_members` and the linear model of the rows from now
    on) in the slots :func:`_replaced_generation` picks (``soon``: the change was declared before the last
    one's delayed restarts were done, every generation started since that one), at
    :data:`CHANGE_ENTRY_PRIOR` when the change has just been declared (then on trial: :class:`Probation`),
    else at :data:`ENTRY_PRIOR`; while the growth is held, only in place of a generation (fresh copies,
    held, are no larger than those they replace: the slots' kinds are fixed), so that a held learner keeps
    its size. The generation first learns the last ``span`` rounds kept (this one included): the rows since
    the declared change's estimated onset (:func:`replay`)."""
    # at a declared change the concept's scale starts afresh, the change's generation from the same prior
    fresh = _restart_concept(grid, span) if grid.rounds == grid.last_change else None
    weights = grid.mixture.weights()
    g = _replaced_generation(grid, weights, soon)
    if g is None:
        return
    members = _copied_members(grid, grid.young[g])
    generation = Generation(grid.rounds, members, grid.new_members(members),
                            RecentExpert(grid.new_recent()), _generation_targets(grid, fresh),
                            _kernel_targets(grid, fresh, grid.young[g], span))
    replay(grid, generation, span)
    grid.young[g] = generation
    slots = young_slots(g)  # a generation with fewer copies (held) leaves its last copies' slots empty
    entering = [*slots[:len(members)], slots[YOUNG_BASES]]
    if grid.probation is not None and not set(grid.probation.slots).isdisjoint(entering):
        grid.probation = None  # its generation is gone
    if grid.rounds == grid.last_change:
        _forget_old_rows(grid, span)
        grid.mixture.enter(entering, CHANGE_ENTRY_PRIOR)
        grid.probation = Probation(entering, entry=CHANGE_ENTRY_PRIOR, low=PROBATION_PRIOR,
                                   rounds=PROBATION_ROUNDS)
    else:
        grid.mixture.enter(entering, ENTRY_PRIOR)
    if grid.leader in young_slots(g):
        grid.leader_since = grid.rounds


def _copied_members(grid: Grid, replaced: Generation | None) -> list[int]:
    """The members a new generation copies: :data:`YOUNG_LINEAR` (regression:
    :data:`YOUNG_REGRESSION_LINEAR`) and the kernel geometry heaviest under the switching rate 0 (its losses
    since round 1: the geometry outlasts the concept, and the rates that switch follow whichever member did
    best lately) at each of the :data:`YOUNG_KERNEL_STEPS`. Held, copy for copy of the kinds of the
    generation ``replaced`` (one saved with fewer copies keeps fewer, one saved with both linear members
    keeps them), so that the learner keeps its size."""
    lasting = grid.mixture.switching.log_weights[0]
    view, kind, width, _ = GRID[max(_KERNEL_MEMBERS, key=lambda i: float(lasting[i]))]
    heaviest = [GRID.index((view, kind, width, step)) for step in YOUNG_KERNEL_STEPS]
    both_linear = [*YOUNG_LINEAR, *heaviest]
    members = both_linear if grid.mixture.binary else [*YOUNG_REGRESSION_LINEAR, *heaviest]
    if not grid.held or replaced is None:
        return members
    kept = len(replaced.members)
    if [GRID[i][1] for i in members[:kept]] == [GRID[i][1] for i in replaced.members]:
        return members[:kept]
    return both_linear[:kept]  # a regression generation saved before it copied the raw view's linear alone


def _forget_old_rows(grid: Grid, span: int) -> None:
    """At a declared change on two classes, the experts that keep rows (the local expert) keep only the
    last ``span`` (those since the change's estimated onset), as a fresh ``auto``'s would hold them: the
    local expert's window of the last :data:`~kons.auto.config.NEIGHBOUR_ROWS` rows otherwise votes with
    the old concept's rows for as many rounds, and near a class boundary that moved they outvote the new
    ones (the tuning drifts of ``benchmarks/drift.py``: ``docs/drift-log.md``). Regression and three classes
    or more keep their windows."""
    if not grid.mixture.binary or grid.classes > 2:
        return
    for experts in grid.experts:
        for expert in experts or ():
            expert.forget(span)


def _restart_concept(grid: Grid, span: int) -> GenerationTargets | None:
    """At a declared change, the grid's scale of the concept (:attr:`Grid.concept`, regression) starts
    afresh: the last concept's scale (the learner's at the first change) as a fading prior
    (:class:`FadingTargets`, :data:`GENERATION_TARGET_PRIOR`), then the last ``span`` rounds kept (the rows
    since the change's estimated onset). Returns the change's generation's own scale before those rounds
    (it replays them itself): the same prior, not fading; None, and no scale of the concept, while the
    growth is held (it would add to the state) or in a grid saved before it had one."""
    if grid.targets is None or not grid.keeps_concept or (grid.concept is None and grid.held):
        return None
    last = grid.concept if grid.concept is not None else grid.targets
    grid.concept = FadingTargets(last.mean, last.std, GENERATION_TARGET_PRIOR, CONCEPT_TARGET_FADE)
    for _, _, target in grid.kept.last(span):
        grid.concept.commit(grid.concept.target(grid.targets.mean + grid.targets.std * target)[1])
    return GenerationTargets(last.mean, last.std, GENERATION_TARGET_PRIOR)


def _generation_targets(grid: Grid, fresh: GenerationTargets | None) -> GenerationTargets | None:
    """A new generation's own scale of the target (regression): ``fresh`` at a declared change
    (:func:`_restart_concept`), else the one it would have had started at the change
    (:meth:`FadingTargets.fixed`), else, in a grid without a scale of the concept, the learner's weighted as
    :data:`GENERATION_TARGET_PRIOR` rounds."""
    if grid.targets is None:
        return None
    if fresh is not None:
        return fresh
    if grid.concept is not None:
        return grid.concept.fixed()
    return GenerationTargets(grid.targets.mean, grid.targets.std, GENERATION_TARGET_PRIOR)


def _kernel_targets(grid: Grid, fresh: GenerationTargets | None, replaced: Generation | None, span: int
                    ) -> FadingTargets | None:
    """The scale of the kernel copies of the generation started at a declared change (regression):
    ``fresh``'s prior fading as the concept's (:attr:`Generation.kernel_targets`) when the change did not
    widen the target (:func:`_not_wider`); None at a later restart, after a change that widened it, and
    while the growth is held in place of a generation that had none (a held learner keeps its size)."""
    if fresh is None or (grid.held and (replaced is None or replaced.kernel_targets is None)):
        return None
    if not _not_wider(grid, fresh, span):
        return None
    return FadingTargets(fresh.mean, fresh.std, GENERATION_TARGET_PRIOR, CONCEPT_TARGET_FADE)


def _not_wider(grid: Grid, fresh: GenerationTargets, span: int) -> bool:
    """Whether the last ``span`` rounds kept (the rows since the declared change's estimated onset, at least
    two) spread about their own mean no more than ``fresh``, the last concept's scale.

    After a change that shrinks the target, the old scale's prior, weighted as a fixed number of rows, keeps
    the kernel copies' units too wide for hundreds of rows, and faded they learn the new concept as a
    restart does; after one that widens it the old scale is the narrow one, its weight matters little, and
    fading it changed how the change's generation played and, through the loss detector's level, when the
    next change was declared (both on the tuning streams of ``benchmarks/drift.py``:
    ``docs/drift-log.md``)."""
    if span < 2 or grid.targets is None:
        return False
    onset = grid.kept.targets()[-span:]
    return grid.targets.std * float(np.std(onset)) <= fresh.std


def _replaced_generation(grid: Grid, weights: np.ndarray, soon: bool) -> int | None:
    """The generation a restart takes: an empty one (not while the growth is held), else, at the round
    a change is declared, the one started first unless the change came ``soon`` (within
    ``RESTART_DELAYS[-1]`` rounds of the last declared one, every generation started since it), else the
    lighter-weighted; None if there is none.

    At a declared change both generations learnt concepts the change has ended, the older from further
    back (which the grid's own members cover already), and the weight it holds is the old concepts'
    weight, which the mixture would take hundreds of rounds to move off it (measured on the gradual
    Friedman drift: ``docs/auto-log.md``). A change declared soon after the last one, its generation and the
    delayed copy alive, finds both on the concept since; when it is a false alarm, the one started first
    (the last change's own, which carries that concept) was replaced and the weight went to older experts
    that erred more (on the binary tuning streams of ``benchmarks/drift.py``, ``docs/drift-log.md`` session
    16), so there the lighter-weighted goes, as at a delayed restart, and a true change's entry is the
    trial's (:class:`Probation`)."""
    started = [(k, generation) for k, generation in enumerate(grid.young) if generation is not None]
    if len(started) < GENERATIONS and not grid.held:
        return next(k for k, generation in enumerate(grid.young) if generation is None)
    if not started:
        return None
    if grid.rounds == grid.last_change and not soon:
        return min(started, key=lambda pair: pair[1].start)[0]
    return min(started, key=lambda pair: float(weights[young_slots(pair[0])].sum()))[0]


def replay(grid: Grid, generation: Generation, rounds: int) -> None:
    """``generation`` learns the last ``rounds`` rounds kept, as if it had started before them (what it
    plays on them is not scored: the mixture has seen those rounds)."""
    sparse, classes = grid.log_scaler.sparse, grid.classes
    experts = generation.experts(0)
    for z, zlog, target in grid.kept.last(rounds):
        views = (SparseVector.from_dense(z), SparseVector.from_dense(zlog)) if sparse else (z, zlog)
        row = Row(grid.views_forms(*views), z)
        if classes > 2:
            for _, expert in experts:
                expert.learn_class(row, int(target), classes)
        else:
            t = _binary_target(target) if grid.mixture.binary else target
            targets = [t] * len(experts)
            if generation.targets is not None and grid.targets is not None:
                # a kept target in the user's units, by the learner's scale now (it was standardised by
                # the scale of its own round, a few rounds back at most)
                y = grid.targets.mean + grid.targets.std * target
                kernel = generation.kernel_targets
                if kernel is not None:
                    t_kernel, kernel_stats = kernel.target(y)
                    kernel.commit(kernel_stats)
                t, stats = generation.targets.target(y)
                generation.move_scale(stats)
                targets = [t_kernel if kernel is not None and generation.targets_of(j) is kernel else t
                           for j in range(len(experts))]
            for (_, expert), learnt in zip(experts, targets, strict=True):
                expert.learn(row, learnt)


def _counted(count: float, mean: float, m2: float, y: float) -> tuple[float, float, float]:
    """The running count, mean and sum of squared deviations ``m2`` of some targets, with ``y`` counted
    (Welford's update)."""
    count += 1.0
    delta = y - mean
    mean += delta / count
    return count, mean, m2 + delta * (y - mean)


class GenerationTargets:
    r"""The running mean and deviation of the targets a generation has learnt (regression): its experts learn
    the targets standardised by them, not by the learner's scaler, whose statistics hold every target since
    the start.

    After a change that moves the target's level or spread, the learner's scaler follows the new concept
    over about as many rounds as it had seen before it: a target standardised by it keeps moving for
    thousands of rounds, so a generation's experts chase a target that drifts by itself, and a kernel
    member (which has no intercept) cannot even fit the new level (measured on ``benchmarks/drift.py``'s
    piecewise-linear streams: ``docs/drift-log.md``). The generation's own statistics start at the learner's,
    weighted as ``prior`` rounds (a generation's first rows would give no deviation at all), and the rounds
    since the change's onset soon outweigh them.

    ``play`` maps a play in the generation's units to the learner's standardised units, ``target`` a
    target in the user's units to the generation's (with the round counted: :meth:`commit` it).
    """

    def __init__(self, mean: float, std: float, prior: float) -> None:
        self.count = prior
        self.mean = mean
        self.m2 = prior * std * std

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / self.count) if self.count > 0.0 else 0.0

    def play(self, f: float, mean: float, std: float, bound: float) -> float:
        """The generation's standardised play ``f`` in the units of a scaler at ``mean`` and ``std``,
        clipped to ``[-bound, bound]``."""
        if std <= 0.0:
            return f
        return min(max((self.mean + self.std * f - mean) / std, -bound), bound)

    def target(self, y: float) -> tuple[float, tuple[float, float, float]]:
        """``y`` standardised by the statistics that include it, and those statistics (to commit)."""
        count, mean, m2 = stats = _counted(self.count, self.mean, self.m2, y)
        std = math.sqrt(m2 / count)
        return ((y - mean) / std if std > 0.0 else 0.0), stats

    def commit(self, stats: tuple[float, float, float]) -> None:
        self.count, self.mean, self.m2 = stats

    def moved(self, stats: tuple[float, float, float]) -> tuple[float, float] | None:
        """``(scale, shift)`` that take a target standardised now to the units of ``stats`` (to commit),
        ``t -> scale * t + shift``; None when either deviation is 0 (no units to take it from or to)."""
        count, mean, m2 = stats
        std, new_std = self.std, math.sqrt(m2 / count)
        if std <= 0.0 or new_std <= 0.0:
            return None
        return std / new_std, (self.mean - mean) / new_std

    def array(self) -> np.ndarray:
        return np.array([self.count, self.mean, self.m2])

    @classmethod
    def restored(cls, array: np.ndarray) -> GenerationTargets:
        """The statistics :meth:`array` saved; StateFormatError if they are not."""
        if array.shape != (3,) or not np.isfinite(array).all() or array[0] <= 0.0 or array[2] < 0.0:
            raise StateFormatError("a generation's target scale is not one.")
        targets = cls(0.0, 0.0, 0.0)
        targets.commit((float(array[0]), float(array[1]), float(array[2])))
        return targets


class FadingTargets:
    r"""The scale of the target since the last declared change (regression: the grid's
    :attr:`~kons.auto.grid.Grid.concept`, whose units the mixture weighs the experts in): the mean and
    deviation of the targets since the change pooled with a prior scale (the last concept's: the
    learner's, or the scale since the change before) weighted as ``prior`` rounds at first, and as
    :math:`c\,e^{-n/f}` rounds after :math:`n` rounds of its own (:math:`c` = ``prior``, :math:`f` =
    ``fade``).

    A prior of fixed weight :math:`c` (:class:`GenerationTargets`) holds the scale to the old concept's for
    as long as its variance, weighted :math:`c`, outweighs the rows': after a change that shrinks the
    target's spread by a factor :math:`k`, for about :math:`c k^2` rounds (thousands, on
    ``benchmarks/drift.py``'s piecewise_scaled stream: ``docs/drift-log.md``), and a mixture that weighs the
    experts in those units hardly tells them apart. Faded, the prior stands for the first rows alone (a
    scale's first rows give no deviation); after a few tens of rounds the scale is that of the rows since
    the change.

    ``play`` and ``target`` as :class:`GenerationTargets`'.
    """

    def __init__(self, mean: float, std: float, prior: float, fade: float) -> None:
        self.prior, self.prior_mean, self.prior_std, self.fade = prior, mean, std, fade
        self.count, self.own_mean, self.m2 = 0.0, 0.0, 0.0  # of its own rows

    def _pooled(self, count: float, own_mean: float, m2: float) -> tuple[float, float]:
        """The mean and deviation of ``count`` own rows (``own_mean``, ``m2``) pooled with the prior."""
        weight = self.prior * math.exp(-count / self.fade)
        total = weight + count
        if total <= 0.0:
            return self.prior_mean, self.prior_std
        gap = own_mean - self.prior_mean
        mean = self.prior_mean + gap * count / total
        variance = (weight * self.prior_std ** 2 + m2 + gap * gap * weight * count / total) / total
        return mean, math.sqrt(max(variance, 0.0))

    @property
    def mean(self) -> float:
        return self._pooled(self.count, self.own_mean, self.m2)[0]

    @property
    def std(self) -> float:
        return self._pooled(self.count, self.own_mean, self.m2)[1]

    def play(self, f: float, mean: float, std: float, bound: float) -> float:
        """As :meth:`GenerationTargets.play`."""
        if std <= 0.0:
            return f
        own_mean, own_std = self._pooled(self.count, self.own_mean, self.m2)
        return min(max((own_mean + own_std * f - mean) / std, -bound), bound)

    def target(self, y: float) -> tuple[float, tuple[float, float, float]]:
        """``y`` standardised by the statistics that include it, and its own rows' (to commit)."""
        stats = _counted(self.count, self.own_mean, self.m2, y)
        mean, std = self._pooled(*stats)
        return ((y - mean) / std if std > 0.0 else 0.0), stats

    def commit(self, stats: tuple[float, float, float]) -> None:
        self.count, self.own_mean, self.m2 = stats

    def array(self) -> np.ndarray:
        return np.array([self.prior, self.prior_mean, self.prior_std, self.fade, self.count, self.own_mean,
                         self.m2])

    def fixed(self) -> GenerationTargets:
        """The scale of the same prior and rows with the prior's weight kept (:class:`GenerationTargets`)."""
        total = self.prior + self.count
        gap = self.own_mean - self.prior_mean
        fixed = GenerationTargets(0.0, 0.0, 0.0)
        fixed.commit((total, self.prior_mean + gap * self.count / total,
                      self.prior * self.prior_std**2 + self.m2 + gap * gap * self.prior * self.count / total))
        return fixed

    @classmethod
    def restored(cls, array: np.ndarray) -> FadingTargets:
        """The scale :meth:`array` saved; StateFormatError if it is not one."""
        if (array.shape != (7,) or not np.isfinite(array).all() or array[0] <= 0.0 or array[2] < 0.0
                or array[3] <= 0.0 or array[4] < 0.0 or array[6] < 0.0):
            raise StateFormatError("a generation's target scale is not one.")
        targets = cls(float(array[1]), float(array[2]), float(array[0]), float(array[3]))
        targets.commit((float(array[4]), float(array[5]), float(array[6])))
        return targets


#: A generation's scale of the target, in which its experts learn and from which their plays are mapped.
TargetScale = GenerationTargets | FadingTargets


class Probation:
    r"""A generation started at a declared change, on trial: a false alarm should cost the other experts
    what an entry at the prior ``low`` costs, a true change should have the weight of an entry at ``entry``
    from its first play on (the rows right after a change are where the old experts lose most).

    The generation's ``n`` experts (``slots``) entered at ``entry`` each (:meth:`SwitchingWeights.replace`).
    After its first round, if its weight under the switching rate 0 is still at least ``n entry`` (that
    round's likelihood at least the other experts'), the trial ends. Else its weights are moved to an entry
    at ``low`` (:meth:`SwitchingWeights.reprice`): under the rate 0, exactly the weights Bayes' rule would
    give after that round had the generation entered at ``low``, since a change of prior only rescales the
    posterior odds. At each of its next rounds, with :math:`L_i` its experts' losses since entry and
    :math:`L` the mixture's (:math:`\eta`-scaled, so that :math:`e^{L - L_i}` is expert ``i``'s likelihood
    ratio to the mixture),

    .. math:: \pi_i = \frac{a\, e^{L - L_i}}{(1 - n a) + \sum_j a\, e^{L - L_j}}, \qquad a = \text{entry},

    is its experts' posterior at an entry at ``entry`` with the mixture standing for the other experts (whose
    likelihood it bounds from below: the aggregating algorithm's guarantee); once
    :math:`\sum_i \pi_i > n a`, that is once :math:`\frac{1}{n}\sum_i e^{L - L_i} > 1` (the generation's
    Bayes factor against the mixture above 1), its experts take the weights :math:`\pi_i` under every rate
    and the trial ends. It ends anyway ``rounds`` rounds after the entry.

    Price, in :math:`\eta`-scaled loss against the mixture without the alarm (under the rate 0): a false
    alarm whose generation never catches up costs the other experts :math:`\ln\frac{1}{1 - n\,low}` for the
    entry at ``low``, plus its first round's play at ``entry``, at most
    :math:`\ln\frac{1 - n\,low}{1 - n\,a}` more; a true change is played at ``entry`` on its first round and
    pays, while demoted, the rounds until its evidence passes the mixture's. The other rates' weights are
    moved by the same factors, which makes them an approximation there (Fixed-Share's sharing does not
    commute with a change of prior).
    """

    def __init__(self, slots: list[int], *, entry: float, low: float, rounds: int) -> None:
        self.slots = slots
        self.entry = entry
        self.low = low
        self.rounds_left = rounds
        self.demoted = False
        self.losses = np.zeros(len(slots))  # the generation's experts' since entry
        self.mixture_loss = 0.0

    def observe(self, weights: SwitchingWeights, losses: np.ndarray, mixture_loss: float) -> bool:
        """After a round whose (weighted) losses were ``losses`` (every slot's) and the mixture's
        ``mixture_loss``, weighed by ``weights`` already: demote or promote the generation in ``weights``;
        True while the trial goes on."""
        self.losses = self.losses + losses[self.slots]
        self.mixture_loss += mixture_loss
        self.rounds_left -= 1
        n = len(self.slots)
        if not self.demoted:
            kept = float(np.logaddexp.reduce(weights.log_weights[0, self.slots]))
            if kept >= math.log(self.entry * n):
                return False
            weights.reprice(self.slots, self.entry, self.low)
            self.demoted = True
            return self.rounds_left > 0
        log_generation = math.log(self.entry) + (self.mixture_loss - self.losses)
        log_evidence = np.logaddexp(math.log1p(-self.entry * n), np.logaddexp.reduce(log_generation))
        posterior = np.exp(log_generation - log_evidence)
        if posterior.sum() > self.entry * n:
            # one expert may trail the mixture by hundreds of nats (a log loss of a class probability
            # near 0) while the others carry the generation: its weight must stay a finite log
            weights.replace(self.slots, np.maximum(posterior, SMALLEST_NORMAL))
            return False
        return self.rounds_left > 0

    def state(self) -> dict[str, Any]:
        return {"slots": list(self.slots), "entry": self.entry, "low": self.low,
                "rounds_left": self.rounds_left, "demoted": self.demoted,
                "losses": [float(v) for v in self.losses], "mixture_loss": self.mixture_loss}

    @classmethod
    def restored(cls, state: dict[str, Any]) -> Probation:
        """The trial :meth:`state` saved; ValueError (or KeyError, TypeError) if it is not one."""
        probation = cls([int(v) for v in state["slots"]], entry=float(state["entry"]),
                        low=float(state["low"]), rounds=int(state["rounds_left"]))
        probation.demoted = bool(state["demoted"])
        probation.losses = np.array([float(v) for v in state["losses"]])
        probation.mixture_loss = float(state["mixture_loss"])
        if (len(probation.losses) != len(probation.slots) or probation.rounds_left <= 0
                or not 0.0 < probation.low < probation.entry < 1.0 / len(probation.slots)
                or not np.isfinite([*probation.losses, probation.mixture_loss]).all()):
            raise ValueError("not a trial of a generation")
        return probation


class RecentRounds:
    """The last ``capacity`` rounds, in arrays of fixed size (a ring): each round's standardised row
    ``z`` and log view ``zlog`` (dense, ``dim`` each), its target (a standardised target, or a class
    index), and the mixture's loss and error on it.

    Its size is fixed from the start, so a learner's size does not move as it fills.
    """

    _MISMATCH = "the kept rounds do not match the grid."

    def __init__(self, capacity: int, dim: int) -> None:
        self.rows = np.zeros((2, capacity, dim))  # z, then zlog
        self.rounds = np.zeros((capacity, 3))  # target, loss, error
        self.ring = Ring(capacity)

    def add(self, z: np.ndarray, zlog: np.ndarray, target: float, loss: float, error: float) -> None:
        """Keep a round: its two views dense (the state's arrays are of fixed shape, a sparse row's too;
        the grid passes the dense copies its kernel members took)."""
        slot = self.ring.next
        self.rows[0, slot] = z
        self.rows[1, slot] = zlog
        self.rounds[slot] = target, loss, error
        self.ring.advance()

    def losses(self) -> np.ndarray:
        """The mixture's losses on the kept rounds, oldest first."""
        return self._kept_column(1)

    def errors(self) -> np.ndarray:
        """The mixture's errors on the kept rounds, oldest first."""
        return self._kept_column(2)

    def targets(self) -> np.ndarray:
        """The kept rounds' targets (class indices, on classes), oldest first."""
        return self._kept_column(0)

    def _kept_column(self, column: int) -> np.ndarray:
        kept: np.ndarray = self.rounds[self.ring.order(), column]
        return kept

    def last(self, k: int) -> list[tuple[np.ndarray, np.ndarray, float]]:
        """The last ``k`` rounds kept (fewer if fewer are), oldest first: ``(z, zlog, target)``."""
        slots = self.ring.order()[max(self.ring.count - k, 0):]
        return [(self.rows[0, i], self.rows[1, i], float(self.rounds[i, 0])) for i in slots]

    def nbytes(self) -> int:
        return int(self.rows.nbytes + self.rounds.nbytes)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"replay_rows": self.rows, "replay_rounds": self.rounds}

    def scalars(self) -> list[int]:
        return self.ring.scalars()

    def restore(self, arrays: dict[str, np.ndarray], scalars: list[int]) -> None:
        rows, rounds = arrays["replay_rows"], arrays["replay_rounds"]
        if rows.shape != self.rows.shape or rounds.shape != self.rounds.shape:
            raise StateFormatError(self._MISMATCH)
        ring = self.ring.restored(scalars, self._MISMATCH)
        self.rows, self.rounds, self.ring = rows.copy(), rounds.copy(), ring
