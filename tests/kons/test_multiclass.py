"""Multi-class classification: the multinomial rounds against a dense reference, labels of any kind in
``kons.Auto``, classes appearing late, save/restore and replay, bad labels and the bound on classes."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import pytest
import scipy.linalg

import kons
from kons import classes as kons_classes
from kons._multinomial import MultinomialRounds, multinomial_rounds, reference_softmax, reference_softmaxes
from kons.auto import Auto
from kons.auto.experts.newton import LearnerExpert, played_together
from kons.auto.grid import Grid
from kons.auto.learner import _unequal_rates_probability, _within_class_deviations
from kons.errors import NumericalError
from kons.losses import log_loss, top_label
from kons.preprocessing import WARMUP_ROWS
from tests.reference import restored_in_step


@functools.cache
def _blobs(n: int = 700, classes: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Raw rows (features on very different scales) of ``classes`` Gaussian clusters; labels 0..K-1."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, 5)) * 2.0
    labels = rng.integers(classes, size=n)
    X = (centres[labels] + rng.normal(size=(n, 5))) * [1.0, 100.0, 0.01, 5.0, 1.0] + [0, 500.0, 3.0, 0, -2.0]
    return X, labels


def _softmax_reference(scores: np.ndarray) -> np.ndarray:
    z = np.concatenate([[0.0], scores])
    e = np.exp(z - z.max())
    probabilities: np.ndarray = e / e.sum()
    return probabilities


class _DenseMultinomialONS:
    """The multinomial ONS with one shared matrix, written plainly: A kept dense and solved each round."""

    def __init__(self, A: np.ndarray, W: np.ndarray, eta: float, C: float) -> None:
        self.A, self.W, self.eta, self.C = A.copy(), W.copy(), eta, C

    def round(self, phi: np.ndarray, label: int) -> np.ndarray:
        margins = self.W.T @ phi
        scores = np.clip(margins, -self.C, self.C)
        v = np.linalg.solve(self.A, phi)
        W = self.W - np.outer(v, (margins - scores) / (phi @ v))  # each score projected onto [-C, C]
        p = _softmax_reference(scores)
        residual = p - np.eye(len(p))[label]
        self.A = self.A + self.eta * (residual[1:] @ residual[1:]) * np.outer(phi, phi)
        self.W = W - np.outer(np.linalg.solve(self.A, phi), residual[1:])
        return p


def test_the_multinomial_ons_round_is_the_dense_reference() -> None:
    rng = np.random.default_rng(1)
    d, classes, eta, C = 6, 4, 0.7, 2.0
    ons = kons.ONS(loss="logistic", alpha=2.0, eta=eta, C=C, dim=d)
    ons._widen(classes - 1)
    reference = _DenseMultinomialONS(2.0 * np.eye(d), np.zeros((d, classes - 1)), eta, C)
    for _ in range(300):
        x, label = rng.normal(size=d) * 2.0, int(rng.integers(classes))
        played = ons._learn_class_checked(x, label)
        assert np.allclose(played, reference.round(x, label), rtol=0, atol=1e-10)
    assert np.allclose(ons._u, reference.W, rtol=1e-10, atol=1e-10)
    assert np.allclose(np.linalg.inv(ons._Ainv), reference.A, rtol=1e-9)
    assert ons.stats()["rounds"] == 300


def test_the_multinomial_nystrom_round_is_the_dense_reference_on_a_full_dictionary() -> None:
    rng = np.random.default_rng(2)
    d, classes, eta, C, members = 3, 5, 0.5, 3.0, 6
    learner = kons.NystromKONS(kernel={"name": "rbf", "gamma": 0.3}, loss="logistic", eta=eta, C=C,
                               max_dictionary=members, dim=d)
    learner._widen(classes - 1)
    while learner.stats()["dictionary_size"] < members:  # grow the dictionary with multinomial rounds
        learner._learn_class_checked(rng.normal(size=d) * 2.0, int(rng.integers(classes)))
    D = learner._kors.points.view.copy()
    L = np.linalg.cholesky(learner.kernel.gram(D, D))
    reference = _DenseMultinomialONS(np.linalg.inv(learner._inverse.to_dense()), learner._weights, eta, C)
    for _ in range(200):
        x, label = rng.normal(size=d) * 2.0, int(rng.integers(classes))
        phi = scipy.linalg.solve_triangular(L, np.exp(-0.3 * ((D - x) ** 2).sum(axis=1)), lower=True)
        played = learner._learn_class_checked(x, label)
        assert np.allclose(played, reference.round(phi, label), rtol=0, atol=1e-10)
    assert np.allclose(learner._weights, reference.W, rtol=1e-8, atol=1e-8)


def test_two_classes_of_the_multinomial_round_are_the_binary_logistic_ons() -> None:
    rng = np.random.default_rng(3)
    binary = kons.ONS(loss="logistic", alpha=1.0, eta=1.0, C=4.0, dim=4)
    multinomial = binary.clone()
    multinomial._widen(1)
    for _ in range(200):
        x, positive = rng.normal(size=4) * 3.0, bool(rng.random() < 0.4)
        score = binary.learn_one(x, 1.0 if positive else -1.0)
        p = multinomial._learn_class_checked(x, int(positive))
        assert math.isclose(p[1], 1.0 / (1.0 + math.exp(-score)), rel_tol=0, abs_tol=1e-12)
    assert np.allclose(multinomial._u[:, 0], binary._u, rtol=1e-10, atol=1e-12)


def test_each_kind_of_expert_bounds_the_bytes_one_more_class_adds_to_its_experts() -> None:
    X, labels = _blobs(400, classes=3, seed=7)
    learner = Auto(task="classification")
    learner.learn_many(X, labels)
    grid = learner._grid
    assert grid is not None and grid.classes == 3
    # the threshold model since a declared change started, as by a change declared while two classes had
    # been seen (not started, it holds no learner to widen)
    grid._renew_fresh_bins()
    grew = set()
    for kind in grid.kinds:
        experts = grid.experts_of(kind.slots[0])
        if experts is None:
            continue
        before = sum(expert.nbytes() for expert in experts)
        for expert in experts:
            expert.widen(grid.classes + 1)
        added = sum(expert.nbytes() for expert in experts) - before
        assert 0 <= added <= kind.class_column_nbytes(5), kind.slots
        assert (added > 0) == (kind.class_column_nbytes(5) > 0), kind.slots
        grew |= {kind.slots[0]} if added else set()
    # the local expert's targets are class indices already
    assert grew == {"bins", "tree0", "forest", "fresh_bins"}


def test_class_growth_bounds_the_bytes_new_classes_add() -> None:
    X, labels = _blobs(620, classes=10, seed=6)
    known = labels < 3
    learner = Auto(task="classification")
    learner.learn_many(X[known][:600], labels[known][:600])
    before, bound = learner.state_nbytes(), learner.class_growth_nbytes(7)
    first_of = [int(np.flatnonzero(labels == k)[0]) for k in range(3, 10)]
    learner.learn_many(X[first_of], labels[first_of])
    grown = learner.state_nbytes() - before
    assert len(learner.classes) == 10 and 0 < grown <= bound
    assert learner.class_growth_nbytes(0) == 0 < learner.class_growth_nbytes(1)
    fresh = Auto(task="classification", dim=5)  # the first two classes add no column, 256 at most in all
    label_bytes = fresh.class_growth_nbytes(1)
    assert fresh.class_growth_nbytes(2) == 2 * label_bytes
    assert fresh.class_growth_nbytes(10_000) == fresh.class_growth_nbytes(256) > 256 * label_bytes
    with pytest.raises(kons.InvalidParameterError, match="classification"):
        Auto(dim=5).class_growth_nbytes(1)
    with pytest.raises(kons.InvalidParameterError, match="input dimension"):
        Auto(task="classification").class_growth_nbytes(1)
    assert Auto(task="classification").class_growth_nbytes(9, dim=5) == fresh.class_growth_nbytes(9)


def test_only_the_learners_that_declare_the_multinomial_round_have_it() -> None:
    # Checked statically too: mypy verifies these assignments against the protocol.
    declared: list[MultinomialRounds] = [kons.ONS(loss="logistic", dim=3), kons.NystromKONS(loss="logistic")]
    assert [type(learner) for learner in declared] == [kons.ONS, kons.NystromKONS]
    for name, cls in kons.LEARNERS.items():
        learner = cls()
        if cls.multinomial:
            assert id(multinomial_rounds(learner)) == id(learner), name
        else:
            with pytest.raises(TypeError, match="no multinomial round"):
                multinomial_rounds(learner)
    assert {name for name, cls in kons.LEARNERS.items() if cls.multinomial} == {"ons", "nystrom_kons"}


def test_the_softmaxes_of_rows_are_each_row_s_softmax_bit_for_bit() -> None:
    rng = np.random.default_rng(11)
    for rows, classes in [(1, 3), (12, 10), (20, 11), (5, 40), (3, 2)]:
        scores = np.clip(rng.normal(size=(rows, classes - 1)) * rng.choice([0.1, 3.0, 30.0]), -10.0, 10.0)
        together = reference_softmaxes(scores)
        assert together.shape == (rows, classes)
        for row, probabilities in zip(scores, together, strict=True):
            assert reference_softmax(row).tobytes() == probabilities.tobytes()


def _newton_experts(learner: Auto, x: np.ndarray) -> tuple[list[tuple[int, LearnerExpert]], Any]:
    grid = learner._grid
    assert isinstance(grid, Grid)
    z = learner._prep.scaled(x)
    return [(slot, e) for slot, e in grid.playing() if isinstance(e, LearnerExpert)], grid.inputs(z, x)[0]


def test_the_newton_experts_played_together_play_and_keep_their_own_plays() -> None:
    """Each expert's probabilities, bit for bit as its own play, and the learning round after them as after
    its own play; an expert whose round overflows keeps its uniform row."""
    X, labels = _blobs(260, classes=5, seed=9)
    learner = Auto(task="classification", seed=1)
    learner.learn_many(X[:250], labels[:250])
    alone = kons.load(learner.to_bytes())
    assert isinstance(alone, Auto)
    for x, label in zip(X[250:], labels[250:], strict=True):
        experts, row = _newton_experts(learner, x)
        own_experts, own_row = _newton_experts(alone, x)
        assert len(experts) >= 10
        together = np.full((max(slot for slot, _ in experts) + 1, 5), 0.2)
        played_together(experts, row, together)
        for (slot, _), (_, own) in zip(experts, own_experts, strict=True):
            assert together[slot].tobytes() == own.probabilities(own_row, 5).tobytes()
        for (_, expert), (_, own) in zip(experts, own_experts, strict=True):
            assert (expert.learn_class(row, int(label), 5).tobytes()
                    == own.learn_class(own_row, int(label), 5).tobytes())
    failing = experts[3][1].base
    def overflowing(x: Any) -> np.ndarray:
        raise NumericalError("overflow")
    failing._class_margins = overflowing  # type: ignore[attr-defined]
    experts, row = _newton_experts(learner, X[0])
    together = np.full((max(slot for slot, _ in experts) + 1, 5), 0.2)
    played_together(experts, row, together)
    assert np.array_equal(together[experts[3][0]], np.full(5, 0.2))
    assert not np.array_equal(together[experts[2][0]], np.full(5, 0.2))


def test_string_labels_play_as_zero_and_one() -> None:
    X, labels = _blobs(200, classes=2, seed=4)
    assert labels[0] == 0  # the first class seen is the negative role, as 0 is
    numbers = Auto(task="classification").learn_many(X, labels)
    strings = Auto(task="classification").learn_many(X, np.where(labels == 1, "b", "a"))
    assert np.array_equal(numbers, strings)
    # A stream starting with 1: 1 keeps the positive role, while its first string takes the negative one,
    # so the string learner's scores are the opposite (up to rounding).
    ones_first = 1 - labels
    numbers = Auto(task="classification").learn_many(X, ones_first)
    strings = Auto(task="classification").learn_many(X, np.where(ones_first == 1, "b", "a"))
    assert np.allclose(strings, -numbers, rtol=0, atol=1e-9) and not np.array_equal(strings, numbers)


def test_ten_classes_of_every_kind_appearing_late_are_learnt() -> None:
    X, labels = _blobs()
    # (not 0 and False together: two classes, but one key of the dicts of probabilities)
    kinds: list[object] = ["cat", 7, True, "dog", 0, "False", "7", -3, "", "bird"]
    ys = [kinds[int(c)] for c in labels]
    ys[:500] = [kinds[int(c) % 5] for c in labels[:500]]  # the five last classes appear at round 500
    learner = Auto(task="classification")
    hits = []
    for x, y in zip(X, ys, strict=True):
        predicted = learner.predict_proba_dict_one(x)
        played = learner.learn_proba_one(x, y)
        assert math.isclose(sum(played.values()), 1.0, rel_tol=1e-12) and played[y] > 0.0
        assert predicted.keys() <= played.keys() and math.isclose(sum(predicted.values() or [1.0]), 1.0)
        hits.append(top_label(predicted) == y)
    # 0 took the negative role and True the positive one, the others follow in order of appearance
    assert learner.classes[:5] == [0, True, "dog", "cat", 7]
    assert sorted(map(str, learner.classes[5:])) == sorted(map(str, kinds[5:]))
    assert np.mean(hits[300:500]) > 0.8 and np.mean(hits[-100:]) > 0.6
    # learn_one: the played probability of the label; predict_one: the top probability
    x = X[3]
    proba = learner.predict_proba_dict_one(x)
    assert learner.predict_one(x) == max(proba.values())
    assert learner.learn_one(x, ys[3]) == proba[ys[3]]


def test_numpy_scalars_are_the_classes_of_their_python_values() -> None:
    X, _ = _blobs(6, seed=12)
    learner = Auto(task="classification")
    for x, label in zip(X, [np.str_("a"), "a", np.int64(2), 2.0, np.bool_(True), True], strict=True):
        learner.learn_one(x, label)
    assert learner.classes == ["a", 2, True] and [type(c) for c in learner.classes] == [str, int, bool]


def test_true_and_one_are_different_classes() -> None:
    X, _ = _blobs(60, seed=5)
    learner = Auto(task="classification")
    for t, x in enumerate(X):
        learner.learn_one(x, [1, True, "1"][t % 3])
    assert learner.classes == [True, 1, "1"] and [type(c) for c in learner.classes] == [bool, int, str]


def test_probabilities_by_class_keep_true_and_one_apart() -> None:
    """The dict by label merges ``True`` and ``1`` into one key; the arrays by class index do not, and are
    the very probabilities of the dict's rounds, in the order of ``classes``."""
    X, _ = _blobs(90, seed=6)
    by_class, by_label = Auto(task="classification"), Auto(task="classification")
    for t, x in enumerate(X):
        y = [1, True, "cat"][t % 3]
        played, as_dict = by_class.learn_proba_by_class_one(x, y), by_label.learn_proba_one(x, y)
        assert len(played) == len(by_class.classes) and math.isclose(played.sum(), 1.0, rel_tol=1e-12)
        assert played[-1] == as_dict[by_class.classes[-1]]  # (the last class of each kind keeps its key)
    probe = X[0]
    probabilities = by_class.predict_proba_by_class_one(probe)
    assert by_class.classes == [True, 1, "cat"] and len(by_class.predict_proba_dict_one(probe)) == 2
    assert len(probabilities) == 3 and math.isclose(probabilities.sum(), 1.0, rel_tol=1e-12)
    assert probabilities[1:].tolist() == [by_label.predict_proba_dict_one(probe)[c] for c in (1, "cat")]
    assert by_class.to_bytes() == by_label.to_bytes()
    assert Auto(task="classification").predict_proba_by_class_one(probe).shape == (0,)


def test_the_class_of_a_label() -> None:
    X, _ = _blobs(4, seed=7)
    booleans, integers = Auto(task="classification"), Auto(task="classification")
    booleans.learn_one(X[0], True)
    integers.learn_one(X[0], 1)
    assert [booleans.class_of(y) for y in (0, 1, -1, 1.0, "x")] == [False, True, False, True, "x"]
    assert [type(integers.class_of(y)) for y in (0, True, 1.0)] == [int, bool, int]
    with pytest.raises(kons.InvalidInputError):
        integers.class_of(0.5)
    with pytest.raises(kons.InvalidParameterError):
        Auto().class_of(1)


def test_a_learner_of_booleans_reads_minus_one_zero_and_one_as_booleans() -> None:
    """Its state is the binary learners' of before, which took the numbers and the booleans alike: a
    saved learner of booleans (or one saved before classes were recorded) goes on with either."""
    X, labels = _blobs(200, classes=2, seed=13)
    booleans = Auto(task="classification")
    played = booleans.learn_many(X[:100], labels[:100] == 1)
    restored = kons.load(booleans.to_bytes())
    signs = np.where(labels[100:] == 1, 1.0, -1.0)  # as the service passes them
    continued = booleans.learn_many(X[100:], labels[100:] == 1)
    assert np.array_equal(continued, restored.learn_many(X[100:], signs))
    assert restored.classes == [False, True] and booleans.to_bytes() == restored.to_bytes()
    integers = Auto(task="classification").learn_many(X[:100], np.where(labels[:100], 1, 0))
    assert np.array_equal(played, integers)  # 0 and 1 play as False and True


def test_save_restore_and_replay_are_bit_identical() -> None:
    """Saved at each cut (before any round, in the warm-up, at its end, after it, late), a restored copy
    plays the rest as the original does; and the stream learnt at once leaves the same bytes."""
    X, labels = _blobs(320, classes=6, seed=6)
    ys = [["a", 2, True, "b", 5, False][c] for c in labels]
    original = Auto(task="classification", seed=2)
    cuts = [0, 5, WARMUP_ROWS - 1, WARMUP_ROWS + 7, 260]
    copies = restored_in_step(original, X, ys, cuts)
    assert all(copy.classes == original.classes for copy in copies)
    assert [copy.to_bytes() for copy in copies] == [original.to_bytes()] * len(cuts)
    replayed = Auto(task="classification", seed=2)
    replayed.learn_many(X, ys)
    assert replayed.to_bytes() == original.to_bytes()


def test_a_learner_of_booleans_saves_what_it_saved_before_classes_were_recorded() -> None:
    X, labels = _blobs(80, classes=2, seed=7)
    booleans, integers = Auto(task="classification"), Auto(task="classification")
    booleans.learn_many(X, labels == 1)
    integers.learn_many(X, labels)
    assert "classes" not in kons._state.decode(booleans.to_bytes())[0]["scalars"]
    assert kons._state.decode(integers.to_bytes())[0]["scalars"]["classes"] == [0, 1]
    assert kons.load(booleans.to_bytes()).classes == [False, True]
    assert kons.load(integers.to_bytes()).classes == [0, 1]


@pytest.mark.parametrize("label", [None, float("nan"), float("inf"), 1.5, [1], {"a": 1}, b"x", "x" * 300])
@pytest.mark.parametrize("rounds", [3, 200])
def test_an_invalid_label_is_refused_and_changes_nothing(label: object, rounds: int) -> None:
    X, labels = _blobs(rounds + 1, classes=3, seed=8)
    learner = Auto(task="classification")
    learner.learn_many(X[:rounds], labels[:rounds])
    blob = learner.to_bytes()
    with pytest.raises(kons.InvalidInputError):
        learner.learn_one(X[rounds], label)
    if label is not None:  # check_round(x, None) checks a prediction's x
        with pytest.raises(kons.InvalidInputError):
            learner.check_round(X[rounds], label)
    assert learner.to_bytes() == blob


def test_classes_beyond_the_bound_are_refused_and_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kons_classes, "MAX_CLASSES", 6)
    X, _ = _blobs(80, seed=9)
    learner = Auto(task="classification")
    for t in range(70):
        learner.learn_one(X[t], f"class {t % 6}")
    blob = learner.to_bytes()
    with pytest.raises(kons.InvalidInputError, match="6 classes"):
        learner.learn_one(X[70], "one more")
    assert learner.to_bytes() == blob
    learner.learn_one(X[71], "class 2")  # a known class still learns


def test_the_default_bound_on_classes_holds_after_the_warm_up() -> None:
    X, _ = _blobs(kons_classes.MAX_CLASSES + 1, seed=10)
    learner = Auto(task="classification")
    for t in range(kons_classes.MAX_CLASSES):
        assert math.isclose(sum(learner.learn_proba_one(X[t], t).values()), 1.0)
    with pytest.raises(kons.InvalidInputError):
        learner.learn_one(X[-1], "another")
    assert len(learner.classes) == kons_classes.MAX_CLASSES


def test_the_played_distribution_of_a_new_class() -> None:
    X, _ = _blobs(3, seed=11)
    learner = Auto(task="classification")
    assert learner.predict_proba_dict_one(X[0]) == {} and learner.classes == []
    assert learner.learn_proba_one(X[0], "a") == {"a": 1.0}  # one class: all the probability
    second = learner.learn_proba_one(X[1], "b")
    assert second.keys() == {"a", "b"} and math.isclose(sum(second.values()), 1.0)
    third = learner.learn_proba_one(X[2], "c")
    assert third.keys() == {"a", "b", "c"} and math.isclose(sum(third.values()), 1.0)
    assert learner.predict_proba_dict_one(X[0]).keys() == {"a", "b", "c"}


def test_the_warm_up_plays_classes_that_no_hyperplane_parts() -> None:
    """Three concentric rings in the warm-up: the linear model alone plays near the class frequencies
    everywhere; the evidence gives the play to the kernel regression, which names each row's ring."""
    rng = np.random.default_rng(12)
    radii = np.array([0.0, 3.0, 6.0])
    labels = np.arange(WARMUP_ROWS - 2) % 3
    angles = rng.uniform(0.0, 2.0 * np.pi, len(labels))
    X = (radii[labels] + rng.normal(0.0, 0.3, len(labels)))[:, None] * np.c_[np.cos(angles), np.sin(angles)]
    learner = Auto(task="classification")
    for x, y in zip(X, labels, strict=True):
        learner.learn_one(x, int(y))
    assert not learner._prep.ready  # still the warm-up's play
    for x, y in zip(X, labels, strict=True):
        probabilities = learner.predict_proba_dict_one(x)
        assert math.isclose(sum(probabilities.values()), 1.0)
        assert max(probabilities, key=probabilities.__getitem__) == y


def test_the_third_class_round_of_the_warm_up_reads_the_buffered_labels_as_classes() -> None:
    """The buffer holds the two first classes as -1 and +1 until the third class comes: its round's play
    reads them as the classes 0 and 1, not the -1 as the last class (the new one, the label just given).
    On the first class's row again, that class is the most probable, not the new one."""
    X, _ = _blobs(2, seed=13)
    learner = Auto(task="classification")
    learner.learn_one(X[0], "a")
    learner.learn_one(X[1], "b")
    played = learner.learn_proba_one(X[0], "c")
    assert max(played, key=played.__getitem__) == "a"


def _warmed_on_three_clusters(counts: tuple[int, int, int], seed: int = 0) -> Auto:
    """A learner still in its warm-up, told ``counts`` rows of "a", "b" and "c" (one feature; the clusters
    around 0, 10 and 5), in a shuffled order."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(3), counts)
    rng.shuffle(labels)
    X = np.array([0.0, 10.0, 5.0])[labels] + rng.normal(0.0, 1.0, len(labels))
    learner = Auto(task="classification")
    for x, label in zip(X, labels, strict=True):
        learner.learn_one([x], "abc"[label])
    assert not learner._prep.ready
    return learner


def _most_probable(played: kons.Round) -> Any:
    return max(played.distribution or [], key=lambda pair: pair[1])[0]


def test_the_warm_up_names_a_rare_class_its_base_rate_alone_would_hide() -> None:
    """Six rows of "a" and of "b", two of "c" between them: the classes may well be equally frequent
    (their rates are weighed by the probability that they are not), so at 2.25, where the play's most
    probable class is "a" by its larger base rate, the label is "c"; the play itself is unchanged. A
    prediction, the learning round of the same row and a restored copy name the same class."""
    learner = _warmed_on_three_clusters((6, 6, 2))
    predicted = learner.predict_round([2.25])
    assert predicted.predicted == "c" and _most_probable(predicted) == "a"
    copy = kons.load(learner.to_bytes())
    assert copy.predict_round([2.25]).predicted == "c"
    assert learner.learn_round([2.25], "a").predicted == "c"
    assert copy.learn_round([2.25], "a").predicted == "c" and copy.to_bytes() == learner.to_bytes()


def test_the_warm_up_names_the_most_probable_class_when_the_rates_are_unequal() -> None:
    """Twenty rows of "a", two of "b" and of "c": the rates are surely unequal, and the label is the
    play's most probable class wherever the row lies."""
    learner = _warmed_on_three_clusters((20, 2, 2))
    for x in np.linspace(0.0, 10.0, 41):
        predicted = learner.predict_round([x])
        assert predicted.predicted == _most_probable(predicted)


def test_the_probability_that_class_rates_are_unequal() -> None:
    """Krichevsky-Trofimov's marginal likelihood against equal rates', at even odds: two classes seen once
    each, 1/2 * 1/4 = 1/8 against 1/4; equal counts make it smaller as they grow, one class's dominance
    brings it to 1."""
    assert math.isclose(_unequal_rates_probability(np.array([1, 1])), 1.0 / 3.0)
    assert _unequal_rates_probability(np.array([8, 8, 8])) < _unequal_rates_probability(np.array([2, 2, 2]))
    assert _unequal_rates_probability(np.array([20, 2, 2])) > 0.999


def test_a_regression_learner_has_no_classes() -> None:
    learner = Auto()
    assert learner.classes == []
    with pytest.raises(kons.InvalidParameterError):
        learner.predict_proba_dict_one([1.0])


def test_round_losses_of_a_played_distribution() -> None:
    played = {"a": 0.2, 7: 0.5, True: 0.3}
    assert math.isclose(log_loss(played, 7), -math.log(0.5)) and top_label(played) == 7
    assert math.isclose(log_loss(played, "never seen"), -math.log(1e-15))


def test_the_binary_learner_refuses_a_third_class_naming_auto() -> None:
    learner = kons.learner_from_params("ons", {"loss": "logistic"})
    learner.learn_one([1.0, 2.0], 1)
    with pytest.raises(kons.InvalidInputError, match="auto"):
        learner.learn_one([1.0, 2.0], 2)


def test_records_with_categories_and_gaps_learn_many_classes_and_restore_bit_identically() -> None:
    rng = np.random.default_rng(14)
    cities, animals = ["Paris", "Lyon", "Nice"], ["cat", "dog", "bird"]
    rows: list[tuple[dict[str, object], str]] = []
    for t in range(240):
        c = int(rng.integers(3))
        x: dict[str, object] = {"age": 30.0 + 10.0 * c + rng.normal(), "city": cities[c]}
        if t > 100 and rng.random() < 0.2:
            x["income"] = None
        if t > 150:
            x["late"] = float(c)  # a feature first seen at round 151
        rows.append((x, animals[c]))
    learner = Auto(task="classification")
    hits = [top_label(learner.learn_proba_one(x, y)) == y for x, y in rows[:160]]
    restored = kons.load(learner.to_bytes())
    for x, y in rows[160:]:
        assert learner.learn_proba_one(x, y) == restored.learn_proba_one(x, y)
    assert learner.to_bytes() == restored.to_bytes() and sorted(learner.classes) == sorted(animals)
    assert np.mean(hits[60:]) > 0.8


def test_the_warm_up_s_within_class_deviations_are_the_pooled_ones_shrunk_to_one() -> None:
    rng = np.random.default_rng(3)
    labels = [0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 2, 2]
    # the first feature parts the classes and barely spreads within them, the second only spreads within them
    Z = np.column_stack([np.array(labels) * 2.0 + 0.01 * rng.normal(size=12), 1.5 * rng.normal(size=12)])
    counts = np.bincount(labels, minlength=4).astype(float)  # (a fourth class not buffered yet)
    features = 2.0
    deviations = _within_class_deviations(Z, labels, counts, features)
    # slow reference: each class's mean, the squares about it summed over the classes, n - classes degrees
    for j in range(2):
        squares = sum((Z[i, j] - np.mean([Z[k, j] for k in range(12) if labels[k] == labels[i]])) ** 2
                      for i in range(12))
        expected = math.sqrt((squares + features) / (12 - 3 + features))
        assert math.isclose(deviations[j], expected, rel_tol=1e-12)
    assert deviations[0] < 0.5 < 1.0 < deviations[1]  # the parting feature then counts for more
