"""NystromKONS against explicit Online Newton Steps on Nystrom features written out in the test.

The references build the features from scratch every round (a fresh Cholesky of the dictionary's Gram
matrix via ``scipy.linalg``, a triangular solve) and keep the ONS matrix itself, solved or inverted
explicitly; none of the package's numerics (kernels, packed factors, Sherman-Morrison) is used.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import pytest
from scipy.linalg import cholesky, solve_triangular

import kons
from kons import NystromKONS
from kons._numerics import SymmetricMatrix
from tests.reference import Trace, explicit_ons, loss_derivative, rbf_gram, single_threaded, unclipped_run
from tests.streams import load_stream

GAMMA = 0.5
PARAMS: dict[str, Any] = {"kernel": {"name": "rbf", "gamma": GAMMA}, "loss": "squared", "alpha": 1.0,
                          "eta": 0.1, "C": 2.0, "seed": 5}
TOL = 1e-9


@functools.cache
def _stream(n: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """cadata, z-scored on the prefix (the test only needs a well-scaled real stream)."""
    data = load_stream("cadata", n)
    X = (data.X - data.X.mean(0)) / data.X.std(0)
    y = (data.y - data.y.mean()) / data.y.std()
    return X, y


class ForcedJoins(NystromKONS):
    """NystromKONS whose KORS coin is answered from ``joins``: round ``t`` joins iff ``t in joins``.

    ``coin_rounds`` records the rounds that drew a coin (the rounds that consulted KORS).
    """

    joins: frozenset[int]
    coin_rounds: list[int]

    def _uniform(self) -> float:
        self.coin_rounds.append(self._rounds)
        return -1.0 if self._rounds in self.joins else 2.0


def _forced(joins: Sequence[int], **overrides: Any) -> ForcedJoins:
    learner = ForcedJoins(**{**PARAMS, **overrides})
    learner.joins = frozenset(joins)
    learner.coin_rounds = []
    return learner


def _nystrom_features(members: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Rows :math:`L^{-1} k_D(x)` with a fresh Cholesky factor of :math:`K_{DD}`."""
    gram = rbf_gram(GAMMA)
    L = cholesky(gram(members, members), lower=True)
    features: np.ndarray = solve_triangular(L, gram(members, X), lower=True).T
    return features


@single_threaded
def padded_ons(X: np.ndarray, Y: np.ndarray, joins: Sequence[int], *, alpha: float, eta: float,
               C: float) -> Trace:
    """ONS with the projection on the embedding of the dictionary of each round's time.

    A round in ``joins`` first adds its point to the dictionary; the weights get a 0 and the matrix
    :math:`A` a new row and column ``[0, ..., 0, alpha]``. :math:`A` is inverted explicitly every round.
    """
    members: list[int] = []
    A = np.zeros((0, 0))
    u = np.zeros(0)
    rows = []
    for t in range(len(Y)):
        phi = _nystrom_features(X[members], X[t : t + 1])[0] if members else np.zeros(0)
        y_bar = float(phi @ u)
        y_hat = min(max(y_bar, -C), C)
        excess = y_bar - y_hat
        gdot = loss_derivative("squared", y_hat, float(Y[t]))
        if t in joins:
            members.append(t)
            A = np.block([[A, np.zeros((len(u), 1))], [np.zeros((1, len(u))), np.full((1, 1), alpha)]])
            u = np.append(u, 0.0)
            phi = _nystrom_features(X[members], X[t : t + 1])[0]
        A_inv = np.linalg.inv(A)
        s = float(phi @ A_inv @ phi)
        w = u - excess / s * (A_inv @ phi) if excess != 0.0 else u
        A = A + eta * gdot**2 * np.outer(phi, phi)
        u = w - np.linalg.inv(A) @ (gdot * phi)
        rows.append((y_bar, y_hat, gdot, excess, s))
    return Trace(*np.array(rows, dtype=np.float64).reshape(-1, 5).T)


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.max(np.abs(a - b)) <= TOL * max(1.0, float(np.max(np.abs(b)))))


def test_frozen_dictionary_is_ons_on_nystrom_features() -> None:
    """First ``m`` rounds join, then the dictionary is full: ONS on the final features from round 1.

    A member's features have zeros past its own coordinate (``L`` is triangular), so ONS on the final
    embedding from the start, with :math:`A_0 = \\alpha I`, is the same run as growing it; the reference
    needs nothing but the frozen features.
    """
    X, y = _stream(300)
    m = 12
    learner = _forced(range(m), max_dictionary=m)
    y_bar, played = unclipped_run(learner, X, y)
    assert learner.stats()["dictionary_size"] == m and learner.stats()["dictionary_full"]
    assert learner.coin_rounds == list(range(m))  # a full dictionary never consults KORS again
    Phi = _nystrom_features(X[:m], X)
    reference = explicit_ons(Phi, y, loss="squared", alpha=1.0, eta=0.1, C=2.0)
    assert _close(y_bar, reference.y_bar) and _close(played, reference.y_hat)
    assert np.abs(reference.y_bar).max() > 2.0  # the projection step was exercised (C = 2)


def test_growing_dictionary_equals_padded_ons() -> None:
    """Members joining all along the stream (forced): each growth pads the Newton state."""
    X, y = _stream(400)
    joins = [0, 1, 5, 17, 40, 41, 90, 150, 151, 230, 333]
    learner = _forced(joins)
    y_bar, played = unclipped_run(learner, X, y)
    assert learner.stats()["dictionary_size"] == len(joins)
    reference = padded_ons(X, y, joins, alpha=1.0, eta=0.1, C=2.0)
    assert _close(y_bar, reference.y_bar) and _close(played, reference.y_hat)


def test_kors_dictionary_equals_padded_ons_and_freezes() -> None:
    """KORS's own coins; the growth rounds read from the run, then the rest is checked independently."""
    X, y = _stream(400)
    learner = NystromKONS(**PARAMS, max_dictionary=25)
    sizes = []
    y_bar = np.empty(len(y))
    for t in range(len(y)):
        y_bar[t] = learner._predict(X[t]) if t else 0.0
        learner.learn_one(X[t], y[t])
        sizes.append(learner.stats()["dictionary_size"])
    joins = [t for t in range(len(y)) if sizes[t] > (sizes[t - 1] if t else 0)]
    assert len(joins) == 25 and joins[-1] < len(y) - 50  # it filled up, and then ran frozen
    reference = padded_ons(X, y, joins, alpha=1.0, eta=0.1, C=2.0)
    assert _close(y_bar, reference.y_bar)
    assert learner.factor_drift() < 1e-12


def test_seeded_runs_are_identical_and_the_seed_matters() -> None:
    X, y = _stream(300)
    a, b, other = (NystromKONS(**{**PARAMS, "seed": s}) for s in (5, 5, 6))
    assert np.array_equal(a.learn_many(X, y), b.learn_many(X, y))
    assert a.to_bytes() == b.to_bytes()
    other.learn_many(X, y)
    assert other.to_bytes() != a.to_bytes()


@pytest.mark.parametrize("cut", [3, 60, 250])
def test_restore_around_the_freeze_continues_bit_identically(cut: int) -> None:
    X, y = _stream(400)
    learner = NystromKONS(**PARAMS, max_dictionary=25)
    learner.learn_many(X[:cut], y[:cut])
    restored = kons.load(learner.to_bytes())
    assert np.array_equal(learner.learn_many(X[cut:], y[cut:]), restored.learn_many(X[cut:], y[cut:]))
    assert learner.to_bytes() == restored.to_bytes()


def test_state_is_bounded_on_an_adversarial_stream() -> None:
    """Far-apart points and random labels: every point is new to an RBF kernel, KORS keeps adding."""
    rng = np.random.default_rng(0)
    learner = NystromKONS(kernel={"name": "rbf", "gamma": 1.0}, eta=1.0, C=1.0, beta=10.0,
                          max_dictionary=30)
    sizes = []
    for block in range(8):
        X = rng.normal(scale=30.0, size=(500, 4))
        learner.learn_many(X, rng.choice([-1.0, 1.0], size=500))
        sizes.append(len(learner.to_bytes()))
        if block == 0:
            assert learner.stats()["dictionary_full"]
    stats = learner.stats()
    assert stats["rounds"] == 4000 and stats["stored_points"] == stats["dictionary_size"] == 30
    assert max(sizes) - min(sizes) < 100  # only the JSON counters' text length changes


def test_a_repeated_point_joins_once() -> None:
    """A point on the dictionary's span adds no direction: it never joins, whatever KORS says."""
    learner = _forced(range(200), max_dictionary=50)
    x = np.array([0.3, -1.0, 2.0])
    for t in range(200):
        learner.learn_one(x, float(np.sin(t)))
    assert learner.stats()["dictionary_size"] == 1
    assert len(learner.coin_rounds) > 100  # KORS was asked, the span test refused


def test_symmetric_matrix_matches_dense() -> None:
    rng = np.random.default_rng(3)
    B = rng.normal(size=(6, 6))
    S = B @ B.T
    packed = SymmetricMatrix(S[np.tril_indices(6)])
    assert packed.packed.tobytes() == S[np.tril_indices(6)].tobytes() and packed.packed_nbytes == 21 * 8
    x = rng.normal(size=6)
    assert np.allclose(packed.matvec(x), S @ x, rtol=1e-14, atol=1e-13)
    packed.rank_one_update(-0.25, x)  # in place
    assert np.allclose(packed.to_dense(), S - 0.25 * np.outer(x, x), rtol=1e-14, atol=1e-13)
    grown = packed.extended(2.0)
    expected = np.zeros((7, 7))
    expected[:6, :6] = packed.to_dense()
    expected[6, 6] = 2.0
    assert np.array_equal(grown.to_dense(), expected) and packed.size == 6
    assert SymmetricMatrix(grown.packed).packed.tobytes() == grown.packed.tobytes()  # saved, restored


def test_rejected_round_after_the_coin_restores_the_generator() -> None:
    """The coin is drawn before the round is known to overflow; a rejection must undo the draw."""
    X, y = _stream(60)
    learner = NystromKONS(**{**PARAMS, "eta": 1e10})
    learner.learn_many(X[:40], y[:40])
    blob = learner.to_bytes()
    rejected_after_coin = 0
    # A huge label whose loss is finite (below about 1e154): with eta = 1e10 its scaled squared gradient
    # overflows in the Newton step, after KORS's coin.
    for label in np.geomspace(1e140, 1e153, 8):
        trial = cast(NystromKONS, kons.load(blob))
        draws: list[float] = []

        def recorded(draw: Callable[[], float] = trial._uniform, draws: list[float] = draws) -> float:
            draws.append(draw())
            return draws[-1]

        trial._uniform = recorded  # type: ignore[method-assign]  # records the coin
        with np.errstate(over="ignore", invalid="ignore"):
            try:
                trial.learn_one(X[40], label)
                continue  # small enough to be absorbed
            except kons.NumericalError:
                pass
        assert trial.to_bytes() == blob
        rejected_after_coin += bool(draws)
        del trial._uniform
        twin = kons.load(blob)
        assert np.array_equal(trial.learn_many(X[40:], y[40:]), twin.learn_many(X[40:], y[40:]))
        assert trial.to_bytes() == twin.to_bytes()
    assert rejected_after_coin > 0  # the scan did reach the path it is meant to test
