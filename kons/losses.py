r"""Losses of a scalar prediction, with the curvature constant of Assumption 2.

Every loss :math:`\ell(\hat y, y)` is evaluated at the *clipped* prediction :math:`\hat y \in [-C, C]`
(``docs/kons-math.md``, "Traps"). ``curvature(C)`` is the largest :math:`\sigma` such that

.. math:: \ell(w) \ge \ell(u) + \ell'(u)(w-u) + \tfrac{\sigma}{2}\,(\ell'(u)(w-u))^2 \quad (|u|,|w| \le C)

(Calandriello et al. 2017, Asm. 2), the default step ``eta`` of the second-order learners.

Examples
--------
>>> from kons.losses import get_loss
>>> sq = get_loss("squared")
>>> sq.value(0.5, 1.0), sq.derivative(0.5, 1.0), sq.curvature(2.0)
(0.25, -1.0, 0.03125)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from kons.classes import class_position
from kons.errors import InvalidInputError, InvalidParameterError

__all__ = ["LOSSES", "PROBABILITY_FLOOR", "Distribution", "Hinge", "Logistic", "Loss", "LossName", "Squared",
           "SquaredHinge", "binary_distribution", "get_loss", "log_loss", "predicted", "probability",
           "sigmoid", "top_label"]


class Loss:
    """A convex loss of a scalar prediction; subclasses are stateless singletons."""

    name: ClassVar[str]
    binary: ClassVar[bool] = False

    def value(self, y_hat: float, y: float) -> float:
        raise NotImplementedError

    def derivative(self, y_hat: float, y: float) -> float:
        """:math:`\\partial \\ell / \\partial \\hat y` at ``y_hat`` (a subgradient at kinks)."""
        raise NotImplementedError

    def curvature(self, C: float) -> float:
        """Asm. 2's :math:`\\sigma` for predictions in ``[-C, C]`` (0 for a loss with no curvature)."""
        raise NotImplementedError

    def check_label(self, y: float, C: float | None = None) -> float:
        """Return ``y`` if this loss accepts it, else raise :class:`InvalidInputError`.

        With ``C``, also require the loss to be finite for every play in ``[-C, C]``: it is convex in
        the play, so checking the two ends suffices, and a round can then never overflow its loss.
        """
        if self.binary and y not in (-1.0, 1.0):
            raise InvalidInputError(f"the {self.name} loss needs a label in {{-1, +1}}; got {y!r}.")
        if C is not None and not (math.isfinite(self.value(C, y)) and math.isfinite(self.value(-C, y))):
            raise InvalidInputError(f"the label {y!r} is so far from [-C, C] that its loss overflows.")
        return y

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Squared(Loss):
    r""":math:`(\hat y - y)^2`; :math:`\sigma = 1/(8C^2)` (paper, after Asm. 2)."""

    name = "squared"

    def value(self, y_hat: float, y: float) -> float:
        gap = y_hat - y
        return gap * gap  # a product overflows to inf where ** would raise OverflowError

    def derivative(self, y_hat: float, y: float) -> float:
        return 2.0 * (y_hat - y)

    def curvature(self, C: float) -> float:
        # l'' = 2 >= sigma l'^2 with |y_hat - y| <= 2C; exact for a quadratic.
        return 1.0 / (8.0 * C * C)


class Logistic(Loss):
    r""":math:`\log(1 + e^{-y \hat y})` for :math:`y \in \{-1, +1\}`."""

    name = "logistic"
    binary = True

    def value(self, y_hat: float, y: float) -> float:
        margin = y * y_hat
        # log1p(exp(-m)) overflows for m << 0; the two branches are the same function.
        return math.log1p(math.exp(-margin)) if margin > -30 else -margin

    def derivative(self, y_hat: float, y: float) -> float:
        margin = y * y_hat
        if margin >= 0:
            e = math.exp(-margin)
            return -y * e / (1.0 + e)
        return -y / (1.0 + math.exp(margin))

    def curvature(self, C: float) -> float:
        # exp-concave with parameter e^{-C} on [-C, C], |l'| <= 1, diameter 2C:
        # Hazan, Agarwal, Kale (2007), Lemma 3 gives sigma = min(1/(4 G D), alpha) / 2.
        return 0.5 * min(1.0 / (8.0 * C), math.exp(-C))


class SquaredHinge(Loss):
    r""":math:`\max(0, 1 - y\hat y)^2` for :math:`y \in \{-1, +1\}`; zero gradient past the margin."""

    name = "squared_hinge"
    binary = True

    def value(self, y_hat: float, y: float) -> float:
        gap = max(0.0, 1.0 - y * y_hat)
        return gap * gap

    def derivative(self, y_hat: float, y: float) -> float:
        return -2.0 * y * max(0.0, 1.0 - y * y_hat)

    def curvature(self, C: float) -> float:
        # On the quadratic piece l'' = 2 >= sigma l'^2 with |1 - y y_hat| <= 1 + C: sigma <= 1/(2(1+C)^2).
        # For C > 1 a step from u = -Cy across the kink to w = Cy ends on the flat piece (l = 0), and
        # Asm. 2 there needs the smaller sigma <= (3C - 1) / (8 C^2 (1 + C)) (equal at C = 1).
        if C <= 1.0:
            return 1.0 / (2.0 * (1.0 + C) ** 2)
        return (3.0 * C - 1.0) / (8.0 * C * C * (1.0 + C))


class Hinge(Loss):
    r""":math:`\max(0, 1 - y\hat y)`: Lipschitz, not curved (:math:`\sigma = 0`), so ``eta`` must be given."""

    name = "hinge"
    binary = True

    def value(self, y_hat: float, y: float) -> float:
        return max(0.0, 1.0 - y * y_hat)

    def derivative(self, y_hat: float, y: float) -> float:
        return -y if y * y_hat < 1.0 else 0.0

    def curvature(self, C: float) -> float:
        return 0.0


LOSSES: dict[str, Loss] = {cls.name: cls() for cls in (Squared, Logistic, SquaredHinge, Hinge)}


def get_loss(name: Any) -> Loss:
    """The loss registered under ``name`` (``squared``, ``logistic``, ``squared_hinge``, ``hinge``)."""
    try:
        return LOSSES[name]
    except (KeyError, TypeError):
        raise InvalidParameterError(
            f"The 'loss' parameter must be one of {sorted(LOSSES)}. Got {name!r} instead."
        ) from None


class LossName:
    """The constraint of a learner's ``loss`` parameter: the name of a registered loss."""

    def check(self, owner: str, name: str, value: Any) -> str:
        return get_loss(value).name


# ----------------------------------------------------------------- a played distribution over classes
#: The probability :func:`log_loss` gives a label the distribution does not hold (scikit-learn's clip of
#: probabilities in its ``log_loss``): a label never seen costs 34.5 nats, not an infinite loss.
PROBABILITY_FLOOR = 1e-15

#: A distribution over a classifier's classes: a dict by label (``predict_proba_dict_one``'s), or
#: (class, probability) pairs in the learner's class order (``classes`` with
#: ``predict_proba_by_class_one``), which keep ``True`` and ``1`` apart as two classes where a dict has
#: one key for both. A label is looked up as the dict looks it up, or by its class
#: (:func:`kons.classes.class_position`) in the pairs.
Distribution = Mapping[Any, float] | Sequence[tuple[Any, float]]


def sigmoid(score: float) -> float:
    r""":math:`1 / (1 + e^{-s})`, the probability of the positive class of a log-odds ``score`` (the
    logistic loss's), without overflow at either end.

    >>> sigmoid(0.0), sigmoid(-1000.0), sigmoid(1000.0)
    (0.5, 0.0, 1.0)
    """
    return 1.0 / (1.0 + math.exp(-score)) if score >= 0 else math.exp(score) / (1.0 + math.exp(score))


def binary_distribution(classes: Sequence[Any], score: float) -> list[tuple[Any, float]]:
    """The distribution of a binary model's ``score``, the log-odds of ``classes[1]`` against
    ``classes[0]`` (:mod:`kons.classes`), as pairs; a single class known has all the probability.

    >>> binary_distribution(["cat", "dog"], 0.0), binary_distribution(["cat"], 3.0)
    ([('cat', 0.5), ('dog', 0.5)], [('cat', 1.0)])
    """
    if len(classes) < 2:
        return [(c, 1.0) for c in classes]
    positive = sigmoid(score)
    return [(classes[0], 1.0 - positive), (classes[1], positive)]


def _pairs(distribution: Distribution, label: Any) -> tuple[Sequence[tuple[Any, float]], int]:
    """The distribution as pairs, and the position of ``label``'s class among them (-1 if absent)."""
    if isinstance(distribution, Mapping):
        pairs = list(distribution.items())
        return pairs, next((i for i, (c, _) in enumerate(pairs) if c == label), -1)  # the dict's lookup
    return distribution, class_position([c for c, _ in distribution], label)


def probability(distribution: Distribution, label: Any) -> float:
    """The probability ``distribution`` gives the class of ``label`` (0 for a class it does not hold).

    >>> probability([(1, 0.25), (True, 0.75)], True), probability({1: 0.25}, True)
    (0.75, 0.25)
    """
    pairs, position = _pairs(distribution, label)
    return 0.0 if position < 0 else pairs[position][1]


def log_loss(distribution: Distribution, label: Any) -> float:
    r""":math:`-\log p(y)` of a distribution over classes (``learn_proba_one``'s or
    ``predict_proba_dict_one``'s, or by class) for the true ``label``; ``p`` is at least
    :data:`PROBABILITY_FLOOR`.

    >>> round(log_loss({"cat": 0.25, "dog": 0.75}, "dog"), 4), round(log_loss([(1, 0.5), (True, 0.5)], 1), 4)
    (0.2877, 0.6931)
    """
    return -math.log(max(float(probability(distribution, label)), PROBABILITY_FLOOR))


def top_label(distribution: Distribution) -> Any:
    """The most probable class (the first in the distribution's order on a tie), None for no class: the
    prediction whose accuracy is counted.

    >>> top_label({"cat": 0.25, "dog": 0.75}), top_label([(0, 0.5), (1, 0.5)]), top_label({})
    ('dog', 0, None)
    """
    pairs = distribution.items() if isinstance(distribution, Mapping) else distribution
    return max(pairs, key=lambda pair: pair[1], default=(None, 0.0))[0]


def predicted(distribution: Distribution, label: Any) -> bool:
    """Whether ``distribution`` predicted the class of ``label``: it is more probable than every other
    class (a tie predicts nothing, as a score of 0 predicts no sign).

    >>> predicted([("a", 0.6), ("b", 0.4)], "a"), predicted([("a", 0.5), ("b", 0.5)], "a")
    (True, False)
    """
    pairs, position = _pairs(distribution, label)
    rivals = [p for i, (_, p) in enumerate(pairs) if i != position]
    return position >= 0 and pairs[position][1] > max(rivals, default=-math.inf)
