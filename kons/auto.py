r"""``auto``: a self-tuning learner for raw data, a mixture of a small grid of learners.

Behind the online preprocessing of :mod:`kons.preprocessing` (feature and target scaling, warm-up for
the median-heuristic RBF width, labels as {0, 1} or booleans), :class:`Auto` runs a small grid of base
learners on every round and combines their predictions by Vovk's aggregating algorithm:

* :class:`~kons.NystromKONS` (bounded cost per round) for kernel widths and steps around the
  median-heuristic width and the preprocessing's default step (:data:`GRID`);
* the same on a second view of the row, the standardised signed log :math:`\mathrm{sign}(x)\log(1+|x|)`,
  for the heavy-tailed features of raw data (counts, sizes, durations);
* :class:`~kons.ONS` with an intercept on each view (linear models);
* the constant prediction (the running mean of the target, or the base rate's log-odds).

Until the median-heuristic width is known (the preprocessing's warm-up rows), ``auto`` plays the
Bayesian linear model of the buffered rows rather than a constant (:meth:`Auto._warmup_prediction`): on
short streams those first rows are a large share of the loss.

Every expert ``i`` keeps a weight :math:`w_i \propto \exp(-\eta L_i)` where :math:`L_i` is its
cumulative loss. For an :math:`\eta`-mixable loss the aggregating algorithm's cumulative loss is at most
:math:`\min_i L_i + \ln(K)/\eta` for ``K`` experts (Vovk, "A game of prediction with expert advice",
1998; Cesa-Bianchi and Lugosi, *Prediction, Learning, and Games*, 2006, Sec. 3.5 and Prop. 3.2, where
exp-concave losses give the same :math:`O(\log K)` price with the weighted average). So ``auto`` pays a
constant, :math:`O(\log K)`, for not knowing which configuration suits the stream:

* logistic loss (classification): the log loss of probabilities is 1-mixable and the aggregating
  algorithm is the Bayes mixture :math:`p = \sum_i w_i \sigma(f_i)`, played as the score
  :math:`\log(p / (1 - p))`;
* squared loss (regression), on standardised targets in :math:`[-B, B]`, :math:`B` =
  :data:`MIX_BOUND`: mixable with :math:`\eta = 1/(2B^2)`, with Vovk's substitution
  :math:`\gamma = (g(-B) - g(B)) / (4B)`, :math:`g(y) = -\frac1\eta \ln \sum_i w_i e^{-\eta (f_i - y)^2}`.

The bound on what the bases and the mixture may play is wider than the mixture's interval
(:data:`REGRESSION_BOUND` deviations of the target, :data:`SCORE_BOUND` in log-odds): a bound is a
constraint on the bases' functions, which a tight one cuts down on targets far in a tail or on rows the
model could be confident about, while the mixture's interval only sets how fast the weights move.

A round costs the sum of the bases' rounds: eight Nystrom rounds of bounded size (at most
:data:`MAX_DICTIONARY` points, O(j d + j^2)) and three O(d^2) ONS rounds.

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
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from kons._validation import POSITIVE, Constraint, Integer, NoneOr, OneOf
from kons.base import Learner, arrays_nbytes
from kons.errors import NumericalError, StateFormatError
from kons.kernel.nystrom_kons import NystromKONS
from kons.linear.ons import ONS
from kons.linear.sparse import SparseVector
from kons.preprocessing import (
    STEP,
    TARGET_BOUND,
    FeatureScaler,
    Pipeline,
    checked_form,
    median_width,
    nested_blob,
    restore_nested,
)

__all__ = ["GRID", "MIX_BOUND", "REGRESSION_BOUND", "SCORE_BOUND", "TASKS", "Auto"]

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
#: Dictionary bound of each Nystrom base (bounded cost per round).
MAX_DICTIONARY = 200
#: Bound on every base's play and on the mixture's, in standard deviations of the target (regression).
#: Wider than the aggregating algorithm's interval :data:`MIX_BOUND`: a bound is a constraint on what a
#: base can express (each round projects the base onto it), and by Chebyshev's inequality up to
#: 1/3^2 = 11% of a target's values may lie beyond 3 deviations (at most 4% beyond 5). On raw cpusmall,
#: where 3.8% of the targets lie below -3 deviations, 3 cost auto 0.169 against 0.081 relative MSE.
REGRESSION_BOUND = 5.0
#: The interval [-B, B] of standardised targets on which the mixture is Vovk's aggregating algorithm:
#: learning rate 1/(2 B^2) and Vovk's substitution. A wider interval slows the mixture down (measured
#: with B = 5: bodyfat, 252 rows, 0.140 -> 0.174 relative MSE) for the rare targets beyond 3 deviations.
MIX_BOUND = TARGET_BOUND
#: Bound on every base's score and on the mixture's (classification): log-odds of 10, probabilities in
#: [4.5e-5, 1 - 4.5e-5]. A bound of 3 (probabilities in [0.047, 0.953]) projected the linear and kernel
#: bases back every round on streams whose rows are mostly easy: raw phishing 0.080 -> 0.069 error,
#: cod-rna 0.086 -> 0.073, ijcnn1 0.077 -> 0.072 with 10.
SCORE_BOUND = 10.0
TASKS = {"regression": "squared", "classification": "logistic"}


def _dense(z: np.ndarray | SparseVector) -> np.ndarray:
    return z.to_dense() if isinstance(z, SparseVector) else z


def _with_intercept(z: np.ndarray | SparseVector) -> np.ndarray | SparseVector:
    if isinstance(z, SparseVector):
        return SparseVector(np.append(z.indices, z.dim), np.append(z.values, 1.0), z.dim + 1)
    return np.append(z, 1.0)


def _guarded(call: Callable[..., float], *args: Any) -> float:
    """A base's play, or 0 (the mean) when its round overflows: the base is then left as it was, and
    the other bases and the mixture go on, so that one base's numerics never reject the round."""
    try:
        return call(*args)
    except NumericalError:
        return 0.0


def _signed_log(x: np.ndarray | SparseVector) -> np.ndarray | SparseVector:
    """:math:`\\mathrm{sign}(x)\\log(1 + |x|)`, elementwise (zeros stay zeros)."""
    if isinstance(x, SparseVector):
        return SparseVector(x.indices, np.sign(x.values) * np.log1p(np.abs(x.values)), x.dim)
    logged: np.ndarray = np.sign(x) * np.log1p(np.abs(x))
    return logged


def _standardised(rows: list[np.ndarray | SparseVector], dim: int) -> np.ndarray:
    """The rows standardised by their own statistics (for the median width of a view)."""
    scaler = FeatureScaler(dim, isinstance(rows[0], SparseVector))
    for row in rows:
        scaler.transform(row, commit=True)
    return np.stack([scaler.standardise(_dense(row)) for row in rows])


def _base_name(view: str, kind: str, width_factor: float, step_factor: float) -> str:
    """A grid member's name in :meth:`Auto.stats`'s weights."""
    if kind == "ons":
        return f"ons+intercept({view}, eta x{step_factor:g})"
    return f"nystrom_kons({view}, width x{width_factor:g}, eta x{step_factor:g})"


def _log_sigmoid(margin: np.ndarray) -> np.ndarray:
    logged: np.ndarray = -np.logaddexp(0.0, -margin)
    return logged


class Auto(Pipeline):
    r"""Self-tuning learner: preprocessing plus a mixture of a grid of learners (see :mod:`kons.auto`).

    Parameters
    ----------
    task : {"regression", "classification"}, default "regression"
        Regression uses the squared loss on standardised targets, predictions in the user's units;
        classification the logistic loss, labels in {-1, +1}, {0, 1} or booleans, and
        :meth:`predict_proba_one` gives the probability of the positive label.
    C : float or None, default None
        Bound on the predictions in the user's units (regression); None: the range of the targets seen.
        Ignored for classification, whose scores (log-odds) lie in :math:`[-B, B]`, :math:`B` =
        :data:`SCORE_BOUND`.
    seed : int, default 0
        Seed of the Nystrom bases' dictionary coins.
    dim : int or None, default None
    """

    name = "auto"
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
        binary = task == "classification"
        self._init_pipeline(loss=TASKS[task], C=None if binary else C, dim=dim)
        self.C_param = C  # kept for get_params: C is the live bound
        self._reset()

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {"task": self.task, "C": self.C_param, "seed": self.seed, "dim": self.dim}

    # ----------------------------------------------------------------- the grid
    def _kernel_model(self) -> bool:
        return True

    def _needs_width(self) -> bool:
        return True

    def _model_bound(self) -> float:
        return SCORE_BOUND if self._binary else REGRESSION_BOUND

    def _features(self, z: np.ndarray | SparseVector) -> np.ndarray | SparseVector:
        return z  # each base takes its own form in _inputs

    def _drop_model(self) -> None:
        self._bases: list[Learner] = []
        self._names: list[str] = []
        self._log_weights = np.zeros(0)
        self._log_scaler: FeatureScaler | None = None

    def _build_model(self, width: float | None) -> None:
        """The grid; ``width`` is the median-heuristic width of the standardised view."""
        if width is None:  # pragma: no cover - auto always sets the width from the data
            raise RuntimeError("auto needs the median width")
        log_rows = [_signed_log(x) for x, _ in self._buffer]
        self._build_grid(width, median_width(_standardised(log_rows, self._dim)) if log_rows else width)

    @classmethod
    def _model_floats(cls, dim: int, params: dict[str, Any]) -> int:
        # The grid's members, each at most a full learner of its kind, and the two scalers (3 d each).
        members = sum(
            ONS._model_floats(dim + 1, {"diagonal": False}) if kind == "ons"
            else NystromKONS._model_floats(dim, {"max_dictionary": MAX_DICTIONARY})
            for _, kind, _, _ in GRID
        )
        return members + 6 * dim

    def _build_grid(self, width: float, log_width: float) -> None:
        self._widths = (width, log_width)
        self._log_scaler = FeatureScaler(self._dim, self._x_scaler.sparse)
        self._bases = self._new_bases(width, log_width)
        self._views: list[tuple[bool, bool]] = [(view == "log", kind == "ons") for view, kind, _, _ in GRID]
        self._forms = sorted(set(self._views))
        self._names = [*(_base_name(*member) for member in GRID), "constant"]
        self._log_weights = np.zeros(len(self._names))

    def _new_bases(self, width: float, log_width: float) -> list[Learner]:
        """The grid's learners, fresh (held if the mixture is)."""
        eta = STEP[self.loss]
        bases: list[Learner] = []
        for view, kind, wf, sf in GRID:
            base: Learner
            if kind == "ons":
                base = ONS(loss=self.loss, alpha=float(self._dim + 1), eta=eta * sf, C=self._model_bound(),
                           dim=self._dim + 1)
            else:
                gamma = (log_width if view == "log" else width) * wf
                base = NystromKONS(kernel={"name": "rbf", "gamma": gamma}, loss=self.loss, alpha=1.0,
                                   eta=eta * sf, C=self._model_bound(), max_dictionary=MAX_DICTIONARY,
                                   seed=self.seed, dim=self._dim)
            base.hold_growth(self._growth_held)
            bases.append(base)
        return bases

    # ----------------------------------------------------------------- size and growth
    def _set_growth_held(self, held: bool) -> None:
        super()._set_growth_held(held)
        for base in self._bases:
            base.hold_growth(held)

    def _own_arrays(self) -> dict[str, np.ndarray]:
        """The mixture's own arrays: its weights and the log view's scaler."""
        return {"log_weights": self._log_weights, **self._log_view.arrays("log")}

    def _model_nbytes(self) -> int:
        return sum(b.state_nbytes() for b in self._bases) + arrays_nbytes(self._own_arrays())

    def _model_growth_nbytes(self, rounds: int) -> int:
        return sum(b.max_growth_nbytes(rounds) for b in self._bases)

    def _fresh_model_nbytes(self, rounds: int) -> int:
        own = 8 * (len(GRID) + 1 + 3 * self._dim)  # the weights and the log view's scaler
        return own + sum(b.state_nbytes() + b.max_growth_nbytes(rounds) for b in self._new_bases(1.0, 1.0))

    @property
    def _log_view(self) -> FeatureScaler:
        if self._log_scaler is None:  # pragma: no cover - a programming error
            raise RuntimeError("the log view's scaler is created with the grid")
        return self._log_scaler

    def _inputs(self, z: np.ndarray | SparseVector, x: np.ndarray | SparseVector
                ) -> tuple[list[np.ndarray | SparseVector], tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Each base's input (the standardised or the signed-log view, dense or with the intercept),
        each form computed and checked once for all the bases that take it, and the log view's pending
        statistics (:meth:`FeatureScaler.pending`)."""
        zlog, log_stats = self._log_view.pending(_signed_log(x))
        forms = {}
        for log, linear in self._forms:
            view = zlog if log else z
            forms[log, linear] = checked_form(_with_intercept(view) if linear else _dense(view))
        return [forms[v] for v in self._views], log_stats

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
        """
        if not self._buffer:
            return self._prior()
        scaler = self._x_scaler
        Z = np.stack([scaler.standardise(row) for row, _ in self._buffer])
        t = np.array([y for _, y in self._buffer])
        mean, std = float(t.mean()), float(t.std())
        if self._binary:
            std = 1.0
        elif std == 0.0:
            return self._prior()
        gram = Z @ Z.T + self._dim * np.eye(len(t))
        coef = np.linalg.solve(gram, (t - mean) / std)
        f = float(Z @ scaler.standardise(_dense(x)) @ coef)
        f = min(max(f, -TARGET_BOUND), TARGET_BOUND)
        if self._binary:
            return min(max(mean + f, -TARGET_BOUND), TARGET_BOUND)
        return mean + std * f

    def _constant(self) -> float:
        return 0.0 if not self._binary else self._prior()

    # ----------------------------------------------------------------- the mixture
    def _weights(self) -> np.ndarray:
        w = np.exp(self._log_weights - self._log_weights.max())
        normalised: np.ndarray = w / w.sum()
        return normalised

    def _mix(self, preds: np.ndarray) -> float:
        w = self._weights()
        bound = self._model_bound()
        if self._binary:
            p = float(w @ np.exp(_log_sigmoid(preds)))
            p = min(max(p, 1.0 / (1.0 + math.exp(bound))), 1.0 / (1.0 + math.exp(-bound)))
            return math.log(p / (1.0 - p))
        eta = 1.0 / (2.0 * MIX_BOUND * MIX_BOUND)
        log_w = np.log(np.maximum(w, 1e-300))

        def g(y: float) -> float:
            return -float(np.logaddexp.reduce(log_w - eta * (preds - y) ** 2)) / eta

        # Vovk's substitution on [-MIX_BOUND, MIX_BOUND]; it follows bases that agree beyond that
        # interval (one expert's f gives f), so the play is clipped at the bases' own bound.
        return min(max((g(-MIX_BOUND) - g(MIX_BOUND)) / (4.0 * MIX_BOUND), -bound), bound)

    # The bases take the checked forms through their unchecked round (_learn_checked), inside the
    # numerics context the mixture's round entered once.
    def _model_predict(self, z: np.ndarray | SparseVector, x: np.ndarray | SparseVector) -> float:
        inputs, _ = self._inputs(z, x)
        preds = [_guarded(b._predict_checked, row) for b, row in zip(self._bases, inputs, strict=True)]
        return self._mix(np.array([*preds, self._constant()]))

    def _model_learn(self, z: np.ndarray | SparseVector, t: float, x: np.ndarray | SparseVector) -> float:
        inputs, log_stats = self._inputs(z, x)
        played_by = [_guarded(b._learn_checked, row, t) for b, row in zip(self._bases, inputs, strict=True)]
        self._log_view.commit(log_stats)
        plays = np.array([*played_by, self._constant()])
        played = self._mix(plays)
        self._update_weights(plays, t)
        return played

    def _update_weights(self, plays: np.ndarray, t: float) -> None:
        r""":math:`w_i \leftarrow w_i e^{-\eta \ell(f_i, t)}` (in logs)."""
        if self._binary:
            self._log_weights += _log_sigmoid(t * plays)
        else:
            bound = self._model_bound()
            target = min(max(t, -bound), bound)
            self._log_weights -= (plays - target) ** 2 / (2.0 * MIX_BOUND * MIX_BOUND)
        self._log_weights -= self._log_weights.max()  # keep them bounded; only differences matter

    def _model_stats(self) -> dict[str, Any]:
        if not self._model_ready:
            return {"weights": {}, "leader": None}
        w = self._weights()
        sizes = [b.stats() for b in self._bases[:-1]]
        return {"weights": {n: float(v) for n, v in zip(self._names, w, strict=True)},
                "leader": self._names[int(np.argmax(w))],
                # the largest base (each base stores at most one point per round); the total is memory
                "stored_points": int(max(s["stored_points"] for s in sizes)),
                "dictionary_size": int(max(s["dictionary_size"] for s in sizes)),
                "stored_points_all_bases": int(sum(s["stored_points"] for s in sizes))}

    # ----------------------------------------------------------------- persistence
    def _model_arrays(self) -> dict[str, np.ndarray]:
        return {**{f"base{i}": nested_blob(b) for i, b in enumerate(self._bases)}, **self._own_arrays()}

    def _model_scalars(self) -> dict[str, Any]:
        if not self._model_ready:
            return {}
        return {"widths": list(self._widths), "log_count": self._log_view.count}

    def _model_restore(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        width, log_width = (float(w) for w in scalars["widths"])
        self._build_grid(width, log_width)
        self._log_view.restore(arrays, int(scalars["log_count"]), "log")
        bases = [restore_nested(arrays[f"base{i}"]) for i in range(len(self._bases))]
        for fresh, restored in zip(self._bases, bases, strict=True):
            if type(fresh) is not type(restored) or fresh.get_params() != restored.get_params():
                raise StateFormatError("a nested base learner does not match the grid.")
        self._bases = bases
        log_weights = arrays["log_weights"]
        if log_weights.shape != (len(self._names),):
            raise StateFormatError("the mixture weights do not match the grid.")
        self._log_weights = log_weights
