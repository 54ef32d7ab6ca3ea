"""River adapters: any kons learner as a River ``base.Regressor`` or ``base.Classifier``.

``KonsRegressor()`` and ``KonsClassifier()`` with no learner are the self-tuning :class:`kons.Auto`
(regression; classification with any labels and any number of classes).

Dict features and the learner's fixed dimension
-----------------------------------------------
A learner that preprocesses (``kons.Auto()``, ``kons.learner_from_params(name, {})``) takes River's dicts
as they are, as records (:mod:`kons.records`): strings are categories, ``None`` and absent names are
missing values, names and categories may appear at any round, and the learner's ``encoding()`` shows
how. Names that are not strings are taken as ``str(name)``. Give it ``features=[...]`` to use the map
below instead.

A paper-exact learner (``"preprocess": false``) works on vectors whose dimension is fixed when it is
built; River examples are dicts whose keys may appear and disappear along the stream. The adapter maps
names to coordinates:

* ``features=[...]`` declares the schema: ``features[i]`` is coordinate ``i`` and the dimension is
  ``len(features)``; any other name is ignored.
* Otherwise the map is learned online: a name takes the next free coordinate in the first round that
  *learns* it (the names new in one example in sorted order, so a dict's key order never changes a
  result). The dimension is the wrapped learner's ``dim``, or :data:`DEFAULT_DIM` when that is None. Once
  every coordinate is taken, further new names are ignored. Give the learner a larger ``dim`` for wider
  data, or put River's ``preprocessing.FeatureHasher(n_features=dim)`` in front for an unbounded
  vocabulary (its hashed names then fill exactly the ``dim`` coordinates).

A name the map does not hold is ignored by ``predict_one`` (it has no weight yet) and a missing name is 0,
River's convention for sparse dicts. ``stats()["ignored_features"]`` counts the feature values learning
had to drop. The map is part of the model's state: pickle keeps it, and so do :meth:`to_bytes` /
:meth:`from_bytes`, kons's pickle-free format.

The wrapped learner is a template, as in River's meta-models: the adapter learns on a fresh learner with
its hyper-parameters and never touches the template's state. Predictions are the learner's, clipped to
``[-C, C]``: scale the target (River's ``preprocessing.TargetStandardScaler``) or raise ``C``.

Examples
--------
>>> from river import preprocessing
>>> import kons
>>> from kons.compat.river import KonsRegressor
>>> # River's StandardScaler already scales: the paper learner, without kons's own preprocessing
>>> ons = kons.learner_from_params("ons", {"C": 5.0, "preprocess": False})
>>> model = preprocessing.StandardScaler() | KonsRegressor(ons)
>>> for t in range(200):
...     x = {"a": t % 7 - 3.0, "b": t % 5 - 2.0}
...     model.learn_one(x, 0.5 * x["a"] - x["b"])
>>> round(model.predict_one({"a": 1.0, "b": -1.0}), 1)
1.5
"""

from __future__ import annotations

import base64
from collections.abc import Hashable, Sequence
from typing import Any, Self

import numpy as np
from river import base
from river.conf.interval import Interval

from kons import _state
from kons.auto import Auto
from kons.base import Learner, learner_from_params, load
from kons.compat._common import PROBABILISTIC_LOSS, positive_probability, with_dim
from kons.errors import InvalidInputError, InvalidParameterError, StateFormatError

__all__ = ["DEFAULT_DIM", "KonsClassifier", "KonsRegressor"]

#: Coordinates of the online feature map when neither ``features`` nor the learner's ``dim`` is given.
DEFAULT_DIM = 64

_STATE_VERSION = 1


def _name_order(name: Hashable) -> tuple[str, str]:
    # A total order on arbitrary hashable names (River allows str, int, tuples, ... side by side).
    return type(name).__name__, repr(name)


def _number(name: Hashable, value: Any) -> float:
    if isinstance(value, int | float | np.integer | np.floating | np.bool_):
        return float(value)
    raise InvalidInputError(
        f"feature {name!r} has the non-numeric value {value!r}; encode it first "
        "(for example with River's preprocessing.OneHotEncoder)."
    )


class _DictAdapter:
    """What both River adapters share: the template, the feature map and the learner in use."""

    #: The ``auto`` task of the template when none is given.
    _task: str

    def __init__(self, learner: Learner | None = None, features: Sequence[Hashable] | None = None) -> None:
        if learner is None:
            learner = Auto(task=self._task)
        if not isinstance(learner, Learner):
            raise InvalidParameterError(
                f"The 'learner' parameter of {type(self).__name__} must be a kons learner "
                f"(for example kons.learner_from_params('sketched_kons', {{}})). Got {learner!r} instead."
            )
        self.learner = learner
        self.features = features
        # A learner that takes records encodes the dicts itself (strings and None included).
        self._records = features is None and learner.accepts_records
        if self._records:
            dim = 0  # no map: the learner's own encoding
            self._index: dict[Hashable, int] = {}
        elif features is None:
            dim = DEFAULT_DIM if learner.dim is None else learner.dim
            self._index = {}
        else:
            self._index = {} if isinstance(features, str) else {name: i for i, name in enumerate(features)}
            dim = len(self._index)
            if dim == 0 or dim != len(features):
                raise InvalidParameterError(
                    f"The 'features' parameter of {type(self).__name__} must list distinct names. "
                    f"Got {features!r} instead."
                )
            if learner.dim is not None and learner.dim != dim:
                raise InvalidParameterError(
                    f"{len(features)} features are declared but the learner's dim is {learner.dim}."
                )
        self._dim = dim
        self._learner = learner.clone() if self._records else with_dim(learner, dim)
        self._ignored = 0

    @property
    def fitted_learner(self) -> Learner:
        """The kons learner the adapter trains (a copy of the template with the map's dimension)."""
        return self._learner

    @property
    def feature_names(self) -> list[Hashable]:
        """The mapped names, in coordinate order."""
        return list(self._index)

    def stats(self) -> dict[str, Any]:
        """The learner's counters, the number of mapped (or encoded) names and of feature values ignored
        in learning."""
        encoding = self._learner.encoding()
        features = len(self._index) if encoding is None else len(encoding["features"])
        return {**self._learner.stats(), "features": features, "ignored_features": self._ignored}

    # ----------------------------------------------------------------- the feature map
    def _encode(self, x: dict[Hashable, Any]) -> tuple[np.ndarray, list[Hashable]]:
        """``x`` on the mapped coordinates (dense), and the names it holds that are not mapped."""
        if not isinstance(x, dict):
            raise InvalidInputError(f"x must be a dict of features; got {type(x).__name__}.")
        vector = np.zeros(self._dim)
        unmapped = []
        for name, value in x.items():
            i = self._index.get(name)
            if i is None:
                unmapped.append(name)
            else:
                vector[i] = _number(name, value)
        return vector, unmapped

    def _record(self, x: dict[Hashable, Any]) -> dict[str, Any]:
        """``x`` as a record for a learner that takes records (names as strings)."""
        if not isinstance(x, dict):
            raise InvalidInputError(f"x must be a dict of features; got {type(x).__name__}.")
        return {name if isinstance(name, str) else str(name): value for name, value in x.items()}

    def _features(self, x: dict[Hashable, Any]) -> Any:
        """What the learner predicts ``x`` from: the record, or the mapped vector."""
        return self._record(x) if self._records else self._encode(x)[0]

    def _margin(self, x: dict[Hashable, Any]) -> float:
        return self._learner.predict_one(self._features(x))

    def _learn(self, x: dict[Hashable, Any], y: float) -> None:
        if self._records:
            self._learner.learn_one(self._record(x), y)
            return
        vector, unmapped = self._encode(x)
        new: dict[Hashable, int] = {}
        if unmapped and self.features is None:
            free = self._dim - len(self._index)
            for name in sorted(unmapped, key=_name_order)[:free]:
                new[name] = len(self._index) + len(new)
                vector[new[name]] = _number(name, x[name])
        self._learner.learn_one(vector, y)  # raises, and changes nothing, on input it cannot learn
        self._index.update(new)
        self._ignored += len(unmapped) - len(new)

    # ----------------------------------------------------------------- persistence
    def to_bytes(self) -> bytes:
        """The adapter's full state (template, feature map, learner) in kons's pickle-free format.

        Feature names must be str, int or float to be saved this way (pickle saves any name).
        """
        names = self.feature_names
        for name in names:
            if not isinstance(name, str | int | float):
                raise InvalidInputError(
                    f"to_bytes saves feature names of type str, int or float; {name!r} is a "
                    f"{type(name).__name__} (pickle the model instead)."
                )
        header = {
            "class": f"river.{type(self).__name__}",
            "state_version": _STATE_VERSION,
            "template": {"algorithm": self.learner.name, "params": self.learner.get_params()},
            "declared": self.features is not None,
            "features": names,
            "ignored": self._ignored,
            "learner": base64.b64encode(self._learner.to_bytes()).decode("ascii"),
        }
        try:
            return _state.encode(header, {})
        except ValueError as exc:  # a non-finite float name
            raise InvalidInputError(f"a feature name cannot be saved: {exc}") from None

    @classmethod
    def from_bytes(cls, blob: bytes) -> Self:
        """Rebuild an adapter saved by :meth:`to_bytes`; raises :class:`~kons.StateFormatError` if invalid."""
        header, _ = _state.decode(blob)
        if header.get("class") != f"river.{cls.__name__}" or header.get("state_version") != _STATE_VERSION:
            raise StateFormatError(
                f"state is for {header.get('class')!r} version {header.get('state_version')!r}, "
                f"not river.{cls.__name__} version {_STATE_VERSION}."
            )
        try:
            template = learner_from_params(header["template"]["algorithm"], header["template"]["params"])
            names = header["features"]
            adapter = cls(template, features=names if header["declared"] else None)
            learner = load(base64.b64decode(header["learner"], validate=True))
            if type(learner) is not type(template) or learner.dim != adapter._learner.dim:
                raise StateFormatError("the saved learner does not match its template.")
            adapter._learner = learner
            adapter._index = {name: i for i, name in enumerate(names)}
            adapter._ignored = int(header["ignored"])
        except StateFormatError:
            raise
        except (InvalidParameterError, KeyError, TypeError, ValueError) as exc:
            raise StateFormatError(f"state content is inconsistent: {exc}") from None
        if len(adapter._index) != len(names) or len(names) > adapter._dim:
            raise StateFormatError("the saved feature map is inconsistent.")
        return adapter


class KonsRegressor(_DictAdapter, base.Regressor):
    """A kons learner as a River regressor on dict features (see :mod:`kons.compat.river`).

    Parameters
    ----------
    learner : kons.Learner or None, default None
        The template learner, e.g. ``kons.learner_from_params("sketched_kons", {"C": 3.0})``; None: the
        self-tuning :class:`kons.Auto`, which scales the target itself (predictions in its units).
    features : sequence of names or None, default None
        A declared schema (fixed map and dimension); None learns the map online.
    """

    _task = "regression"

    @classmethod
    def _unit_test_params(cls) -> Any:
        yield {"learner": learner_from_params("sketched_kons", {"C": 100.0})}

    def learn_one(self, x: dict[Hashable, Any], y: float) -> None:
        """Play one round of the learner on ``x`` (features mapped as described above) and target ``y``."""
        self._learn(x, y)

    def predict_one(self, x: dict[Hashable, Any], with_interval: bool = False,  # type: ignore[override]
                    coverage: float = 0.9) -> float | Interval:
        """The learner's clipped prediction for ``x``; never changes the model. ``with_interval``: River's
        ``conf.Interval`` around it, as ``conf.RegressionJackknife`` answers, from
        :meth:`predict_interval_one` at ``coverage``."""
        if not with_interval:
            return self._margin(x)
        return Interval(*self.predict_interval_one(x, coverage))

    def predict_interval_one(self, x: dict[Hashable, Any], coverage: float = 0.9) -> tuple[float, float]:
        """``(low, high)`` holding the target with the long-run frequency ``coverage``, also while the
        data drift (:meth:`kons.Learner.predict_interval_one`: conformal, online; the first ask of a
        coverage starts tracking it, part of the model's state)."""
        return self._learner.predict_interval_one(self._features(x), coverage)


class KonsClassifier(_DictAdapter, base.Classifier):
    """A kons learner as a River classifier: multi-class with :class:`kons.Auto`, else binary.

    With no learner (or a :class:`kons.Auto` for classification), labels are any of River's (str, int,
    bool), classes are learnt as they appear, ``predict_proba_one`` gives every known class's probability
    and ``predict_one`` the most probable class (None before any label).

    With a binary learner, labels are ``False``/``True`` (River's convention; 0 and 1 are read as them):
    ``False`` is the learner's label -1 and ``True`` its +1. ``predict_one`` is the sign of the learner's
    prediction; ``predict_proba_one`` needs the logistic loss, whose prediction is a log-odds (the other
    losses raise ``NotImplementedError``, River's way of saying a classifier gives no probabilities).

    Parameters
    ----------
    learner : kons.Learner or None, default None
        None: ``kons.Auto(task="classification")``; else a template learner with a classification loss,
        e.g. ``kons.learner_from_params("sketched_kons", {"loss": "logistic", "C": 5.0})``.
    features : sequence of names or None, default None
        A declared schema (fixed map and dimension); None learns the map online.

    Examples
    --------
    >>> from kons.compat.river import KonsClassifier
    >>> model = KonsClassifier()
    >>> for t in range(90):
    ...     model.learn_one({"a": float(t % 3), "b": 1.0}, ["red", "green", "blue"][t % 3])
    >>> model.predict_one({"a": 2.0, "b": 1.0})
    'blue'
    """

    _task = "classification"

    @classmethod
    def _unit_test_params(cls) -> Any:
        yield {"learner": learner_from_params("sketched_kons", {"loss": "logistic", "C": 5.0})}

    @property
    def _classes_learnt(self) -> bool:
        """Whether the learner learns the classes itself (``auto``): labels of any kind, any number."""
        return isinstance(self.learner, Auto)

    @property
    def _multiclass(self) -> bool:
        return self._classes_learnt

    def learn_one(self, x: dict[Hashable, Any], y: Any) -> None:
        """Play one round of the learner on ``x`` and the label ``y``."""
        if self._classes_learnt:
            self._learn(x, y)
            return
        is_number = isinstance(y, bool | int | float | np.bool_ | np.integer | np.floating)
        if not (is_number and y in (0, 1)):
            raise InvalidInputError(f"KonsClassifier is binary: y must be True or False; got {y!r}.")
        self._learn(x, 1.0 if y else -1.0)

    def predict_proba_one(self, x: dict[Hashable, Any], **kwargs: Any) -> dict[base.typing.ClfTarget, float]:
        """Every known class's probability (``auto``); for a binary learner ``{False: 1 - p, True: p}``,
        ``p`` the sigmoid of the learner's (clipped) log-odds."""
        if self._classes_learnt:
            return self._learner.predict_proba_dict_one(self._features(x))
        if self.learner.loss != PROBABILISTIC_LOSS:
            raise NotImplementedError(
                f"the {self.learner.loss} loss gives no probability; use loss={PROBABILISTIC_LOSS!r}."
            )
        p = positive_probability(self._margin(x))
        return {False: 1.0 - p, True: p}

    def predict_set_one(self, x: dict[Hashable, Any], coverage: float = 0.9) -> list[Any]:
        """The classes, most probable first, holding the label with the long-run frequency ``coverage``
        (``auto``: :meth:`kons.Learner.predict_set_one`; a binary learner gives no sets)."""
        return self._learner.predict_set_one(self._features(x), coverage)

    def predict_one(self, x: dict[Hashable, Any], **kwargs: Any) -> Any:
        """The class ``auto`` predicts (:attr:`kons.Round.predicted`: its label of fewest errors; None before
        any label); for a binary learner, ``True`` where its prediction is positive."""
        if self._classes_learnt:
            return self._learner.predict_round(self._features(x)).predicted
        return self._margin(x) > 0.0
