r"""The experts that follow the target's own last values (regression): for rows that come in time order.

``auto`` sees rows, not a series; but when it learns a round, the targets of the rounds before are known, so
a series read in time order can be forecast from its own past, which the rows' features may not carry at all
(an hourly flow given its hour, a weekly reading given its week). Two experts, on the standardised targets
:math:`t_{n-1}, t_{n-2}, \dots` of the last :data:`~kons.auto.config.LAGS` rounds (0, the mean, before
there were as many):

* :class:`LastTarget`: the forecast "as the last round", :math:`t_{n-1}`;
* :class:`TargetLags`: that forecast corrected by the Bayesian linear model
  (:class:`~kons.auto.experts.recent.RecentLinear`) of the change :math:`t_n - t_{n-1}` on the lags and an
  intercept, :math:`t_{n-1} + w^\top (t_{n-1}, \dots, t_{n-L}, 1)`: an autoregression whose prior is the
  last value (its weights start at 0), so it is never far from :class:`LastTarget` before it has learnt
  better, and a trend, a cycle or a pull back to the level are learnt as they show.

They sleep until the last target has done better than the mean over the rounds so far (on rows in no order
it does twice as badly: there they never play, and ``auto`` plays as without them). The lags are kept as
the rounds standardised them (the target scaler moves a little each round; its moves are :math:`O(1/n)`),
in a state of fixed size; nothing depends on the row, so a record, a sparse row or a row with missing values
is the same to them.
The targets before the last are kept in the units of the scaler's statistics before the last round, and
moved to those of the round that plays on them (an affine map): early in a stream, and at a burst, the
scale moves much in one round, and lags of several scales read as a trend the series does not have.

Before the grid exists (``auto``'s warm-up), :func:`last_leads` is the same evidence on the buffered targets:
the warm-up plays the last target while it has done much better than the running mean.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from kons.auto.config import LAGS, LAGS_LONG, LAGS_WAKE_ROWS, LAGS_WEIGHT_VARIANCE
from kons.auto.experts.protocol import Expert, GridContext, Row, guarded, restore_saved
from kons.auto.experts.recent import RecentLinear
from kons.errors import StateFormatError
from kons.preprocessing import TARGET_BOUND, TargetScaler

__all__ = ["LastTarget", "LongLags", "TargetLags", "build_lags", "build_long_lags", "lag_experts",
           "last_leads", "restore_lags", "restore_long_lags"]

#: The intercept's coordinate after the lags.
_INTERCEPT = np.ones(1)


def _affine(units: list[float], mean: float, std: float) -> tuple[float, float] | None:
    """The scale and the shift that move targets standardised by ``units`` (the mean and deviation they
    were standardised by) to the statistics ``mean`` and ``std``; None if there is nothing to move."""
    was_mean, was_std = units
    if (mean == was_mean and std == was_std) or std <= 0.0 or was_std <= 0.0:
        return None
    return was_std / std, (was_mean - mean) / std


def _moved(lags: np.ndarray, units: np.ndarray, targets: TargetScaler | None) -> np.ndarray:
    """``lags`` with those before the newest moved from ``units`` to the statistics of ``targets`` now
    (:func:`_affine`), in a copy; ``lags`` itself if there is nothing to move (no scaler: a state saved
    before the units were kept goes on as it was)."""
    affine = None if targets is None else _affine(units.tolist(), targets.mean, targets.std)
    if affine is None:
        return lags
    scale, shift = affine
    moved = lags.copy()
    moved[1:] = lags[1:] * scale + shift
    return moved


class _OfTheSeries:
    """What every expert on the target's last values is to the grid beside its plays: regression only, of a
    fixed size (once started), nothing forgotten at a change (the last targets are the series' own, not
    rows), no scalars saved."""

    sleeps = True
    plays_together = None

    def probabilities(self, row: Row, classes: int) -> np.ndarray:  # pragma: no cover - regression only
        raise NotImplementedError("the lag experts are for regression")

    def learn_class(self, row: Row, label: int, classes: int) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError("the lag experts are for regression")

    def widen(self, classes: int) -> None:  # pragma: no cover - regression only
        raise NotImplementedError("the lag experts are for regression")

    def forget(self, rounds: int) -> None:
        """Nothing (the class's docstring)."""

    def hold_growth(self, held: bool) -> None:
        """Nothing: a fixed size."""

    def growth_nbytes(self, rounds: int) -> int:
        return 0

    def scalars(self) -> Any:
        return None


class _Lagged(_OfTheSeries):
    """What both experts are to the grid: a regression expert that plays from the targets kept in
    ``lags`` (newest first, shared; those before the newest in ``units``, shared: :func:`_moved`), asleep
    until the last target has beaten the mean."""

    def __init__(self, lags: np.ndarray, units: np.ndarray, targets: TargetScaler | None) -> None:
        self.lags, self.units, self.targets = lags, units, targets

    def _move(self) -> None:
        """The kept targets into the scaler's units now (once a learning round: the scaler moves only after
        it, so the later calls of the round find them there and write nothing)."""
        targets = self.targets
        if targets is None:
            return
        mean, std, units = targets.mean, targets.std, self.units.tolist()
        if units == [mean, std]:  # (units and lags are shared: the round's first call moved them)
            return
        affine = _affine(units, mean, std)
        if affine is not None:
            scale, shift = affine
            moved = self.lags[1:]  # (in place, each rounded as in _moved's copy)
            moved *= scale
            moved += shift
        self.units[:] = mean, std

    def ready(self) -> bool:
        return True


class LastTarget(_Lagged):
    """The last round's standardised target. Asleep, it keeps the evidence that the rows come in time
    order: its squared errors and the mean's (the standardised target's, 0) summed over the rounds, and
    those of the mean of the kept targets (the last :data:`~kons.auto.config.LAGS`); it is :meth:`ready`
    once, after ``wake_rows`` rounds, its sum is below both. On rows in no order its expected error is
    twice the mean's, so it never wakes there, and ``auto`` plays as without it. After a change of level
    the standing mean errs for long where the last target does not, though the rows are in no order; the
    mean of the last few targets follows the new level within a few rounds, so such a change does not wake
    it (a state saved before that evidence, ``local`` None, goes on under the mean alone)."""

    def __init__(self, lags: np.ndarray, units: np.ndarray, targets: TargetScaler | None, wake_rows: int
                 ) -> None:
        super().__init__(lags, units, targets)
        self.wake_rows = wake_rows
        self.evidence = np.zeros(3)  # rounds, the last target's squared errors, the mean's
        self.local: np.ndarray | None = np.zeros(1)  # the squared errors of the kept targets' mean

    def predict(self, row: Row) -> float:
        return float(self.lags[0])

    def learn(self, row: Row, target: float) -> float:
        return float(self.lags[0])

    def observe(self, row: Row, target: float, classes: int, playing: bool) -> None:
        """The round's evidence (the lags move on in :meth:`TargetLags.observe`, observed after it)."""
        # (the sums as floats, each the float64 addition the arrays' own would make, without building an
        # array of the round's terms)
        self._move()
        rounds, last, mean = self.evidence.tolist()
        self.evidence[:] = rounds + 1.0, last + (target - float(self.lags[0])) ** 2, mean + target * target
        local = self.local
        if local is not None:
            # (the mean as ndarray.mean computes it, without its Python wrapper)
            local[0] = float(local[0]) + (target - float(np.add.reduce(self.lags) / len(self.lags))) ** 2

    def ready(self) -> bool:
        rounds, last, mean = self.evidence.tolist()
        local = math.inf if self.local is None else float(self.local[0])
        return rounds >= self.wake_rows and last < mean and last < local

    def nbytes(self) -> int:
        return (self.lags.nbytes + self.evidence.nbytes + (0 if self.local is None else self.local.nbytes)
                + (0 if self.targets is None else self.units.nbytes))

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        kept = {f"{name}_targets": self.lags, f"{name}_evidence": self.evidence}
        if self.targets is not None:
            kept[f"{name}_units"] = self.units
        return kept if self.local is None else {**kept, f"{name}_local": self.local}


class TargetLags(_Lagged):
    """The last target plus the Bayesian linear model of the change on the lags (the module's docstring);
    plays clipped at the model's bound. It learns every round, in its plays or, asleep, in
    :meth:`observe`, so that it enters having learnt the rows before; then it keeps the round's target."""

    def __init__(self, lags: np.ndarray, units: np.ndarray, targets: TargetScaler | None,
                 model: RecentLinear) -> None:
        super().__init__(lags, units, targets)
        self.model = model

    def _inputs(self) -> np.ndarray:
        """The model's inputs: the kept targets in the scaler's units now, and the intercept (the kept
        targets themselves are moved only in a learning round: :meth:`_move`)."""
        return np.concatenate((_moved(self.lags, self.units, self.targets), _INTERCEPT))

    def _moved_inputs(self) -> np.ndarray:
        """:meth:`_inputs` in a learning round: the kept targets moved once, for the round's observes too."""
        self._move()
        return np.concatenate((self.lags, _INTERCEPT))

    def _clipped(self, f: float) -> float:
        return min(max(f, -self.model.clip / 2.0), self.model.clip / 2.0)

    def predict(self, row: Row) -> float:
        last = float(self.lags[0])
        return self._clipped(last + guarded(self.model.predict, self._inputs()))

    def learn(self, row: Row, target: float) -> float:
        last = float(self.lags[0])
        return self._clipped(last + guarded(self.model.learn, self._moved_inputs(), target - last))

    def observe(self, row: Row, target: float, classes: int, playing: bool) -> None:
        if playing:
            self._move()
        else:  # asleep: the round learnt as in a play, the play itself not computed
            last = float(self.lags[0])
            guarded(self.model.learn_unplayed, self._moved_inputs(), target - last)
        self.lags[1:] = self.lags[:-1]
        self.lags[0] = target

    def nbytes(self) -> int:
        return self.model.nbytes()

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        return {f"{name}_{key}": array for key, array in self.model.arrays().items()}


def _model(lags: int, bound: float, intercept_scale: float) -> RecentLinear:
    # the change's model: its own bound (a change is at most twice the bound), the lags' weights of the
    # prior variance LAGS_WEIGHT_VARIANCE together
    return RecentLinear(lags, intercept_scale=intercept_scale, clip=2.0 * bound,
                        weight_variance=LAGS_WEIGHT_VARIANCE)


def last_leads(targets: np.ndarray, share: float) -> bool:
    """Whether, over ``targets`` in the order they came, the last target has forecast them with a sum of
    squared errors below ``share`` times that of the mean of the targets before each (the evidence of
    :class:`LastTarget` for rows kept without a scale: the warm-up's buffer). On rows in no order the last
    target's expected error is about twice the mean's."""
    if len(targets) < 2:
        return False
    means = np.cumsum(targets)[:-1] / np.arange(1, len(targets))
    return bool(np.sum(np.diff(targets) ** 2) < share * np.sum((targets[1:] - means) ** 2))


def lag_experts(lags: int, bound: float, intercept_scale: float, wake_rows: int,
                targets: TargetScaler | None = None) -> list[LastTarget | TargetLags]:
    """The two experts on ``lags`` shared lags, plays within ``[-bound, bound]``, asleep for at least
    ``wake_rows`` rounds; the lags kept in the units of ``targets`` (None: as each round standardised
    them)."""
    kept = np.zeros(lags)
    units = np.array([0.0, 0.0] if targets is None else [targets.mean, targets.std])
    return [LastTarget(kept, units, targets, wake_rows),
            TargetLags(kept, units, targets, _model(lags, bound, intercept_scale))]


class LongLags(_OfTheSeries):
    """The second autoregression, on the last ``order`` targets (more than the first's): a
    :class:`TargetLags` of its own that exists only once it has entered, with the experts on the last
    targets (``leader`` their first), which it never does by itself (:meth:`ready` False: the grid enters
    it with them, :attr:`~kons.auto.grid.Kind.wakes_with`). Asleep it keeps nothing and does nothing, so
    that rows in no order, where the lag experts never wake, cost no more than without it, in time or in
    a saved state. It starts at its first call after entering, its model of the change having learnt the
    rounds the grid keeps for a replay (``history``: their standardised targets, oldest first, each as its
    round standardised it), its lags the newest of them, the leader's kept targets first (in their units)."""

    def __init__(self, leader: LastTarget, order: int, bound: float, history: Callable[[], np.ndarray]
                 ) -> None:
        self.leader, self.order, self.bound, self.history = leader, order, bound, history
        self.started: TargetLags | None = None

    def _start(self) -> TargetLags:
        """The autoregression, started (the class's docstring) if it has not started."""
        if self.started is None:
            model = _model(self.order, self.bound, TARGET_BOUND)
            history = self.history()
            for i in range(self.order, len(history)):  # newest first, as the lags
                guarded(model.learn_unplayed, np.concatenate((history[i - 1::-1][:self.order], _INTERCEPT)),
                        float(history[i] - history[i - 1]))
            kept = np.zeros(self.order)
            kept[:len(history)] = history[::-1][:self.order]
            kept[:len(self.leader.lags)] = self.leader.lags
            self.started = TargetLags(kept, self.leader.units.copy(), self.leader.targets, model)
        return self.started

    def predict(self, row: Row) -> float:
        return self._start().predict(row)

    def learn(self, row: Row, target: float) -> float:
        return self._start().learn(row, target)

    def observe(self, row: Row, target: float, classes: int, playing: bool) -> None:
        if self.started is not None or playing:
            self._start().observe(row, target, classes, playing)

    def ready(self) -> bool:
        return False

    def nbytes(self) -> int:
        started = self.started
        return 0 if started is None else sum(array.nbytes for array in self.arrays("").values())

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        """Nothing before it starts; then its kept targets, their units and its model."""
        started = self.started
        if started is None:
            return {}
        return {f"{name}_targets": started.lags, f"{name}_units": started.units, **started.arrays(name)}

    def restore(self, arrays: dict[str, np.ndarray], name: str) -> None:
        """:meth:`arrays`' state (none: not started)."""
        self.started = None
        if f"{name}_targets" not in arrays:
            return
        kept, units = arrays[f"{name}_targets"], arrays[f"{name}_units"]
        if (kept.shape != (self.order,) or units.shape != (2,)
                or not (np.isfinite(kept).all() and np.isfinite(units).all())):
            raise StateFormatError("the second autoregression's kept targets do not match the grid.")
        started = self._start()
        started.lags[:], started.units[:] = kept, units
        started.model.restore({key: arrays[f"{name}_{key}"] for key in ("P", "b", "sum")})


def _restore_into(experts: list[LastTarget | TargetLags], arrays: dict[str, np.ndarray], last: str,
                  model: str, targets: TargetScaler | None) -> None:
    """The saved lags (``<last>_targets``, the evidence ``<last>_evidence`` and ``<last>_local``, and their
    units ``<last>_units`` in the scale of ``targets``, both absent from a state saved before them) and the
    change's model (``<model>_P``, ...) into ``experts``."""
    kept, evidence = arrays[f"{last}_targets"], arrays[f"{last}_evidence"]
    local, units = arrays.get(f"{last}_local"), arrays.get(f"{last}_units")
    first, lagged = experts
    assert isinstance(first, LastTarget) and isinstance(lagged, TargetLags)
    if (kept.shape != first.lags.shape or evidence.shape != first.evidence.shape
            or not (np.isfinite(kept).all() and np.isfinite(evidence).all())
            or (local is not None and (local.shape != (1,) or not np.isfinite(local).all()))
            or (units is not None and (units.shape != first.units.shape or not np.isfinite(units).all()))):
        raise StateFormatError("the kept targets do not match the grid.")
    first.lags[:] = kept  # shared: both experts see them
    first.units[:] = 0.0 if units is None else units
    first.targets = lagged.targets = None if units is None else targets  # (saved before: as it was)
    first.evidence[:] = evidence
    first.local = None if local is None else local.astype(np.float64)
    lagged.model.restore({key: arrays[f"{model}_{key}"] for key in ("P", "b", "sum")})


def build_lags(grid: GridContext) -> list[Expert] | None:
    """The two experts on the :data:`~kons.auto.config.LAGS` last targets (regression)."""
    if grid.mixture.binary:
        return None
    return list(lag_experts(LAGS, grid.bound, TARGET_BOUND, LAGS_WAKE_ROWS, grid.targets))


def build_long_lags(grid: GridContext) -> list[Expert] | None:
    """The second autoregression, on the :data:`~kons.auto.config.LAGS_LONG` last targets (regression),
    led by the grid's last target."""
    lags = grid.experts_of("target_last")
    if lags is None:
        return None
    leader = lags[0]
    assert isinstance(leader, LastTarget)
    return [LongLags(leader, LAGS_LONG, grid.bound, grid.kept_targets)]


def restore_long_lags(grid: GridContext, built: list[Expert] | None, arrays: dict[str, np.ndarray],
                      scalars: dict[str, Any]) -> list[Expert] | None:
    """The second autoregression, started or not (a state saved before it: not started, and as its lag
    experts' kind was saved awake or asleep, it stays out or enters with them)."""
    if built is None:
        if any(name.startswith("target_long_lags_") for name in arrays):
            raise StateFormatError("the second autoregression does not match the grid.")
        return None
    cast(LongLags, built[0]).restore(arrays, "target_long_lags")
    return built


def restore_lags(grid: GridContext, built: list[Expert] | None, arrays: dict[str, np.ndarray],
                 scalars: dict[str, Any]) -> list[Expert] | None:
    """The last targets and their model."""
    return restore_saved(grid, built, arrays, "target_last", "the last targets", lambda experts:
                         _restore_into(cast(list[LastTarget | TargetLags], experts), arrays, "target_last",
                                       "target_lags", grid.targets))
