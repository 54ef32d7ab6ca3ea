r"""``auto``: a self-tuning learner for raw data, a mixture of a small grid of learners.

Behind the online preprocessing of :mod:`kons.preprocessing` (feature and target scaling, warm-up for
the median-heuristic RBF width, labels as {0, 1} or booleans), :class:`Auto` runs a small grid of base
learners on every round and combines their predictions by Vovk's aggregating algorithm:

* :class:`~kons.NystromKONS` (bounded cost per round) for kernel widths and steps around the
  median-heuristic width and the preprocessing's default step (:data:`GRID`);
* the same on a second view of the row, the standardised signed log :math:`\mathrm{sign}(x)\log(1+|x|)`,
  for the heavy-tailed features of raw data (counts, sizes, durations);
* :class:`~kons.ONS` with an intercept on each view (linear models);
* :class:`~kons.ONS` on the quantile thresholds of the raw features (:mod:`kons._bins`: each feature
  coded by the thresholds it passes, taken from the warm-up rows), an additive piecewise-constant model
  for a target that steps on one raw feature or on integer-coded categories, which a smooth kernel on the
  whole row learns slowly (dense rows of at most :data:`~kons._bins.MAX_COLUMNS` features). Added for
  ``benchmarks/drift.py``'s Agrawal stream, whose first concept is "age under 40 or 60 and over":
  ``auto``'s error there went from 0.277 to 0.215 (River's ARF 0.235), from 0.309 to 0.127 in the 1,000
  rounds after the concept's return but from 0.248 to 0.291 after its first change (the model that
  learnt the first concept keeps weight); the other drift streams' overall figures moved by -0.0036 to
  +0.0032 (water flow's relative MSE). On the 26 stationary sets of ``drift_stationary.md`` (not used
  to choose it) splice's error went from 0.163 to 0.137 and no set lost 1% (the largest loss +0.39%);
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
  :math:`\log(p / (1 - p))`; with ``K`` classes the log loss :math:`-\log p_y` of a distribution over
  them is 1-mixable too, for any ``K``: the mixture plays :math:`p = \sum_i w_i p_i` and updates
  :math:`w_i \leftarrow w_i\, p_i(y)`, which telescopes to :math:`-\log \sum_i w_i^{(0)} \prod_t
  p_{i,t}(y_t) \le \min_i L_i + \ln N` for ``N`` experts (the same bound, whatever ``K``);
* squared loss (regression), on standardised targets in :math:`[-B, B]`, :math:`B` =
  :data:`MIX_BOUND`: mixable with :math:`\eta = 1/(2B^2)`, with Vovk's substitution
  :math:`\gamma = (g(-B) - g(B)) / (4B)`, :math:`g(y) = -\frac1\eta \ln \sum_i w_i e^{-\eta (f_i - y)^2}`.

The bound on what the bases and the mixture may play is wider than the mixture's interval
(:data:`REGRESSION_BOUND` deviations of the target, :data:`SCORE_BOUND` in log-odds): a bound is a
constraint on the bases' functions, which a tight one cuts down on targets far in a tail or on rows the
model could be confident about, while the mixture's interval only sets how fast the weights move.

Following a changing stream (issue 20). The weights above compete with the best single base since
round 1, so after a change of concept the old leader would keep the weight for a long time, and the
bases themselves (ONS's matrix, a full Nystrom dictionary) remember the old concept. Three parts:

* the weights are Fixed-Share's, with the switching rate mixed over a small grid that includes 0
  (:class:`~kons._tracking.SwitchingWeights`): the mixture competes with the best *sequence* of
  experts, paying about :math:`\ln(KT/m)/\eta` per switch, and on a stationary stream at most
  :math:`\ln(1/0.95)/\eta` more than the aggregating algorithm alone;
* change detectors on the mixture's own plays: a one-sided CUSUM on the ratio of the loss to its
  recent level (:class:`~kons._tracking.LossChangeDetector`) declares a change when the loss has risen
  for good, and, for classes, Page's Bernoulli CUSUM on the errors
  (:class:`~kons._tracking.ErrorChangeDetector`) when the error odds have doubled: a change of concept
  such as SEA's or Agrawal's raises the log loss by less than half, which the first never declares;
* restarted bases: at each declared change, and :data:`RESTART_DELAYS` rounds after it, a generation of
  fresh copies (the linear bases of both views, and the views and widths of the two kernel members
  heaviest under the switching rate 0, at the default step) and of the Bayesian linear model of the rows
  since the generation started (:class:`~kons._recent.RecentLinear`, the model a fresh ``auto`` plays in its
  warm-up, so a new linear concept is fitted within a few rows) enters the mixture, each expert with weight
  :data:`CHANGE_ENTRY_PRIOR` at the change (the switching rates' own weights sit on the rate 0 after a
  long stationary stretch, so they cannot move the weight to the newcomers fast) and
  :data:`ENTRY_PRIOR` at the delayed restarts; the generation started at a declared change is then on
  trial (:class:`~kons._tracking.Probation`): if its first round goes against it, its weights become those
  of an entry at :data:`~kons._grid.PROBATION_PRIOR` until its Bayes factor against the mixture passes 1
  (within :data:`~kons._grid.PROBATION_ROUNDS` rounds), so a false alarm costs the experts already there
  about what an entry at 0.05 costs, while a true change is played at the full entry from its first row
  (the row where the old experts lose most); :data:`GENERATIONS` generations live at once, a new one
  replacing, at a declared change, the one started first (it learnt the concept before last, and its
  weight is the old concepts': on the gradual Friedman drift, keeping it instead of the lighter put the
  1,000 rounds after the second change at 0.43 relative MSE rather than 0.38), and at a delayed restart
  the lighter;
* the generation started at a declared change is started *at the change's estimated onset*, not at the
  declaration: the grid keeps its last :data:`~kons._grid.REPLAY_ROWS` rounds (both views of the row, the
  target, the mixture's loss and error: a ring of fixed size), and the new learners first learn the
  rounds since the onset, the maximum-likelihood change point of the declaring detector's CUSUM over the
  rounds kept (:func:`~kons._tracking.change_span`, Hinkley 1971), round by round rather than the
  detector's blocks. Measured on ``benchmarks/drift.py``: on the recurring Friedman stream, declared 18
  rounds after its second change, a generation started at the true change instead put the next 1,000
  rounds at 0.99 of the oracle instead of 1.16, and one started 10 rounds before it at 1.09 (so the
  onset is estimated to the round: the detector's block boundary, up to 7 rounds early, cost the flipped
  linear target 1.2-1.8 of the oracle). What the new learners play on those rounds is not scored, and
  the mixture's weights are not touched: the generation enters with its prior as before. What it
  costs, measured on the same benchmark: a transient burst declared as a change (the real water-flow
  series, round 882) now puts its first 9 rows into the new generation, and the series' last 500 rounds
  went from 0.47 to 0.61 relative MSE (River's linear model 0.66 there); the gradual Friedman
  drift's second window from 0.38 to 0.43 (1.03 of the oracle; its change was declared at round 3204
  instead of 3153).

  Against a comparator that may switch to an expert started at the onset, the regret on the ``n`` rounds
  after the declaration is the detection delay's loss plus the expert's own regret on the ``n + s``
  rounds since the onset (``s`` the span replayed; :math:`O(d \log(n + s))` for ONS on exp-concave losses,
  Hazan et al. 2007; :math:`O(d B^2 \log(n + s))` for the linear model on the squared loss,
  Cesa-Bianchi and Lugosi 2006, Sec. 11.7-11.8) plus the switch's price
  :math:`\ln(1/\text{CHANGE\_ENTRY\_PRIOR})/\eta` and the Fixed-Share terms above; when the estimated
  onset is ``e`` rounds before the true one, the expert also carries ``e`` rounds of the old concept,
  which that bound prices as a comparator started ``e`` rounds early (while demoted by its trial, the
  price is an entry at :data:`~kons._grid.PROBATION_PRIOR`'s, :math:`\ln 20/\eta`, until it is
  promoted). A false alarm costs the experts already there at most
  :math:`\ln(1/(1 - \text{YOUNG\_SIZE} \cdot \text{CHANGE\_ENTRY\_PRIOR}))/\eta = \ln(1/0.25)/\eta`,
  and, once its first round has gone against the generation, about :math:`\ln(1/0.75)/\eta` plus that
  round's excess (:class:`~kons._tracking.Probation`). Assumptions: the concept is piecewise stationary and a
  change raises the mixture's loss by a factor (about 2 over the detector's horizon) or, for classes, its
  error odds (by about 2); a gradual change or one that moves the loss less is left to the switching weights
  and to the bases' own learning (for a gradual change the onset found is where the loss's rise began, inside
  the transition). This is Follow-the-Leading-History (Hazan and Seshadhri 2009) with starts at detected
  changes instead of on a geometric cover, so the number of bases alive is bounded (``len(GRID) + GENERATIONS
  * YOUNG_SIZE``) and the cost per round stays flat (a declared change costs, once, at most
  :data:`~kons._grid.REPLAY_ROWS` rounds of the generation's learners);
  ``benchmarks/drift.py`` measures it against ``auto`` restarted by hand at each true change. Tuned on
  those same streams: the replay's length (192 rows), the onset's estimate and the kernel copy's step were
  chosen by their windows there, so the figures of ``benchmarks/results/drift.md`` are not a held-out
  measure; the 26 stationary sets of ``drift_stationary.md`` were not used to choose them, except for the
  trial of a declared change's generation, made for the one false alarm that cost a stationary set over
  1% (power_plant; ``docs/drift.md``).

A local expert follows what the frozen dictionaries cannot: the Nystrom bases stop adding points once
:data:`MAX_DICTIONARY` are in, so a concept whose geometry moves after that (River's RBF drift, whose class
centroids wander) is followed only by reweighting points of the old geometry. The mixture's last expert
(:class:`~kons._local.RecentNeighbours`) votes with the :data:`~kons._grid.NEIGHBOURS` nearest of the last
:data:`~kons._grid.NEIGHBOUR_ROWS` standardised rows (Cover and Hart 1967, over a sliding window), its
memory moving with the stream at a fixed size. It sleeps until it holds
:data:`~kons._grid.NEIGHBOURS_WAKE_ROWS` rows, then enters at :data:`~kons._grid.NEIGHBOURS_PRIOR`, as a
delayed generation does; there is none on sparse rows or above :data:`~kons._grid.NEIGHBOURS_MAX_DIM`
features. Measured on ``benchmarks/drift.py``'s RBF drift: 0.0767 error overall instead of 0.1087, 0.0860
over the window after the change instead of 0.1540; on the 26 stationary sets, one borderline row of
ionosphere moved (+1.8%, its only set over 1%; the constants' comments in :mod:`kons._grid` give the
variants measured). Its votes have since weighed the inverse of their distances (:mod:`kons._local`):
0.0703 and 0.0740 there, the stationary sets as before or better.

For classes, three Hoeffding trees (:mod:`kons._tree`, Domingos and Hulten's VFDT with grace periods
:data:`~kons._grid.TREE_GRACES`) are experts too: they represent what neither the kernels nor the additive
threshold view do, a target that depends on *interactions* of thresholds (Agrawal's loan functions, on age
and salary together). They learn every row from the first, are kept across declared changes (a tree
restarted at a change had too few rows to grow again), and enter together at
:data:`~kons._grid.TREE_PRIOR` once they have learnt :data:`~kons._grid.TREE_WAKE_ROWS` rows. Which of
Agrawal's concepts one tree fits depends on its grace period; three together were ahead of River's ARF
in every window (``docs/drift.md``). None above :data:`~kons._grid.TREE_MAX_DIM` features or for
regression; at most :data:`~kons._grid.MAX_TREE_LEAVES` leaves each, so their state and cost stay flat.

The issue's other option, a forgetting factor in the second-order matrices, was measured on the ONS
bases (:math:`A_t = \lambda A_{t-1} + (1 - \lambda)\alpha I + \eta \dot g_t^2 x_t x_t^\top`, the floor
keeping :math:`A \succeq \alpha I`) and not kept. With :math:`\lambda = 0.99` it cost 3 of the 26
stationary raw sets more than 1% (cod-rna +3.3%, phishing +1.5%, diabetes +1.1%). With 0.999, on top of
the restarts above, the 26 sets moved by -0.3% on average (none worse by 1%), but on ``drift.py`` only one
window moved by more than 0.01 of the oracle ratio (the linear target's second, 0.93 to 0.87), and its
floor is not a rank-one update: a round costs an O(d^3) inverse instead of O(d^2).

A paired test was measured too and not kept: a shadow generation (the copies a restart would start and
the linear model of the rows), renewed every 384 rounds and learning outside the mixture, each of its
experts' errors compared with the mixture's on the same rounds by a sequential test (the sum of the
differences against four times the root of their sum of squares), the shadow entering the mixture as it
had learnt when one of them won. Alone it declared SEA's last change 352 rounds after it (that window
1.11 to 1.07 of the oracle) and nothing on Agrawal's or the RBF stream (a fresh learner there is no
better than the old mixture for hundreds of rounds); beside the error CUSUM it never declared first (every
play of ``drift.py``'s classification streams the same with it off), for a fourth generation's rounds.

:meth:`Auto.stats` says what leads and since when (``leader``, ``leader_since``), how many changes were
declared (``changes``, ``last_change_round``) and the switching rates' weights.

A round costs the sum of the bases' rounds: eight Nystrom rounds of bounded size (at most
:data:`MAX_DICTIONARY` points, O(j d + j^2)), three O(d^2) ONS rounds and one ONS round on the at
most ``MAX_COLUMNS + 1`` threshold columns (O(d) to code the row, O(c^2) for ``c`` columns), plus,
after a declared change, at most :data:`GENERATIONS` x (two ONS rounds, two Nystrom rounds and one
O(d^2) round of the linear model), O(d) to keep the round and, at most
:data:`~kons._grid.NEIGHBOURS_MAX_DIM` features, O(:data:`~kons._grid.NEIGHBOUR_ROWS` d) for the local
expert's distances (3-5% of a round measured), and for classes three tree rounds (the leaf's path, its
naive Bayes O(K d), and every ``grace`` rows a split's weighing, O(K d cuts)); the weights cost
O((len(GRID) + GENERATIONS * YOUNG_SIZE + 1) x len(RATES)). The round that declares a change also replays
at most :data:`~kons._grid.REPLAY_ROWS` rounds into the new generation (once per change).

**Classes** (:mod:`kons.classes`). Labels are strings, integers or booleans, learnt as they appear. With
two classes, ``auto`` is the binary learner above: the score is the log-odds of ``classes[1]`` (``1`` or
``True`` for the labels of the binary learners of before, whose streams play exactly as they did). A third
class turns every base into the multinomial logistic model with the first class as reference
(:mod:`kons._multinomial`): the binary weights become the first of ``K - 1`` score columns (a new class's
column starts at zero, the reference's score), all sharing the base's one second-order matrix, so a round
costs one O(j^2) update whatever ``K`` plus O(j K) for the columns, and with two classes it is the binary
round. The constant expert plays the add-1/2 (Krichevsky-Trofimov) class frequencies, and the warm-up the
Bayesian linear model of each class against the others (softmax of half their scores, which for two
classes is the binary warm-up). At most :data:`~kons.classes.MAX_CLASSES` classes are kept.

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

from typing import Any, ClassVar

import numpy as np

from kons._bins import QuantileBins, thresholds_per_feature
from kons._grid import (
    GENERATIONS,
    GRID,
    MAX_DICTIONARY,
    REPLAY_ROWS,
    YOUNG_BASES,
    YOUNG_LINEAR,
    Grid,
    bins_columns,
    class_column_nbytes,
    signed_log,
    standardised,
)
from kons._mixture import MIX_BOUND, Mixture
from kons._multinomial import log_probability, reference_softmax
from kons._validation import POSITIVE, Constraint, Integer, NoneOr, OneOf, check_int
from kons.base import Learner, _round_numerics
from kons.classes import MAX_CLASSES, MAX_LABEL_CHARS, Classes, class_label, legacy_sign
from kons.errors import InvalidParameterError
from kons.kernel.nystrom_kons import NystromKONS
from kons.linear.ons import ONS
from kons.losses import binary_distribution, get_loss
from kons.preprocessing import (
    TARGET_BOUND,
    FeatureScaler,
    Preprocessor,
    median_width,
    user_bound,
)
from kons.records import Record
from kons.sparse import SparseVector, dense

__all__ = ["GENERATIONS", "GRID", "MIX_BOUND", "REGRESSION_BOUND", "SCORE_BOUND", "TASKS", "YOUNG_LINEAR",
           "Auto", "Mixture"]

#: Bound on every base's play and on the mixture's, in standard deviations of the target (regression).
#: Wider than the aggregating algorithm's interval :data:`MIX_BOUND`: a bound is a constraint on what a
#: base can express (each round projects the base onto it), and by Chebyshev's inequality up to
#: 1/3^2 = 11% of a target's values may lie beyond 3 deviations (at most 4% beyond 5). On raw cpusmall,
#: where 3.8% of the targets lie below -3 deviations, 3 cost auto 0.169 against 0.081 relative MSE.
REGRESSION_BOUND = 5.0
#: Bound on every base's score and on the mixture's (classification): log-odds of 10, probabilities in
#: [4.5e-5, 1 - 4.5e-5]. A bound of 3 (probabilities in [0.047, 0.953]) projected the linear and kernel
#: bases back every round on streams whose rows are mostly easy: raw phishing 0.080 -> 0.069 error,
#: cod-rna 0.086 -> 0.073, ijcnn1 0.077 -> 0.072 with 10.
SCORE_BOUND = 10.0
TASKS = {"regression": "squared", "classification": "logistic"}


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
        Bound on the predictions in the user's units (regression); None: the range of the targets seen.
        Ignored for classification, whose scores (log-odds) lie in :math:`[-B, B]`, :math:`B` =
        :data:`SCORE_BOUND`.
    seed : int, default 0
        Seed of the Nystrom bases' dictionary coins.
    dim : int or None, default None
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
        self._prep = Preprocessor(loss=self._loss, user_bound=self._user_bound, model_bound=self._model_bound,
                                  warms_up=True)
        self._grid: Grid | None = None  # built once the warm-up gives the kernel widths
        self._classes = Classes()
        # The round just played (classification): its distribution over the classes and its log loss.
        self._played: tuple[list[tuple[Any, float]], float] = ([], 0.0)
        super()._reset()

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {"task": self.task, "C": self.C_param, "seed": self.seed, "dim": self.dim}

    @classmethod
    def _model_floats(cls, dim: int, params: dict[str, Any]) -> int:
        # The grid's members and the restarted copies, each at most a full learner of its kind, each
        # generation's linear model ((d + 1)^2 + 2 (d + 1) floats, one score), the two scalers (3 d each)
        # and the rounds kept for a restart (two views of d and three floats each).
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
        return members + GENERATIONS * (YOUNG_BASES * largest + recent) + 6 * dim + kept + binned

    # ----------------------------------------------------------------- bounds and labels
    @property
    def C(self) -> float:  # type: ignore[override]  # noqa: N802 - the learners' name for the bound
        """The bound on every prediction: the user's ``C``, else the largest target magnitude seen."""
        return self._prep.bound

    @property
    def _model_bound(self) -> float:
        """The bound on the bases' and the mixture's plays on standardised data."""
        return SCORE_BOUND if self._binary else REGRESSION_BOUND

    def _check_x(self, x: Any) -> Any:
        return self._prep.check_form(super()._check_x(x))

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
        counts = np.zeros(classes)
        counts[:len(self._prep.labels)] = self._prep.labels
        prior: np.ndarray = (counts + 0.5) / (counts.sum() + 0.5 * classes)
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
                  bins: QuantileBins | None = None) -> Grid:
        """The grid for the median-heuristic widths of the standardised and of the log view (``sparse``:
        the rows', by default the feature scaler's) and the quantile thresholds ``bins``, if any."""
        sparse = self._prep.x_scaler.sparse if sparse is None else sparse
        return Grid(loss=self.loss, dim=self._dim, bound=self._model_bound, seed=self.seed,
                    widths=(width, log_width), held=self._growth_held,
                    log_scaler=FeatureScaler(self._dim, sparse), binary=self._binary, bins=bins)

    def _warmed_up_grid(self, Z: np.ndarray) -> Grid:
        """The grid for the buffered rows: ``Z`` standardised gives the width, their signed logs the log
        view's, the raw rows the quantile thresholds (dense rows of few enough features only: a sparse
        row's features are mostly absent, and the view's columns are bounded)."""
        rows = [x for x, _ in self._prep.buffer]
        log_rows = [signed_log(x) for x in rows]
        width = median_width(Z)
        dense_rows = not self._prep.x_scaler.sparse and thresholds_per_feature(self._dim) > 0
        bins = QuantileBins.from_rows(np.stack([dense(x) for x in rows])) if rows and dense_rows else None
        return self._new_grid(width, median_width(standardised(log_rows, self._dim)) if log_rows else width,
                              bins=bins)

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
        prep = self._prep
        if not prep.buffer:
            return prep.prior()
        scaler = prep.x_scaler
        Z = prep.standardised_buffer()
        t = np.array([y for _, y in prep.buffer])
        mean, std = float(t.mean()), float(t.std())
        if self._binary:
            std = 1.0
        elif std == 0.0:
            return prep.prior()
        gram = Z @ Z.T + self._dim * np.eye(len(t))
        coef = np.linalg.solve(gram, (t - mean) / std)
        f = float(Z @ scaler.standardise(dense(x)) @ coef)
        f = min(max(f, -TARGET_BOUND), TARGET_BOUND)
        if self._binary:
            return min(max(mean + f, -TARGET_BOUND), TARGET_BOUND)
        return mean + std * f

    def _constant(self) -> float:
        """The constant expert: the mean of the standardised target, or the base rate's log-odds."""
        return 0.0 if not self._binary else self._prep.prior()

    def _warmup_probabilities(self, x: np.ndarray | SparseVector, classes: int) -> np.ndarray:
        r"""The warm-up play for ``classes`` classes: :meth:`_warmup_prediction` for each class against
        the others (labels :math:`\pm 1`, one solve for all of them), and the softmax of half those
        scores; for two classes, the sigmoid of the binary warm-up score (the two scores are opposite)."""
        prep = self._prep
        if not prep.buffer:
            return self._class_prior(classes)
        Z = prep.standardised_buffer()
        targets = -np.ones((len(Z), classes))
        targets[np.arange(len(Z)), [int(t) for _, t in prep.buffer]] = 1.0
        mean = targets.mean(axis=0)
        coef = np.linalg.solve(Z @ Z.T + self._dim * np.eye(len(Z)), targets - mean)
        f = np.clip(Z @ prep.x_scaler.standardise(dense(x)) @ coef, -TARGET_BOUND, TARGET_BOUND)
        scores = np.clip(mean + f, -TARGET_BOUND, TARGET_BOUND) / 2.0
        return reference_softmax(scores[1:] - scores[0])

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
        return played

    def _round_loss(self, y_hat: float, y: Any) -> float:
        return self._played[1] if self._binary else self._loss.value(y_hat, y)

    def _learn_target(self, x: np.ndarray | SparseVector, y: float) -> float:
        """A round of the one-score model: regression, or the binary classes as the labels -1 and +1."""
        prep = self._prep
        prep.begin(x, self._dim)
        target, y_stats = prep.target(y)
        if prep.ready:
            played = prep.scaled_round(x, lambda z: self._model.learn(z, target, x, self._constant()))
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
            played = self._warmup_probabilities(x, classes)
            buffered = prep.buffer
            if len(prep.labels) == 2:  # the third class: the buffered labels -1 and +1 become indices
                prep.buffer = [(row, float(t > 0)) for row, t in buffered]
            try:
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
        return self._prep.nbytes() + (self._model.nbytes() if self._prep.ready else 0)

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
        return grid.nbytes() + grid.growth_nbytes(rounds)

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
        return scalars

    def _restore(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        self._prep.restore(self._dim, arrays, scalars)
        if self._binary and scalars:
            self._classes.restore(scalars.get("classes"), self._prep.labels)
        if self._prep.ready:
            width, log_width = (float(w) for w in scalars["widths"])
            grid = self._new_grid(width, log_width)
            grid.restore(arrays, scalars, self._rounds)
            grid.classes = max(len(self._classes), 2)
            self._grid = grid
