"""kons's own round answers (:meth:`kons.Learner.learn_round`, :meth:`kons.Learner.predict_round`) against
a reference that reads only the learner's public surface (``learn_one``, ``learn_proba_by_class_one``,
``classes``, ``class_of``) and decides the multinomial round from the classes before it, as the service
did before kons answered rounds itself. The class predicted is the reference's most probable class with
two classes; with more, ``auto``'s label vote (``tests/kons/test_label_vote.py``), a known class whose
``correct`` says whether it is the label's."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

import kons
from kons.classes import class_position
from kons.losses import binary_distribution, get_loss, log_loss, predicted, top_label


def _reference_learn(learner: kons.Learner, x: Any, y: Any) -> kons.Round:
    if not (isinstance(learner, kons.Auto) and get_loss(learner.loss).binary):
        value = learner.learn_one(x, y)
        loss = get_loss(learner.loss)
        correct = None if not loss.binary else (value if y > 0 else -value) > 0
        return kons.Round(value, loss=loss.value(value, y), correct=correct)
    label = learner.class_of(y)
    classes = learner.classes
    if len(classes) >= 3 or (len(classes) == 2 and class_position(classes, label) < 0):
        probabilities = learner.learn_proba_by_class_one(x, y).tolist()
        distribution = list(zip(learner.classes, probabilities, strict=True))
        value = probabilities[class_position(learner.classes, label)]
    else:
        value = learner.learn_one(x, y)
        distribution = binary_distribution(learner.classes, value)
    multinomial, first = len(distribution) >= 3, not classes  # (the first round predicts no class)
    return kons.Round(value, distribution, label, loss=log_loss(distribution, label),
                      correct=None if multinomial else not first and predicted(distribution, label),
                      predicted=None if multinomial or first else top_label(distribution))


def _reference_predict(learner: kons.Learner, x: Any) -> kons.Round:
    if not (isinstance(learner, kons.Auto) and get_loss(learner.loss).binary):
        return kons.Round(learner.predict_one(x))
    if len(learner.classes) >= 3:
        probabilities = learner.predict_proba_by_class_one(x).tolist()
        return kons.Round(max(probabilities), list(zip(learner.classes, probabilities, strict=True)))
    score = learner.predict_one(x)
    distribution = binary_distribution(learner.classes, score)
    return kons.Round(score, distribution, predicted=top_label(distribution) if distribution else None)


def _as_reference(played: kons.Round) -> kons.Round:
    """``played`` as the reference gives it: a multinomial round's class predicted (and whether it was
    the label's) left to the vote, checked to be a known class and ``correct`` to say whether it is the
    label's."""
    classes = [c for c, _ in played.distribution or []]
    if len(classes) < 3:
        return played
    assert class_position(classes, played.predicted) >= 0
    if played.label is not None:
        assert played.correct == (class_position(classes, played.predicted) == class_position(classes,
                                                                                              played.label))
        return dataclasses.replace(played, predicted=None, correct=None)
    return dataclasses.replace(played, predicted=None)


LABELS: dict[str, list[Any]] = {
    "booleans": [True, False],
    "legacy signs then a string": [1, -1, 0, 1, "late"],
    "strings, a third and fourth later": ["a", "b", "a", "b", "c", "a", "d"],
    "one and True": [1, True, 0],
}


@pytest.mark.parametrize("name", list(LABELS))
def test_auto_classification_rounds_are_the_reference_s(name: str) -> None:
    rng = np.random.default_rng(3)
    labels = LABELS[name]
    ours, theirs = kons.Auto(task="classification"), kons.Auto(task="classification")
    for t in range(260):  # through the warm-up into the grid
        x = rng.normal(size=3)
        y = labels[min(int(rng.integers(0, len(labels) + t // 60)), len(labels) - 1)]
        assert _as_reference(ours.predict_round(x)) == _reference_predict(theirs, x)
        assert _as_reference(ours.learn_round(x, y)) == _reference_learn(theirs, x, y)
    assert ours.gives_class_probabilities and ours.to_bytes() == theirs.to_bytes()


@pytest.mark.parametrize("make", [lambda: kons.Auto(),
                                  lambda: kons.learner_from_params("ons", {"loss": "logistic"}),
                                  lambda: kons.ONS(loss="squared", dim=3)])
def test_other_learners_rounds_are_their_float_with_its_loss(make: Any) -> None:
    rng = np.random.default_rng(4)
    ours, theirs = make(), make()
    binary = get_loss(ours.loss).binary
    for _ in range(80):
        x = rng.normal(size=3)
        y = float(np.sign(x[0]) or 1.0) if binary else float(x @ [1.0, -2.0, 0.5])
        assert ours.predict_round(x) == _reference_predict(theirs, x)
        played = ours.learn_round(x, y)
        assert played == _reference_learn(theirs, x, y)
        assert played.loss is not None and (played.correct is None) == (not binary)
    assert not ours.gives_class_probabilities


def test_algorithm_params_rebuild_the_learner() -> None:
    for learner in [kons.Auto(task="classification", seed=2), kons.learner_from_params("kons", {"eta": 0.5}),
                    kons.learner_from_params("ons", {"preprocess": False, "dim": 2})]:
        algorithm, params = learner.algorithm_params()
        rebuilt = kons.learner_from_params(algorithm, params)
        assert type(rebuilt) is type(learner) and rebuilt.get_params() == learner.get_params()
