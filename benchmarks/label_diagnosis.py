"""Why ``auto``'s label loses where it does on the multi-class streams (issue 39; docs/auto-log.md, "Where the
label still loses, and why").

One run of ``kons.Auto(task="classification")`` per stream records every multinomial round: each expert's
label (-1 while out of the mixture), the vote's label, the mixture's most probable class, the label played
and the true class. It prints the errors of each, the experts of fewest errors (an expert out of play counted
with the label played), and replays exactly, on the recorded labels (the pick changes no learning), a
candidate rule: follow the leader by discounted errors over every expert's label besides the vote's and the
mixture's class. ``--seeds N`` also counts River's ``AMFClassifier`` and ``auto`` at seeds 0..N-1 (``--orders
N`` instead both at seed 0 on the benchmark's order and N shuffles: :func:`orders`), and
``--forest-wake`` ``auto`` with the forest woken after that many rows (``--neighbours-wake`` the local expert;
``--forest-dirichlet`` the forest's prior, at the ``--seeds``), ``--softmax-voter`` the vote replayed with
River's softmax regression as one more voter, ``--warmup-labels`` the errors of candidate labels of
the rows the multi-class warm-up plays (:func:`warmup_labels`; with ``--shuffles N`` summed over the
benchmark's order and N shuffles of each stream, and ``--streams`` may name the :data:`IMBALANCED` streams),
``--two-class-warmup`` those of the rows the warm-up plays with two classes, played as the multi-class
warm-up would (:func:`two_class_warmup`), and ``--vote-shares`` (with ``--orders N``) the errors of the label
replayed with the split vote's rule at several shares (:func:`vote_shares`).

Run::

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.label_diagnosis --streams iris image_segments waveform
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable
from typing import Any
from unittest import mock

import numpy as np

import kons
import kons.auto.experts.forest as forest_module
import kons.auto.experts.neighbours as neighbours_module
import kons.auto.learner as learner_module
import kons.auto.mixture as mixture_module
from benchmarks.multiclass import STREAMS, TUNING_STREAMS, _log_loss
from kons._multinomial import reference_softmax
from kons.auto.config import WARMUP_NOISE
from kons.preprocessing import TARGET_BOUND, WARMUP_ROWS, median_width
from kons.sparse import dense

#: The first rows, counted apart (a small stream's errors are mostly there).
EARLY = 25
#: The candidate rule's grid: discounts of the errors, and the lead an expert needs over the label played.
DISCOUNTS = (0.97, 0.98, 0.985, 0.99, 0.993, 0.995, 0.997, 0.999, 0.9995, 1.0)
MARGINS = (0.5, 1.0, 2.0, 4.0)


class Recorded:
    """A stream's multinomial rounds: experts' labels (rounds, experts), and the vote's label, the
    mixture's class, the label played and the true class (rounds). The rounds of the rows the warm-up
    plays are learnt by the grid when it replays its buffer, all in one row, and played by no rule of the
    grid: they count in each rule's state, not in its errors (``played``)."""

    def __init__(self, names: list[str], rounds: list[tuple[np.ndarray, int, int, int, int, np.ndarray]],
                 wrong: list[bool], rows: list[int], tempered: list[int]) -> None:
        #: Whether ``auto``'s label was wrong, by row.
        self.names, self.wrong, errors = names, wrong, sum(wrong)
        self.errors = errors
        self.labels = np.full((len(rounds), len(names)), -1)
        self.weights = np.zeros((len(rounds), len(names)))
        for t, (labels, _, _, _, _, weights) in enumerate(rounds):
            self.labels[t, :len(labels)] = labels
            self.weights[t, :len(weights)] = weights
        self.voted, self.own, self.picked, self.y = (np.array([r[i] for r in rounds]) for i in (1, 2, 3, 4))
        #: The mixture's tempered class (the pick's second rule), by round.
        self.tempered = np.array(tempered)
        #: Whether the grid played the round (its row's only round).
        self.played = np.bincount(rows, minlength=len(wrong))[rows] == 1
        #: The errors outside the rounds played (the first row, before any class is known, and the
        #: warm-up's).
        self.offset = errors - int(np.sum((self.picked != self.y) & self.played))


def record(name: str, shuffle: int = 0) -> Recorded:
    """``auto``'s rounds on ``name`` in the benchmark's order (``shuffle`` 0) or shuffled by that seed."""
    rounds: list[tuple[np.ndarray, int, int, int, int, np.ndarray]] = []
    rows: list[int] = []  # the row of each round
    tempered: list[int] = []
    original = mixture_module.Mixture.update_probabilities

    def update(self: mixture_module.Mixture, probabilities: np.ndarray, label: int,
               played: np.ndarray | None = None) -> None:
        labels = self._labels(probabilities, probabilities.tobytes()).copy()
        own = int((self.mix_probabilities(probabilities) if played is None else played).argmax())
        vote = self.vote
        tempered.append(self.tempered_class(probabilities))
        voted, picked = (own, own) if vote is None else (
            vote.voted(labels, own), vote.label(labels, own, tempered[-1]))
        rounds.append((labels, voted, own, picked, label, self.weights().copy()))
        rows.append(len(wrong))
        original(self, probabilities, label, played)

    with mock.patch.object(mixture_module.Mixture, "update_probabilities", update):
        X, y = _shuffled(name, shuffle)
        model = kons.Auto(task="classification")
        wrong: list[bool] = []
        for x, t in zip(X, y, strict=True):
            wrong.append(model.learn_round(x, t).predicted != t)
        names = model._grid.names() if model._grid is not None else []
    return Recorded(names, rounds, wrong, rows, tempered)


def follow_experts(r: Recorded, discount: float, margin: float) -> int:
    """The errors of the candidate rule on ``r``'s rounds played (those outside them as played)."""
    candidates = np.column_stack([r.voted, r.own, r.labels])
    counts = np.zeros(candidates.shape[1])
    current, errors = 0, 0
    for labels, y, played in zip(candidates, r.y, r.played, strict=True):
        live = labels >= 0
        best = int(np.argmin(np.where(live, counts, np.inf)))
        if not live[current] or counts[best] + margin < counts[current]:
            current = best
        wrong = labels[current] != y
        errors += int(wrong and played)
        counts = discount * counts + np.where(live, labels != y, wrong)
    return errors + r.offset


def with_voter(name: str, r: Recorded) -> None:
    """The label played with River's ``StandardScaler | SoftmaxRegression`` as one more voter of the vote
    (its labels on the same rows; the vote replayed by :class:`~kons.auto.mixture.LabelVote`, the mixture's
    class as recorded)."""
    from river import linear_model, preprocessing

    X, y = STREAMS[name](3000)
    index: dict[Any, int] = {}
    for label in y:  # (auto's classes: in order of first appearance)
        index.setdefault(label, len(index))
    model: Any = preprocessing.StandardScaler() | linear_model.SoftmaxRegression()
    extra = []
    for x, t in zip(X, y, strict=True):
        features = dict(enumerate(x.tolist()))
        proba = model.predict_proba_one(features)
        extra.append(index[max(proba, key=proba.__getitem__)] if proba else -1)
        model.learn_one(features, t)
    outcome = {}
    for voting in (False, True):
        vote, errors = None, 0
        for t in range(len(r.y)):
            labels = np.append(r.labels[t], extra[t]) if voting else r.labels[t]
            own, tempered, label = int(r.own[t]), int(r.tempered[t]), int(r.y[t])
            errors += r.played[t] and (own if vote is None else vote.label(labels, own, tempered)) != label
            if vote is None:
                vote = mixture_module.LabelVote(labels >= 0)
            else:
                vote.score(labels, own, tempered, label)
            vote.follow(labels >= 0)
            vote.update(labels, own, label)
        outcome[voting] = errors + r.offset
    print(f"{name}: the label played replayed {outcome[False]}, with River's softmax as a voter "
          f"{outcome[True]} (the softmax alone {sum(index[t] != e for t, e in zip(y, extra, strict=True))})")


def describe(name: str, r: Recorded, shown: int = 6) -> None:
    active = (r.labels >= 0) & r.played[:, None]
    wrong = r.labels != r.y[:, None]
    played_wrong = (r.picked != r.y) & r.played
    filled = np.where(active, wrong, played_wrong[:, None]).sum(axis=0)
    print(f"== {name}: auto {r.errors} errors; the grid's {r.played.sum()} rounds played: played "
          f"{played_wrong.sum()}, vote {np.sum((r.voted != r.y) & r.played)}, mixture's class "
          f"{np.sum((r.own != r.y) & r.played)}, tempered class {np.sum((r.tempered != r.y) & r.played)}; "
          f"in its first {EARLY} rows {sum(r.wrong[:EARLY])}")
    for i in [i for i in np.argsort(filled, kind="stable") if active[:, i].any()][:shown]:
        print(f"   {r.names[i][:60]:60s} plays {active[:, i].sum():5d} rounds, errors there "
              f"{np.sum(wrong[:, i] & active[:, i]):4d} (played there "
              f"{np.sum(played_wrong & active[:, i]):4d}), mean weight {r.weights[:, i].mean():.3f}")


def _amf_wrong(X: np.ndarray, y: list[Any], seed: int = 0) -> list[bool]:
    """Whether River's ``AMFClassifier`` at ``seed`` missed each row of ``X``, progressive validation."""
    from river import forest

    model: Any = forest.AMFClassifier(seed=seed)
    wrong = []
    for x, t in zip(X, y, strict=True):
        features = dict(enumerate(np.asarray(x).tolist()))
        proba = model.predict_proba_one(features)
        wrong.append((max(proba, key=proba.__getitem__) if proba else None) != t)
        model.learn_one(features, t)
    return wrong


def seeds(name: str, count: int) -> None:
    X, y = STREAMS[name](3000)
    amf, early, ours = [], [], []
    for seed in range(count):
        wrong = _amf_wrong(X, y, seed)
        amf.append(sum(wrong))
        early.append(sum(wrong[:EARLY]))
        auto = kons.Auto(task="classification", seed=seed)
        ours.append(sum(auto.learn_round(x, t).predicted != t for x, t in zip(X, y, strict=True)))
    print(f"{name}: River AMF errors at seeds 0..{count - 1} {amf} (in the first {EARLY} rows {early}); "
          f"auto {ours}")


def orders(name: str, count: int) -> None:
    """River's AMF and ``auto`` (each at seed 0) on the benchmark's order of ``name`` and ``count`` shuffles
    of it: their errors summed in the warm-up's rows and after them, on how many orders ``auto`` is ahead,
    tied and behind, and after the warm-up the errors of the label played, the vote's, the mixture's class
    and the tempered class (the pick's two rules and the class it was picked against)."""
    summed, outcomes = np.zeros((2, 2), dtype=int), {"ahead": 0, "tied": 0, "behind": 0}
    rules = dict.fromkeys(("played", "vote", "mixture's class", "tempered class"), 0)
    for shuffle in range(count + 1):
        recorded = record(name, shuffle)
        amf = _amf_wrong(*_shuffled(name, shuffle))
        for at, wrong in enumerate((recorded.wrong, amf)):
            summed[at] += sum(wrong[:WARMUP_ROWS]), sum(wrong[WARMUP_ROWS:])
        ours = sum(recorded.wrong)
        outcomes["ahead" if ours < sum(amf) else "tied" if ours == sum(amf) else "behind"] += 1
        for rule, labels in zip(rules, (recorded.picked, recorded.voted, recorded.own, recorded.tempered),
                                strict=True):
            rules[rule] += int(np.sum((labels != recorded.y) & recorded.played))
    print(f"{name} over {count + 1} orders, errors in the first {WARMUP_ROWS} rows and after: auto "
          f"{summed[0].tolist()}, River AMF {summed[1].tolist()}; auto {outcomes}; after the warm-up {rules}")


#: The shares of the vote's weight :func:`vote_shares` replays the split vote's rule at (0: never split).
VOTE_SHARES = (0.0, 0.5, 0.65, 0.7, 0.75, 0.77, 0.8, 0.85, 0.9, 0.95, 0.96, 0.99)


def _split_vote_errors(r: Recorded, shares: tuple[float, ...]) -> list[int]:
    """The errors of ``r``'s label replayed with the tempered class played where the vote's class holds
    less than each of ``shares`` of the voters' weight (the label of
    :meth:`~kons.auto.mixture.LabelVote.label` at each ``vote_share``, the vote replayed on the recorded
    labels: no learning depends on them)."""
    errors, vote = np.full(len(shares), r.offset), None
    for t in range(len(r.y)):
        labels, own, tempered, label = r.labels[t], int(r.own[t]), int(r.tempered[t]), int(r.y[t])
        if vote is None:  # (the vote's first round plays the mixture's class, as recorded)
            vote = mixture_module.LabelVote(labels >= 0)
        else:
            played = []
            for share in shares:  # (the share changes no learning of the vote: one vote for all)
                vote.vote_share = share
                played.append(vote.label(labels, own, tempered))
            errors += r.played[t] * (np.array(played) != label)
            vote.score(labels, own, tempered, label)
        vote.follow(labels >= 0)
        vote.update(labels, own, label)
    return errors.tolist()


def vote_shares(name: str, count: int) -> None:
    """``auto``'s errors on the benchmark's order of ``name`` and ``count`` shuffles, summed, with the split
    vote's rule replayed at each of :data:`VOTE_SHARES` (docs/auto.md, "A split vote"), and on the
    benchmark's order alone."""
    runs = [_split_vote_errors(record(name, shuffle), VOTE_SHARES) for shuffle in range(count + 1)]
    summed = dict(zip(VOTE_SHARES, np.sum(runs, axis=0).tolist(), strict=True))
    print(f"{name}: errors over {count + 1} orders by share {summed}; on the benchmark's order "
          f"{dict(zip(VOTE_SHARES, runs[0], strict=True))}", flush=True)


def patched(name: str, module: Any, constant: str, value: float, seeds: int = 1) -> None:
    """``auto``'s errors and log loss on ``name`` at seeds 0..``seeds``-1 with ``module``'s ``constant`` (the
    name its builder reads, not exported) set to ``value``."""
    names = vars(module)
    kept, names[constant] = names[constant], type(names[constant])(value)
    try:
        X, y = STREAMS[name](3000)
        errors, losses = [], []
        for seed in range(seeds):
            model = kons.Auto(task="classification", seed=seed)
            wrong, logs = 0, []
            for x, t in zip(X, y, strict=True):
                played = model.learn_round(x, t)
                wrong += played.predicted != t
                logs.append(_log_loss(dict(played.distribution or []), t))
            errors.append(wrong)
            losses.append(f"{np.mean(logs):.4f}")
    finally:
        names[constant] = kept
    print(f"{name}: {constant} = {value:g}: errors at seeds 0..{seeds - 1} {errors}, log loss {losses}")


#: The candidate labels of a warm-up round (:func:`warmup_labels`).
WARMUP_RULES = ("played", "most probable", "without base rates", "nearest row", "fewer leave-one-out errors",
                "three models by leave-one-out log loss")


def _imbalanced(weights: tuple[float, ...]) -> Callable[[int], tuple[np.ndarray, list[int]]]:
    def load(rows: int) -> tuple[np.ndarray, list[int]]:
        from sklearn.datasets import make_classification

        X, y = make_classification(n_samples=rows, n_features=10, n_informative=6, n_classes=len(weights),
                                   weights=list(weights), n_clusters_per_class=1, random_state=0)
        return np.asarray(X, dtype=np.float64), [int(label) for label in y]

    return load


#: Streams of unequal class rates, for the warm-up's label only (``make_classification``, the classes'
#: shares as named; no part of ``benchmarks/multiclass.py``).
IMBALANCED = {"imbalanced3": _imbalanced((0.8, 0.15, 0.05)), "imbalanced4": _imbalanced((0.7, 0.1, 0.1, 0.1)),
              "imbalanced5": _imbalanced((0.4, 0.3, 0.15, 0.1, 0.05))}


def _shuffled(name: str, shuffle: int) -> tuple[np.ndarray, list[Any]]:
    """The stream ``name`` in the benchmark's order (``shuffle`` 0) or its rows shuffled by that seed."""
    X, y = (IMBALANCED | STREAMS)[name](3000)
    order = np.arange(len(y)) if shuffle == 0 else np.random.default_rng(shuffle).permutation(len(y))
    return np.asarray(X)[order], [y[i] for i in order]


def _warmup_models(Z: np.ndarray, labels: np.ndarray, z: np.ndarray, classes: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The warm-up's two models as ``Auto._warmup_probabilities`` fits them on the buffered rows ``Z``
    (standardised) of class indices ``labels``: their weights by evidence, the class means, their scores'
    deviations from those means at ``z`` (models x classes) and on each buffered row left out (models x
    rows x classes; Gaussian-process regression's closed form)."""
    targets = -np.ones((len(Z), classes))
    targets[np.arange(len(Z)), labels] = 1.0
    mean = targets.mean(axis=0)
    inner, inner_z = Z @ Z.T, Z @ z
    squares = np.diagonal(inner)
    distances = np.maximum(squares[:, None] + squares[None, :] - 2.0 * inner, 0.0)
    width = median_width(Z)
    evidences, deviations, left_out = [], [], []
    for gram, k in ((inner / Z.shape[1] + np.eye(len(Z)), inner_z / Z.shape[1]),
                    (np.exp(-width * distances) + WARMUP_NOISE * np.eye(len(Z)),
                     np.exp(-width * np.maximum(squares + z @ z - 2.0 * inner_z, 0.0)))):
        inverse = np.linalg.inv(gram)
        coef = inverse @ (targets - mean)
        deviations.append(np.clip(k @ coef, -TARGET_BOUND, TARGET_BOUND))
        left_out.append(np.clip(targets - mean - coef / np.diagonal(inverse)[:, None], -TARGET_BOUND,
                                TARGET_BOUND))
        evidences.append(-0.5 * float(np.sum((targets - mean) * coef))
                         - 0.5 * classes * float(np.linalg.slogdet(gram)[1]))
    weights = np.exp(np.array(evidences) - max(evidences))
    return weights / weights.sum(), mean, np.array(deviations), np.array(left_out)


def _additive_model(Z: np.ndarray, labels: np.ndarray, z: np.ndarray, classes: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """A third warm-up model, axis-aligned as the forest's and AMF's splits are: the Gaussian-process
    regression of :func:`_warmup_models` on the mean of one radial kernel a feature (each at its own
    median width, noise ``WARMUP_NOISE``). Its scores' deviations from the class means at ``z`` and on each
    buffered row left out."""
    targets = -np.ones((len(Z), classes))
    targets[np.arange(len(Z)), labels] = 1.0
    mean = targets.mean(axis=0)
    gram, k = np.zeros((len(Z), len(Z))), np.zeros(len(Z))
    for column, value in zip(Z.T, z, strict=True):
        width = median_width(column[:, None])
        gram += np.exp(-width * (column[:, None] - column[None, :]) ** 2) / len(z)
        k += np.exp(-width * (column - value) ** 2) / len(z)
    inverse = np.linalg.inv(gram + WARMUP_NOISE * np.eye(len(Z)))
    coef = inverse @ (targets - mean)
    return (np.clip(k @ coef, -TARGET_BOUND, TARGET_BOUND),
            np.clip(targets - mean - coef / np.diagonal(inverse)[:, None], -TARGET_BOUND, TARGET_BOUND))


def _left_out_log_loss(mean: np.ndarray, left_out: np.ndarray, labels: np.ndarray) -> float:
    """The log loss summed of a model's plays of the buffered rows each left out (``left_out``: its scores'
    deviations there, rows x classes), played as the warm-up plays."""
    plays = _mixed_play(np.ones(1), (mean + left_out)[None])
    return -float(np.sum(np.log(plays[np.arange(len(labels)), labels])))


def _mixed_play(weights: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """The models' softmaxes of half their ``scores`` (models x ... x classes) averaged by ``weights``, as
    the warm-up plays them."""
    plays = np.apply_along_axis(lambda s: reference_softmax(s[1:] - s[0]), -1, scores / 2.0)
    mixed: np.ndarray = np.tensordot(weights, plays, 1)
    return mixed


def _mixed_class(weights: np.ndarray, scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """The most probable class among ``allowed`` of :func:`_mixed_play`."""
    chosen: np.ndarray = np.where(allowed, _mixed_play(weights, scores), -1.0).argmax(axis=-1)
    return chosen


def warmup_labels(name: str, shuffle: int = 0) -> dict[str, int]:
    """The errors of candidate labels on the multinomial rounds the warm-up plays (the rows before the
    grid's; the same rows and plays for all: a label changes no learning), each among the classes the
    buffer holds: the class ``auto`` named (the base rates weighed by the probability that the rates are
    unequal); the play's most probable class (its label before that); the class of the same models' scores
    without the classes' base rates in the buffer (their means, which the play adds back); the class of
    the nearest buffered row; and the one of the most probable and the one without base rates with fewer
    errors on the buffered rows, each left out in turn (the most probable on a tie); and the class of the
    two models and a third, axis-aligned (:func:`_additive_model`), averaged by their log loss on the
    buffered rows each left out, the base rates weighed as named. ``shuffle``: the
    stream's rows shuffled by that seed (0: the benchmark's order)."""
    errors = dict.fromkeys(WARMUP_RULES, 0)
    original = learner_module.Auto._warmup_probabilities
    # the round's labels without the base rates and of the nearest row, and whether the first had fewer
    # leave-one-out errors than the play's on the buffer
    candidates: list[int] = []

    def spied(self: kons.Auto, x: Any, classes: int) -> np.ndarray:
        played: np.ndarray = original(self, x, classes)
        prep = self._prep
        if prep.buffer:
            Z = prep.standardised_buffer()
            labels = np.array([int(t) for _, t in prep.buffer])
            z = prep.x_scaler.standardise(dense(x))
            weights, mean, deviations, left_out = _warmup_models(Z, labels, z, classes)
            held = np.bincount(labels, minlength=classes) > 0
            again = np.bincount(labels, minlength=classes) > 1  # (a class left out still in the buffer)
            loo = [int(np.sum(_mixed_class(weights, scores, again) != labels))
                   for scores in (mean + left_out, left_out)]
            probable = int(_mixed_class(weights, mean + deviations, held))
            without = int(_mixed_class(weights, deviations, held))
            nearest = int(labels[np.argmin(np.sum((Z - z) ** 2, axis=1))])
            # the linear, radial and additive models weighed by their left-out log loss (pseudo-Bayesian
            # model averaging), with the base rates weighed as the label named weighs them
            additive, additive_left_out = _additive_model(Z, labels, z, classes)
            deviations_of = np.vstack([deviations, additive[None]])
            losses = [_left_out_log_loss(mean, left, labels) for left in (*left_out, additive_left_out)]
            pseudo = np.exp(min(losses) - np.array(losses))
            rates = learner_module._unequal_rates_probability(np.bincount(labels, minlength=classes)[held])
            three = int(_mixed_class(pseudo / pseudo.sum(), rates * mean + deviations_of, held))
            candidates[:] = [probable, without, nearest, int(loo[1] < loo[0]), three]
        return played

    with mock.patch.object(learner_module.Auto, "_warmup_probabilities", spied):
        X, y = _shuffled(name, shuffle)
        model = kons.Auto(task="classification")
        for x, t in zip(X, y, strict=True):
            candidates.clear()
            predicted = model.learn_round(x, t).predicted
            if candidates:  # (a multinomial round of the warm-up, the buffer not empty)
                probable, without, nearest, fewer, three = candidates
                played = model.classes.index(predicted)
                truth = model.classes.index(t)
                labels = (played, probable, without, nearest, without if fewer else probable, three)
                for rule, label in zip(WARMUP_RULES, labels, strict=True):
                    errors[rule] += label != truth
            if model._grid is not None:  # (the grid plays from the next row)
                break
    return errors


def two_class_warmup(name: str) -> tuple[int, float, int, float]:
    """The errors and summed log loss of the warm-up's rounds with two classes in the buffer (the binary
    model's linear play, ``Auto._warmup_prediction``), as played and as the multi-class warm-up would play
    them: the linear model and the radial one averaged by their evidence (:func:`_warmup_models` at two
    classes). The same rows and learning for both: the warm-up's play changes no model."""
    original = learner_module.Auto._warmup_prediction
    averaged: list[float] = []  # the round's probability of the class of index 1 (the label +1)

    def spied(self: kons.Auto, x: Any) -> float:
        played: float = original(self, x)
        prep = self._prep
        labels = np.array([int(t > 0) for _, t in prep.buffer])
        if self._binary and len(set(labels.tolist())) == 2:
            Z = prep.standardised_buffer()
            weights, mean, deviations, _ = _warmup_models(Z, labels, prep.x_scaler.standardise(dense(x)), 2)
            averaged[:] = [float(_mixed_play(weights, mean + deviations)[1])]
        return played

    counts = [0, 0.0, 0, 0.0]
    with mock.patch.object(learner_module.Auto, "_warmup_prediction", spied):
        X, y = STREAMS[name](3000)
        model = kons.Auto(task="classification")
        for x, t in zip(X, y, strict=True):
            averaged.clear()
            played = model.learn_round(x, t)
            if averaged:
                positive = model.classes.index(t) == 1
                for at, p in ((0, dict(played.distribution or [])[t]),
                              (2, averaged[0] if positive else 1.0 - averaged[0])):
                    counts[at] += p < 0.5 or (p == 0.5 and positive)  # (a tie plays the class of index 0)
                    counts[at + 1] += -float(np.log(max(p, 1e-300)))
            if model._grid is not None:
                break
    return int(counts[0]), round(counts[1], 3), int(counts[2]), round(counts[3], 3)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", nargs="*", default=list(TUNING_STREAMS), choices=[*STREAMS, *IMBALANCED])
    parser.add_argument("--shuffles", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=0)
    parser.add_argument("--orders", type=int, default=-1)
    parser.add_argument("--forest-wake", type=int, nargs="*", default=[])
    parser.add_argument("--neighbours-wake", type=int, nargs="*", default=[])
    parser.add_argument("--forest-dirichlet", type=float, nargs="*", default=[])
    parser.add_argument("--softmax-voter", action="store_true")
    parser.add_argument("--warmup-labels", action="store_true")
    parser.add_argument("--two-class-warmup", action="store_true")
    parser.add_argument("--vote-shares", action="store_true")
    args = parser.parse_args(argv)
    if args.vote_shares:
        for name in args.streams:
            vote_shares(name, max(args.orders, 0))
        return
    if args.two_class_warmup:
        print("the two-class warm-up's rounds: errors, log loss summed; played / as the multi-class warm-up")
        for name in args.streams:
            print(f"   {name:16s} {two_class_warmup(name)}", flush=True)
        return
    if args.orders >= 0:
        for name in args.streams:
            orders(name, args.orders)
        return
    if args.warmup_labels:
        print("errors on the warm-up's multinomial rounds: " + ", ".join(WARMUP_RULES))
        for name in args.streams:
            runs = [list(warmup_labels(name, shuffle).values()) for shuffle in range(args.shuffles + 1)]
            errors = np.sum(runs, axis=0)
            print(f"   {name:16s} {errors.tolist()}", flush=True)
        return
    recorded = {name: record(name) for name in args.streams}
    for name, r in recorded.items():
        describe(name, r)
    print("follow the leader over every label (discount, margin): mean ratio to the label played, errors")
    rows = []
    for discount, margin in itertools.product(DISCOUNTS, MARGINS):
        errors = {name: follow_experts(r, discount, margin) for name, r in recorded.items()}
        rows.append((float(np.mean([errors[n] / max(r.errors, 1) for n, r in recorded.items()])),
                     discount, margin, errors))
    for ratio, discount, margin, errors in sorted(rows, key=lambda row: row[0]):
        print(f"   {discount:g}, {margin:g}: {ratio:.4f} {errors}")
    for name in args.streams:
        if args.softmax_voter:
            with_voter(name, recorded[name])
        if args.seeds:
            seeds(name, args.seeds)
        for rows_ in args.forest_wake:
            patched(name, forest_module, "FOREST_WAKE_ROWS", rows_)
        for rows_ in args.neighbours_wake:
            patched(name, neighbours_module, "NEIGHBOURS_WAKE_ROWS", rows_)
        for prior in args.forest_dirichlet:
            patched(name, forest_module, "FOREST_DIRICHLET", prior, max(args.seeds, 1))


if __name__ == "__main__":
    main()
