"""The learner protocol shared by every model in :mod:`kons`.

A learner is built from keyword-only hyper-parameters (validated once, in ``__init__``), plays one
round per :meth:`Learner.learn_one` (predict on the current state, then update) and returns the clipped
prediction it played. All randomness comes from ``seed``; the state is saved by :meth:`Learner.to_bytes`
into the versioned, pickle-free format of :mod:`kons._state`, and restoring continues bit-identically.
"""

from __future__ import annotations

import abc
import functools
import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self

import numpy as np

from kons import _state
from kons._blas import one_blas_thread
from kons._multinomial import log_probability, multinomial_rounds
from kons._numerics import clip
from kons._validation import (
    POSITIVE,
    Constraint,
    Integer,
    NoneOr,
    as_features,
    as_label,
    check_int,
    check_real,
)
from kons.conformal import SPREAD_EXPONENT, Conformal, check_coverage
from kons.errors import InvalidInputError, InvalidParameterError, NumericalError, StateFormatError
from kons.kernels import Kernel
from kons.losses import Loss, LossName, get_loss
from kons.records import is_record, parse_record
from kons.rounds import Round
from kons.sparse import as_sparse, is_sparse_input

__all__ = ["LEARNERS", "Learner", "learner_class", "learner_from_params", "load", "peek"]

#: Every concrete learner by its registry name (``"kons"``, ``"sketched_kons"``, ...).
LEARNERS: dict[str, type[Learner]] = {}


class _RoundNumerics:
    """How every round (and a restore) computes: on one BLAS thread, so that its result does not depend
    on the thread count of the embedding process (:mod:`kons._blas`), and without floating-point
    warnings: overflow inside a round is detected from its results (a learner raises NumericalError, the
    prediction is checked), so numpy's warnings would only reach the caller's stderr. A class, not a
    generator-based context manager: every round enters it, and the generator's frame cost as much as
    the pin itself."""

    __slots__ = ("_errstate",)

    def __enter__(self) -> None:
        _BLAS_PIN.__enter__()
        try:
            self._errstate = np.errstate(over="ignore", invalid="ignore", divide="ignore")
            self._errstate.__enter__()
        except BaseException:  # pragma: no cover - the pin is lifted whatever happens
            _BLAS_PIN.__exit__(None, None, None)
            raise

    def __exit__(self, *exc_info: Any) -> None:
        try:
            self._errstate.__exit__(*exc_info)
        finally:
            _BLAS_PIN.__exit__(*exc_info)


#: The pin every round enters (held here: one lookup less per round than asking for it).
_BLAS_PIN = one_blas_thread()


def _round_numerics() -> _RoundNumerics:
    """A fresh :class:`_RoundNumerics` to enter (each entry keeps its own numpy error state)."""
    return _RoundNumerics()


#: Bytes of one float64 of the state.
_FLOAT_BYTES = 8
#: A round's mark that it has drawn nothing yet (:attr:`Learner._generator`).
_UNDRAWN = object()

# Weight of the newest loss in the exponentially weighted "recent loss" (about the last 100 rounds).
_RECENT_WEIGHT = 0.01


class Learner(abc.ABC):
    """Base class of all online learners.

    A learner is written as follows (:class:`~kons.linear.OGD` is a short example):

    * ``name``, the registry key, and ``_parameter_constraints``, the limits of every hyper-parameter
      of ``__init__`` (extend the parent's: ``{**Parent._parameter_constraints, "beta": Interval(...)}``);
    * its capabilities, as class attributes: ``accepts_sparse``, ``accepts_records``, ``uses_kernel``,
      ``grows``, ``can_hold_growth``, ``_eta_from_curvature``, ``preprocesses``;
    * ``__init__`` with keyword-only hyper-parameters that calls ``self._set_params(**those)`` (which
      checks each value against its constraint and stores it under its own name) and then
      ``self._reset()``;
    * the abstract hooks: ``_reset_model`` creates the learned state, ``_predict`` and ``_learn`` play a
      round, ``_arrays`` (with ``_scalars``, optional) saves the state and ``_restore`` loads it;
      ``_model_stats`` (optional) adds counters to :meth:`stats`. What a learner shares with others
      is a member object (a sketch, a dictionary, a :class:`~kons.preprocessing.Preprocessor`), so no
      learner is more than three kons classes deep.

    The input dimension is fixed in one place, :meth:`_fix_dim`: at construction when ``dim`` is given,
    else at the first round. Every hook runs after it, so ``self._dim`` is always an int inside them;
    before it the learner has no model, predicts 0 and saves no arrays.
    """

    name: ClassVar[str]
    #: Whether the learner preprocesses its input itself (:mod:`kons.preprocessing`).
    preprocesses: ClassVar[bool] = False
    #: Whether it takes sparse examples (:class:`~kons.sparse.SparseVector`, a dict of indices and
    #: values, a scipy.sparse row) as well as dense ones.
    accepts_sparse: ClassVar[bool] = False
    #: Whether it takes records, dicts of named numbers, strings, booleans and None (:mod:`kons.records`).
    accepts_records: ClassVar[bool] = False
    #: Whether it learns in a kernel's feature space (it has a ``kernel`` parameter and takes dense rows).
    uses_kernel: ClassVar[bool] = False
    #: Version of the subclass's own arrays and scalars inside the state blob.
    state_version: ClassVar[int] = 1
    #: The domain of each hyper-parameter, checked by :meth:`_set_params`.
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "loss": LossName(),
        "C": POSITIVE,
        "dim": NoneOr(Integer(low=1)),
    }

    dim: int | None
    loss: str
    C: float
    _loss: Loss
    #: The input dimension; set by :meth:`_fix_dim` (only then, and only then is ``_has_model`` true).
    _dim: int
    _has_model: bool
    _rng: np.random.Generator | None = None
    #: In a round: :data:`_UNDRAWN` until its first draw, then the generator's state before it.
    _draws_from: object = None
    #: Whether ``eta`` is the weight of the second-order term, defaulting to the loss's curvature
    #: ``sigma(C)`` (:meth:`_resolve_eta`): :meth:`_set_params` then sets ``_eta`` and ``_sqrt_eta``.
    _eta_from_curvature: ClassVar[bool] = False
    #: The exponent of :meth:`_spread` in the local scale of its intervals (:mod:`kons.conformal`; a class
    #: attribute, except for :class:`~kons.preprocessing.Preprocessed`, which takes its base learner's).
    _spread_exponent: float = SPREAD_EXPONENT
    #: The resolved step, reported by :meth:`stats` (None: the learner has no such step).
    _eta: float | None = None
    #: Whether the learned state grows with the rounds (kernel learners storing points); linear ones:
    #: False. A class attribute, except for :class:`~kons.preprocessing.Preprocessed`, which takes its
    #: base learner's.
    grows: bool = False
    #: Whether it can keep learning with its state held at its current size (see :meth:`hold_growth`).
    can_hold_growth: bool = True
    _growth_held: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            LEARNERS[cls.name] = cls

    # ----------------------------------------------------------------- parameters
    def _set_params(self, **params: Any) -> None:
        """Check each hyper-parameter against ``_parameter_constraints`` and store it under its name."""
        owner = type(self).__name__
        for name, value in params.items():
            setattr(self, name, self._parameter_constraints[name].check(owner, name, value))
        self._loss = get_loss(self.loss)
        if self._eta_from_curvature:
            eta = self._resolve_eta(getattr(self, "eta", None))
            self._eta = eta
            self._sqrt_eta = math.sqrt(eta)

    def _init_common(self, *, loss: str, C: float, dim: int | None) -> None:
        """Validate the parameters every learner has (``loss``, ``C``, ``dim``)."""
        self._set_params(loss=loss, C=C, dim=dim)

    def _resolve_eta(self, eta: float | None) -> float:
        """``eta`` if given, else the loss's curvature constant ``sigma(C)`` (Asm. 2)."""
        owner = type(self).__name__
        if eta is None:
            sigma = self._loss.curvature(self.C)
            if sigma <= 0.0:
                raise InvalidParameterError(
                    f"The 'eta' parameter of {owner} has no default for the {self.loss} loss "
                    "(it has no curvature); give a float in (0, inf)."
                )
            return sigma
        return check_real(owner, "eta", eta, low=0.0, low_open=True)

    @classmethod
    def _defaults(cls) -> dict[str, Any]:
        """The hyper-parameters with their defaults, in the constructor's order (scikit-learn's
        convention: the signature of ``__init__`` is the list of parameters)."""
        return dict(_signature_defaults(cls.__init__))

    @classmethod
    def _param_names(cls) -> list[str]:
        return list(cls._defaults())

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The hyper-parameters as a JSON-able dict (kernels as ``{"name": ..., ...}``).

        ``deep=False`` (scikit-learn's signature) gives them as stored, the kernel as its object:
        ``sklearn.base.clone`` rebuilds the learner from that and checks the constructor kept each one.
        """
        params = {}
        for name in self._param_names():
            value = getattr(self, name)
            params[name] = value.to_dict() if deep and isinstance(value, Kernel) else value
        return params

    @classmethod
    def _check_known(cls, params: Any) -> None:
        if not isinstance(params, Mapping):
            raise InvalidParameterError(f"parameters of {cls.__name__} must be a dict.")
        unknown = sorted(set(params) - set(cls._param_names()))
        if unknown:
            raise InvalidParameterError(
                f"Unknown parameter(s) {unknown} for {cls.__name__}; "
                f"expected some of {cls._param_names()}."
            )

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> Self:
        """Build a learner from a plain dict (as sent in JSON); unknown keys are an error."""
        cls._check_known(params)
        return cls(**params)

    @classmethod
    def state_bytes(cls, params: Mapping[str, Any]) -> int:
        """Bytes of the arrays a learner built from ``params`` allocates, computed without building it.

        A caller can so refuse a configuration before anything is allocated (``dim=10**30`` gives a
        number, not a ``MemoryError``). For the linear learners this is the whole state, whatever the
        number of rounds; the kernel learners' state grows with the points they store, and this is what
        they hold after their first stored point. A round briefly needs up to twice the state more
        (ONS's rank-one update), and :meth:`to_bytes` a copy of it.

        Raises
        ------
        InvalidParameterError
            For any parameter the constructor would refuse.

        Examples
        --------
        >>> from kons import ONS
        >>> ONS.state_bytes({"dim": 1000})  # A^{-1} (d, d) and u (d,)
        8008000
        """
        cls._check_known(params)
        checked = {
            name: cls._parameter_constraints[name].check(cls.__name__, name, params.get(name, default))
            for name, default in cls._defaults().items()
        }
        dim = checked["dim"]
        return 0 if dim is None else _FLOAT_BYTES * cls._model_floats(dim, checked)

    @classmethod
    @abc.abstractmethod
    def _model_floats(cls, dim: int, params: dict[str, Any]) -> int:
        """Float64 entries of what :meth:`_reset_model` allocates for ``dim`` and the checked ``params``
        (Python ints: exact for any ``dim``)."""

    def clone(self) -> Self:
        """A fresh, unfitted learner with the same hyper-parameters."""
        return type(self).from_params(self.get_params())

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    # ----------------------------------------------------------------- rounds
    def _reset(self) -> None:
        """Create the learned state from scratch (called at the end of ``__init__``)."""
        self._rounds = 0
        self._cumulative_loss = 0.0
        self._recent_loss = 0.0
        self._effective_dimension = 0.0
        seed = getattr(self, "seed", None)
        self._rng = None if seed is None else np.random.default_rng(seed)
        self._has_model = False
        self._conformal: Conformal | None = None  # started by the first coverage asked
        self._asked: float | None = None  # the coverage asked of the round being learnt
        self._answered: tuple[float, float] | list[Any] | None = None  # its interval or set
        self._covered: bool | None = None  # whether that held the label
        # The row last played and its leverage x' A^{-1} x, for _spread (not state: a function of it)
        self._played_row: Any = None
        self._played_quad: float | None = None
        if self.dim is not None:
            self._fix_dim(self.dim)

    def _fix_dim(self, dim: int) -> None:
        """The one place where the input dimension becomes known: create the model for it."""
        self._dim = dim
        self._has_model = True
        with _round_numerics():  # a model may start from a factorisation (a QR, ...)
            self._reset_model()

    @abc.abstractmethod
    def _reset_model(self) -> None:
        """Create the subclass's learned state for inputs of dimension ``self._dim``."""

    def _known_dim(self) -> int | None:
        """The input dimension, or None before the first round of a learner built without ``dim``."""
        return self._dim if self._has_model else None

    @property
    def input_dim(self) -> int | None:
        """The input dimension: ``dim`` when given, else fixed by the first round; None before it.

        Examples
        --------
        >>> from kons import OGD
        >>> learner = OGD()
        >>> learner.input_dim is None
        True
        >>> _ = learner.learn_one([1.0, 2.0], 1.0)
        >>> learner.input_dim
        2
        """
        return self._known_dim()

    @property
    def _generator(self) -> np.random.Generator:
        """The learner's own random generator (for learners with a ``seed``). A round's first draw keeps
        the generator's state before it, so that a round that raises takes its draws back
        (:meth:`_take_back_draws`); a round that draws nothing, most rounds of most learners, copies no
        state."""
        if self._rng is None:  # pragma: no cover - a learner without a seed never draws
            raise TypeError(f"{type(self).__name__} has no random generator (no 'seed' parameter).")
        if self._draws_from is _UNDRAWN:
            self._draws_from = self._rng.bit_generator.state
        return self._rng

    def _take_back_draws(self) -> None:
        """Put the generator back where it was before the round's first draw, if the round drew."""
        if self._rng is not None and isinstance(self._draws_from, dict):
            self._rng.bit_generator.state = self._draws_from

    def _check_x(self, x: Any) -> Any:
        """``x`` validated against the learner's dimension (what ``_predict`` and ``_learn`` receive)."""
        if is_record(x):
            if not self.accepts_records:
                # A dict here is either a mistyped sparse row or a record: say what each needs.
                sparse = (" (a sparse row is a dict with exactly the keys 'indices' and 'values', and "
                          "optionally 'dim')") if self.accepts_sparse else ""
                raise InvalidInputError(
                    f"{type(self).__name__} takes arrays of numbers{sparse}; a record (a dict of named "
                    "values) needs a learner that preprocesses: 'auto', or learner_from_params(...) without "
                    "'preprocess': false.")
            return parse_record(x, self._known_dim())
        if self.accepts_sparse and is_sparse_input(x):
            return as_sparse(x, self._known_dim())
        return as_features(x, self._known_dim())

    def _check_y(self, y: Any) -> float:
        return self._loss.check_label(as_label(y), self.C)

    def _clip(self, y_bar: float) -> float:
        bound = self.C
        # (:func:`clip`'s test written out: every expert of a mixture clips its plays)
        return y_bar if -bound <= y_bar <= bound else clip(y_bar, -bound, bound)

    def check_round(self, x: Any, y: Any = None) -> tuple[Any, float | None]:
        """Validate one round's input exactly as :meth:`learn_one` and :meth:`predict_one` do.

        Never changes the learner, so a caller can check a whole batch before it plays any round.

        Parameters
        ----------
        x : array-like or sparse example
            The features (a sparse ``{"indices": ..., "values": ...}`` dict for the linear learners).
        y : float, optional
            The label; not checked when None (a prediction has none).

        Returns
        -------
        tuple
            ``(x, y)`` as the learner uses them: ``x`` as float64 features, ``y`` as a float (or None).

        Raises
        ------
        InvalidInputError
            If ``x`` has the wrong dimension, a non-finite value or a squared norm that overflows, or
            ``y`` is not a label of the loss or so far from ``[-C, C]`` that its loss overflows.

        Examples
        --------
        >>> from kons import KernelOGD
        >>> learner = KernelOGD(dim=2, loss="hinge")
        >>> learner.check_round([1, 2], 1)
        (array([1., 2.]), 1.0)
        >>> learner.check_round([1e300, 0.0])
        Traceback (most recent call last):
        ...
        kons.errors.InvalidInputError: x is too large: its squared norm overflows float64.
        """
        return self._check_x(x), (None if y is None else self._check_y(y))

    def predict_one(self, x: Any) -> float:
        """The clipped prediction for ``x`` on the current state; never changes the state."""
        x, _ = self.check_round(x)
        if not self._has_model:  # nothing learned yet: the zero function
            return 0.0
        with _round_numerics():
            return self._predict_checked(x)

    def _predict_checked(self, x: Any) -> float:
        """:meth:`predict_one` of an ``x`` as :meth:`check_round` returns it, inside the numerics
        context (a composite calls it for its parts: its own round validates and enters it once)."""
        if not self._has_model:
            return 0.0
        y_bar = self._predict(x)
        if not math.isfinite(y_bar):
            raise NumericalError("the prediction overflowed for this input.")
        return self._clip(y_bar)

    def learn_one(self, x: Any, y: Any) -> float:
        """Play one round: predict ``x`` on the current state, observe ``y``, update.

        Returns the clipped prediction played in this round (the one the regret is measured on).
        Raises a :class:`~kons.errors.KonsError` and leaves the learner unchanged on bad input.
        """
        x, label = self.check_round(x, y)
        y = as_label(y) if label is None else label  # check_round skips a missing label; a round needs one
        with _round_numerics():
            return self._learn_checked(x, y)

    def _learn_checked(self, x: Any, y: Any) -> float:
        """:meth:`learn_one` of ``(x, y)`` as :meth:`check_round` returns them, inside the numerics
        context (a composite calls it for its parts: its own round validates and enters it once)."""
        first = not self._has_model
        if first:
            self._fix_dim(len(x))
        # A round that raises leaves the state unchanged (``_learn`` commits nothing before it can no
        # longer fail), and the random draws it made are taken back here, for every learner.
        self._draws_from = _UNDRAWN
        try:
            y_hat, leverage = self._learn(x, y)
        except BaseException:
            if first:
                conformal, asked = self._conformal, self._asked
                self._reset()
                self._conformal, self._asked = conformal, asked
            else:
                self._take_back_draws()
            raise
        finally:
            self._draws_from = None
        self._record_round(self._round_loss(y_hat, y), leverage)
        if self._conformal is not None:
            self._learn_conformal(self._conformal, y_hat, y)
        return y_hat

    def learn_round(self, x: Any, y: Any, coverage: float | None = None, *, track: bool = True) -> Round:
        """Play one round as :meth:`learn_one` does and return what it answers: the play, its loss at
        ``y`` and, for a binary loss, whether the play's sign was the label's (:class:`~kons.Round`).

        ``coverage``: the round answers too the interval (regression) or the set (classes) of the play
        at that coverage (see :meth:`predict_interval_one`), which is tracked from then on; with
        ``track=False`` it is not (an untracked coverage is answered from the recent scores, none before
        any coverage is tracked: :meth:`track_coverage`), so that the learner's state is the same whatever
        coverage a caller asks of its rounds."""
        return self._conformal_round(lambda: self._learnt_round(x, y), coverage, track)

    def track_coverage(self, coverage: float) -> None:
        """Track ``coverage`` from now on (:meth:`predict_interval_one`): every round learns its threshold.

        Raises
        ------
        InvalidParameterError
            If ``coverage`` is not in (0, 1), or the learner gives neither intervals nor sets.
        """
        self._conformal_for(coverage)

    def _learnt_round(self, x: Any, y: Any) -> Round:
        played = self.learn_one(x, y)
        loss = get_loss(self.loss)
        correct = (played if y > 0 else -played) > 0 if loss.binary else None
        return Round(played, loss=loss.value(played, y), correct=correct)

    def predict_round(self, x: Any, coverage: float | None = None) -> Round:
        """:meth:`predict_one` as a :class:`~kons.Round` (no loss: nothing is learnt); with ``coverage``,
        its interval or set as :meth:`predict_interval_one` and :meth:`predict_set_one` give them, except
        that it never changes the learner: a coverage not tracked is answered from the recent scores (the
        split-conformal quantile of the last :data:`~kons.conformal.RING`), and before any coverage was
        asked, as a learner that learnt no round since (a regression learner's range ``[-C, C]``)."""
        if coverage is None:
            return self._predicted_round(x)
        conformal = self._conformal_for(coverage, track=False)
        played = self._predicted_round(x)
        return _answering(played, coverage, self._conformal_answer(conformal, played, coverage), None)

    def _predicted_round(self, x: Any) -> Round:
        return Round(self.predict_one(x))

    # ----------------------------------------------------------------- conformal intervals and sets
    def predict_interval_one(self, x: Any, coverage: float = 0.9) -> tuple[float, float]:
        r"""An interval ``(low, high)`` around :meth:`predict_one` that holds the target with the long-run
        frequency ``coverage`` (a regression learner), whatever the stream does.

        The width follows the row: the learner's recent mean absolute residual times its own
        uncertainty about the row relative to its usual one (a second-order learner's: the row's leverage
        :math:`x^\top A^{-1} x` under its matrix; for :class:`~kons.Auto`, the spread of its experts' plays
        under the mixture's weights; a first-order learner has one width for every row, which still
        follows a drift). The scale of the residuals is calibrated online, one threshold per coverage
        asked, by quantile tracking (adaptive conformal inference: Gibbs and Candès 2021; Angelopoulos et
        al. 2023), :mod:`kons.conformal`.

        Guarantee: over any ``n`` rounds learnt after this coverage was first asked, the fraction of
        targets outside the interval played at their round differs from ``1 - coverage`` by at most
        ``(B + eta) / (eta n)``, ``B`` the bound of the scores (residuals in local scales, capped at
        :data:`~kons.conformal.SCORE_CAP`) and ``eta`` the tracking step, :data:`kons.conformal.STEP`.
        Assumptions: none on the data (no exchangeability: drift and even an adversary are allowed);
        it is a long-run, marginal statement (nothing is promised for one row or one region of ``x``).

        The first ask of a coverage starts tracking it (part of the learner's state, saved by
        :meth:`to_bytes`; at most :data:`~kons.conformal.MAX_LEVELS` at once); before any round was learnt
        since intervals started, the interval is the learner's range ``[-C, C]``.

        Raises
        ------
        InvalidParameterError
            If ``coverage`` is not in (0, 1), or the learner is not a regression learner.
        """
        self._conformal_for(coverage, "interval")
        interval = self.predict_round(x, coverage).interval
        assert interval is not None  # a regression round with a coverage
        return interval

    def predict_set_one(self, x: Any, coverage: float = 0.9) -> list[Any]:
        """The classes, most probable first, that hold the label with the long-run frequency ``coverage``
        (a learner of class probabilities: :class:`~kons.Auto` for classification): adaptive prediction
        sets whose threshold is calibrated online as :meth:`predict_interval_one`'s scale, with the same
        guarantee (set scores lie in [0, 1]). A set may be empty when the threshold sank below every
        class's: the learner then covers more often than asked and says so."""
        self._conformal_for(coverage, "set")
        labels = self.predict_round(x, coverage).prediction_set
        assert labels is not None  # a round of classes with a coverage
        return labels

    @property
    def conformal_kind(self) -> str | None:
        """What a coverage asks of this learner: ``"interval"`` (regression), ``"set"`` (a learner of
        class probabilities) or None (neither: a binary loss without probabilities)."""
        if self.gives_class_probabilities:
            return "set"
        return None if self._loss.binary else "interval"

    def _conformal_for(self, coverage: Any, kind: str | None = None, track: bool = True) -> Conformal:
        """The conformal component, started if need be, with ``coverage`` (checked) tracked; ``kind``:
        the answer asked (an interval or a set), refused if the learner gives the other. ``track=False``:
        nothing changes (the component as it is, or a fresh one not kept)."""
        coverage = check_coverage(coverage)
        own = self.conformal_kind
        if own is None or (kind is not None and kind != own):
            gives = {"interval": "intervals (it is a regression learner)",
                     "set": "prediction sets (it gives class probabilities)",
                     None: "neither intervals nor prediction sets (it is not a regression learner and gives "
                           "no class probabilities: use 'auto' with task 'classification')"}[own]
            raise InvalidParameterError(f"{type(self).__name__} with the {self.loss} loss gives {gives}.")
        conformal = self._conformal
        if conformal is None:
            conformal = Conformal(own, spread_exponent=self._spread_exponent)
        if track:
            self._conformal = conformal
            conformal.track(coverage)
        return conformal

    def _conformal_round(self, learnt: Any, coverage: float | None, track: bool) -> Round:
        """The round ``learnt()`` plays, with the interval or set of ``coverage`` of its play."""
        if coverage is None:
            played: Round = learnt()
            return played
        self._conformal_for(coverage, track=track)
        self._asked = coverage
        try:
            played = learnt()
            answered, covered = self._answered, self._covered
        finally:
            self._asked, self._answered, self._covered = None, None, None
        return _answering(played, coverage, answered, covered)

    def _conformal_answer(self, conformal: Conformal, played: Round, coverage: float
                          ) -> tuple[float, float] | list[Any]:
        """The interval or set of ``coverage`` of the round just ``played``."""
        if conformal.kind == "set":
            pairs = played.distribution or []
            inside = conformal.prediction_set(np.array([p for _, p in pairs], dtype=np.float64), coverage)
            return [pairs[i][0] for i in inside]
        interval = conformal.interval(played.value, self._spread(), coverage)
        if interval is None:  # nothing learnt since intervals started: the learner's range
            interval = (min(-self.C, played.value), max(self.C, played.value))
        return interval

    def _spread(self) -> float:
        r"""The learner's own uncertainty about the row it just played: the square root of the row's
        leverage :math:`x^\top A^{-1} x` under a second-order learner's matrix (0: a learner without one).

        A learner's round keeps the leverage it computes anyway (``_played_quad``, the matrix before the
        update); a prediction keeps only its row (``_played_row``) and the leverage is computed here, on
        the same state, only when an interval is asked."""
        quad = self._played_quad
        if quad is None:
            if self._played_row is None:
                return 0.0
            quad = self._played_quad = self._quad(self._played_row)
        return math.sqrt(max(quad, 0.0))

    def _quad(self, row: Any) -> float:
        r"""The leverage :math:`x^\top A^{-1} x` of a ``row`` as ``_predict`` recorded it, on the current
        state (0: a learner without a second-order matrix)."""
        return 0.0

    def _learn_conformal(self, conformal: Conformal, y_hat: float, y: Any) -> None:
        """The round just learnt (played ``y_hat``, label ``y``) for the conformal component, after the
        interval of the coverage asked of it, if any, was answered."""
        spread = self._spread()
        if self._asked is not None:
            self._answered = self._conformal_answer(conformal, Round(y_hat), self._asked)
            self._covered = self._answered[0] <= float(y) <= self._answered[1]
        conformal.learn_residual(y_hat, float(y), spread)

    @property
    def gives_class_probabilities(self) -> bool:
        """Whether its rounds play a distribution over classes (:class:`~kons.Auto` for classification)."""
        return False

    def algorithm_params(self) -> tuple[str, dict[str, Any]]:
        """The algorithm and parameters that :func:`learner_from_params` builds this learner from (a
        learner without its own preprocessing: ``"preprocess": False``)."""
        params = self.get_params()
        if not self.preprocesses:
            params["preprocess"] = False
        return self.name, params

    def _round_loss(self, y_hat: float, y: Any) -> float:
        """The loss of the round just played (:meth:`stats`): the loss's value at the play."""
        return self._loss.value(y_hat, y)

    def _record_round(self, loss: float, leverage: float) -> None:
        """Count a played round in :meth:`stats`."""
        self._rounds += 1
        self._cumulative_loss += loss
        self._recent_loss += _RECENT_WEIGHT * (loss - self._recent_loss)
        self._effective_dimension += leverage

    # ----------------------------------------------------------------- classes
    @property
    def classes(self) -> list[Any]:
        """The classes seen, for a learner that learns classes (:class:`~kons.Auto`); else ``[]``."""
        return []

    def predict_proba_dict_one(self, x: Any) -> dict[Any, float]:
        """Every known class's probability for ``x`` (a learner of classes: :class:`~kons.Auto`)."""
        raise InvalidParameterError(
            f"{type(self).__name__} gives no class probabilities: use 'auto' with task 'classification'.")

    def learn_proba_one(self, x: Any, y: Any) -> dict[Any, float]:
        """One round, returning the distribution played (a learner of classes: :class:`~kons.Auto`)."""
        raise InvalidParameterError(
            f"{type(self).__name__} gives no class probabilities: use 'auto' with task 'classification'.")

    # ----------------------------------------------------------------- multinomial rounds
    #: Whether the learner has the multinomial round (:mod:`kons._multinomial`) that :class:`~kons.Auto`
    #: drives once a third class appears: :class:`~kons.ONS` and :class:`~kons.NystromKONS`.
    multinomial: ClassVar[bool] = False

    def _learn_class_checked(self, x: Any, label: int) -> np.ndarray:
        """A multinomial round on a checked ``x`` (with the model already widened to the classes by
        ``_widen``): the probabilities played, the state unchanged (random draws too) if it raises.
        Its loss in :meth:`stats` is the log loss."""
        self._draws_from = _UNDRAWN
        try:
            probabilities, leverage = multinomial_rounds(self)._learn_class(x, label)
        except BaseException:
            self._take_back_draws()
            raise
        finally:
            self._draws_from = None
        self._record_round(-log_probability(probabilities, label), leverage)
        return probabilities

    def predict_many(self, X: Any) -> np.ndarray:
        """:meth:`predict_one` for each row of ``X`` (n, d), on the same state; returns (n,)."""
        return np.array([self.predict_one(x) for x in X], dtype=np.float64)

    def learn_many(self, X: Any, Y: Any) -> np.ndarray:
        """Sequential rounds of :meth:`learn_one` over the rows of ``X`` and ``Y``; returns the plays.

        Stops at the first invalid example (the rounds before it are kept) and raises.
        """
        if len(X) != len(Y):
            raise InvalidParameterError(f"X and Y differ in length ({len(X)} != {len(Y)}).")
        return np.array([self.learn_one(x, y) for x, y in zip(X, Y, strict=True)], dtype=np.float64)

    @abc.abstractmethod
    def _predict(self, x: Any) -> float:
        """The unclipped prediction ``y_bar`` for an ``x`` validated by ``_check_x``."""

    @abc.abstractmethod
    def _learn(self, x: Any, y: float) -> tuple[float, float]:
        """One round on validated input: return ``(y_hat, ridge leverage score of the round)``.

        Must leave the state unchanged if it raises (but for the random generator: the draws of a round
        that raises are taken back by :meth:`_learn_checked`).
        """

    # ----------------------------------------------------------------- statistics
    def _recent_loss_unbiased(self) -> float:
        """The weighted average of the rounds' losses, the weights summing to 1 at every round.

        The running average starts at 0, so early on it carries weight ``(1 - w)**rounds`` on that 0
        and would read low (a dashboard curve starting near 0); dividing by the weight the rounds
        actually got fixes that (the bias correction Adam uses for its moments).
        """
        if self._rounds == 0:
            return 0.0
        return self._recent_loss / -math.expm1(self._rounds * math.log1p(-_RECENT_WEIGHT))

    def stats(self) -> dict[str, Any]:
        """Counters of the run so far.

        ``rounds``, ``stored_points``, ``dictionary_size``, ``kors_size``, ``cumulative_loss``,
        ``recent_loss`` (exponentially weighted, about the last 100 rounds) and
        ``effective_dimension`` (online effective dimension: the sum of the rounds' ridge leverage
        scores; 0 for first-order learners).
        """
        stats: dict[str, Any] = {
            "rounds": self._rounds,
            "stored_points": 0,
            "dictionary_size": 0,
            "kors_size": 0,
            "cumulative_loss": self._cumulative_loss,
            "recent_loss": self._recent_loss_unbiased(),
            "effective_dimension": self._effective_dimension,
        }
        if self._eta is not None:
            stats["eta"] = self._eta
        if self.grows:
            stats["growth_held"] = self._growth_held
        if self._has_model:
            stats.update(self._model_stats())
        return stats

    def encoding(self) -> dict[str, Any] | None:
        """How the learner encodes records (:meth:`kons.records.RecordEncoder.encoding`: names, kinds,
        coordinates, categories with counts, missing and overflow counts), JSON-able and bounded by the
        width; None when it learns arrays or has learned nothing yet."""
        return None

    def state_nbytes(self) -> int:
        """Bytes of the learned arrays: about the size of :meth:`to_bytes` and of the state in memory.

        O(number of arrays): nothing is copied or encoded (a composite adds up its parts'). It differs
        from ``len(to_bytes())`` by the blob's JSON headers (a few hundred bytes per learner in it).
        """
        return (self._arrays_nbytes() if self._has_model else 0) + self._conformal_nbytes()

    def _arrays_nbytes(self) -> int:
        """The bytes of :meth:`_arrays` (a subclass whose arrays are costly to gather counts them from
        their shapes instead: the service asks the size after every round)."""
        return arrays_nbytes(self._arrays())

    def _conformal_nbytes(self) -> int:
        """The bytes of the conformal component's arrays (0 until a coverage is asked)."""
        return 0 if self._conformal is None else self._conformal.nbytes()

    # ----------------------------------------------------------------- changes of the data
    @property
    def changes_detected(self) -> int:
        """How many changes of the data the learner's change detector has declared (``stats()["changes"]``
        without building the whole statistics); 0 for a learner without one."""
        return 0

    @property
    def last_change_round(self) -> int | None:
        """The round at which the last declared change was detected (None: none yet, or no detector)."""
        return None

    # ----------------------------------------------------------------- bounded growth
    @property
    def growth_held(self) -> bool:
        """Whether the learned state is held at its size (:meth:`hold_growth`)."""
        return self._growth_held

    def hold_growth(self, held: bool) -> None:
        """Stop (``held=True``) or resume the growth of the learned state; the learner keeps learning.

        A learner whose state can grow and that can learn without growing (``can_hold_growth``:
        :class:`~kons.NystromKONS`, whose dictionary then admits no new point and draws no coin, and
        the composites of such learners) keeps its size while held; a fixed-size learner
        (``grows=False``) ignores the call. Held-ness is part of the state: :meth:`to_bytes` saves it, and
        a replay that holds and resumes at the same rounds plays the same bits.

        Raises
        ------
        InvalidParameterError
            If ``held`` is not a bool, or to hold a learner that cannot learn without growing
            (:class:`~kons.KONS`, :class:`~kons.SketchedKONS`, :class:`~kons.KernelOGD`).

        Examples
        --------
        >>> from kons import KONS, NystromKONS
        >>> learner = NystromKONS(dim=2)
        >>> learner.hold_growth(True)
        >>> learner.stats()["growth_held"], learner.max_growth_nbytes(1000)
        (True, 0)
        >>> KONS(dim=2).hold_growth(True)
        Traceback (most recent call last):
        ...
        kons.errors.InvalidParameterError: KONS cannot hold its growth: it learns by storing points.
        """
        if not isinstance(held, bool):
            raise InvalidParameterError(f"hold_growth takes true or false; got {held!r}.")
        if not self.grows:
            return
        if held and not self.can_hold_growth:
            owner = type(self).__name__
            raise InvalidParameterError(f"{owner} cannot hold its growth: it learns by storing points.")
        self._set_growth_held(held)

    def _set_growth_held(self, held: bool) -> None:
        """Record held-ness (a composite passes it on to its parts too)."""
        self._growth_held = held

    def max_growth_nbytes(self, rounds: int) -> int:
        """An upper bound of the growth of :meth:`state_nbytes` over the next ``rounds`` rounds.

        0 for a fixed-size learner and for a held one (:meth:`hold_growth`; held, ``auto`` on three
        classes or more still counts its forest's saved counts, which widen when a class's rows in a tree
        pass 255, then 65,535); O(1), from the current sizes (a kernel learner's bound grows with the
        square of ``rounds``: its factor gains a row per stored point).

        Raises
        ------
        InvalidParameterError
            If ``rounds`` is not a non-negative int, or before the input dimension is known (a learner
            built without ``dim`` that has played no round).
        """
        rounds = check_int(type(self).__name__, "rounds", rounds, low=0)
        if not self._has_model:
            raise InvalidParameterError(
                "max_growth_nbytes needs the input dimension: build the learner with 'dim' or play a round.")
        return self._growth_nbytes(rounds) if rounds else 0

    def _growth_nbytes(self, rounds: int) -> int:
        """:meth:`max_growth_nbytes` for ``rounds > 0`` once the dimension is known."""
        if self._growth_held or not self.grows:
            return 0
        return _FLOAT_BYTES * self._growth_floats(rounds)

    def _growth_floats(self, rounds: int) -> int:
        """Float64 entries (int64 ones count the same) a growing learner may add in ``rounds`` rounds."""
        return 0

    def _model_stats(self) -> dict[str, Any]:
        """The subclass's counters (called once the model exists); they may replace the zeros above."""
        return {}

    # ----------------------------------------------------------------- persistence
    def to_bytes(self) -> bytes:
        """The full state in the versioned, checksummed, pickle-free format."""
        header = {
            "class": type(self).__name__,
            "state_version": self.state_version,
            "params": self.get_params(),
            "dim": self._known_dim(),
            "counters": [self._rounds, self._cumulative_loss, self._recent_loss,
                         self._effective_dimension],
            "rng": None if self._rng is None else self._rng.bit_generator.state,
            "scalars": self._scalars() if self._has_model else {},
        }
        if self._growth_held:  # only then: the blobs of learners that were never held are unchanged
            header["growth_held"] = True
        arrays = self._arrays() if self._has_model else {}
        if self._conformal is not None:  # only then, likewise
            header["conformal"] = self._conformal.header()
            arrays = {**arrays, **self._conformal.arrays()}
        return _state.encode(header, arrays)

    @classmethod
    def from_bytes(cls, blob: bytes, *, max_bytes: int | None = None) -> Self:
        """Rebuild a learner saved by :meth:`to_bytes`; raises :class:`StateFormatError` if invalid.

        With ``max_bytes``, a blob whose learner would allocate more (:meth:`state_bytes` of the
        parameters in its header) is refused before any of its arrays or of the learner is built.
        """
        return cls._from_blob(blob, max_bytes)

    @classmethod
    def _from_blob(cls, blob: bytes, max_bytes: int | None, *, nested: bool = False) -> Self:
        """:meth:`from_bytes`; ``nested``: of a blob inside a state being loaded (:func:`load_nested`)."""
        learner_cls: type[Self] = cls

        def check(header: dict[str, Any]) -> None:
            nonlocal learner_cls
            learner_cls = cls._class_of(header)
            if max_bytes is not None:
                try:  # the model's dimension (the parameter may be None: fixed at the first round)
                    needed = learner_cls.state_bytes({**header["params"], "dim": header["dim"]})
                except (InvalidParameterError, KeyError, TypeError) as exc:
                    raise StateFormatError(f"state content is inconsistent: {exc}") from None
                if needed > max_bytes:
                    raise StateFormatError(
                        f"the state's learner would allocate {needed} bytes; at most {max_bytes} are allowed."
                    )

        header, arrays = _state.decode(blob, check, nested=nested)
        try:
            learner = learner_cls.from_params(header["params"])
            rounds, cumulative, recent, effective = header["counters"]
            learner._rounds = int(rounds)
            learner._cumulative_loss = float(cumulative)
            learner._recent_loss = float(recent)
            learner._effective_dimension = float(effective)
            held = header.get("growth_held", False)
            if not isinstance(held, bool):
                raise StateFormatError("the state's 'growth_held' is not a bool.")
            learner._growth_held = held  # its parts (a composite's) carry their own, in their blobs
            if "conformal" in header:  # its arrays are taken out of the learner's
                arrays = dict(arrays)
                learner._conformal = Conformal.restored(header["conformal"], arrays, learner._spread_exponent)
            if (header["rng"] is None) != (learner._rng is None):
                raise StateFormatError("the random generator's state is missing or unexpected.")
            if learner._rng is not None:
                learner._rng.bit_generator.state = header["rng"]
            if header["dim"] is not None:
                # Not _fix_dim: creating a model could draw from the (already restored) generator.
                learner._dim = int(header["dim"])
                learner._has_model = True
                with _round_numerics():
                    learner._restore(arrays, header["scalars"])
        except StateFormatError:
            raise
        except (InvalidParameterError, KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise StateFormatError(f"state content is inconsistent: {exc}") from None
        return learner

    @classmethod
    def _class_of(cls, header: dict[str, Any]) -> type[Self]:
        """The learner class a state header names, if it is ``cls`` or a subclass of it."""
        named = [c for c in LEARNERS.values() if c.__name__ == header.get("class")]
        if not named:
            raise StateFormatError(f"unknown learner class {header.get('class')!r}.")
        learner_cls = named[0]
        if not issubclass(learner_cls, cls):
            raise StateFormatError(f"state is for {learner_cls.__name__}, not {cls.__name__}.")
        if header.get("state_version") != learner_cls.state_version:
            raise StateFormatError(
                f"{learner_cls.__name__} state version {header.get('state_version')!r} is not "
                f"supported (this is {learner_cls.state_version})."
            )
        return learner_cls

    @abc.abstractmethod
    def _arrays(self) -> dict[str, np.ndarray]:
        """The learned arrays (used prefixes only) to save; a subclass adds its own to ``super()``'s."""

    def _scalars(self) -> dict[str, Any]:
        """JSON-able scalar state to save (the same pattern as :meth:`_arrays`)."""
        return {}

    @abc.abstractmethod
    def _restore(self, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> None:
        """Rebuild the whole model from what :meth:`_arrays` and :meth:`_scalars` saved.

        ``self._dim`` is set; raise ValueError (or KeyError) if the arrays do not fit together. It must
        not draw random numbers (the generator's state is already restored).
        """


@functools.cache
def _signature_defaults(init: Callable[..., None]) -> tuple[tuple[str, Any], ...]:
    """The parameters of a constructor with their defaults, in order (read once per constructor: every
    learner built, saved or loaded lists them, and ``inspect.signature`` costs more than the rest)."""
    parameters = inspect.signature(init).parameters
    return tuple((name, p.default) for name, p in parameters.items() if name != "self")


def _answering(played: Round, coverage: float, answer: tuple[float, float] | list[Any] | None,
               covered: bool | None) -> Round:
    """``played`` with the conformal answer of ``coverage`` (a set, as a list, or an interval) and, for a
    learnt round, whether it held the label."""
    interval, prediction_set = (None, answer) if isinstance(answer, list) else (answer, None)
    # built field by field: dataclasses.replace, generic, is several times slower on every asked round
    return Round(played.value, distribution=played.distribution, label=played.label, loss=played.loss,
                 correct=played.correct, predicted=played.predicted, coverage=coverage, interval=interval,
                 prediction_set=prediction_set, covered=covered)


def arrays_nbytes(arrays: Mapping[str, np.ndarray]) -> int:
    return sum(a.nbytes for a in arrays.values())


def learner_class(algorithm: str) -> type[Learner]:
    """The learner class registered as ``algorithm``."""
    try:
        return LEARNERS[algorithm]
    except (KeyError, TypeError):
        raise InvalidParameterError(
            f"Unknown algorithm {algorithm!r}; expected one of {sorted(LEARNERS)}."
        ) from None


def learner_from_params(algorithm: str, params: dict[str, Any]) -> Learner:
    """Build the learner registered as ``algorithm`` from a plain parameter dict.

    The learner comes with online preprocessing (:class:`kons.preprocessing.Preprocessed`: feature and
    target scaling, intercept, kernel width from the data, binary labels as {0, 1} or booleans) unless
    ``params`` holds ``"preprocess": false``, which gives the paper-exact learner.
    """
    cls = learner_class(algorithm)
    if not isinstance(params, dict) or "preprocess" not in params:
        preprocess = True
    else:
        params = dict(params)
        preprocess = params.pop("preprocess")
        if not isinstance(preprocess, bool) or (cls.preprocesses and not preprocess):
            raise InvalidParameterError(
                f"The 'preprocess' parameter must be true or false (and true for {algorithm!r}). "
                f"Got {preprocess!r} instead."
            )
    if cls.preprocesses or not preprocess:
        return cls.from_params(params)
    from kons.preprocessing import Preprocessed  # imports this module

    rest = dict(params) if isinstance(params, dict) else params
    dim = rest.pop("dim", None) if isinstance(rest, dict) else None
    return Preprocessed(algorithm=algorithm, params=rest, dim=dim)


def load(blob: bytes, *, max_bytes: int | None = None) -> Learner:
    """Rebuild any learner from its :meth:`Learner.to_bytes` blob (``max_bytes``: see ``from_bytes``)."""
    return Learner.from_bytes(blob, max_bytes=max_bytes)


def load_nested(blob: bytes) -> Learner:
    """:func:`load` of a learner's state saved inside another's (a wrapped learner's, an array of it):
    its checksum is not computed again, the enclosing state's covers its bytes."""
    return Learner._from_blob(blob, None, nested=True)


def peek(blob: bytes) -> tuple[str, dict[str, Any]]:
    """The algorithm name and the parameters of the learner a state blob holds, read from its header
    (checksum verified) without building the learner or any of its arrays."""
    header = _state.decode_header(blob)
    params = header.get("params")
    if not isinstance(params, dict):
        raise StateFormatError("state header is malformed: no parameters.")
    return Learner._class_of(header).name, params
