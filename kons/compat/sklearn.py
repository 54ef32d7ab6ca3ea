"""scikit-learn estimators around the kons learners: ``partial_fit`` is one online round per row.

``KonsRegressor(algorithm="sketched_kons", params={"kernel": {"name": "rbf", "gamma": 0.5}})``
names the learner by its registry key (:data:`kons.LEARNERS`) and passes ``params`` to it unchanged, so
the estimator has the same two parameters as the service's ``POST /v1/learners``. The learner's own
parameters are nested under ``params__``, the kernel's under ``params__kernel__``, as scikit-learn nests a
sub-estimator's: ``get_params(deep=True)`` lists them (with the learner's defaults), ``set_params`` and
``GridSearchCV`` accept them (``{"params__kernel__gamma": [0.1, 1.0]}``), and ``clone`` copies them.

``partial_fit(X, y)`` plays one round per row, in order, on the current learner; ``fit(X, y)`` starts a
fresh learner and makes one such pass (an online learner sees each example once: there are no epochs), in
a random order unless ``shuffle=False``, as scikit-learn's own online estimators do (``SGDClassifier``):
rows sorted by class or by time (a cross-validation fold of a sorted data set) would otherwise look like a
drifting stream, and ``auto`` would follow the "drift" to the last class. ``random_state`` fixes the order.
Learners are built from their parameter dict, so they rescale features and target online and predict in
the target's own units, within the range of targets seen; a ``C`` in ``params`` caps predictions at
``[-C, C]`` in those units too, so give it only to mean that cap (a ``C`` tuned for a scaled target
would cut off an unscaled one).

Examples
--------
>>> import numpy as np
>>> from kons.compat.sklearn import KonsRegressor
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(300, 2))
>>> y = np.sin(X[:, 0])
>>> model = KonsRegressor(algorithm="kons", params={"kernel": {"name": "rbf", "gamma": 0.5}})
>>> for start in range(0, 300, 100):
...     model = model.partial_fit(X[start:start + 100], y[start:start + 100])
>>> bool(np.abs(model.predict(X[:50]) - y[:50]).mean() < 0.1)
True
>>> model.set_params(params__kernel__gamma=2.0).params["kernel"]
{'name': 'rbf', 'gamma': 2.0}
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from kons.base import Learner, learner_class, learner_from_params
from kons.compat._common import PROBABILISTIC_LOSS, positive_probability
from kons.kernels import Kernel
from kons.losses import PROBABILITY_FLOOR

__all__ = ["KonsClassifier", "KonsRegressor"]

_NESTED = "params__"
#: The default algorithm: the self-tuning learner (classification: multi-class).
AUTO = "auto"


def _plain(params: Any) -> dict[str, Any]:
    """``params`` as a fresh dict with a kernel given as an object turned into its dict."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise ValueError(f"params must be a dict of the learner's parameters; got {params!r}.")
    return {k: v.to_dict() if isinstance(v, Kernel) else v for k, v in params.items()}


class _OnlineEstimator(BaseEstimator):
    """The parameters, their nesting and the online rounds shared by the regressor and the classifier."""

    #: Learner parameters this estimator uses unless ``params`` gives them: for ``auto``, and for the others.
    _default_auto_params: ClassVar[dict[str, Any]] = {}
    _default_params: ClassVar[dict[str, Any]] = {}
    #: Whether ``y`` is a number (regression) rather than a class label.
    _numeric_target: ClassVar[bool]

    #: The estimator's own parameters (the learner's are nested under ``params__``).
    _OWN: ClassVar[tuple[str, ...]] = ("algorithm", "params", "shuffle", "random_state")

    def __init__(self, algorithm: str = AUTO, params: dict[str, Any] | None = None, *, shuffle: bool = True,
                 random_state: Any = None) -> None:
        # Stored as given, validated when a learner is built (scikit-learn's convention, which clone checks).
        self.algorithm = algorithm
        self.params = params
        self.shuffle = shuffle
        self.random_state = random_state

    # ----------------------------------------------------------------- parameters
    def _learner_params(self) -> dict[str, Any]:
        defaults = self._default_auto_params if self.algorithm == AUTO else self._default_params
        return {**defaults, **_plain(self.params)}

    def _new_learner(self, dim: int) -> Learner:
        return learner_from_params(self.algorithm, {**self._learner_params(), "dim": dim})

    def _effective_params(self) -> dict[str, Any]:
        """Every learner parameter with its value here (defaults included), as far as they are valid."""
        try:
            given = self._learner_params()
        except ValueError:  # params is not a dict: set_params does not validate, fit will say so
            return {}
        try:
            # the paper learner's own parameters (the dict path would wrap it in kons.preprocessing)
            exact = {} if learner_class(self.algorithm).preprocesses else {"preprocess": False}
            return learner_from_params(self.algorithm, {**given, **exact}).get_params()
        except (TypeError, ValueError):  # an unknown algorithm or an invalid parameter (KonsErrors)
            return given

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """``algorithm``, ``params``, ``shuffle``, ``random_state``; with ``deep`` also ``params__<name>``
        and ``params__kernel__<key>``."""
        out = {name: getattr(self, name) for name in self._OWN}
        if deep:
            for name, value in self._effective_params().items():
                out[_NESTED + name] = value
                if isinstance(value, dict):  # the kernel
                    out.update({f"{_NESTED}{name}__{key}": v for key, v in value.items()})
        return out

    def set_params(self, **params: Any) -> Self:
        """Set ``algorithm``, ``params``, ``shuffle``, ``random_state`` or nested ``params__<name>`` /
        ``params__<name>__<key>`` values.

        Nested values go into a new ``params`` dict (the one given before is never modified).
        """
        nested = {k: v for k, v in params.items() if k.startswith(_NESTED)}
        for name, value in params.items():
            if name in self._OWN:
                setattr(self, name, value)
            elif name not in nested:
                raise ValueError(
                    f"Invalid parameter {name!r} for estimator {type(self).__name__}. Valid parameters are: "
                    f"{list(self._OWN)} and params__<learner parameter>."
                )
        if nested:
            merged = _plain(self.params)
            defaults = self._effective_params()
            for key, value in nested.items():
                path = key[len(_NESTED):].split("__")
                if len(path) == 1:
                    merged[path[0]] = value
                elif len(path) == 2:
                    inner = merged.get(path[0], defaults.get(path[0]))
                    if not isinstance(inner, dict):
                        raise ValueError(f"Invalid parameter {key!r}: {path[0]!r} has no nested parameters.")
                    merged[path[0]] = {**inner, path[1]: value}
                else:
                    raise ValueError(f"Invalid parameter {key!r} for estimator {type(self).__name__}.")
            self.params = merged
        return self

    # ----------------------------------------------------------------- rounds
    def _validate(self, X: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        """``X`` (n, d) and ``y`` (n,) checked; on the first batch, ``d`` becomes ``n_features_in_``."""
        first = not hasattr(self, "learner_")
        return validate_data(self, X, y, dtype=np.float64, y_numeric=self._numeric_target, reset=first)

    def fit(self, X: Any, y: Any) -> Self:
        """A fresh learner, then one online round per row of ``X`` (n, d) and ``y`` (n,): in a random
        order (``random_state``), or in the given order with ``shuffle=False``."""
        self.__dict__.pop("learner_", None)
        X, y = self._validate(X, y)
        if self.shuffle:
            order = check_random_state(self.random_state).permutation(len(y))
            X, y = X[order], y[order]
        return self._rounds(X, y)

    def _rounds(self, X: np.ndarray, y: np.ndarray, classes: Any = None) -> Self:
        """One online round per row of the validated ``X`` and ``y``, in their order."""
        raise NotImplementedError

    def _margins(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "learner_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return self.learner_.predict_many(X)


class KonsRegressor(RegressorMixin, _OnlineEstimator):
    """A kons learner as a scikit-learn regressor (see :mod:`kons.compat.sklearn`).

    Parameters
    ----------
    algorithm : str, default "auto"
        The learner's registry name (a key of :data:`kons.LEARNERS`); "auto" is the self-tuning mixture.
    params : dict or None, default None
        The learner's parameters (``dim`` is set from the data).
    shuffle : bool, default True
        Whether ``fit`` plays the rows in a random order (``partial_fit`` always plays them in order).
    random_state : int, RandomState instance or None, default None
        The seed of ``fit``'s order when ``shuffle``.

    Attributes
    ----------
    learner_ : kons.Learner
        The learner trained so far.
    n_features_in_ : int
    """

    _numeric_target = True

    def partial_fit(self, X: Any, y: Any) -> Self:
        """One online round per row, in order, continuing the current learner (a fresh one on the first
        call)."""
        X, y = self._validate(X, y)
        return self._rounds(X, y)

    def _rounds(self, X: np.ndarray, y: np.ndarray, classes: Any = None) -> Self:
        if not hasattr(self, "learner_"):
            self.learner_ = self._new_learner(self.n_features_in_)
        self.learner_.learn_many(X, y)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """The learner's clipped predictions (n,) on its current state."""
        return self._margins(X)


class KonsClassifier(ClassifierMixin, _OnlineEstimator):
    """A kons learner as a scikit-learn classifier (see :mod:`kons.compat.sklearn`).

    With ``algorithm="auto"`` (the default) the classifier is multi-class: the learner takes the labels as
    they are and learns the classes as they appear, and ``classes_`` (sorted, scikit-learn's convention)
    grows with them; ``predict_proba`` has a column per class of ``classes_`` (0 for a class given in
    ``partial_fit``'s ``classes`` but not seen yet) and ``predict`` is the most probable class.

    Any other algorithm is binary: ``classes_[0]`` is the learner's label -1 and ``classes_[1]`` its +1,
    so ``decision_function`` is the learner's (clipped) prediction, positive for ``classes_[1]``. The loss
    is logistic unless ``params`` names another; ``predict_proba`` exists for the logistic loss only (its
    prediction is a log-odds).

    Parameters
    ----------
    algorithm : str, default "auto"
        The learner's registry name (a key of :data:`kons.LEARNERS`).
    params : dict or None, default None
        The learner's parameters (``dim`` is set from the data; ``task`` defaults to "classification" for
        ``auto``, ``loss`` to ``"logistic"`` for the others).
    shuffle : bool, default True
        Whether ``fit`` plays the rows in a random order (``partial_fit`` always plays them in order).
    random_state : int, RandomState instance or None, default None
        The seed of ``fit``'s order when ``shuffle``.

    Attributes
    ----------
    learner_ : kons.Learner
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
    """

    _numeric_target = False
    _default_auto_params: ClassVar[dict[str, Any]] = {"task": "classification"}
    _default_params: ClassVar[dict[str, Any]] = {"loss": PROBABILISTIC_LOSS}

    def _learns_classes(self) -> bool:
        """Whether the learner learns the classes itself (``auto``): any number of them."""
        return bool(self.algorithm == AUTO)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = self._learns_classes()
        return tags

    def partial_fit(self, X: Any, y: Any, classes: Any = None) -> Self:
        """One online round per row, continuing the current learner.

        Binary learners: ``classes`` (both labels) is needed on the first call unless that batch already
        holds both. ``auto``: ``classes`` is optional, and a label not seen before is a new class.
        """
        X, y = self._validate(X, y)
        return self._rounds(X, y, classes)

    def _rounds(self, X: np.ndarray, y: np.ndarray, classes: Any = None) -> Self:
        check_classification_targets(y)
        if not hasattr(self, "learner_"):
            found = np.unique(y if classes is None else classes)
            if len(found) != 2 and not self._learns_classes():
                # The wording is scikit-learn's, which its checks look for.
                raise ValueError(
                    f"Only binary classification is supported: {type(self).__name__} needs exactly 2 "
                    f"classes; got {len(found)} class(es) {found.tolist()} (give partial_fit both classes "
                    "on its first call, or use algorithm='auto' for more classes)."
                )
            self.classes_ = found
            self.learner_ = self._new_learner(self.n_features_in_)
        unknown = np.setdiff1d(y, self.classes_)
        if self._learns_classes():
            self.learner_.learn_many(X, y)  # the labels as given (new classes included)
            self.classes_ = np.union1d(self.classes_, unknown) if len(unknown) else self.classes_
            return self
        if len(unknown):
            raise ValueError(f"y holds labels {unknown.tolist()} that are not in classes_ {self.classes_}.")
        self.learner_.learn_many(X, np.where(y == self.classes_[1], 1.0, -1.0))
        return self

    def _binary(self) -> bool:
        return not self._learns_classes()

    @available_if(_binary)
    def decision_function(self, X: Any) -> np.ndarray:
        """The learner's clipped predictions (n,): positive for ``classes_[1]`` (binary learners)."""
        return self._margins(X)

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class (``auto``); binary learners: ``classes_[1]`` where the decision
        function is positive, else ``classes_[0]``."""
        if self._learns_classes():
            proba = self.predict_proba(X)  # checks that the estimator is fitted first
            return self.classes_[np.argmax(proba, axis=1)]
        positive = self.decision_function(X) > 0.0
        return self.classes_[positive.astype(int)]

    def _probabilistic(self) -> bool:
        return self._learns_classes() or self._learner_params().get("loss") == PROBABILISTIC_LOSS

    @available_if(_probabilistic)
    def predict_proba(self, X: Any) -> np.ndarray:
        """Columns ``classes_``: the learner's probability of each class (binary learners: the sigmoid of
        the learner's (clipped) log-odds for ``classes_[1]``)."""
        if not self._learns_classes():
            p = np.array([positive_probability(m) for m in self.decision_function(X)])
            return np.column_stack([1.0 - p, p])
        check_is_fitted(self, "learner_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        proba = np.array([[d.get(c, 0.0) for c in self.classes_]
                          for d in map(self.learner_.predict_proba_dict_one, X)]).reshape(len(X), -1)
        return proba

    @available_if(_probabilistic)
    def predict_log_proba(self, X: Any) -> np.ndarray:
        """The log of :meth:`predict_proba` (a probability of 0 is taken as 1e-15)."""
        logged: np.ndarray = np.log(np.maximum(self.predict_proba(X), PROBABILITY_FLOOR))
        return logged
