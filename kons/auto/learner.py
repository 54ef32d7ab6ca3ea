r"""``auto``: a self-tuning learner for raw data, a mixture of a small grid of learners.

Behind the online preprocessing of :mod:`kons.preprocessing` (feature and target scaling, warm-up for the
median-heuristic RBF width, labels of any kind), :class:`Auto` plays every round a small grid of experts
(:mod:`kons.auto.grid`: Nystrom kernel and linear Newton learners on two views of the row, a linear model
on quantile thresholds, a local expert, Hoeffding trees for classes, an aggregated Mondrian forest for three
classes or more, the target's last values and a Bayesian linear model of every row for regression, the
constant) and combines their plays by Vovk's aggregating algorithm with switching weights
(:mod:`kons.auto.mixture`), so it pays an :math:`O(\log K)` price for not knowing which configuration
suits the stream. Change detectors on the
mixture's own plays (:mod:`kons.auto.detectors`) start generations of fresh learners at a declared change
(:mod:`kons.auto.restarts`). Until the median-heuristic width is known it plays the Bayesian linear model
of the buffered rows. Why each part is there, the regret statements, the cost of a round and what was
measured and not kept: ``docs/auto.md`` and ``docs/auto-log.md``; the tuning constants and what chose them:
:mod:`kons.auto.config`.

Examples
--------
>>> import numpy as np
>>> import kons
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(600, 2)) * [3.0, 0.01] + [100.0, 5.0]
>>> y = X[:, 0] > 100.0  # booleans
>>> model = kons.Auto(task="classification")
>>> played = model.learn_many(X, y)
>>> bool(np.mean((played[300:] > 0) != y[300:]) < 0.1)
True
>>> model.stats()["leader"] in model.stats()["weights"]
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from kons._multinomial import log_probability, reference_softmax
from kons._validation import POSITIVE, Constraint, Integer, NoneOr, OneOf, check_int
from kons.auto.config import (
    EARLIER_REGRESSION_BOUND,
    LAGS,
    LAGS_LONG,
    LAGS_WARMUP_LINEAR_ROWS,
    LAGS_WARMUP_ROWS,
    LAGS_WARMUP_SHARE,
    LINEAR_DIM_PER_KEY,
    NUMBERS_WIDTH,
    RANGE_MARGIN,
    REGRESSION_BOUND,
    SCORE_BOUND,
    WARMUP_NOISE,
    WARMUP_RIDGE_PER_KEY,
)
from kons.auto.experts.bins import QuantileBins, bins_columns, thresholds_per_feature
from kons.auto.experts.lags import last_leads
from kons.auto.grid import (
    GENERATIONS,
    GRID,
    MAX_DICTIONARY,
    REPLAY_ROWS,
    YOUNG_BASES,
    YOUNG_LINEAR,
    Grid,
    class_column_nbytes,
    signed_log,
    silent_names,
    standardised,
)
from kons.auto.mixture import MIX_BOUND, Mixture
from kons.base import Learner, _round_numerics
from kons.classes import MAX_CLASSES, MAX_LABEL_CHARS, Classes, class_label, class_position, legacy_sign
from kons.conformal import Conformal
from kons.errors import InvalidParameterError
from kons.kernel.nystrom_kons import NystromKONS
from kons.linear.ons import ONS
from kons.losses import binary_distribution, get_loss, log_loss
from kons.preprocessing import (
    TARGET_BOUND,
    FeatureScaler,
    Preprocessor,
    median_width,
    user_bound,
)
from kons.records import MAX_WIDTH, MIN_WIDTH, Record, same_record
from kons.rounds import Round
from kons.sparse import SparseVector, dense

__all__ = ["GENERATIONS", "GRID", "MIX_BOUND", "REGRESSION_BOUND", "SCORE_BOUND", "TASKS", "YOUNG_LINEAR",
           "Auto", "Mixture"]

TASKS = {"regression": "squared", "classification": "logistic"}
_FLOAT64 = np.dtype(np.float64)  # (numpy's float64 arrays' dtype; a row of another is checked in full)


def _unequal_rates_probability(counts: np.ndarray) -> float:
    r"""The posterior probability, at even prior odds, that the classes of ``counts`` (each counted at
    least once) are not equally frequent: the labels' marginal likelihood under rates of a Dirichlet(1/2)
    prior (Krichevsky-Trofimov) against :math:`K^{-n}` under equal rates."""
    classes, rows = len(counts), int(counts.sum())
    log_rates = (math.lgamma(classes / 2.0) - math.lgamma(rows + classes / 2.0)
                 + sum(math.lgamma(c + 0.5) - math.lgamma(0.5) for c in counts.tolist()))
    return float(np.exp(-np.logaddexp(0.0, -rows * math.log(classes) - log_rates)))


def _half_softmax(scores: np.ndarray) -> np.ndarray:
    """The warm-up's play of a model's class ``scores``: the softmax of half of them, bounded."""
    half = np.clip(scores, -TARGET_BOUND, TARGET_BOUND) / 2.0
    return reference_softmax(half[1:] - half[0])


def _width_without(Z: np.ndarray, groups: Sequence[np.ndarray]) -> float:
    """The median-heuristic width of the standardised rows ``Z`` with the coordinates of ``groups`` (some of
    a record's categorical names, each its one-hot coordinates) set to zero: the geometry of the rows
    without those names."""
    without = Z.copy()
    without[:, np.concatenate(groups)] = 0.0
    return median_width(without)


def _within_class_deviations(Z: np.ndarray, labels: list[int], counts: np.ndarray, features: float
                             ) -> np.ndarray:
    """Each feature's deviation within the classes of the standardised rows ``Z`` (pooled over the classes,
    from the class means), shrunk to the unit deviation of the standardised rows with as many rows of prior
    as there are ``features`` (the warm-up's count, :meth:`Auto._warmup_features`): a few rows measure it
    poorly, and many features fewer rows each."""
    means = np.zeros((len(counts), Z.shape[1]))
    np.add.at(means, labels, Z)
    means /= np.maximum(counts, 1)[:, None]
    spread = np.sum((Z - means[labels]) ** 2, axis=0)
    freedom = len(Z) - int(np.count_nonzero(counts))
    return np.asarray(np.sqrt((spread + features) / (freedom + features)))


class Auto(Learner):
    r"""Self-tuning learner: preprocessing plus a mixture of a grid of learners (see :mod:`kons.auto`).

    Parameters
    ----------
    task : {"regression", "classification"}, default "regression"
        Regression uses the squared loss on standardised targets, predictions in the user's units;
        classification the log loss, labels strings, integers or booleans, any number of classes:
        :attr:`classes`, :meth:`predict_proba_dict_one` and :meth:`learn_proba_one` give the classes and
        their probabilities. ``learn_one`` plays the score (log-odds of ``classes[1]``) with two classes
        and the probability played for the label with more; ``predict_one`` the score, or the
        probability of the most probable class.
    C : float or None, default None
        Bound on the magnitude of the predictions in the user's units (regression): a prediction lies in
        :math:`[-C, C]`. With or without it, a prediction lies within the range of the targets seen,
        widened on each side by :data:`~kons.auto.config.RANGE_MARGIN` times that range's width (a heavy
        tail's next target lies beyond every one seen: ``docs/series.md``). Ignored for classification,
        whose scores (log-odds) lie in :math:`[-B, B]`, :math:`B` = :data:`SCORE_BOUND`.
    seed : int, default 0
        Seed of the Nystrom bases' dictionary coins.
    dim : int or None, default None
        Input dimension; None fixes it at the first row (a record's: the width of its encoding,
        :mod:`kons.records`).
    """

    name = "auto"
    preprocesses = True
    accepts_sparse = True
    accepts_records = True
    # Its Nystrom bases grow up to their dictionary bound; held, they keep learning at their size.
    grows = True
    can_hold_growth = True
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "task": OneOf(tuple(TASKS)),
        "C": NoneOr(POSITIVE),
        "seed": Integer(low=0),
        "dim": NoneOr(Integer(low=1)),
    }

    def __init__(self, *, task: str = "regression", C: float | None = None, seed: int = 0,
                 dim: int | None = None) -> None:
        self.task = self._parameter_constraints["task"].check("Auto", "task", task)
        self.seed = self._parameter_constraints["seed"].check("Auto", "seed", seed)
        self.loss = TASKS[task]
        self._loss = get_loss(self.loss)
        self._binary = bool(self._loss.binary)  # classification (binary or not): scores, not targets
        self._user_bound = None if self._binary else user_bound("Auto", C)
        self.dim = None if dim is None else check_int("Auto", "dim", dim, low=1)
        self.C_param = C  # kept for get_params: C is the live bound
        self._reset()

    def _reset(self) -> None:
        # The rules for heavy tails (docs/series.md): the bound REGRESSION_BOUND, predictions beyond the
        # targets' range by RANGE_MARGIN, the mixture's substitution centred on its weighted mean. A
        # regression state saved before them goes on under the rules it was saved with.
        self._tails = True
        # The linear models play on the row standardised by the statistics before it (regression,
        # docs/series.md); a state saved before this goes on playing them on the row as the others take it.
        self._plays_before = True
        # A regression grid's first rounds play its mixture's weights sharpened (Grid.early, docs/series.md);
        # a state saved before this goes on playing the mixture's own.
        self._early = True
        self._prep = Preprocessor(loss=self._loss, user_bound=self._user_bound, model_bound=self._model_bound,
                                  warms_up=True, range_margin=RANGE_MARGIN, pooled=True, imputes=True,
                                  fixes_gaps=True)
        self._grid: Grid | None = None  # built once the warm-up gives the kernel widths
        self._classes = Classes()
        # The round just played (classification): its distribution over the classes and its log loss,
        # and the index of the class it predicted (the label of fewest errors).
        self._played: tuple[list[tuple[Any, float]], float] = ([], 0.0)
        self._predicted = -1
        # the class the multi-class warm-up's last play names (its label: _warmup_probabilities); not state,
        # a function of the buffer and the row, as the play is
        self._warmup_class = -1
        # the last record checked, as given (a copy), the dimension it was checked for, and its parse (not
        # state): a prediction and the learning round of the same record parse it once
        self._parsed: tuple[dict[Any, Any], int | None, Record] | None = None
        # the last float64 array checked: the dimension it was checked for, its shape and its values (not
        # state): a prediction and the learning round of the same row validate it once
        self._validated: tuple[int | None, tuple[int, ...], bytes] | None = None
        # the classes' counts the constant expert was last computed from, and it (not state, read only): a
        # prediction and the learning round of the same row take the same
        self._prior: tuple[tuple[int, ...], np.ndarray] | None = None
        super()._reset()

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {"task": self.task, "C": self.C_param, "seed": self.seed, "dim": self.dim}

    @classmethod
    def _model_floats(cls, dim: int, params: dict[str, Any]) -> int:
        # The grid's members and the restarted copies, each at most a full learner of its kind, each
        # generation's linear model ((d + 1)^2 + 2 (d + 1) floats, one score), the two scalers (3 d each)
        # and the rounds kept for a restart (two views of d and three floats each), the last targets (their
        # evidence and the models of their changes) and the linear model of every row.
        members = sum(
            ONS._model_floats(dim + 1, {"diagonal": False}) if kind == "ons"
            else NystromKONS._model_floats(dim, {"max_dictionary": MAX_DICTIONARY})
            for _, kind, _, _ in GRID
        )
        largest = max(ONS._model_floats(dim + 1, {"diagonal": False}),
                      NystromKONS._model_floats(dim, {"max_dictionary": MAX_DICTIONARY}))
        recent = (dim + 1) * (dim + 3)
        kept = REPLAY_ROWS * (2 * dim + 3)
        columns = bins_columns(dim)  # the linear model on the quantile thresholds, and the thresholds
        binned = ONS._model_floats(columns, {"diagonal": False}) + columns + dim if columns else 0
        lags = LAGS + 6 + (LAGS + 1) * (LAGS + 3) + LAGS_LONG + 2 + (LAGS_LONG + 1) * (LAGS_LONG + 3)
        return (members + GENERATIONS * (YOUNG_BASES * largest + recent + 3) + 6 * dim + kept + binned + lags
                + recent)  # the linear model of every row: a generation's

    # ----------------------------------------------------------------- bounds and labels
    @property
    def C(self) -> float:  # type: ignore[override]  # noqa: N802 - the learners' name for the bound
        """The user's ``C`` (regression), else the largest target magnitude seen (a scale, not a bound: a
        prediction may reach past it, see the parameter ``C``); :data:`SCORE_BOUND` for classification."""
        return self._prep.bound

    @property
    def _model_bound(self) -> float:
        """The bound on the bases' and the mixture's plays on standardised data."""
        if self._binary:
            return SCORE_BOUND
        return REGRESSION_BOUND if self._tails else EARLIER_REGRESSION_BOUND

    def _check_x(self, x: Any) -> Any:
        kept, dim = self._parsed, self._known_dim()
        if kept is not None and type(x) is dict and kept[1] == dim and same_record(x, kept[0]):
            return self._prep.check_form(kept[2])  # (a record parsed once for its prediction and round)
        # A float64 array is checked as itself (``as_features`` takes it as it is): its values, shape and
        # the dimension decide, so the same values pass again unchecked.
        values = x.tobytes() if type(x) is np.ndarray and x.dtype is _FLOAT64 else None
        if values is not None and self._validated == (dim, x.shape, values):
            return self._prep.check_form(x)
        checked = super()._check_x(x)
        if isinstance(checked, Record):
            self._parsed = dict(x), dim, checked
        elif values is not None:
            self._validated = dim, x.shape, values
        return self._prep.check_form(checked)

    def _check_y(self, y: Any) -> Any:
        """Regression: the target as a float. Classification: a label of the binary learners of before
        (-1, 0, 1, false, true) as their -1.0 or +1.0, as :meth:`check_round` gave them before classes
        were learnt (a caller that learns from those floats gets the classes -1 and 1 and the same
        plays); any other label as kept (:func:`~kons.classes.class_label`)."""
        if not self._binary:
            return self._prep.check_label(y)
        label = self._classes.check(y)
        sign = legacy_sign(label)
        return label if sign is None else sign

    def learn_one(self, x: Any, y: Any) -> float:
        """Play one round (see :class:`~kons.base.Learner`); classification learns the label ``y`` as
        given (``True`` and ``1`` are two classes, but for a learner of booleans: :mod:`kons.classes`),
        whatever :meth:`check_round` maps it to."""
        if not self._binary:
            return super().learn_one(x, y)
        x, _ = self.check_round(x, y)
        with _round_numerics():
            return self._learn_checked(x, class_label(y))

    def _clip(self, y_bar: float) -> float:
        return y_bar  # the preprocessing clips in the user's units itself

    @property
    def _multiclass(self) -> bool:
        return self._binary and not self._classes.binary

    # ----------------------------------------------------------------- classes and probabilities
    @property
    def classes(self) -> list[Any]:
        """The classes seen (classification), by index: the negative and the positive one first (the
        binary roles, :mod:`kons.classes`), then in order of appearance; ``[]`` for regression."""
        return self._classes.labels

    def predict_proba_one(self, x: Any) -> float:
        """The probability of the positive class, ``classes[1]`` (binary classification): the sigmoid of
        the score."""
        if self._multiclass:
            raise InvalidParameterError(
                f"this learner has {len(self._classes)} classes: use predict_proba_dict_one.")
        return self._prep.probability(self.predict_one(x))

    def encoding(self) -> dict[str, Any] | None:
        return self._prep.encoding()

    def predict_proba_dict_one(self, x: Any) -> dict[Any, float]:
        """Every known class's probability for ``x`` (summing to 1; ``{}`` before any class is known);
        never changes the state. Keys are the labels: ``True`` and ``1``, two classes, are one dict key
        (a learner given both reports them under that key, the later class's probability): use
        :meth:`predict_proba_by_class_one` to keep them apart."""
        return dict(self._predicted_pairs(x))

    def predict_proba_by_class_one(self, x: Any) -> np.ndarray:
        """The probabilities of :attr:`classes` for ``x``, in their order (summing to 1; empty before any
        class is known): :meth:`predict_proba_dict_one` by index, so ``True`` and ``1`` stay apart."""
        return np.array([p for _, p in self._predicted_pairs(x)], dtype=np.float64)

    def _predicted_pairs(self, x: Any) -> list[tuple[Any, float]]:
        if not self._binary:
            raise InvalidParameterError("class probabilities need task='classification'.")
        if not self._multiclass:
            return self._binary_distribution(self.predict_one(x))
        x, _ = self.check_round(x)
        with _round_numerics():
            return self._distribution(self._class_probabilities(self._prep.encoded(x, self._dim)))

    def learn_proba_one(self, x: Any, y: Any) -> dict[Any, float]:
        """Play one round (as :meth:`learn_one`) and return the distribution it played, before learning,
        over the classes known before the round and ``y`` if it is new. A new class's probability is
        the model's for a class it has not learnt: binary, the score's for the free role; else the
        mixture of the bases' (a new class's weights are zero, the score of the reference class 0)
        and of the constant's (add-1/2 frequencies: :math:`1/(2n + K)` after n rounds). Keyed by label
        as :meth:`predict_proba_dict_one` (see :meth:`learn_proba_by_class_one`)."""
        return dict(self._learned_pairs(x, y))

    def learn_proba_by_class_one(self, x: Any, y: Any) -> np.ndarray:
        """:meth:`learn_proba_one` by index: the played probabilities of :attr:`classes` as they are after
        the round (the label's class included), in their order, so ``True`` and ``1`` stay apart."""
        return np.array([p for _, p in self._learned_pairs(x, y)], dtype=np.float64)

    @property
    def gives_class_probabilities(self) -> bool:
        return self._binary

    def _learnt_round(self, x: Any, y: Any) -> Round:
        """Play one round (as :meth:`learn_one`) and return what it answers (:class:`~kons.Round`); for
        classification, the distribution it played over :attr:`classes` as they are after the round (the
        binary model's from its score, the multinomial one's as :meth:`learn_proba_by_class_one`), the
        label's class, its log loss and whether it was predicted."""
        if not self._binary:
            return super()._learnt_round(x, y)
        label = self.class_of(y)
        value = self.learn_one(x, y)
        predicted = self._predicted
        if self._multiclass:  # a multinomial round (the label a third class, or classes before it)
            probabilities = [p for _, p in self._played[0]]
            distribution = list(zip(self.classes, probabilities, strict=True))
            value = probabilities[class_position(self.classes, label)]  # the label's probability
        else:  # the binary model: its score, the distribution from it
            distribution = binary_distribution(self.classes, value)
        return Round(value, distribution, label, loss=log_loss(distribution, label),
                     correct=predicted == class_position(self.classes, label),
                     predicted=self.classes[predicted] if predicted >= 0 else None)

    def _predicted_round(self, x: Any) -> Round:
        """A prediction for ``x`` as a :class:`~kons.Round` (changes nothing); for classification the
        distribution over :attr:`classes` (the multinomial play's value: the most probable class's
        probability) and the class predicted."""
        if not self._binary:
            return super()._predicted_round(x)
        if self._multiclass:
            probabilities = self.predict_proba_by_class_one(x).tolist()
            distribution = list(zip(self.classes, probabilities, strict=True))
            return Round(max(probabilities), distribution,
                         predicted=self.classes[self._voted(probabilities)])
        score = self.predict_one(x)
        distribution = binary_distribution(self.classes, score)
        predicted = self._voted([p for _, p in distribution]) if self.classes else -1
        return Round(score, distribution, predicted=self.classes[predicted] if predicted >= 0 else None)

    def _voted(self, probabilities: list[float] | np.ndarray) -> int:
        """The index of the class a round that played ``probabilities`` predicts: the grid's label vote
        (:class:`~kons.auto.mixture.LabelVote`) once the grid plays, else the warm-up's
        (:meth:`_warmup_voted`)."""
        if self._prep.ready:
            voted = self._model.voted
            if 0 <= voted < len(probabilities):
                return voted
        return self._warmup_voted(probabilities)

    def _warmup_voted(self, probabilities: list[float] | np.ndarray) -> int:
        """The index of the class a warm-up round that played ``probabilities`` predicts: with three classes
        or more the class its play names (:meth:`_warmup_probabilities`), else the most probable class (the
        first on a tie)."""
        if self._multiclass and 0 <= self._warmup_class < len(probabilities):
            return self._warmup_class
        return int(np.argmax(probabilities))

    def _spread(self) -> float:
        """The spread of the experts' plays (standardised) under the mixture's weights, last round."""
        return 0.0 if self._grid is None or self._binary else self._grid.mixture.spread()

    def _learn_conformal(self, conformal: Conformal, y_hat: float, y: Any) -> None:
        if not self._binary:
            super()._learn_conformal(conformal, y_hat, y)
            return
        pairs = self._played[0]  # the distribution played, over the classes after the round
        probabilities = np.array([p for _, p in pairs], dtype=np.float64)
        if self._asked is not None:
            inside = conformal.prediction_set(probabilities, self._asked)
            self._answered = [pairs[i][0] for i in inside]
            self._covered = class_position(self.classes, y) in inside.tolist()
        conformal.learn_label(probabilities, class_position(self.classes, y))

    def class_of(self, y: Any) -> Any:
        """The class this learner learns for the label ``y`` (:meth:`kons.classes.Classes.label`: ``y``
        itself, or ``False``/``True`` for -1, 0 and 1 given to a learner of booleans), whether known or
        new; :class:`InvalidInputError` for a label it cannot learn."""
        if not self._binary:
            raise InvalidParameterError("classes need task='classification'.")
        return self._classes.label(y)

    def _learned_pairs(self, x: Any, y: Any) -> list[tuple[Any, float]]:
        if not self._binary:
            raise InvalidParameterError("class probabilities need task='classification'.")
        self.learn_one(x, y)
        return self._played[0]

    def _distribution(self, probabilities: np.ndarray) -> list[tuple[Any, float]]:
        """The probabilities of the classes by index (the next index: a new class) as (label, p) pairs."""
        return [(self._classes.label_of(i), float(p)) for i, p in enumerate(probabilities)]

    def _binary_distribution(self, score: float, new: tuple[int, Any] | None = None
                             ) -> list[tuple[Any, float]]:
        """The distribution of the binary model's ``score`` over the classes known (and ``new``, its role
        and label), as (label, p) pairs by index; one class has all the probability."""
        labels = [self._classes.label_of(0), self._classes.label_of(1)]
        if new is not None:
            labels[new[0]] = new[1]
        return binary_distribution([label for label in labels if label is not None], score)

    def _class_prior(self, classes: int) -> np.ndarray:
        """The constant expert for ``classes`` classes: the add-1/2 (Krichevsky-Trofimov) frequencies,
        the binary base rate's for two classes."""
        labels = self._prep.labels
        of = (classes, *labels)
        kept = self._prior
        if kept is not None and kept[0] == of:
            return kept[1]
        counts = np.zeros(classes)
        counts[:len(labels)] = labels
        prior: np.ndarray = (counts + 0.5) / (counts.sum() + 0.5 * classes)
        prior.flags.writeable = False
        self._prior = of, prior
        return prior

    # ----------------------------------------------------------------- the grid
    def _reset_model(self) -> None:
        """Nothing yet: the scalers start with the first row, the grid after the warm-up."""

    @property
    def _model(self) -> Grid:
        if self._grid is None:  # pragma: no cover - a programming error
            raise RuntimeError("the grid is built after the warm-up")
        return self._grid

    def _new_grid(self, width: float, log_width: float, sparse: bool | None = None,
                  bins: QuantileBins | None = None, numbers_width: float | None = None,
                  linear_keys: int | None = None, silent: tuple[int, ...] = (),
                  quiet_width: float | None = None) -> Grid:
        """The grid for the median-heuristic widths of the standardised and of the log view (``sparse``:
        the rows', by default the feature scaler's), the quantile thresholds ``bins``, if any, and the
        width of the standardised rows without a record's categorical names, if it has any, and the
        coordinates its linear models' regularisers count if not the width (Grid.linear_keys)."""
        sparse = self._prep.x_scaler.sparse if sparse is None else sparse
        # the linear models' play on the row before it needs the feature scaler; a grid whose bytes are
        # only estimated, before the first row has made the scaler, plays nothing
        return Grid(loss=self.loss, dim=self._dim, bound=self._model_bound, seed=self.seed,
                    centred=self._tails, targets=None if self._binary else self._prep.y,
                    features=self._prep.scaler if self._plays_before and not self._binary else None,
                    widths=(width, log_width), held=self._growth_held,
                    log_scaler=FeatureScaler(self._dim, sparse, self._prep.groups, omits_groups=True,
                                             gaps=self._prep.gaps),
                    binary=self._binary, bins=bins, early=self._early and not self._binary,
                    numbers=self._prep.encoder is not None,  # (records: their categorical names)
                    numbers_width=numbers_width, linear_keys=linear_keys, silent=silent,
                    quiet_width=quiet_width)

    def _warmed_up_grid(self, Z: np.ndarray) -> Grid:
        """The grid for the buffered rows: ``Z`` standardised gives the width, their signed logs the log
        view's, the raw rows the quantile thresholds (dense rows of few enough features only: a sparse
        row's features are mostly absent, and the view's columns are bounded)."""
        rows = [x for x, _ in self._prep.buffer]
        log_rows = [signed_log(x) for x in rows]
        width = median_width(Z)
        dense_rows = not self._prep.x_scaler.sparse and thresholds_per_feature(self._dim) > 0
        bins = QuantileBins.from_rows(np.stack([dense(x) for x in rows])) if rows and dense_rows else None
        groups = self._prep.groups
        log_width = (median_width(standardised(log_rows, self._dim, groups, omits_groups=True,
                                               gaps=self._prep.gaps))
                     if log_rows else width)
        numbers_width = quiet_width = None
        silent: tuple[int, ...] = ()
        if groups:  # (records with categorical names: the width of their numbers, Grid.numbers_width)
            numbers_width = _width_without(Z, groups)
            said_nothing = silent_names(rows, [t for _, t in self._prep.buffer], groups, self._binary)
            if said_nothing:  # (the narrow raw kernels take the rows without them: Grid.silent)
                quiet_width = _width_without(Z, [groups[g] for g in said_nothing])
                silent = tuple(int(groups[g][0]) for g in said_nothing)
            if len(said_nothing) == len(groups):  # (the records' numbers alone: their two widths)
                numbers_width *= NUMBERS_WIDTH
        return self._new_grid(width, log_width, bins=bins, numbers_width=numbers_width,
                              linear_keys=self._linear_keys(), silent=silent, quiet_width=quiet_width)

    def _linear_keys(self) -> int | None:
        """The coordinates a regression record's linear models' regularisers count: its keys by the
        warm-up's end (at least one) times LINEAR_DIM_PER_KEY; None (the width) for arrays, sparse rows
        and classification."""
        encoder = self._prep.encoder
        if encoder is None or self._binary:
            return None
        return LINEAR_DIM_PER_KEY * max(len(encoder.names), 1)

    def _warmup_prediction(self, x: np.ndarray | SparseVector) -> float:
        r"""Before the kernel width is known, the Bayesian linear model of the buffered rows.

        The linear bases need no width, so there is no reason to play a constant while the kernel
        bases wait for it: the posterior mean of :math:`y = w^\top z + b + \epsilon`,
        :math:`w \sim N(0, I/d)` (a unit prior variance of :math:`w^\top z` on standardised rows),
        unit noise, on the buffered rows standardised by the current statistics, targets centred
        (and, for regression, scaled) by the buffer's own mean and deviation, labels taken as
        :math:`\pm 1`. In the dual, :math:`f(z) = k^\top (Z Z^\top + d I)^{-1} (t - \bar t)`,
        O(n^2 d + n^3) for the at most :data:`~kons.preprocessing.WARMUP_ROWS` buffered rows, and a
        function of the buffer alone (no state of its own).

        Regression rows in time order: once :data:`~kons.auto.config.LAGS_WARMUP_ROWS` rows are buffered,
        the last target instead, while it has forecast the buffered targets much better than their
        running mean (:func:`~kons.auto.experts.lags.last_leads`; the grid's experts on the last targets
        wake on the same evidence), or better than both that mean and this model (:meth:`_last_leads`). A
        state saved before the rules for heavy tails warms up as it did.
        """
        prep = self._prep
        if not prep.buffer:
            return prep.prior()
        Z = prep.standardised_buffer()
        t = np.array([y for _, y in prep.buffer])
        features = self._warmup_features()
        if (not self._binary and self._tails and len(t) >= LAGS_WARMUP_ROWS
                and self._last_leads(Z, t, features)):
            return float(t[-1])
        return self._buffer_linear(Z, t, prep.x_scaler.standardise(dense(x)), features)

    def _last_leads(self, Z: np.ndarray, t: np.ndarray, features: float) -> bool:
        """Whether the warm-up plays the last target: it has forecast the buffered targets much better than
        their running mean, or (once :data:`~kons.auto.config.LAGS_WARMUP_LINEAR_ROWS` rows are buffered)
        better than the mean and than the linear model it would play instead, each buffered target forecast
        from the rows before it: on a short series in time order that model can err more than the mean."""
        if last_leads(t, LAGS_WARMUP_SHARE):
            return True
        if len(t) < LAGS_WARMUP_LINEAR_ROWS or not last_leads(t, 1.0):
            return False
        linear = sum((self._buffer_linear(Z[:i], t[:i], Z[i], features) - t[i]) ** 2
                     for i in range(1, len(t)))
        return bool(np.sum(np.diff(t) ** 2) < linear)

    def _buffer_linear(self, Z: np.ndarray, t: np.ndarray, z: np.ndarray, features: float) -> float:
        """The Bayesian linear model of the buffered rows ``Z`` and targets ``t`` played on the standardised
        row ``z`` (:meth:`_warmup_prediction`), its prior counting ``features`` (:meth:`_warmup_features`)."""
        mean, std = float(t.mean()), float(t.std())
        if self._binary:
            std = 1.0
        elif std == 0.0:
            return self._prep.prior()
        gram = Z @ Z.T + features * np.eye(len(t))
        coef = np.linalg.solve(gram, (t - mean) / std)
        f = float(Z @ z @ coef)
        f = min(max(f, -TARGET_BOUND), TARGET_BOUND)
        if self._binary:
            return min(max(mean + f, -TARGET_BOUND), TARGET_BOUND)
        return mean + std * f

    def _warmup_features(self) -> float:
        """The features the warm-up counts: its linear model's prior precision of a weight (the :math:`d`
        of :meth:`_warmup_prediction`) and the rows of prior of its label's within-class deviations; the
        width, but :data:`~kons.auto.config.WARMUP_RIDGE_PER_KEY` a key (within the records' width bounds)
        where the first record set the width. The keys counted are those the encoder holds at the round, so
        a key first seen during the warm-up raises it, where the width stays as the first record set it."""
        encoder = self._prep.encoder
        if encoder is None or self.dim is not None:
            return float(self._dim)
        return float(min(MAX_WIDTH, max(MIN_WIDTH, WARMUP_RIDGE_PER_KEY * len(encoder.names))))

    def _constant(self) -> float:
        """The constant expert: the mean of the standardised target, or the base rate's log-odds."""
        return 0.0 if not self._binary else self._prep.prior()

    def _warmup_probabilities(self, x: np.ndarray | SparseVector, classes: int) -> np.ndarray:
        r"""The warm-up play for ``classes`` classes: two Gaussian-process regressions of each class
        against the others (labels :math:`\pm 1`, centred by their mean, one solve for all classes), each
        played as the softmax of half its scores, averaged by their evidence on the buffered rows.

        The linear one is :meth:`_warmup_prediction`'s model (covariance :math:`ZZ^\top/d`, unit noise);
        the other has the grid's radial kernel at the buffer's median width and the noise
        :data:`~kons.auto.config.WARMUP_NOISE`: classes that no hyperplane parts (a class seen once, far
        from the others; two classes that overlap along every direction) are what the grid learns after the
        warm-up, and its first rounds need not be lost to the linear model. Each model's evidence is the
        Gaussian marginal likelihood :math:`\log N(t - \bar t; 0, G)` of the buffered labels' columns
        (equal priors), so the average is Bayes' over the two; a function of the buffer alone, as the
        linear model is (docs/auto-log.md, "The multi-class warm-up").

        The class the round names (``_warmup_class``, among the classes the buffer holds) is that of the
        same average with the classes' base rates (the means :math:`\bar t` the scores add back) weighed
        by the probability that the classes are not equally frequent (:func:`_unequal_rates_probability`):
        a few buffered rows of each class measure their rates poorly, and the play's log loss keeps them
        whole (docs/auto-log.md, "The warm-up's label"), and of the two models refitted on the rows with each
        feature in units of its deviation within the buffered classes (:func:`_within_class_deviations`):
        a feature that parts the classes then counts for more in the radial kernel's distances than one
        that only spreads each class (docs/auto-log.md, "The warm-up's label in units within the classes")."""
        prep = self._prep
        self._warmup_class = -1
        if not prep.buffer:
            return self._class_prior(classes)
        Z = prep.standardised_buffer()
        labels = [int(t) for _, t in prep.buffer]
        targets = -np.ones((len(Z), classes))
        targets[np.arange(len(Z)), labels] = 1.0
        mean = targets.mean(axis=0)
        counts = np.bincount(labels, minlength=classes)
        held = counts > 0
        rates = _unequal_rates_probability(counts[held])
        z = prep.x_scaler.standardise(dense(x))
        features = self._warmup_features()
        weights, scores = self._warmup_models(Z, z, targets - mean, features)
        played: np.ndarray = weights @ np.array([_half_softmax(mean + f) for f in scores])
        deviations = _within_class_deviations(Z, labels, counts, features)
        weights, scores = self._warmup_models(Z / deviations, z / deviations, targets - mean, features)
        named = weights @ np.array([_half_softmax(rates * mean + f) for f in scores])
        self._warmup_class = int(np.where(held, named, -1.0).argmax())
        return played

    def _warmup_models(self, Z: np.ndarray, z: np.ndarray, centred: np.ndarray, features: float
                       ) -> tuple[np.ndarray, np.ndarray]:
        """The multi-class warm-up's two Gaussian-process regressions (:meth:`_warmup_probabilities`) of the
        ``centred`` label columns on the rows ``Z``, the linear one's prior counting ``features``
        (:meth:`_warmup_features`): their weights by evidence and their scores at ``z`` (models x classes)."""
        inner, inner_z = Z @ Z.T, Z @ z
        squares = np.diagonal(inner)
        distances = np.maximum(squares[:, None] + squares[None, :] - 2.0 * inner, 0.0)
        width = median_width(Z)
        scores = []
        evidences = []
        for gram, k in ((inner / features + np.eye(len(Z)), inner_z / features),
                        (np.exp(-width * distances) + WARMUP_NOISE * np.eye(len(Z)),
                         np.exp(-width * np.maximum(squares + z @ z - 2.0 * inner_z, 0.0)))):
            coef = np.linalg.solve(gram, centred)
            scores.append(np.clip(k @ coef, -TARGET_BOUND, TARGET_BOUND))
            evidences.append(-0.5 * float(np.sum(centred * coef))
                             - 0.5 * centred.shape[1] * float(np.linalg.slogdet(gram)[1]))
        weights = np.exp(np.array(evidences) - max(evidences))
        return weights / weights.sum(), np.array(scores)

    def _class_probabilities(self, x: np.ndarray | SparseVector) -> np.ndarray:
        """The probabilities of the classes (three or more) for a checked ``x``, nothing learnt."""
        prep, classes = self._prep, len(self._classes)
        if prep.scaler is None:
            return self._class_prior(classes)
        if not prep.ready:
            return self._warmup_probabilities(x, classes)
        return self._model.probabilities(prep.scaled(x), x, self._class_prior(classes))

    # ----------------------------------------------------------------- rounds
    def _predict(self, x: np.ndarray | SparseVector | Record) -> float:
        prep = self._prep
        x = prep.encoded(x, self._dim)
        if self._multiclass:  # the probability of the most probable class
            return float(self._class_probabilities(x).max())
        if prep.scaler is None:  # no row seen yet (the dimension was given): predicting changes nothing
            return prep.prior()
        if not prep.ready:
            return self._warmup_prediction(x)
        return prep.to_user(self._model.predict(prep.scaled(x), x, self._constant()))

    def _learn(self, x: np.ndarray | SparseVector | Record, y: Any) -> tuple[float, float]:
        prep = self._prep
        x, encoding = prep.encode(x, self._dim)  # a record as its vector; its new names kept at the end
        played = self._learn_label(x, y) if self._binary else self._learn_target(x, y)
        prep.commit_encoding(encoding)
        if self._grid is not None:  # the log view leaves out the categorical names' coordinates
            self._grid.log_scaler.groups = prep.groups
            self._grid.log_scaler.gaps = prep.gaps  # (and scales the numbers' gaps as the raw view does)
        return played, 0.0

    def _learn_label(self, x: np.ndarray | SparseVector, y: Any) -> float:
        """A round of classification: the binary model, or the multinomial one from the third class."""
        classes = self._classes
        y = classes.label(y)
        index = classes.index(y)
        new = index < 0
        if new:
            index = classes.new_index(y)
        distribution: list[tuple[Any, float]]
        by_grid = self._prep.ready  # the grid plays this round (not the warm-up's model)
        knew_none = len(classes) == 0  # (its first round predicts no class: it knows none)
        if index >= 2 or self._multiclass:  # the multinomial model
            probabilities = self._learn_classes(x, index, len(classes) + new)
            if new:
                classes.add(y, index)
            distribution = self._distribution(probabilities)
            played, loss = float(probabilities[index]), -log_probability(probabilities, index)
        else:  # the binary model: index 1 is the label +1
            t = 1.0 if index == 1 else -1.0
            played = self._learn_target(x, t)
            distribution = self._binary_distribution(played, (index, y) if new else None)
            loss = self._loss.value(played, t)
            if new:
                classes.add(y, index)
        self._played = (distribution, loss)
        shares = [p for _, p in distribution]
        self._predicted = -1 if knew_none else self._voted(shares) if by_grid else self._warmup_voted(shares)
        return played

    def _round_loss(self, y_hat: float, y: Any) -> float:
        return self._played[1] if self._binary else self._loss.value(y_hat, y)

    def _learn_target(self, x: np.ndarray | SparseVector, y: float) -> float:
        """A round of the one-score model: regression, or the binary classes as the labels -1 and +1."""
        prep = self._prep
        prep.begin(x, self._dim)
        target, y_stats = prep.target(y)
        if prep.ready:
            played = prep.scaled_round(x, lambda z: self._model.learn(z, target, x, self._constant(),
                                                                        None if self._binary else y))
        else:
            played = self._warmup_prediction(x)
            with prep.warm_up(x, y) as full:
                if full:  # the widths of the buffered rows, then the rows replayed into the grid
                    Z = prep.standardised_buffer()
                    grid = self._warmed_up_grid(Z)
                    for z, t, row in prep.replay(Z, y_stats):
                        grid.learn(z, t, row, self._constant())
                    self._grid = grid
        prep.commit_target(y, y_stats)
        return played

    def _learn_classes(self, x: np.ndarray | SparseVector, label: int, classes: int) -> np.ndarray:
        """A round of the multinomial model with ``classes`` classes (``label`` may be the new one)."""
        prep = self._prep
        constant = self._class_prior(classes)
        if prep.ready:
            z, scaled = prep.x_scaler.pending(x)
            played = self._model.learn_class(z, label, x, constant)
            prep.x_scaler.commit(scaled)
        else:
            buffered = prep.buffer
            # the third class: the buffered labels -1 and +1 become indices, before the play reads them as
            # indices (a label -1 would name the last class, the new one: the label it was just told)
            if len(prep.labels) == 2:
                prep.buffer = [(row, float(t > 0)) for row, t in buffered]
            try:
                played = self._warmup_probabilities(x, classes)
                with prep.warm_up(x, float(label)) as full:
                    if full:  # as in _learn_target, with the classes' indices
                        Z = prep.standardised_buffer()
                        grid = self._warmed_up_grid(Z)
                        for z, t, row in prep.replay(Z, None):
                            grid.learn_class(z, int(t), row, constant)
                        self._grid = grid
            except BaseException:
                prep.buffer = buffered
                raise
        prep.count_class(label)
        return played

    # ----------------------------------------------------------------- size, growth and statistics
    def state_nbytes(self) -> int:
        """The scalers' and warm-up buffer's bytes plus the grid's (its bases' ``state_nbytes``)."""
        return (self._prep.nbytes() + (self._model.nbytes() if self._prep.ready else 0)
                + self._conformal_nbytes())

    def _growth_nbytes(self, rounds: int) -> int:
        if self._prep.ready:
            return self._model.growth_nbytes(rounds) + self._prep.encoder_growth_nbytes()
        return self._prep.warm_up_growth_nbytes(self._dim, rounds, self._fresh_grid_nbytes)

    def class_growth_nbytes(self, classes: int, dim: int | None = None) -> int:
        """An upper bound of the growth of :meth:`state_nbytes` when ``classes`` classes it does not know
        appear (at most up to :data:`~kons.classes.MAX_CLASSES`): a weight column per class in every base
        and its label. Apart from :meth:`max_growth_nbytes`, which bounds the growth of the bases'
        dictionaries over rounds (and is 0 while the growth is held), because a class is added whatever
        the hold: a store that reserves bytes ahead of the rounds reserves these for the new labels a
        batch actually brings. ``dim``: the input dimension its first round will fix, for a learner that
        has none yet.

        Raises
        ------
        InvalidParameterError
            For a regression learner, or without an input dimension (the learner's or ``dim``).
        """
        classes = check_int("Auto", "classes", classes, low=0)
        if not self._binary:
            raise InvalidParameterError("class_growth_nbytes needs task='classification'.")
        dim = self.input_dim if self.input_dim is not None else dim
        if dim is None:
            raise InvalidParameterError(
                "class_growth_nbytes needs the input dimension: build the learner with 'dim' or play a "
                "round.")
        known = len(self._classes)
        labels = min(classes, MAX_CLASSES - known)
        # K classes have K - 1 score columns, the binary model one: the first two classes add none
        columns = max(known + labels, 2) - max(known, 2)
        return columns * class_column_nbytes(dim) + labels * (MAX_LABEL_CHARS * 4 + 8)  # UTF-8, count

    def _fresh_grid_nbytes(self, rounds: int) -> int:
        """The bytes of the grid after ``rounds`` rounds, at most, before it is built (its size does not
        depend on the kernel widths)."""
        # a scaler's arrays are 3 d floats either way; the quantile thresholds as many as they may be
        most = thresholds_per_feature(self._dim)
        bins = QuantileBins([np.arange(float(most))] * self._dim) if most else None
        grid = self._new_grid(1.0, 1.0, sparse=False, bins=bins)
        # records: a name the warm-up hears gives the grid one more kernel member (Grid.hears_names)
        wide = grid.wide_numbers_nbytes(rounds) if self._prep.encoder is not None else 0
        return grid.nbytes() + grid.growth_nbytes(rounds) + wide

    def _set_growth_held(self, held: bool) -> None:
        super()._set_growth_held(held)
        if self._grid is not None:
            self._grid.hold_growth(held)

    def _model_stats(self) -> dict[str, Any]:
        if self._grid is None:
            return {"weights": {}, "leader": None, "leader_since": None, "changes": 0,
                    "last_change_round": None}
        return self._grid.stats()

    @property
    def changes_detected(self) -> int:
        return 0 if self._grid is None else self._grid.changes

    @property
    def last_change_round(self) -> int | None:
        return None if self._grid is None or self._grid.last_change < 0 else self._grid.last_change

    # ----------------------------------------------------------------- persistence
    def _arrays(self) -> dict[str, np.ndarray]:
        arrays = self._prep.arrays()
        if self._prep.ready:
            arrays.update(self._model.arrays())
        return arrays

    def _scalars(self) -> dict[str, Any]:
        scalars = self._prep.scalars()
        if self._prep.ready:
            scalars.update(self._model.scalars())
        saved = self._classes.saved()
        if saved is not None:  # not for booleans: a learner of booleans has the state it had before
            scalars["classes"] = saved
        if not self._binary and self._tails:  # a state saved before the rules for heavy tails: as it was
            scalars["tails"] = True
        scaler = self._prep.scaler
        if not self._binary and self._plays_before and (scaler is None or not scaler.sparse):
            scalars["plays_before"] = True  # (sparse rows have no such play: their state is as it was)
        if not self._binary and self._early:
            scalars["early"] = True
        return scalars

    def _restore(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        self._tails = self._binary or bool(scalars.get("tails", False))
        self._plays_before = not self._binary and bool(scalars.get("plays_before", False))
        self._early = not self._binary and bool(scalars.get("early", False))
        self._prep.range_margin = RANGE_MARGIN if self._tails else 0.0
        # unless the state is of records saved before (Preprocessor.restore)
        self._prep.pooled = self._prep.fixes_gaps = True
        self._prep.restore(self._dim, arrays, scalars)
        if self._binary and scalars:
            self._classes.restore(scalars.get("classes"), self._prep.labels)
        if self._prep.ready:
            width, log_width = (float(w) for w in scalars["widths"])
            numbers_width = scalars.get("numbers_width")  # (none saved: the wide raw kernels' own width)
            linear_keys = scalars.get("linear_keys")  # (none saved: the regularisers count the width)
            quiet_width = scalars.get("quiet_width")  # (none saved: every raw kernel sees every name)
            grid = self._new_grid(width, log_width,
                                  numbers_width=None if numbers_width is None else float(numbers_width),
                                  linear_keys=None if linear_keys is None else int(linear_keys),
                                  silent=tuple(int(g) for g in scalars.get("silent_names", ())),
                                  quiet_width=None if quiet_width is None else float(quiet_width))
            grid.restore(arrays, scalars, self._rounds)
            grid.classes = max(len(self._classes), 2)
            self._grid = grid
