"""The label of fewest errors (:class:`kons.auto.mixture.LabelVote`): the vote against a plain reference,
the label picked between the vote's and the mixture's class by their errors, ``kons.Auto``'s
``Round.predicted`` from it while the probabilities stay the log-loss mixture's, its state saved and
restored exactly, and a state saved before the vote, or before its label rules were scored, loading and
playing as before."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import pytest

import kons
import kons._state
from kons.auto.config import LABEL_VOTE_SHARE, LABEL_WEIGHT_POWER
from kons.auto.mixture import LabelVote, Mixture
from kons.losses import top_label


class _PlainVote:
    """Weighted majority with Fixed-Share over a grid of rates, written plainly: one list of weights per
    rate in probabilities (not logs), Bayes' rule on the rates, ties to the mixture's own label."""

    def __init__(self, active: list[bool], rate: float, rates: tuple[float, ...], switching_prior: float,
                 own_prior: float, entry_prior: float) -> None:
        self.rate, self.rates, self.entry_prior = rate, rates, entry_prior
        self.active = [*active, True]
        n = sum(self.active)
        others = len(rates) - 1
        self.v = [1.0 - switching_prior, *[switching_prior / others] * others] if others else [1.0]
        self.w = [[1.0 / n if on else 0.0 for on in self.active] for _ in rates]
        self.enter([len(active)], own_prior)

    def enter(self, slots: list[int], prior: float) -> None:
        for w in self.w:
            for i in slots:
                w[i] = 0.0
                self.active[i] = False
            rest = sum(w)
            for i in range(len(w)):
                w[i] = w[i] / rest * (1.0 - prior * len(slots))
            for i in slots:
                w[i] = prior
                self.active[i] = True

    def weights(self) -> list[float]:
        p = [sum(v * w[i] for v, w in zip(self.v, self.w, strict=True)) for i in range(len(self.active))]
        return [x / sum(p) for x in p]

    def label(self, labels: list[int], own: int) -> int:
        voters, weights = [*labels, own], self.weights()
        votes: dict[int, float] = {}
        for label, weight, on in zip(voters, weights, self.active, strict=True):
            if on and label >= 0:
                votes[label] = votes.get(label, 0.0) + weight
        best = max(votes.values())
        if math.isclose(votes.get(own, -1.0), best, rel_tol=1e-12):
            return own
        return min(label for label, vote in votes.items() if math.isclose(vote, best, rel_tol=1e-12))

    def update(self, labels: list[int], own: int, y: int) -> None:
        voters = [*labels, own]
        n = sum(self.active)
        for r, (alpha, w) in enumerate(zip(self.rates, self.w, strict=True)):
            likelihood = [math.exp(-self.rate * (voter != y)) if on else 0.0
                          for voter, on in zip(voters, self.active, strict=True)]
            evidence = sum(wi * li for wi, li in zip(w, likelihood, strict=True))
            self.v[r] *= evidence
            self.w[r] = [(1 - alpha) * wi * li / evidence + (alpha / n if on else 0.0)
                         for wi, li, on in zip(w, likelihood, self.active, strict=True)]
        total = sum(self.v)
        self.v = [v / total for v in self.v]


@pytest.mark.parametrize("rates", [(0.0,), (0.0, 1e-2, 1e-1)])
def test_the_vote_plays_and_weighs_as_a_plain_weighted_majority_with_fixed_share(
        rates: tuple[float, ...]) -> None:
    rng = np.random.default_rng(1)
    experts, classes = 6, 4
    active = np.array([True, True, True, True, False, False])
    constants: dict[str, Any] = {"rate": 0.7, "rates": rates, "switching_prior": 0.05, "own_prior": 0.5,
                                 "entry_prior": 0.02}
    vote = LabelVote(active, **constants)
    plain = _PlainVote(active.tolist(), **constants)
    accuracy = np.array([0.9, 0.3, 0.5, 0.6, 0.95, 0.2])  # expert 4 enters late, and is the best
    for t in range(400):
        if t == 150:
            vote.enter([4, 5])
            plain.enter([4, 5], constants["entry_prior"])
        y = int(rng.integers(classes))
        labels = np.where(rng.random(experts) < accuracy, y, rng.integers(classes, size=experts))
        labels[~np.array(plain.active[:experts])] = -1  # an expert out of play names nothing
        own = int(labels[2]) if rng.random() < 0.8 else -1
        assert vote.voted(labels, own) == plain.label(labels.tolist(), own), t
        vote.update(labels, own, y)
        plain.update(labels.tolist(), own, y)
        np.testing.assert_allclose(vote.weights.weights(), plain.weights(), rtol=1e-9, atol=1e-300)
    # the voter of fewest errors leads the weights, and the vote follows it
    assert int(np.argmax(vote.weights.weights())) == 4


def test_the_vote_leaves_the_majority_for_the_voter_of_fewest_errors() -> None:
    vote = LabelVote(np.ones(3, dtype=bool))
    right, wrong = 1, 0
    labels = np.array([right, wrong, wrong])
    assert vote.label(labels, wrong, wrong) == wrong  # two experts and the mixture against one
    for _ in range(2):
        vote.update(labels, wrong, right)  # expert 0 right, the others wrong
    assert vote.label(labels, wrong, wrong) == right


def test_the_label_is_the_vote_s_until_the_mixture_s_class_has_fewer_errors() -> None:
    vote = LabelVote(np.ones(3, dtype=bool), rate=0.1)  # (a slow vote: it keeps its label meanwhile)
    experts, own = np.array([0, 0, 0]), 1
    assert vote.voted(experts, own) == vote.label(experts, own, own) == 0  # no errors yet: the vote's
    for _ in range(2):  # the experts outvote the mixture's class, and are wrong
        vote.label(experts, own, own)
        vote.score(experts, own, own, own)
        vote.update(experts, own, own)
        assert vote.voted(experts, own) == 0
        assert vote.label(experts, own, own) == own  # the mixture's class has the fewer errors
    experts, own = np.array([2, 2, 2]), 0
    assert vote.label(experts, own, own) == own
    for _ in range(3):  # now the vote is right and the mixture's class wrong
        vote.label(experts, own, own)
        vote.score(experts, own, own, 2)
        vote.update(experts, own, 2)
    assert vote.voted(experts, own) == vote.label(experts, own, own) == 2
    # equal discounted errors, or the mixture's lead within the margin: the vote's
    vote.pick_errors = np.array([1.0, 1.0 - vote.pick_margin])
    assert vote.label(np.array([1, 1, 1]), 0, 0) == 1


def test_a_split_vote_plays_the_tempered_class() -> None:
    vote = LabelVote(np.ones(4, dtype=bool))
    # the four experts share 0.9 of the weight, the mixture's class holds 0.1 (LABEL_OWN_PRIOR): class 2
    # holds two experts' and the mixture's, 0.55
    experts, own, tempered = np.array([2, 2, 1, 0]), 2, 1
    share = vote.weights.weights()[[0, 1, 4]].sum()
    assert vote.voted(experts, own) == 2 and share < LABEL_VOTE_SHARE
    assert vote.label(experts, own, tempered) == tempered
    assert vote.label(experts, own, 2) == 2  # (the two rules agree)
    vote.update(experts, own, 2)  # experts 2 and 3 pay: class 2 now holds most of the weight
    share = vote.weights.weights()[[0, 1, 4]].sum()
    assert share >= LABEL_VOTE_SHARE and vote.label(experts, own, tempered) == 2
    # the share is the vote's own: at 0.5 class 2's 0.55 is no split, at 0.6 it is
    assert LabelVote(np.ones(4, dtype=bool), vote_share=0.5).label(experts, own, tempered) == 2
    assert LabelVote(np.ones(4, dtype=bool), vote_share=0.6).label(experts, own, tempered) == tempered


def test_the_tempered_class_averages_the_experts_the_leader_outweighs() -> None:
    mixture = Mixture(binary=False, bound=10.0, experts=3)
    mixture.switching.log_weights = np.log(np.array([[0.9, 0.05, 0.05]] * len(mixture.switching.log_weights)))
    # the leader is sure of nothing (class 0 barely), the two others sure of class 1
    probabilities = np.array([[0.5, 0.25, 0.25], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    assert int(mixture.mix_probabilities(probabilities).argmax()) == 0  # the log-loss mixture's class
    flattened = np.power(mixture.weights(), LABEL_WEIGHT_POWER)
    assert int(flattened.dot(probabilities).argmax()) == mixture.tempered_class(probabilities) == 1
    # the weights a mix was given serve it while the weights stay; new weights are computed again
    mixture.mix_probabilities(probabilities, mixture.weights())
    assert mixture.tempered_class(probabilities) == 1
    leading = np.log(np.array([0.999, 0.0005, 0.0005]))
    mixture.switching.log_weights = leading * np.ones_like(mixture.switching.log_weights)
    assert mixture.tempered_class(probabilities) == 0


@functools.cache
def _clusters(n: int = 600, classes: int = 6, seed: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, 4)) * 1.5
    labels = rng.integers(classes, size=n)
    return (centres[labels] + rng.normal(size=(n, 4))) * [1.0, 50.0, 0.1, 3.0], labels


def _rounds(model: kons.Learner, X: np.ndarray, y: np.ndarray) -> list[kons.Round]:
    return [model.learn_round(x, int(label)) for x, label in zip(X, y, strict=True)]


def test_auto_predicts_the_vote_s_class_with_three_classes_or_more_the_score_s_with_two() -> None:
    X, y = _clusters()
    rounds = _rounds(kons.Auto(task="classification"), X, y)
    assert rounds[0].predicted is None and rounds[0].correct is False  # it knew no class
    for r in rounds[1:]:
        assert r.correct == (r.predicted == r.label)
        assert r.predicted in [c for c, _ in r.distribution or []]
    # the label leaves the distribution's most probable class on some rounds (whether it then has fewer
    # errors is the picking rule's, test_the_label_is_the_vote_s_until_the_mixture_s_class_has_fewer_errors)
    assert any(r.predicted != top_label(r.distribution or []) for r in rounds)
    # two classes: the class of the score's sign, and no vote in the state
    binary = kons.Auto(task="classification")
    for r in _rounds(binary, X, y % 2)[1:]:
        assert r.predicted == top_label(r.distribution or [])
    _, arrays = kons._state.decode(binary.to_bytes())
    assert not any(name.startswith("label_") for name in arrays)


def test_the_vote_is_saved_and_restored_exactly() -> None:
    X, y = _clusters()
    model = kons.Auto(task="classification")
    _rounds(model, X[:300], y[:300])
    blob = model.to_bytes()
    _, arrays = kons._state.decode(blob)
    assert {"label_log_weights", "label_log_rate_weights", "label_active",
            "label_pick_errors"} <= arrays.keys()
    copy = kons.load(blob)
    assert copy.to_bytes() == blob
    assert [(r.predicted, r.distribution) for r in _rounds(copy, X[300:], y[300:])] == \
        [(r.predicted, r.distribution) for r in _rounds(model, X[300:], y[300:])]
    assert [copy.predict_round(x).predicted for x in X[:50]] == \
        [model.predict_round(x).predicted for x in X[:50]]


def test_a_state_saved_before_the_vote_plays_as_before_and_starts_a_vote() -> None:
    X, y = _clusters()
    model = kons.Auto(task="classification")
    _rounds(model, X[:300], y[:300])
    header, arrays = kons._state.decode(model.to_bytes())
    before_the_vote = {name: array for name, array in arrays.items() if not name.startswith("label_")}
    old = kons.load(kons._state.encode(header, before_the_vote))
    fresh, ahead = _rounds(old, X[300:], y[300:]), _rounds(model, X[300:], y[300:])
    assert [r.distribution for r in fresh] == [r.distribution for r in ahead]  # the plays are the same
    # the vote starts at its next round: the first label is the mixture's
    assert fresh[0].predicted == top_label(fresh[0].distribution or [])
    _, arrays = kons._state.decode(old.to_bytes())
    assert "label_active" in arrays


def test_a_vote_saved_before_its_label_rules_were_scored_counts_their_errors_from_zero() -> None:
    X, y = _clusters()
    model = kons.Auto(task="classification")
    _rounds(model, X[:300], y[:300])
    header, arrays = kons._state.decode(model.to_bytes())
    assert arrays["label_pick_errors"].any()
    del arrays["label_pick_errors"]
    old = kons.load(kons._state.encode(header, arrays))
    vote = old._model.mixture.vote  # type: ignore[attr-defined]
    assert vote is not None and not vote.pick_errors.any()
    ahead, fresh = _rounds(model, X[300:], y[300:]), _rounds(old, X[300:], y[300:])
    assert [r.distribution for r in fresh] == [r.distribution for r in ahead]  # the plays are the same
    _, arrays = kons._state.decode(old.to_bytes())
    assert arrays["label_pick_errors"].any()


def test_the_regression_state_has_no_vote() -> None:
    X, y = _clusters()
    model = kons.Auto()
    model.learn_many(X[:100], y[:100].astype(float))
    _, arrays = kons._state.decode(model.to_bytes())
    assert not any(name.startswith("label_") for name in arrays)
    assert model.learn_round(X[100], 1.0).predicted is None
