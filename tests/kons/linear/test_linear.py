"""The linear learners (ONS, FD-SON, RP-SON, Oja-SON, AdaGrad, OGD) against explicit references."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pytest
import scipy.sparse

import kons
from kons import FDSON, KONS, OGD, ONS, RPSON, AdaGrad, OjaSON, SparseVector
from kons.kernels import Linear
from tests import linear_reference as ref
from tests.streams import load_stream

#: The dict path preprocesses by default (kons.preprocessing); these tests check the paper-exact learners.
EXACT = {"preprocess": False}
LINEAR = ["ons", "fd_son", "rp_son", "oja_son", "adagrad", "ogd"]
SKETCHED = [FDSON, RPSON, OjaSON]
TIGHT = 1e-9


def _stream(
    n: int = 200, d: int = 6, *, seed: int = 0, density: float = 1.0, scale: float | np.ndarray = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gaussian features (``1 - density`` of them zeroed), binary labels, a clipped regression target."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * scale
    if density < 1.0:
        X *= rng.random((n, d)) < density
    w = rng.normal(size=d)
    return X, np.sign(X @ w + 0.3 * rng.normal(size=n)), np.clip(X @ w / np.sqrt(d), -1.5, 1.5)


def _sparse_rows(X: np.ndarray) -> list[SparseVector]:
    return [SparseVector.from_dense(x) for x in X]


# ----------------------------------------------------------------- exactness
@pytest.mark.parametrize("loss", ["squared", "logistic", "squared_hinge"])
def test_ons_equals_kons_with_the_linear_kernel(loss: str) -> None:
    X, yb, yr = _stream(250, 7, seed=1, scale=2.0)
    y = yr if loss == "squared" else yb
    params: dict[str, Any] = {"loss": loss, "alpha": 0.5, "C": 1.5}
    ons, kons_ = ONS(**params), KONS(kernel=Linear(), **params)
    played = ons.learn_many(X, y)
    assert np.max(np.abs(played - kons_.learn_many(X, y))) < TIGHT
    assert np.max(np.abs(ons.predict_many(X[:30]) - kons_.predict_many(X[:30]))) < TIGHT
    a, b = ons.stats(), kons_.stats()
    assert abs(a["effective_dimension"] - b["effective_dimension"]) < 1e-9 * b["effective_dimension"]
    assert abs(a["cumulative_loss"] - b["cumulative_loss"]) < 1e-9 * b["cumulative_loss"]
    assert np.max(np.abs(played - ref.son(X, y, ref.FullSketch(7), loss=loss, alpha=0.5, C=1.5))) < TIGHT


@pytest.mark.parametrize("m", [7, 8, 30])
def test_fd_son_with_a_sketch_larger_than_d_is_ons(m: int) -> None:
    X, y, _ = _stream(300, 6, seed=2)
    fd = FDSON(sketch_size=m, alpha=2.0)
    played = fd.learn_many(X, y)
    assert np.max(np.abs(played - ONS(alpha=2.0).learn_many(X, y))) < TIGHT
    assert fd.stats()["rebases"] + fd.stats()["direct_epochs"] >= 1  # both the sparse and direct epochs ran


@pytest.mark.parametrize("name", ["breast-cancer", "diabetes"])
def test_fd_son_with_a_sketch_larger_than_d_is_ons_on_real_data(name: str) -> None:
    data = load_stream(name)
    d = data.X.shape[1]
    expected = ONS(alpha=1.0).learn_many(data.X, data.y)
    for m in (d + 1, 2 * d):
        fd = FDSON(sketch_size=m, alpha=1.0)
        assert np.max(np.abs(fd.learn_many(data.X, data.y) - expected)) < TIGHT
        assert fd.stats()["rebases"] == 0 and fd.stats()["direct_epochs"] == 1


@pytest.mark.parametrize("density", [1.0, 0.3])
@pytest.mark.parametrize("m", [0, 1, 2, 4, 6, 9])
def test_fd_son_matches_frequent_directions_reference(m: int, density: float) -> None:
    X, y, _ = _stream(240, 6, seed=3, density=density)
    fd = FDSON(sketch_size=m, alpha=2.0)
    played = fd.learn_many(_sparse_rows(X) if density < 1 else X, y)
    assert np.max(np.abs(played - ref.son(X, y, ref.FrequentDirections(m, 6), alpha=2.0))) < 1e-8


@pytest.mark.parametrize("density", [1.0, 0.3])
@pytest.mark.parametrize("m", [1, 3, 6, 9])
def test_rp_son_matches_random_projection_reference(m: int, density: float) -> None:
    X, _, y = _stream(200, 6, seed=4, density=density)
    rp = RPSON(sketch_size=m, alpha=2.0, C=1.5, seed=7)
    played = rp.learn_many(_sparse_rows(X) if density < 1 else X, y)
    expected = ref.son(X, y, ref.RandomProjection(m, 6, seed=7), alpha=2.0, C=1.5)
    assert np.max(np.abs(played - expected)) < 1e-8
    assert rp.sketch_drift() < 1e-10


@pytest.mark.parametrize("density", [1.0, 0.3])
@pytest.mark.parametrize("m", [1, 3, 6, 9])
def test_oja_son_matches_oja_reference(m: int, density: float) -> None:
    X, y, _ = _stream(200, 6, seed=5, density=density)
    oja = OjaSON(sketch_size=m, alpha=2.0, seed=3, dim=6)
    V0 = oja.directions()
    assert np.allclose(V0 @ V0.T, np.eye(min(m, 6)), atol=1e-12)
    played = oja.learn_many(_sparse_rows(X) if density < 1 else X, y)
    assert np.max(np.abs(played - ref.son(X, y, ref.Oja(V0), alpha=2.0))) < 1e-8
    V = oja.directions()
    assert np.allclose(V @ V.T, np.eye(min(m, 6)), atol=1e-9)  # the factored V = FZ stays orthonormal


def test_oja_son_tracks_the_top_eigenvalues() -> None:
    rng = np.random.default_rng(6)
    X = rng.normal(size=(3000, 8)) * np.r_[6.0, 3.0, np.ones(6)]
    y = np.sign(X @ rng.normal(size=8))
    oja = OjaSON(sketch_size=2, alpha=1.0, eta=1.0, loss="squared", C=1.0)
    oja.learn_many(X, y)
    assert oja.stats()["rebases"] >= 1
    # Oja's directions align with the top two coordinates, where the gradients have the most energy.
    V = oja.directions()
    assert np.abs(V[:, :2]).sum(axis=1).min() > 0.95


@pytest.mark.parametrize("cls", SKETCHED)
def test_sketch_size_zero_is_ogd_with_step_one_over_alpha(cls: type) -> None:
    X, y, _ = _stream(150, 5, seed=8)
    played = cls(sketch_size=0, alpha=4.0).learn_many(X, y)
    expected = OGD(eta=0.25, schedule="constant").learn_many(X, y)
    assert np.max(np.abs(played - expected)) < 1e-12


@pytest.mark.parametrize("schedule", ["constant", "inverse_sqrt"])
def test_ogd_matches_reference(schedule: str) -> None:
    X, _, y = _stream(200, 5, seed=9, scale=2.0)
    played = OGD(eta=0.3, schedule=schedule, C=1.2).learn_many(X, y)
    expected = ref.ogd(X, y, eta=0.3, schedule=schedule, loss="squared", C=1.2)
    assert np.max(np.abs(played - expected)) < 1e-12


def test_adagrad_matches_reference() -> None:
    X, y, _ = _stream(200, 5, seed=10, density=0.5, scale=np.array([1, 10, 0.1, 1, 3]))
    played = AdaGrad(eta=0.7, delta=1e-3, loss="logistic", C=2.0).learn_many(X, y)
    expected = ref.adagrad(X, y, eta=0.7, delta=1e-3, loss="logistic", C=2.0)
    assert np.max(np.abs(played - expected)) < 1e-12


@pytest.mark.parametrize("name", ["ons", "fd_son", "rp_son", "oja_son"])
def test_diagonal_adaptation_feeds_rescaled_examples(name: str) -> None:
    X, y, _ = _stream(150, 5, seed=11, scale=np.array([1, 10, 0.1, 1, 3]))
    params = {"alpha": 2.0, **({} if name == "ons" else {"sketch_size": 2})}
    adapted = kons.learner_from_params(name, {**params, "diagonal": True, **EXACT})
    plain = kons.learner_from_params(name, {**params, **EXACT})
    D = np.full(5, 0.1)  # D_1 = 0.1 I, then D += diag(g g') with g on the raw features (Sec. 5.2)
    loss = kons.losses.get_loss("squared")
    for x, label in zip(X, y, strict=True):
        a = adapted.learn_one(x, label)
        b = plain.learn_one(x / np.sqrt(D), label)
        assert abs(a - b) < 1e-12
        D += (loss.derivative(b, label) * x) ** 2


# ----------------------------------------------------------------- sparse input
@pytest.mark.parametrize("name", LINEAR)
def test_sparse_and_dense_inputs_give_the_same_predictions(name: str) -> None:
    X, y, _ = _stream(300, 12, seed=12, density=0.25)
    params = {"alpha": 2.0, "sketch_size": 4} if name not in ("ons", "adagrad", "ogd") else {}
    if name == "ons":
        params = {"alpha": 2.0}
    dense = kons.learner_from_params(name, {**params, "dim": 12, **EXACT})
    sparse = kons.learner_from_params(name, {**params, "dim": 12, **EXACT})
    csr = kons.learner_from_params(name, {**params, "dim": 12, **EXACT})
    as_dicts = [{"indices": v.indices.tolist(), "values": v.values.tolist()} for v in _sparse_rows(X)]
    a = dense.learn_many(X[:200], y[:200])
    b = sparse.learn_many(as_dicts[:200], y[:200])
    c = csr.learn_many(scipy.sparse.csr_matrix(X[:200]), y[:200])
    assert np.max(np.abs(a - b)) < 1e-10 and np.max(np.abs(a - c)) < 1e-10
    # Mixed: the same learner may get dense and sparse examples.
    probe = X[200:]
    assert np.max(np.abs(dense.predict_many(probe) - sparse.predict_many(as_dicts[200:]))) < 1e-10
    for i in range(200, 300):
        x = X[i] if i % 2 else as_dicts[i]
        assert abs(dense.learn_one(X[i], y[i]) - sparse.learn_one(x, y[i])) < 1e-10


@pytest.mark.parametrize(
    ("x", "message"),
    [
        ({"indices": [0, 0], "values": [1.0, 2.0]}, "repeat"),
        ({"indices": [0, 9], "values": [1.0, 2.0]}, r"\[0, 5\)"),
        ({"indices": [-1], "values": [1.0]}, r"\[0, 5\)"),
        ({"indices": [0, 1], "values": [1.0]}, "differ in length"),
        ({"indices": [0], "values": [float("nan")]}, "non-finite"),
        ({"indices": [0.5], "values": [1.0]}, "integers"),
        ({"indices": [0], "values": [1.0], "dim": 7}, "dimension 5"),
        ({"indices": [0]}, "keys"),
        ({"indices": [0], "values": [1.0], "extra": 1}, "keys"),
    ],
)
def test_invalid_sparse_examples_are_rejected_without_changing_the_learner(
    x: dict[str, Any], message: str
) -> None:
    learner = FDSON(sketch_size=2, dim=5)
    learner.learn_one(np.ones(5), 1.0)
    before = learner.to_bytes()
    with pytest.raises(kons.InvalidInputError, match=message):
        learner.learn_one(x, 1.0)
    assert learner.to_bytes() == before


def test_sparse_example_needs_a_known_dimension() -> None:
    learner = OjaSON(sketch_size=2)
    with pytest.raises(kons.InvalidInputError, match="dimension"):
        learner.learn_one({"indices": [1], "values": [1.0]}, 1.0)
    learner.learn_one({"indices": [1], "values": [1.0], "dim": 4}, 1.0)
    assert learner.stats()["rounds"] == 1 and learner.predict_one(np.ones(4)) != 0.0


def test_sparse_vector_is_canonical() -> None:
    v = SparseVector(np.array([5, 1, 3]), np.array([0.5, 1.0, -2.0]), 6)
    assert v.indices.tolist() == [1, 3, 5] and v.values.tolist() == [1.0, -2.0, 0.5]
    assert len(v) == 6 and v.nnz == 3
    assert np.array_equal(SparseVector.from_dense(v.to_dense()).indices, v.indices)
    with pytest.raises(ValueError):
        v.values[0] = 3.0  # read-only: validated once, never changed behind the learner's back


def test_kernel_learners_reject_sparse_input() -> None:
    with pytest.raises(kons.InvalidInputError):
        KONS().learn_one({"indices": [0], "values": [1.0]}, 1.0)


@pytest.mark.parametrize(
    ("name", "params"),
    [("fd_son", {"sketch_size": 8}), ("oja_son", {"sketch_size": 8}), ("rp_son", {"sketch_size": 8}),
     ("adagrad", {}), ("ogd", {})],
)
def test_sparse_round_time_does_not_grow_with_the_dimension(name: str, params: dict[str, Any]) -> None:
    rng = np.random.default_rng(13)
    n, s, used = 400, 12, 150
    index = [np.sort(rng.choice(used, s, replace=False)) for _ in range(n)]
    values = [rng.normal(size=s) for _ in range(n)]
    y = np.sign(rng.normal(size=n))
    dims = (1_000, 100_000)
    streams = {d: [SparseVector(i * (d // used), v, d) for i, v in zip(index, values, strict=True)]
               for d in dims}  # the same stream, its features scattered over d coordinates
    learners = {d: kons.learner_from_params(name, {**params, "dim": d, **({"alpha": 4.0} if params else {})})
                for d in dims}
    times: dict[int, list[float]] = {d: [] for d in dims}
    for t in range(n):  # interleaved, so that both see the same load on a shared machine
        for d in dims:
            start = time.perf_counter()
            learners[d].learn_one(streams[d][t], y[t])
            times[d].append(time.perf_counter() - start)
    small, large = (float(np.median(times[d][20:])) for d in dims)
    assert large < 3.0 * small, (small, large)
    if name != "oja_son":  # Oja starts from random directions over all d coordinates
        a, b = (learners[d].predict_many(streams[d][:50]) for d in dims)
        assert np.max(np.abs(a - b)) < 1e-9


# ----------------------------------------------------------------- persistence and protocol
def _for_persistence(name: str, diagonal: bool) -> kons.Learner:
    params: dict[str, Any] = {"ons": {"alpha": 2.0}, "adagrad": {"eta": 0.5}, "ogd": {"eta": 0.3}}.get(
        name, {"alpha": 2.0, "sketch_size": 3}
    )
    if diagonal:
        params["diagonal"] = True
    return kons.learner_from_params(name, {**params, "loss": "logistic", "C": 2.0})


@pytest.mark.parametrize("diagonal", [False, True])
@pytest.mark.parametrize("name", LINEAR)
def test_save_and_restore_continue_bit_identically(name: str, diagonal: bool) -> None:
    if diagonal and name in ("adagrad", "ogd"):
        pytest.skip("no diagonal option")
    X, y, _ = _stream(160, 9, seed=14, density=0.5, scale=3.0)
    rows = [x if i % 3 else SparseVector.from_dense(x) for i, x in enumerate(X)]
    for cut in (0, 70, 71, 95):  # before learning, mid-epoch for FD-SON, after RP draws and Oja rebases
        original = _for_persistence(name, diagonal)
        original.learn_many(rows[:cut], y[:cut])
        blob = original.to_bytes()
        restored = kons.load(blob)
        assert type(restored) is type(original) and restored.to_bytes() == blob
        rest = original.learn_many(rows[cut:], y[cut:])
        assert np.array_equal(rest, restored.learn_many(rows[cut:], y[cut:]))
        assert original.to_bytes() == restored.to_bytes()
        assert original.stats() == restored.stats()


@pytest.mark.parametrize("name", LINEAR)
def test_learners_are_built_from_json_params(name: str) -> None:
    cls = kons.LEARNERS[name]
    params = json.loads(json.dumps({"loss": "logistic", "C": 2.0, "dim": 4}))
    learner = kons.learner_from_params(name, {**params, **EXACT})
    assert type(learner) is cls
    full = learner.get_params()
    assert json.loads(json.dumps(full)) == full and {**full, **params} == full
    assert kons.learner_from_params(name, {**full, **EXACT}).get_params() == full
    bad: list[dict[str, Any]] = [{"unknown": 1}, {"C": 0.0}, {"loss": "absolute"}, {"dim": 0}]
    if "sketch_size" in full:
        bad += [{"sketch_size": -1}, {"sketch_size": 2.5}, {"sketch_size": "3"}]
    if "diagonal" in full:
        bad += [{"diagonal": "yes"}, {"diagonal": 1}]
    if "alpha" in full:
        bad += [{"alpha": 0.0}, {"alpha": float("inf")}]
    for extra in bad:
        with pytest.raises(kons.InvalidParameterError):
            kons.learner_from_params(name, {**params, **extra})


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", LINEAR)
def test_a_rejected_round_leaves_the_learner_unchanged(name: str) -> None:
    extra = {"eta": 1.0, "schedule": "constant"} if name == "ogd" else {}
    learner = kons.learner_from_params(name, {"loss": "squared", "C": 2.0, **extra})
    X, y, _ = _stream(30, 4, seed=15)
    learner.learn_many(X, y)
    before = learner.to_bytes()
    rejected = 0
    for x in (np.full(4, 1e308), np.r_[1e308, -1e308, 1e308, -1e308], np.full(4, -1e308)):
        learner = kons.load(before)
        try:
            learner.learn_one(x, 1.0)  # |x|^2, the prediction or the step overflows
        except (kons.NumericalError, kons.InvalidInputError):
            rejected += 1
            assert learner.to_bytes() == before
            assert np.array_equal(learner.learn_many(X, y), kons.load(before).learn_many(X, y))
    assert rejected >= 1


def test_stats_report_the_sketch() -> None:
    X, y, _ = _stream(100, 5, seed=16)
    assert FDSON(sketch_size=2).stats()["rounds"] == 0
    fd, oja = FDSON(sketch_size=2, alpha=2.0), OjaSON(sketch_size=2, alpha=2.0)
    fd.learn_many(X, y)
    oja.learn_many(X, y)
    assert {"rebases", "direct_epochs", "buffered_rows", "eta"} <= set(fd.stats())
    assert oja.stats()["top_eigenvalue"] == pytest.approx(oja.eigenvalues().max())
    assert 0 < fd.stats()["effective_dimension"] < 100


def test_rp_son_rejected_round_after_the_draw_restores_the_generator() -> None:
    """RP-SON draws its projection before it knows the round overflows; a rejection must undo the draw."""
    learner = RPSON(sketch_size=3, seed=0)
    rng = np.random.default_rng(0)
    for _ in range(5):
        learner.learn_one(rng.normal(size=4), 1.0)
    before = learner.to_bytes()
    draws_before = learner._generator.bit_generator.state
    with pytest.raises(kons.NumericalError):
        learner.learn_one([1e100, 0.0, 0.0, 0.0], 1.0)  # g_hat != 0: the projection is drawn first
    assert learner._generator.bit_generator.state == draws_before
    assert learner.to_bytes() == before
