"""What one round answers: :class:`Round`, returned by :meth:`kons.Learner.learn_round` and
:meth:`kons.Learner.predict_round`.

A round's answer is more than ``learn_one``'s float for a learner of classes: the distribution over its
classes the round played (as (class, probability) pairs in the learner's class order, so that ``True`` and
``1`` stay two classes), the class the label is learnt as, the loss of the play and whether it was right.
Computing them here, beside the learner that knows when its model is binary or multinomial, keeps every
caller's answers the library's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Distribution", "Round"]

#: A played distribution over classes: each class with its probability, in the learner's class order
#: (pairs, not a dict: ``True`` and ``1`` are two classes but one dict key), as the functions of
#: :mod:`kons.losses` (``log_loss``, ``predicted``, ``top_label``) read it.
Distribution = list[tuple[Any, float]]


@dataclass(frozen=True, slots=True)
class Round:
    """A round as played.

    ``value``: ``learn_one``'s or ``predict_one``'s float (a regression's prediction, a binary score, or
    for a multinomial round the probability of the label learnt or of the most probable class).
    ``distribution``: for a learner that gives class probabilities, the distribution played, else None.
    ``label``: the learner's own class of the label learnt (:meth:`kons.Auto.class_of`), None for a
    prediction or a learner without classes. ``loss``: the round's loss (the log loss of the distribution
    for the label, else the learner's loss at its play), None for a prediction. ``correct``: whether a
    classifier's predicted class was the label's (None for regression and for a prediction).
    ``predicted``: the class a classifier predicts (for :class:`kons.Auto` with three classes or more the
    label of fewest errors, in the warm-up the class of its play with the classes' base rates weighed;
    either may not be the distribution's most probable class: ``docs/auto.md``, "The label of fewest
    errors" and "The warm-up's label"), None for a learner without classes or before it knows one.
    """

    value: float
    distribution: Distribution | None = None
    label: Any = None
    loss: float | None = None
    correct: bool | None = None
    predicted: Any = None
    #: With a coverage asked (:meth:`kons.Learner.predict_round`'s ``coverage``): the coverage, and the
    #: play's conformal interval (regression) or prediction set (classes, most probable first).
    coverage: float | None = None
    interval: tuple[float, float] | None = None
    prediction_set: list[Any] | None = None
    #: A learnt round with a coverage: whether its interval or set held the label.
    covered: bool | None = None
