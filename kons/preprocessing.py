r"""Online preprocessing that is part of a learner: what makes raw data learnable with no tuning.

A learner fed raw rows (features in their own units, targets in the tens or thousands, labels as
``{0, 1}`` or booleans) needs, before any paper's update applies:

* **Feature scaling, learned online.** Dense input: each feature is standardised by its running mean and
  standard deviation (Welford's update). The statistics *include the row being transformed* (computed
  without committing them on a prediction), so a prediction and the play of the same round agree and a
  standardised value is bounded by :math:`\sqrt{n}` after :math:`n` rows, even on the first rows of a raw
  stream. Sparse input: each feature is divided by the largest absolute value it has taken, which keeps
  zeros at zero (no centring) and every value in :math:`[-1, 1]`.
* **An intercept.** The linear family gets a constant feature 1 (a bias weight); kernel learners get it
  for regression through the target centring below.
* **Target scaling (regression).** The target is centred and scaled by its running mean and standard
  deviation; the base learner learns the standardised target and its prediction is mapped back to the
  user's units, then clipped to the range of targets seen so far (and to ``[-C, C]`` when the user gives
  ``C``). The base learner clips at :data:`TARGET_BOUND` standard deviations.
* **A step not tied to C.** The second-order learners' default step is the loss's curvature constant
  :math:`\sigma(C)` (e.g. :math:`1/(8C^2)`), which makes learning slower the wider the clipping range.
  On standardised targets the step is instead the value that makes the second-order matrix
  :math:`\eta\,g g^\top` match the loss's Hessian for a residual of one standard deviation:
  :math:`\eta = 1/2` for the squared loss (Hessian :math:`2xx^\top`, :math:`gg^\top = 4r^2 xx^\top`) and
  :math:`\eta = 1` for the logistic loss at :math:`p = 1/2` (Hessian :math:`p(1-p)xx^\top`,
  :math:`gg^\top = (p - y)^2 xx^\top`).
* **A regulariser on the scale of the input.** The sketched linear learners step by
  :math:`g/\alpha` along the directions outside their sketch, which overshoots unless
  :math:`\alpha \gtrsim \|x\|^2`; a standardised row with its constant feature has
  :math:`E\|z\|^2 = d + 1`, so the linear family gets :math:`\alpha = d + 1` (kernels: :math:`k(x, x) = 1`,
  :math:`\alpha = 1`).
* **A data-driven kernel width.** When no kernel is given, the learner buffers the first
  :data:`WARMUP_ROWS` rows (predicting the running mean or the base rate meanwhile), sets the RBF width
  by the median heuristic :math:`\gamma = 1/\mathrm{median}\|z_i - z_j\|^2` on their standardised values,
  then builds the kernel learner and replays the buffered rows into it.
* **Binary labels** ``{-1, +1}``, ``{0, 1}`` or booleans for the binary losses; with the logistic loss,
  :meth:`Preprocessed.predict_proba_one` gives the probability next to the score. (Labels of any kind
  and more than two classes: :class:`~kons.Auto` with ``task="classification"``, :mod:`kons.classes`.)

:func:`kons.learner_from_params` wraps every algorithm in :class:`Preprocessed` unless the parameters say
``"preprocess": false``; the classes themselves (``kons.KONS(...)``) stay paper-exact. The preprocessing
itself is a :class:`Preprocessor`, an object that :class:`Preprocessed` and :class:`~kons.Auto` own next
to their model.

Examples
--------
>>> import numpy as np
>>> import kons
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(400, 3)) * [1.0, 100.0, 0.01] + [0.0, 5000.0, -3.0]
>>> y = 250.0 + 40.0 * np.sin(X[:, 0]) + 0.3 * (X[:, 1] - 5000.0)
>>> model = kons.learner_from_params("ons", {})  # raw rows, raw targets, no tuning
>>> played = model.learn_many(X, y)
>>> bool(np.mean((played[200:] - y[200:]) ** 2) < 0.2 * np.var(y[200:]))
True
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from operator import is_
from typing import Any, ClassVar

import numpy as np

from kons import base as _base
from kons._numerics import clip
from kons._validation import (
    Constraint,
    Integer,
    NoneOr,
    as_label,
    check_feature_values,
    check_int,
    check_real,
)
from kons.base import Learner
from kons.errors import InvalidInputError, InvalidParameterError, StateFormatError
from kons.kernels import Kernel
from kons.losses import Loss, get_loss, sigmoid
from kons.records import IMPUTE_RIDGE, GaussianImputer, Record, RecordEncoder
from kons.sparse import SparseVector, dense

__all__ = ["TARGET_BOUND", "WARMUP_ROWS", "FeatureScaler", "Preprocessed", "Preprocessor", "ScalerStats",
           "TargetScaler",
           "binary_label", "median_width", "nested_blob", "restore_nested", "user_bound", "with_intercept"]

#: Rows buffered before a kernel learner is built with the median-heuristic width.
WARMUP_ROWS = 32
#: Clipping bound of the base learner on standardised regression targets (standard deviations).
TARGET_BOUND = 3.0
#: The constant feature :func:`with_intercept` appends.
_INTERCEPT = np.ones(1)
#: Bytes of one float64.
_FLOAT_BYTES = 8
#: A feature scaler's ``gaps`` when it has none (arrays, sparse rows, a state saved before).
_NO_GAPS = np.zeros(0, dtype=np.int64)
#: The variance a record's number's missing indicator is scaled by, in place of its own (a feature scaler's
#: ``gaps``): standardised by its own, the 0/1 indicator of a gap rate p puts a gapped row
#: :math:`\sqrt{(1 - p) / p}` deviations out (3 for one gap in ten), and the gaps dominate the row's
#: distances.
GAP_VARIANCE = 1.0
#: Default step of the second-order learners on preprocessed data, by loss (see the module docstring).
STEP = {"squared": 0.5, "logistic": 1.0, "squared_hinge": 0.5}


def binary_label(y: Any) -> float:
    """``+1.0`` or ``-1.0`` from a label given as {-1, +1}, {0, 1} or a boolean."""
    if isinstance(y, bool | np.bool_):
        return 1.0 if y else -1.0
    value = as_label(y)
    if value == 1.0:
        return 1.0
    if value in (0.0, -1.0):
        return -1.0
    raise InvalidInputError(f"a binary label must be -1, 0, 1, true or false; got {y!r} (for labels of any "
                            "kind and more than two classes, use the 'auto' learner with task "
                            "'classification').")


def median_width(Z: np.ndarray) -> float:
    """The median heuristic :math:`1/\\mathrm{median}_{i<j}\\|z_i - z_j\\|^2` (``1/d`` if that is 0)."""
    sq = (Z * Z).sum(axis=1)
    dist = sq[:, None] + sq[None, :] - 2.0 * (Z @ Z.T)
    pairs = np.maximum(dist[np.triu_indices(len(Z), k=1)], 0.0)
    median = float(np.median(pairs)) if len(pairs) else 0.0
    return 1.0 / median if median > 0.0 else 1.0 / Z.shape[1]


def checked_form(z: np.ndarray | SparseVector) -> np.ndarray | SparseVector:
    """A standardised row as a base learner's validation would pass it (finite, with a finite squared
    norm), checked once for the bases that take it unchecked (``_learn_checked``), inside their round's
    numerics context (which ignores an overflow)."""
    values = z.values if isinstance(z, SparseVector) else z
    # The squared norm (one BLAS dot) is finite exactly when the check passes: a NaN or an infinity makes
    # it NaN or infinite, and the check's own test of it is this dot. The check then names the problem.
    if not math.isfinite(values.dot(values)):
        check_feature_values(values)
    return z


def with_intercept(z: np.ndarray | SparseVector) -> np.ndarray | SparseVector:
    """``z`` with the constant feature 1 appended (the linear family's intercept)."""
    if isinstance(z, SparseVector):
        return SparseVector(np.append(z.indices, z.dim), np.append(z.values, 1.0), z.dim + 1)
    return np.concatenate((z, _INTERCEPT))  # np.append without its wrapper (every round)


def user_bound(owner: str, C: Any) -> float | None:
    """The user's bound on predictions, in their units: None (the data's) or a positive float."""
    return None if C is None else check_real(owner, "C", C, low=0.0, low_open=True)


def nested_blob(learner: Learner) -> np.ndarray:
    """A learner's state blob as a byte array, to be saved inside another learner's state."""
    return np.frombuffer(learner.to_bytes(), dtype=np.uint8)


def restore_nested(array: np.ndarray) -> Learner:
    """Inverse of :func:`nested_blob`, for an array of a state being loaded, whose checksum covers it (an
    inconsistent blob raises :class:`StateFormatError`)."""
    if array.dtype != np.uint8 or array.ndim != 1:
        raise StateFormatError("a nested learner state must be a 1-D byte array.")
    return _base.load_nested(array.tobytes())


#: What :meth:`FeatureScaler.pending` computes and :meth:`FeatureScaler.commit` keeps: the mean, the
#: sums of squared deviations, the largest magnitudes and the per-coordinate counts (None: every
#: coordinate has the scaler's ``count``).
ScalerStats = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]


def _divided(deviation: np.ndarray, std: np.ndarray, masked: bool = False) -> np.ndarray:
    """``deviation / std``, 0 where ``std`` is not positive (a coordinate without variance), written into
    ``deviation`` (the caller's temporary): one division without the mask once every ``std`` is positive;
    ``masked``: with the mask at once, without that test (a record's row, whose coordinates that no name has
    taken yet have no variance)."""
    divided: np.ndarray
    # (False for a NaN; the ufunc's reduction: ndarray.min wraps it)
    if not masked and float(np.minimum.reduce(std)) > 0.0:
        divided = np.divide(deviation, std, out=deviation)
    else:
        divided = np.divide(deviation, std, out=np.zeros(len(std)), where=std > 0)
    return divided


class FeatureScaler:
    """Running per-feature scaling: Welford mean/variance (dense) or running max |x_j| (sparse).

    A dense row may leave coordinates out (NaN, as a record's missing values are encoded,
    :mod:`kons.records`): such a coordinate's value is imputed by its running mean (0 once
    standardised) and the round does not count in its statistics. The scaler then keeps a count per
    coordinate (``counts``); until the first such row it has none, and arrays give exactly the results
    (and the saved state) they gave before gaps existed.

    ``groups``: sets of coordinates that share one scale, the root mean of their variances (a record's
    categorical name: :meth:`~kons.records.RecordEncoder.category_groups`), so that a rare category's
    coordinate is not blown up by the inverse root of its frequency; every other coordinate has its own
    deviation. ``omits_groups``: the groups' coordinates standardise to 0 instead (a view that leaves the
    categorical names out). ``gaps``: coordinates scaled by the fixed variance :data:`GAP_VARIANCE`, centred
    only (a record's numbers' missing indicators: :meth:`~kons.records.RecordEncoder.number_gaps`).
    """

    def __init__(self, dim: int, sparse: bool, groups: tuple[np.ndarray, ...] = (),
                 omits_groups: bool = False, gaps: np.ndarray | None = None) -> None:
        self.dim = dim
        self.sparse = sparse
        self.groups = groups
        self.omits_groups = omits_groups
        self.gaps = _NO_GAPS if gaps is None else gaps
        self.count = 0
        self.mean = np.zeros(dim)
        self.m2 = np.zeros(dim)  # sum of squared deviations (dense) or unused (sparse)
        self.maxabs = np.zeros(dim)
        self.counts: np.ndarray | None = None  # per coordinate, once a row has had a gap
        # the last dense row pending() scaled, what it was scaled by, and its result (not state): a
        # prediction and the learning round of the same row scale it once
        self._pending: tuple[tuple[Any, ...], tuple[Any, ...],
                             tuple[np.ndarray | SparseVector, ScalerStats]] | None = None
        # the statistics the inverse deviations were computed from, and those (not state): every commit
        # replaces the arrays, so the rows of one state share them (standardised_before())
        self._inverse: tuple[tuple[Any, ...], int, np.ndarray] | None = None
        # the deviations the last dense pending() row was scaled by and the statistics they are of, and
        # those of the statistics committed last, if a pending() row computed them (not state): the
        # deviations of the next row's standardised_before()
        self._pending_std: tuple[tuple[Any, ...], int, np.ndarray] | None = None
        self._committed_std: tuple[tuple[Any, ...], int, np.ndarray] | None = None

    def _with(self, x: np.ndarray | SparseVector
              ) -> tuple[ScalerStats, np.ndarray | None, int | np.ndarray | None]:
        """``(mean, m2, maxabs, counts)`` after including ``x`` (nothing committed), and, for a dense ``x``,
        ``x`` less that mean (0 where it misses a value): the numerator of its standardised value, and
        the counts the new statistics divide by (:meth:`_divisor`, for :meth:`_std`)."""
        if isinstance(x, SparseVector):
            maxabs = self.maxabs.copy()
            maxabs[x.indices] = np.maximum(maxabs[x.indices], np.abs(x.values))
            return (self.mean, self.m2, maxabs, self.counts), None, None
        # (the squared norm, one BLAS dot, is NaN exactly when a value is: no other sum of squares is;
        # inside a round's numerics context, which ignores its overflow)
        if self.counts is None and not math.isnan(x.dot(x)):
            delta = x - self.mean
            divisor = self._divisor(None, self.count + 1)
            mean = self.mean + delta / divisor
            deviation = x - mean
            return (mean, self.m2 + delta * deviation, self.maxabs, None), deviation, divisor
        present = x == x  # (False where NaN)
        counts = (np.full(self.dim, float(self.count)) if self.counts is None else self.counts) + present
        # A missing value taken as the mean: its delta and deviation are then 0 and its mean stays, as the
        # masked operations left them (the divisor at least 1: a coordinate never given a value has the
        # count 0; a mean is never a negative zero, which the deviation would keep: it starts at a positive
        # zero, and a sum is a negative zero only of two), in whole-array operations, each cheaper than its
        # masked form (a record's rows).
        given = np.where(present, x, self.mean)
        delta = given - self.mean
        divisor = self._divisor(counts, self.count + 1)
        mean = self.mean + delta / divisor
        deviation = given - mean
        return (mean, self.m2 + delta * deviation, self.maxabs, counts), deviation, divisor

    @staticmethod
    def _divisor(counts: np.ndarray | None, count: int) -> int | np.ndarray:
        """What the statistics of ``count`` rows (``counts`` per coordinate, if any) divide by: at least 1
        (a coordinate never given a value has the count 0)."""
        return max(count, 1) if counts is None else np.maximum(counts, 1.0)

    def _std(self, m2: np.ndarray, divisor: int | np.ndarray) -> np.ndarray:
        """The deviations of the sums of squared deviations ``m2`` over their counts (:meth:`_divisor`)."""
        variance = m2 / divisor
        for group in self.groups:  # (an infinite scale standardises a coordinate to 0)
            # (the mean as ndarray.mean computes it, without its Python wrapper: every scaled row takes it)
            variance[group] = np.inf if self.omits_groups else np.add.reduce(variance[group]) / len(group)
        if len(self.gaps):
            variance[self.gaps] = GAP_VARIANCE
        std: np.ndarray = np.sqrt(variance, out=variance)
        return std

    def transform(self, x: np.ndarray | SparseVector, *, commit: bool) -> np.ndarray | SparseVector:
        """``x`` scaled by the statistics that include it; ``commit`` keeps those statistics."""
        z, stats = self.pending(x)
        if commit:
            self.commit(stats)
        return z

    def pending(self, x: np.ndarray | SparseVector) -> tuple[np.ndarray | SparseVector, ScalerStats]:
        """``x`` scaled by the statistics that include it, and those statistics, to :meth:`commit` once
        the round that uses them has succeeded."""
        if isinstance(x, np.ndarray):
            key = (self.count, self.omits_groups, x.dtype, x.shape, x.tobytes())
            # (replaced, never written to)
            state = (self.mean, self.m2, self.maxabs, self.counts, self.groups, self.gaps)
            kept = self._pending
            if (kept is not None and kept[0] == key
                    and all(map(is_, kept[1], state))):  # (both of six; no generator's frame)
                return kept[2]
            scaled = self._pending_of(x)
            self._pending = key, state, scaled
            return scaled
        return self._pending_of(x)

    def _pending_of(self, x: np.ndarray | SparseVector) -> tuple[np.ndarray | SparseVector, ScalerStats]:
        stats, deviation, divisor = self._with(x)
        _, m2, maxabs, counts = stats
        if isinstance(x, SparseVector):
            scale = maxabs[x.indices]
            z: np.ndarray | SparseVector = SparseVector(
                x.indices, np.divide(x.values, scale, out=np.zeros(len(scale)), where=scale > 0), x.dim)
        else:
            assert divisor is not None  # (a dense row's)
            std = self._std(m2, divisor)
            self._pending_std = (m2, counts, self.groups, self.gaps), self.count + 1, std
            assert deviation is not None  # (a dense row's)
            # (a missing value's deviation is 0: so is its standardised value)
            z = _divided(deviation, std, masked=counts is not None)
        return z, stats

    def commit(self, stats: ScalerStats) -> None:
        """Keep the statistics :meth:`pending` computed."""
        self.count += 1
        self.mean, self.m2, self.maxabs, self.counts = stats
        self._committed_std = self._pending_std

    def standardise(self, x: np.ndarray) -> np.ndarray:
        """A dense ``x`` scaled by the current statistics (the buffered warm-up rows)."""
        if self.sparse:
            scaled: np.ndarray = np.divide(x, self.maxabs, out=np.zeros(self.dim), where=self.maxabs > 0)
            return scaled
        deviation = np.subtract(x, self.mean, out=np.zeros(self.dim), where=~np.isnan(x))  # (0 if left out)
        return _divided(deviation, self._std(self.m2, self._divisor(self.counts, self.count)))

    def standardised_before(self, x: np.ndarray) -> np.ndarray | None:
        """A dense ``x`` standardised by the current statistics, those of the rows before it, with the
        constant feature 1 appended (the row the linear models of :class:`~kons.Auto` play on); None if
        that overflows."""
        of, kept = (self.m2, self.counts, self.groups, self.gaps), self._inverse
        if kept is None or not self._is_of(kept, of):
            committed = self._committed_std
            std = (committed[2] if committed is not None and self._is_of(committed, of)
                   else self._std(self.m2, self._divisor(self.counts, self.count)))
            # (as _divided: without the mask once every deviation is positive, a row without gaps)
            inverse = (np.divide(1.0, std) if self.counts is None and float(np.minimum.reduce(std)) > 0.0
                       else np.divide(1.0, std, out=np.zeros(self.dim), where=std > 0))
            kept = self._inverse = of, self.count, inverse
        row = np.empty(self.dim + 1)
        deviation = np.subtract(x, self.mean, out=row[:-1])
        deviation *= kept[2]
        row[-1] = 1.0
        # (the squared norm, one BLAS dot, cheaper than a reduction, is finite only when every value is)
        if not math.isfinite(row.dot(row)):  # a missing value (NaN: standardised to 0), or an overflow
            deviation[np.isnan(x)] = 0.0
            # the squared norm again, the values one by one only if it overflows (ndarray.all wraps this
            # reduction in Python)
            if not (math.isfinite(row.dot(row)) or np.logical_and.reduce(np.isfinite(row))):
                return None
        return row

    def _is_of(self, kept: tuple[tuple[Any, ...], int, np.ndarray], of: tuple[Any, ...]) -> bool:
        """Whether ``kept`` was computed from the statistics ``of`` at the current count."""
        return kept[1] == self.count and all(map(is_, kept[0], of))  # (both of four; no generator's frame)

    def snapshot(self) -> tuple[int, ScalerStats]:
        """The statistics, to :meth:`rollback` to."""
        return self.count, (self.mean, self.m2, self.maxabs, self.counts)

    def rollback(self, snapshot: tuple[int, ScalerStats]) -> None:
        self.count, (self.mean, self.m2, self.maxabs, self.counts) = snapshot

    def arrays(self, prefix: str = "x") -> dict[str, np.ndarray]:
        arrays = {f"{prefix}_mean": self.mean, f"{prefix}_m2": self.m2, f"{prefix}_maxabs": self.maxabs}
        if self.counts is not None:
            arrays[f"{prefix}_counts"] = self.counts
        return arrays

    def restore(self, arrays: dict[str, np.ndarray], count: int, prefix: str = "x") -> None:
        keys = (f"{prefix}_mean", f"{prefix}_m2", f"{prefix}_maxabs")
        counts = arrays.get(f"{prefix}_counts")
        for key in (*keys, f"{prefix}_counts") if counts is not None else keys:
            if arrays[key].shape != (self.dim,):
                raise StateFormatError(f"array {key!r} does not match the dimension {self.dim}.")
        self.count = count
        self.mean, self.m2, self.maxabs = (arrays[k] for k in keys)
        self.counts = counts


class TargetScaler:
    """Running mean, standard deviation and range of a regression target."""

    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.low = math.inf
        self.high = -math.inf

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / self.count) if self.count else 0.0

    def to_user(self, f: float, bound: float | None, margin: float = 0.0) -> float:
        """A standardised prediction in the user's units, clipped to the targets' range widened by
        ``margin`` times its width on each side (and to ``bound``)."""
        if not self.count:
            return 0.0
        spread = margin * (self.high - self.low)
        y = clip(self.mean + self.std * f, self.low - spread, self.high + spread)
        return y if bound is None else clip(y, -bound, bound)

    def standardised(self, y: float) -> tuple[float, tuple[int, float, float, float, float]]:
        """``y`` standardised by the statistics that include it, and those statistics (uncommitted)."""
        count = self.count + 1
        delta = y - self.mean
        mean = self.mean + delta / count
        m2 = self.m2 + delta * (y - mean)
        std = math.sqrt(m2 / count)
        t = (y - mean) / std if std > 0.0 else 0.0
        return t, (count, mean, m2, min(self.low, y), max(self.high, y))

    def commit(self, stats: tuple[int, float, float, float, float]) -> None:
        self.count, self.mean, self.m2, self.low, self.high = stats

    def scalars(self) -> dict[str, Any]:
        return {"y": [self.count, self.mean, self.m2, self.low, self.high] if self.count else [0]}

    def restore(self, scalars: dict[str, Any]) -> None:
        stats = scalars["y"]
        if stats[0]:
            self.commit((int(stats[0]), float(stats[1]), float(stats[2]), float(stats[3]), float(stats[4])))


class Preprocessor:
    """The online preprocessing a composite learner owns (:class:`Preprocessed`, :class:`~kons.Auto`).

    It holds the feature scaler (created by the first row, dense or sparse as that row), the record
    encoder (when the first row is a record, :mod:`kons.records`), the target scaler (regression) or the
    counts of the labels (binary losses), and the warm-up buffer of the rows played before the model's
    kernel width is known. The owner builds its model (at the first row, or
    from the buffered rows once :meth:`warm_up` says the buffer is full), plays it on the scaled rows
    (:meth:`scaled_round`) and so learns the standardised target, in the user's units again.

    Parameters
    ----------
    loss
        The owner's loss: labels of a binary loss are mapped to {-1, +1}, regression targets standardised.
    user_bound
        The user's ``C`` (None: the data's range for regression, ``model_bound`` for a binary loss).
    model_bound
        The bound on the model's plays on standardised data (scores, for a binary loss).
    warms_up
        Whether the model waits for the warm-up rows (the median-heuristic kernel width).
    range_margin
        How far beyond the targets' range a prediction may go, in widths of that range (regression; a
        ``user_bound`` clips it too): 0 clips to the range.
    pooled
        Whether the coordinates of a record's categorical name (its categories and its missing
        indicator: :meth:`RecordEncoder.category_groups`) share one scale; else each is standardised on
        its own, and a rare category stands out by the inverse root of its frequency.
    imputes
        Whether a record's missing numbers are imputed by their conditional mean given its present ones
        (:class:`~kons.records.GaussianImputer`); else each is its running mean, 0 once standardised.
    fixes_gaps
        Whether a record's numbers' missing indicators are scaled by the fixed :data:`GAP_VARIANCE`
        (:meth:`RecordEncoder.number_gaps`); else each is standardised by its own deviation, and a rare
        gap stands out by the inverse root of its rate.
    """

    def __init__(self, *, loss: Loss, user_bound: float | None, model_bound: float, warms_up: bool,
                 range_margin: float = 0.0, pooled: bool = False, imputes: bool = False,
                 fixes_gaps: bool = False) -> None:
        self.loss = loss
        self.range_margin = range_margin
        self.pooled = pooled
        self.fixes_gaps = fixes_gaps
        self.binary = bool(loss.binary)
        self.user_bound = user_bound
        self.model_bound = model_bound
        self.warms_up = warms_up
        self.scaler: FeatureScaler | None = None
        self.encoder: RecordEncoder | None = None  # the first row was a record
        self.imputer = GaussianImputer(IMPUTE_RIDGE) if imputes else None  # (used by records only)
        self.y = TargetScaler()
        self.labels = [0, 0]  # counts of the labels by class index (binary losses: -1 and +1)
        self.buffer: list[tuple[np.ndarray, float]] = []
        self.ready = False  # whether the owner's model exists

    # ----------------------------------------------------------------- labels and bounds
    def check_label(self, y: Any) -> float:
        """The label as the model uses it: {-1, +1} for a binary loss (from {0, 1} or booleans too)."""
        if self.binary:
            return binary_label(y)
        if type(y) is float and math.isfinite(y * y):  # (a float passes as_label as itself: every round's)
            return y
        value = as_label(y)
        if not math.isfinite(value * value):  # the running variance of the target would overflow
            raise InvalidInputError(f"the label {value!r} is too large: its square overflows float64.")
        return value

    @property
    def bound(self) -> float:
        """The user's ``C``, else ``model_bound`` (binary loss) or the largest target magnitude seen (a
        scale: with a ``range_margin``, a prediction may reach past it, :meth:`to_user`)."""
        if self.user_bound is not None:
            return self.user_bound
        if self.binary:
            return self.model_bound
        return max(abs(self.y.low), abs(self.y.high)) if self.y.count else 0.0

    def prior(self) -> float:
        """The prediction before the model exists: the running mean, or the base rate's log-odds."""
        if self.binary:
            negative, positive = self.labels
            bound = self.model_bound
            return clip(math.log((positive + 0.5) / (negative + 0.5)), -bound, bound)
        return self.y.to_user(0.0, self.user_bound)

    def to_user(self, f: float) -> float:
        """A play of the model on standardised data in the user's units (clipped to the targets' range
        widened by ``range_margin``, and to the user's ``C``)."""
        return f if self.binary else self.y.to_user(f, self.user_bound, self.range_margin)

    def probability(self, score: float) -> float:
        """The probability of the label +1 for a ``score`` (the logistic loss only): its sigmoid."""
        if self.loss.name != "logistic":
            raise InvalidParameterError(
                f"probabilities need the logistic loss; this learner has {self.loss.name}")
        return sigmoid(score)

    # ----------------------------------------------------------------- records
    def check_form(self, x: np.ndarray | SparseVector | Record) -> np.ndarray | SparseVector | Record:
        """``x`` if it has the form of the rows learned so far: records, or arrays (dense or sparse)."""
        if self.scaler is not None and isinstance(x, Record) != (self.encoder is not None):
            learned, given = ("records", "an array") if self.encoder is not None else ("arrays", "a record")
            raise InvalidInputError(f"this learner has learned {learned}; it cannot take {given}.")
        return x

    def encode(self, x: np.ndarray | SparseVector | Record, dim: int
               ) -> tuple[np.ndarray | SparseVector, tuple[RecordEncoder, Any, np.ndarray] | None]:
        """A record as its vector, its missing numbers imputed if the imputer can (left as it is: any
        other row), and what learning it adds to the encoder and the imputer, for :meth:`commit_encoding`
        once the round has succeeded."""
        if not isinstance(x, Record):
            return x, None
        encoder = self.encoder if self.encoder is not None else RecordEncoder(dim)
        vector, pending = encoder.pending(x)
        filled = vector if self.imputer is None else self.imputer.filled(vector)
        return filled, (encoder, pending, vector)

    def encoded(self, x: np.ndarray | SparseVector | Record, dim: int) -> np.ndarray | SparseVector:
        """A record as its vector on the current encoding (a prediction: nothing kept)."""
        return self.encode(x, dim)[0]

    def commit_encoding(self, encoding: tuple[RecordEncoder, Any, np.ndarray] | None) -> None:
        """Keep what :meth:`encode` computed."""
        if encoding is not None:
            self.encoder, pending, vector = encoding
            self.encoder.commit(pending)
            if self.imputer is not None:  # (the row as sent: an imputed number is not counted)
                numbers = [s for (_, kind, _), s in pending.taken.items() if kind == "numeric"]
                self.imputer.commit(vector, numbers)
            if pending.taken:
                self._pool()

    @property
    def record_imputer(self) -> GaussianImputer | None:
        """The imputer once the rows are records, what it imputes (None: no imputer, or no record yet)."""
        return self.imputer if self.encoder is not None else None

    def _pool(self) -> None:
        """Give the feature scaler the encoder's categorical names' groups of coordinates (if ``pooled``)
        and its numbers' missing indicators (if ``fixes_gaps``)."""
        if self.scaler is None or self.encoder is None:
            return
        if self.pooled:
            self.scaler.groups = self.encoder.category_groups()
        if self.fixes_gaps:
            self.scaler.gaps = self.encoder.number_gaps()

    @property
    def groups(self) -> tuple[np.ndarray, ...]:
        """The feature scaler's groups of coordinates that share one scale (none before the first row)."""
        return () if self.scaler is None else self.scaler.groups

    @property
    def gaps(self) -> np.ndarray:
        """The feature scaler's coordinates of the fixed variance :data:`GAP_VARIANCE` (none before the
        first row)."""
        return _NO_GAPS if self.scaler is None else self.scaler.gaps

    def encoding(self) -> dict[str, Any] | None:
        """:meth:`RecordEncoder.encoding` (None: the learner learns arrays, or has seen no row)."""
        return None if self.encoder is None else self.encoder.encoding()

    # ----------------------------------------------------------------- rounds
    def begin(self, x: np.ndarray | SparseVector, dim: int) -> bool:
        """At the first row, create the feature scaler (sparse for a sparse row); True when the owner
        builds its model now (it needs no warm-up)."""
        if self.scaler is not None:
            return False
        self.scaler = FeatureScaler(dim, isinstance(x, SparseVector))
        self.ready = not self.warms_up
        return self.ready

    @property
    def x_scaler(self) -> FeatureScaler:
        """The feature scaler (what uses it runs after the first row has created it)."""
        if self.scaler is None:  # pragma: no cover - a programming error
            raise RuntimeError("the feature scaler is created by the first row")
        return self.scaler

    def target(self, y: float) -> tuple[float, tuple[int, float, float, float, float] | None]:
        """What the model learns for the label ``y`` (standardised for regression) and the target's
        statistics including it, for :meth:`commit_target` once the round has succeeded."""
        return (y, None) if self.binary else self.y.standardised(y)

    def commit_target(self, y: float, stats: tuple[int, float, float, float, float] | None) -> None:
        if stats is not None:
            self.y.commit(stats)
        else:
            self.labels[y > 0] += 1

    def count_class(self, index: int) -> None:
        """Count a label of class ``index`` (a multi-class owner's; a new class is the next index)."""
        if index == len(self.labels):
            self.labels.append(0)
        self.labels[index] += 1

    def scaled_round(self, x: np.ndarray | SparseVector,
                     play: Callable[[np.ndarray | SparseVector], float]) -> float:
        """The model's ``play`` on ``x`` scaled by the statistics that include it, in the user's units;
        the scaler keeps those statistics only if ``play`` succeeds."""
        z, scaled = self.x_scaler.pending(x)
        played = self.to_user(play(z))
        self.x_scaler.commit(scaled)
        return played

    def scaled(self, x: np.ndarray | SparseVector) -> np.ndarray | SparseVector:
        """``x`` scaled as :meth:`scaled_round` would, nothing kept (a prediction)."""
        return self.x_scaler.transform(x, commit=False)

    @contextmanager
    def warm_up(self, x: np.ndarray | SparseVector, y: float) -> Iterator[bool]:
        """Buffer a warm-up row (the scaler takes it) and yield whether the buffer is now full.

        When it is, the owner builds its model from :meth:`standardised_buffer` and :meth:`replay` inside
        the block; the buffer is then emptied and the model ready. If the block raises, the row is taken
        back (the scaler and the buffer are as before the round).
        """
        scaler = self.x_scaler
        saved = scaler.snapshot()
        scaler.transform(x, commit=True)
        self.buffer.append((dense(x).copy(), y))
        full = len(self.buffer) >= WARMUP_ROWS
        try:
            yield full
        except BaseException:
            self.buffer.pop()
            scaler.rollback(saved)
            raise
        if full:
            self.buffer = []
            self.ready = True

    def standardised_buffer(self) -> np.ndarray:
        """The buffered rows standardised by the current statistics (their median width)."""
        return np.stack([self.x_scaler.standardise(x) for x, _ in self.buffer])

    def replay(self, Z: np.ndarray, y_stats: tuple[int, float, float, float, float] | None
               ) -> Iterator[tuple[np.ndarray | SparseVector, float, np.ndarray | SparseVector]]:
        """``(z, t, x)`` for each buffered row: standardised (``Z``, sparse if the rows are), its target
        standardised with the statistics including them all, and the row as it was given."""
        if y_stats is not None:
            mean, std = y_stats[1], math.sqrt(y_stats[2] / y_stats[0])
        sparse = self.x_scaler.sparse
        for z, (x, y) in zip(Z, self.buffer, strict=True):
            t = y if y_stats is None else ((y - mean) / std if std > 0.0 else 0.0)
            if sparse:
                yield SparseVector.from_dense(z), t, SparseVector.from_dense(x)
            else:
                yield z, t, x

    # ----------------------------------------------------------------- size
    def nbytes(self) -> int:
        """The scaler's, the record encoder's and the warm-up buffer's bytes."""
        if self.scaler is None:
            return 0
        buffered = _FLOAT_BYTES * len(self.buffer) * (self.scaler.dim + 1)  # buffer_x and buffer_y
        encoder = 0 if self.encoder is None else self.encoder.nbytes()
        imputer = self.record_imputer
        imputed = 0 if imputer is None else imputer.nbytes()
        return _base.arrays_nbytes(self.scaler.arrays()) + buffered + encoder + imputed

    def encoder_growth_nbytes(self) -> int:
        """What the record encoder may still add (bounded by its width; 0 for arrays)."""
        if self.encoder is None:
            return 0
        if self.imputer is None:
            return self.encoder.growth_nbytes()
        tracked = len(self.imputer.coordinates)  # (every free coordinate may be a new number's)
        return self.encoder.growth_nbytes() + GaussianImputer.growth_nbytes(
            tracked, tracked + self.encoder.free - self.encoder.taken)

    def warm_up_growth_nbytes(self, dim: int, rounds: int, fresh_model_nbytes: Callable[[int], int]) -> int:
        """Before the model is ready: what the scaler, the warm-up buffer and the model about to be built
        (its initial size and its growth over the buffered rows replayed into it and the rounds after
        them, ``fresh_model_nbytes(rounds)``) may add in ``rounds`` rounds."""
        scaler = (0 if self.scaler is not None else _FLOAT_BYTES * 3 * dim) + self.encoder_growth_nbytes()
        if self.scaler is None and not self.warms_up:
            return scaler + fresh_model_nbytes(rounds)  # built by the first row
        left = WARMUP_ROWS - len(self.buffer)
        buffered = _FLOAT_BYTES * min(rounds, left) * (dim + 1)
        if rounds < left:
            return scaler + buffered
        return scaler + buffered + fresh_model_nbytes(WARMUP_ROWS + rounds - left)

    # ----------------------------------------------------------------- persistence
    def arrays(self) -> dict[str, np.ndarray]:
        if self.scaler is None:
            return {}
        arrays = self.scaler.arrays()
        imputer = self.record_imputer
        if imputer is not None:
            arrays.update(imputer.arrays())
        if self.buffer:
            rows = np.stack([x for x, _ in self.buffer])
            gaps = np.isnan(rows)
            if gaps.any():  # a state holds finite numbers only: the records' gaps are saved as a mask
                arrays["buffer_gaps"] = gaps
                rows = np.where(gaps, 0.0, rows)
            arrays["buffer_x"] = rows
            arrays["buffer_y"] = np.array([y for _, y in self.buffer])
        return arrays

    def scalars(self) -> dict[str, Any]:
        if self.scaler is None:
            return {}
        scalars = {"sparse": self.scaler.sparse, "count": self.scaler.count, "labels": list(self.labels),
                   "ready": self.ready, **self.y.scalars()}
        if self.encoder is not None:
            scalars["records"] = self.encoder.scalars()
            if self.pooled:  # (a state of records saved before pooling existed goes on without it)
                scalars["pooled"] = True
            if self.fixes_gaps:  # (and one saved before the gaps' fixed variance, without it)
                scalars["fixes_gaps"] = True
        return scalars

    def restore(self, dim: int, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        """Load what :meth:`arrays` and :meth:`scalars` saved (nothing: before the first row)."""
        if not scalars:
            return
        self.scaler = FeatureScaler(dim, bool(scalars["sparse"]))
        self.scaler.restore(arrays, int(scalars["count"]))
        self.labels = [int(v) for v in scalars["labels"]]
        self.y.restore(scalars)
        if "records" in scalars:
            self.pooled = self.pooled and bool(scalars.get("pooled", False))
            self.fixes_gaps = self.fixes_gaps and bool(scalars.get("fixes_gaps", False))
            self.encoder = RecordEncoder.from_scalars(scalars["records"], dim)
            self._pool()
            imputer = self.record_imputer
            if imputer is not None:
                if "impute_moments" in arrays:
                    imputer.restore(arrays, dim)
                else:  # a state saved before the imputer existed: its statistics start now
                    numeric = [k.numeric for k in self.encoder.names.values() if k.numeric >= 0]
                    imputer.track(numeric, self.scaler.mean[numeric])
        if "buffer_x" in arrays:
            rows, ys = arrays["buffer_x"], arrays["buffer_y"]
            if rows.shape != (len(ys), dim):
                raise StateFormatError("the warm-up buffer does not match the dimension.")
            if "buffer_gaps" in arrays:
                gaps = arrays["buffer_gaps"]
                if gaps.shape != rows.shape or gaps.dtype != np.bool_:
                    raise StateFormatError("the warm-up buffer's gaps do not match its rows.")
                rows = np.where(gaps, np.nan, rows)
            self.buffer = [(row, float(y)) for row, y in zip(rows, ys, strict=True)]
        self.ready = bool(scalars["ready"])


class _Registered:
    """The registry name of a learner without preprocessing of its own."""

    def check(self, owner: str, name: str, value: Any) -> str:
        cls = _base.LEARNERS.get(value) if isinstance(value, str) else None
        if cls is None or cls.preprocesses:
            choices = sorted(k for k, c in _base.LEARNERS.items() if not c.preprocesses)
            raise InvalidParameterError(
                f"The {name!r} parameter of {owner} must be one of {choices}. Got {value!r} instead.")
        return str(value)


class _AnyDict:
    """A dict of the base learner's parameters (checked by the base itself), without ``dim``."""

    def check(self, owner: str, name: str, value: Any) -> dict[str, Any]:
        value = {} if value is None else value
        if not isinstance(value, dict) or "dim" in value:
            raise InvalidParameterError(f"The {name!r} parameter of {owner} must be a dict without 'dim'")
        return value


#: Base parameters whose default preprocessing replaces (data-driven or rescaled): never filled in.
_DATA_DRIVEN = ("kernel", "eta", "C", "alpha", "dim")


def _canonical(cls: type[Learner], params: dict[str, Any]) -> dict[str, Any]:
    """The base's parameters as JSON values in sorted order, with the defaults that preprocessing keeps
    filled in: the same learner has the same parameters however it was asked for."""
    defaults = {k: v for k, v in cls._defaults().items() if k not in _DATA_DRIVEN}
    merged = {**defaults, **params}
    merged = {k: v.to_dict() if isinstance(v, Kernel) else v for k, v in merged.items()}
    try:
        canonical: dict[str, Any] = json.loads(json.dumps(merged, sort_keys=True, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidParameterError(f"The 'params' of Preprocessed must be JSON values: {exc}") from None
    return canonical


class Preprocessed(Learner):
    """Any registered learner behind online preprocessing (:mod:`kons.preprocessing`).

    Parameters
    ----------
    algorithm : str, default "sketched_kons"
        Registry name of the base learner.
    params : dict or None, default None
        The base learner's hyper-parameters. ``kernel`` omitted: RBF with the median-heuristic width of
        the first :data:`WARMUP_ROWS` standardised rows. ``eta`` omitted for a learner whose default
        ``eta`` is the loss curvature: :data:`STEP`. ``C`` (regression): the bound on predictions in the
        user's units (the base learner clips at :data:`TARGET_BOUND` standard deviations).
    dim : int or None, default None

    Examples
    --------
    >>> import kons
    >>> m = kons.learner_from_params("kons", {"loss": "logistic"})
    >>> type(m).__name__, m.get_params()["algorithm"]
    ('Preprocessed', 'kons')
    >>> # warm-up rounds play the base rate's log-odds (clipped to C = 1) until the width is known
    >>> [round(m.learn_one([3.0, 1000.0], label), 3) for label in (True, 0, 1)]
    [0.0, 1.0, 0.0]
    >>> m.predict_proba_one([3.0, 1000.0]) > 0.5  # two positives, one negative seen
    True
    """

    name = "preprocessed"
    preprocesses = True
    accepts_sparse = True
    accepts_records = True
    # "algorithm" and "params" are checked against the registry and the base's own constraints in
    # __init__ (the base is built once there to validate them).
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "algorithm": _Registered(),
        "params": _AnyDict(),
        "dim": NoneOr(Integer(low=1)),
    }

    def __init__(self, *, algorithm: str = "sketched_kons", params: dict[str, Any] | None = None,
                 dim: int | None = None) -> None:
        constraints = self._parameter_constraints
        self.algorithm = constraints["algorithm"].check("Preprocessed", "algorithm", algorithm)
        params = constraints["params"].check("Preprocessed", "params", params)
        cls = _base.LEARNERS[algorithm]
        self.params = params  # as given (scikit-learn's clone checks identity); used in canonical form
        self._params = _canonical(cls, params)
        self._base_cls = cls
        self._base_params = self._resolved(cls, self._params)
        probe = cls.from_params(self._base_params)  # validates the base's parameters now
        self.loss = probe.loss
        self._loss = probe._loss
        self._user_bound = None if probe._loss.binary else user_bound("Preprocessed", self._params.get("C"))
        self._score_bound = probe.C
        self.dim = None if dim is None else check_int("Preprocessed", "dim", dim, low=1)
        self.grows = cls.grows
        self.can_hold_growth = cls.can_hold_growth
        self._spread_exponent = cls._spread_exponent
        self._reset()

    def _reset(self) -> None:
        self._prep = Preprocessor(loss=self._loss, user_bound=self._user_bound, model_bound=self._score_bound,
                                  warms_up=self._base_cls.uses_kernel and "kernel" not in self._params)
        self._base: Learner | None = None  # built at the first row, or after the warm-up
        self._base_played = False  # whether the base played the last round (else the prior did)
        super()._reset()

    def algorithm_params(self) -> tuple[str, dict[str, Any]]:
        """The base algorithm and its parameters with ``"preprocess": True`` (this learner is what
        :func:`~kons.learner_from_params` builds from them)."""
        return self.algorithm, {**self._params, "preprocess": True, "dim": self.dim}

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """``algorithm``, ``params`` (in canonical form: JSON values, sorted, the defaults that
        preprocessing keeps filled in; with ``deep=False`` as given, for scikit-learn's clone) and ``dim``."""
        return {"algorithm": self.algorithm, "params": self._params if deep else self.params, "dim": self.dim}

    @staticmethod
    def _resolved(cls: type[Learner], params: dict[str, Any]) -> dict[str, Any]:
        """The base's parameters with the preprocessing defaults (step, regression bound) filled in."""
        resolved = dict(params)
        loss = get_loss(params.get("loss", "squared"))
        if cls._eta_from_curvature and params.get("eta") is None:
            resolved["eta"] = STEP.get(loss.name, loss.curvature(1.0))
        if not loss.binary:
            resolved["C"] = TARGET_BOUND
        return resolved

    @classmethod
    def _model_floats(cls, dim: int, params: dict[str, Any]) -> int:
        # The base learner (on d + 1 features at most: the intercept) and the feature scaler (3 d).
        base = _base.LEARNERS[params["algorithm"]]
        return base.state_bytes({**params["params"], "dim": dim + 1}) // 8 + 3 * dim

    # ----------------------------------------------------------------- the base learner
    @property
    def C(self) -> float:  # type: ignore[override]  # noqa: N802 - the learners' name for the bound
        """The bound on every prediction: the user's ``C``, else the largest target magnitude seen."""
        return self._prep.bound

    def _reset_model(self) -> None:
        """Nothing yet: the scalers and the base start with the first row."""

    def _base_dim(self) -> int:
        return self._dim if self._base_cls.uses_kernel else self._dim + 1

    def _new_base(self, width: float | None) -> Learner:
        """The base learner, fresh (held if this learner is); ``width``: the RBF width from the data."""
        params = {**self._base_params, "dim": self._base_dim()}
        scaled_alpha = "alpha" in self._base_cls._parameter_constraints and "alpha" not in self._params
        if scaled_alpha and not self._base_cls.uses_kernel:
            params["alpha"] = float(self._base_dim())
        if width is not None:
            params["kernel"] = {"name": "rbf", "gamma": width}
        base = self._base_cls.from_params(params)
        base.hold_growth(self._growth_held)
        return base

    @property
    def _model(self) -> Learner:
        if self._base is None:  # pragma: no cover - a programming error
            raise RuntimeError("the base learner is built after the warm-up")
        return self._base

    def _features(self, z: np.ndarray | SparseVector) -> np.ndarray | SparseVector:
        """What the base sees, checked once (it takes it unchecked, :meth:`_learn_checked`): dense for
        kernels; with the constant feature for the linear family."""
        if self._base_cls.uses_kernel:
            return checked_form(dense(z))
        return checked_form(with_intercept(z))

    def _check_x(self, x: Any) -> Any:
        return self._prep.check_form(super()._check_x(x))

    def _check_y(self, y: Any) -> float:
        return self._prep.check_label(y)

    def _clip(self, y_bar: float) -> float:
        return y_bar  # the preprocessing clips in the user's units itself

    def predict_proba_one(self, x: Any) -> float:
        """The probability of the label +1 (the logistic loss only): the sigmoid of the score."""
        return self._prep.probability(self.predict_one(x))

    def encoding(self) -> dict[str, Any] | None:
        return self._prep.encoding()

    # ----------------------------------------------------------------- rounds
    def _predict(self, x: np.ndarray | SparseVector | Record) -> float:
        self._base_played = self._prep.ready
        if not self._prep.ready:  # no row yet, or the warm-up: the prior
            return self._prep.prior()
        z = self._prep.scaled(self._prep.encoded(x, self._dim))
        return self._prep.to_user(self._model._predict_checked(self._features(z)))

    def _learn(self, x: np.ndarray | SparseVector | Record, y: float) -> tuple[float, float]:
        prep = self._prep
        x, encoding = prep.encode(x, self._dim)
        if prep.begin(x, self._dim):
            self._base = self._new_base(None)
        target, y_stats = prep.target(y)
        self._base_played = prep.ready
        if prep.ready:
            played = prep.scaled_round(x, lambda z: self._model._learn_checked(self._features(z), target))
        else:
            played = prep.prior()
            with prep.warm_up(x, y) as full:
                if full:  # the median width of the buffered rows, then the rows replayed into the base
                    Z = prep.standardised_buffer()
                    base = self._new_base(median_width(Z))
                    for z, t, _ in prep.replay(Z, y_stats):
                        base._learn_checked(self._features(z), t)
                    self._base = base
        prep.commit_target(y, y_stats)
        prep.commit_encoding(encoding)
        return played, 0.0

    def _spread(self) -> float:
        """The base's own uncertainty about the row (standardised), if the base played it (not the
        prior of the warm-up)."""
        return self._model._spread() if self._has_model and self._base_played else 0.0

    # ----------------------------------------------------------------- size, growth and statistics
    def state_nbytes(self) -> int:
        """The scaler's and warm-up buffer's bytes plus the base's."""
        return (self._prep.nbytes() + (self._model.state_nbytes() if self._prep.ready else 0)
                + self._conformal_nbytes())

    def _growth_nbytes(self, rounds: int) -> int:
        if self._prep.ready:
            return self._model.max_growth_nbytes(rounds) + self._prep.encoder_growth_nbytes()
        return self._prep.warm_up_growth_nbytes(self._dim, rounds, self._fresh_base_nbytes)

    def _fresh_base_nbytes(self, rounds: int) -> int:
        """The bytes of a base not built yet after ``rounds`` rounds, at most (its size does not depend
        on the kernel width, so the default width gives it)."""
        base = self._new_base(None)
        return base.state_nbytes() + base.max_growth_nbytes(rounds)

    def _set_growth_held(self, held: bool) -> None:
        super()._set_growth_held(held)
        if self._base is not None:
            self._base.hold_growth(held)

    def _model_stats(self) -> dict[str, Any]:
        if self._base is None:
            return {}
        inner = self._base.stats()
        keys = ("stored_points", "dictionary_size", "kors_size", "effective_dimension")
        return {k: inner[k] for k in keys if k in inner}

    # ----------------------------------------------------------------- persistence
    def _arrays(self) -> dict[str, np.ndarray]:
        arrays = self._prep.arrays()
        if self._prep.ready:
            arrays["base"] = nested_blob(self._model)
        return arrays

    def _scalars(self) -> dict[str, Any]:
        return self._prep.scalars()

    def _restore(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        self._prep.restore(self._dim, arrays, scalars)
        if self._prep.ready:
            base = restore_nested(arrays["base"])
            if type(base) is not self._base_cls or base.dim != self._base_dim():
                raise StateFormatError("the nested base learner does not match the configuration.")
            self._base = base
