"""State size without serialising, and bounded growth (``grows``, ``hold_growth``, ``max_growth_nbytes``).

The service budgets learners by :meth:`~kons.Learner.state_nbytes` on every request and, at a budget,
holds a bounded learner's growth; these tests check that the size is counted from the arrays alone, that
it accounts for the whole blob but its JSON headers, that the growth bound is an upper bound (and exact
where every round stores a point), and that held-ness is state: saved, restored and replayed exactly.
"""

from __future__ import annotations

import functools
import json
import struct
from typing import Any

import numpy as np
import pytest

import kons
import kons._state
import kons.auto.experts.newton
import kons.auto.grid
import kons.preprocessing
from kons.base import Learner
from kons.errors import InvalidParameterError
from tests.reference import make_learner, stream_for
from tests.streams import load_stream

PREFIX = struct.Struct("<8sHI")  # magic, format version, header length (documented in kons._state)
DIGEST = 32
LEAVES = sorted(n for n, c in kons.LEARNERS.items() if not c.preprocesses)
#: Every registered learner, every non-preprocessing one behind the default preprocessing, and auto.
KINDS = [*sorted(kons.LEARNERS), *(f"preprocessed:{n}" for n in LEAVES), "auto:classification"]
#: Learners that cannot learn without storing points.
UNHOLDABLE = {"kons", "sketched_kons", "kernel_ogd"}


def _build(kind: str, **params: Any) -> Learner:
    if kind.startswith("preprocessed:"):
        return kons.learner_from_params(kind.split(":")[1], params)
    if kind.startswith("auto:"):
        return kons.Auto(task=kind.split(":")[1], **params)
    return make_learner(kind, **params)


@functools.cache
def _data() -> tuple[np.ndarray, np.ndarray]:
    data = load_stream("housing", 400)
    return data.X, data.y


def _stream(learner: Learner) -> tuple[np.ndarray, np.ndarray]:
    return stream_for(learner, *_data())


@functools.cache
def _learned_blob(kind: str) -> bytes:
    learner = _build(kind)
    X, y = _stream(learner)
    learner.learn_many(X[:300], y[:300])
    return learner.to_bytes()


def _nested(dtype: str, data: bytes) -> bool:
    """Whether an array's bytes are a nested learner's blob (other |u1 arrays hold narrow integers)."""
    return dtype == "|u1" and data.startswith(kons._state.MAGIC)


def _overheads(blob: bytes) -> tuple[int, int]:
    """Bytes of the blob outside its learned arrays (prefix, JSON header, checksum, and the same of
    every learner nested in it), and the number of learners in it."""
    _, _, head_len = PREFIX.unpack_from(blob)
    header = json.loads(blob[PREFIX.size : PREFIX.size + head_len])
    data = blob[PREFIX.size + head_len : -DIGEST]
    overhead, learners = PREFIX.size + head_len + DIGEST, 1
    for spec in header["arrays"]:
        nested = data[spec["offset"] : spec["offset"] + spec["shape"][0]]
        if _nested(spec["dtype"], nested):
            inner, count = _overheads(nested)
            overhead, learners = overhead + inner, learners + count
    return overhead, learners


# ----------------------------------------------------------------- state_nbytes
@pytest.mark.parametrize("kind", KINDS)
def test_state_nbytes_is_the_blob_but_its_headers(kind: str) -> None:
    learner = kons.load(_learned_blob(kind))
    blob = learner.to_bytes()
    overhead, learners = _overheads(blob)
    assert learner.state_nbytes() == len(blob) - overhead > 0
    assert overhead < 1500 * learners  # the headers: well under 1.5 KB per learner in the blob
    if learner.state_nbytes() >= 100_000 * learners:  # arrays dominate: the blob's size within 1%
        assert abs(len(blob) - learner.state_nbytes()) <= 0.01 * len(blob)


@pytest.mark.parametrize("kind", ["auto:classification", "auto:regression", "kons", "preprocessed:kons"])
def test_state_nbytes_is_within_two_percent_of_the_blob_for_large_states(kind: str) -> None:
    learner = _build(kind)
    X, y = _stream(learner)
    learner.learn_many(X, y)  # 400 rounds: the Nystrom bases of auto hold about 100 points each
    assert learner.state_nbytes() > 300_000
    # the headers: about 1% of auto's state, whose dictionaries are saved once each
    assert abs(len(learner.to_bytes()) - learner.state_nbytes()) <= 0.02 * len(learner.to_bytes())


@pytest.mark.parametrize("kind", KINDS)
def test_state_nbytes_encodes_nothing(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    learner = kons.load(_learned_blob(kind))
    expected = learner.state_nbytes()

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("state_nbytes serialised the learner")

    for owner, name in [(Learner, "to_bytes"), (kons._state, "encode"),
                        (kons.auto.experts.newton, "nested_blob"), (kons.preprocessing, "nested_blob")]:
        monkeypatch.setattr(owner, name, refuse)
    assert learner.state_nbytes() == expected
    assert learner.max_growth_nbytes(10) >= 0


def _saved_nbytes(learner: Learner) -> int:
    """The size the slow way: the saved blob's bytes but its headers."""
    blob = learner.to_bytes()
    return len(blob) - _overheads(blob)[0]


def _drifting(n: int, task: str) -> tuple[list[Any], list[Any]]:
    """Raw rows whose target's sign flips halfway (a change ``auto`` declares and restarts on); classes
    appear along the way for a multiclass task; records (a category with new values along the way) for
    the task ``records``."""
    rng = np.random.default_rng(36)
    X = rng.normal(size=(n, 3)) * [1.0, 20.0, 0.1] + [0.0, 300.0, 5.0]
    target = 10.0 * X[:, 0] + 0.5 * (X[:, 1] - 300.0) + rng.normal(size=n)
    target[n // 2 :] *= -1.0
    rows: list[Any] = list(X)
    if task == "records":
        rows = [{"a": x[0], "b": x[1], "kind": f"k{i % (2 + i // 100)}"} for i, x in enumerate(X)]
    if task == "binary":
        return rows, [bool(t > 0) for t in target]
    if task == "multiclass":  # a third class from a quarter of the stream on, a fourth from three quarters
        seen = 2 + (np.arange(n) >= n // 4) + (np.arange(n) >= 3 * n // 4)
        return rows, [f"c{int(k)}" for k in np.digitize(target, [-15.0, 0.0, 15.0]) % seen]
    return rows, list(target + 50.0)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["regression", "binary", "multiclass", "records"])
def test_auto_state_nbytes_is_the_saved_size_after_every_round(task: str) -> None:
    """Through the warm-up, dictionary growth, new classes, a declared change and its restarts, a held
    stretch and reloads, the size counted from shapes is the saved state's after every round."""
    rows, targets = _drifting(1200, task)
    learner = kons.Auto(task="classification" if task in ("binary", "multiclass") else "regression")
    for i, (x, y) in enumerate(zip(rows, targets, strict=True)):
        if learner.input_dim is not None:
            learner.hold_growth(900 <= i < 1000)
        learner.learn_one(x, y)
        if i % 300 == 299:  # as the service loads it: dictionaries restored, a full one's KORS retired
            reloaded = kons.load(learner.to_bytes())
            assert isinstance(reloaded, kons.Auto)
            learner = reloaded
        if task != "records":
            assert learner.state_nbytes() == _saved_nbytes(learner), i
        elif learner._prep.ready:  # the record encoder's size is an estimate (JSON): the learned arrays'
            learned = learner.state_nbytes() - learner._prep.nbytes()
            saved = learner._model.arrays()  # the nested blobs' arrays without their headers, as above
            assert learned == sum(a.nbytes - (_overheads(a.tobytes())[0] if _nested(a.dtype.str, a.tobytes())
                                              else 0) for a in saved.values()), i
    assert learner.changes_detected >= 1  # the restarts were played through


@pytest.mark.parametrize("kind", [k for k in KINDS if not k.startswith("auto:")])
def test_state_nbytes_is_the_saved_size_after_every_round(kind: str) -> None:
    learner = _build(kind)
    X, y = _stream(learner)
    for i, (x, t) in enumerate(zip(X, y, strict=True)):
        learner.learn_one(x, t)
        assert learner.state_nbytes() == _saved_nbytes(learner), i


# ----------------------------------------------------------------- capabilities
def test_capabilities_are_declared() -> None:
    for name in LEAVES:
        cls = kons.LEARNERS[name]
        kernel = cls.uses_kernel
        assert cls.grows is kernel, name  # the kernel learners store points; the linear ones do not
        assert cls.can_hold_growth is (name not in UNHOLDABLE), name
    assert kons.Auto.grows and kons.Auto.can_hold_growth
    for name in LEAVES:
        wrapped = kons.learner_from_params(name, {})
        assert (wrapped.grows, wrapped.can_hold_growth) == (kons.LEARNERS[name].grows,
                                                             kons.LEARNERS[name].can_hold_growth)


@pytest.mark.parametrize("kind", [*sorted(UNHOLDABLE), *(f"preprocessed:{n}" for n in sorted(UNHOLDABLE))])
def test_a_learner_that_learns_by_storing_points_cannot_be_held(kind: str) -> None:
    learner = _build(kind)
    with pytest.raises(InvalidParameterError, match="cannot hold its growth"):
        learner.hold_growth(True)
    learner.hold_growth(False)  # resuming is always possible
    assert not learner.growth_held and learner.stats()["growth_held"] is False


def test_hold_growth_takes_a_bool() -> None:
    with pytest.raises(InvalidParameterError, match="true or false"):
        kons.NystromKONS().hold_growth(1)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", [n for n in LEAVES if not kons.LEARNERS[n].grows])
def test_a_fixed_size_learner_ignores_hold_growth(name: str) -> None:
    learner = make_learner(name, dim=13)
    assert learner.max_growth_nbytes(1000) == 0
    learner.hold_growth(True)
    assert not learner.growth_held and "growth_held" not in learner.stats()
    X, y = _stream(learner)
    size = learner.state_nbytes()
    learner.learn_many(X[:50], y[:50])
    assert learner.state_nbytes() == size


def test_max_growth_nbytes_needs_the_dimension_and_a_count() -> None:
    with pytest.raises(InvalidParameterError, match="input dimension"):
        kons.NystromKONS().max_growth_nbytes(3)
    with pytest.raises(InvalidParameterError, match="rounds"):
        kons.NystromKONS(dim=2).max_growth_nbytes(-1)
    assert kons.KONS(dim=2).max_growth_nbytes(0) == 0


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_a_fresh_auto_bounds_its_growth_before_its_first_row(task: str) -> None:
    # the service asks before the first feedback; a regression grid's linear models play on the feature
    # scaler, which only the first row creates
    learner = kons.Auto(dim=3, task=task)
    assert learner.max_growth_nbytes(50) > 0


# ----------------------------------------------------------------- the bound
GROWING = [k for k in KINDS if k.split(":")[-1] in {"kons", "sketched_kons", "kernel_ogd", "nystrom_kons",
                                                     "classification", "preprocessed"}]


@pytest.mark.parametrize("kind", GROWING)
@pytest.mark.parametrize(("start", "rounds"), [(0, 60), (10, 40), (31, 5), (100, 80)])
def test_max_growth_nbytes_is_an_upper_bound(kind: str, start: int, rounds: int) -> None:
    learner = _build(kind, dim=13)
    X, y = _stream(learner)
    learner.learn_many(X[:start], y[:start])
    before, bound = learner.state_nbytes(), learner.max_growth_nbytes(rounds)
    largest = before
    for x, label in zip(X[start : start + rounds], y[start : start + rounds], strict=True):
        learner.learn_one(x, label)
        largest = max(largest, learner.state_nbytes())
    assert largest - before <= bound


def test_the_bound_is_exact_when_every_round_stores_a_point() -> None:
    """KONS with the squared loss stores every round with a non-zero gradient, each as a dictionary
    member: point (d), squared norm, beta, index, scale, (K beta) entry, whitened entry and a factor
    row as long as the dictionary with it."""
    learner = kons.KONS(dim=13, C=1e6)  # no clipping, a gradient on every round of a noisy target
    X, y = _stream(learner)
    learner.learn_many(X[:20], y[:20])
    j, d, n = 20, 13, 30
    assert learner.max_growth_nbytes(n) == 8 * (n * (d + 6) + sum(j + i for i in range(1, n + 1)))
    before = learner.state_nbytes()
    learner.learn_many(X[20:50], y[20:50])
    assert learner.stats()["dictionary_size"] == 50
    assert learner.state_nbytes() - before == learner.max_growth_nbytes(0) + 8 * (
        n * (d + 6) + sum(j + i for i in range(1, n + 1)))


# ----------------------------------------------------------------- holding
def test_a_held_nystrom_learner_learns_exactly_as_one_whose_dictionary_is_full() -> None:
    """A dictionary bound of m and a hold at the round the dictionary reaches m play the same bits: both
    stop consulting KORS (no coin) and take Newton steps in the same embedding."""
    full = make_learner("nystrom_kons", max_dictionary=12)
    held = make_learner("nystrom_kons", max_dictionary=500)
    X, y = _stream(full)
    for t, (x, label) in enumerate(zip(X, y, strict=True)):
        assert full.learn_one(x, label) == held.learn_one(x, label)
        if held.stats()["dictionary_size"] == 12 and not held.growth_held:
            held.hold_growth(True)
            assert held.max_growth_nbytes(10**6) == 0
            size, at = held.state_nbytes(), t
    assert held.growth_held and held.stats()["dictionary_size"] == 12 and held.state_nbytes() == size
    assert at < len(X) - 100  # the held rounds are most of the stream


@pytest.mark.parametrize("kind", ["nystrom_kons", "preprocessed:nystrom_kons", "auto:classification",
                                  "auto:regression"])
def test_a_held_learner_keeps_learning_at_its_size(kind: str) -> None:
    learner = _build(kind, max_dictionary=500) if kind == "nystrom_kons" else _build(kind)
    X, y = _stream(learner)
    learner.learn_many(X[:100], y[:100])
    learner.hold_growth(True)
    assert learner.stats()["growth_held"] is True and learner.max_growth_nbytes(10**4) == 0
    size, blob = learner.state_nbytes(), learner.to_bytes()
    learner.learn_many(X[100:300], y[100:300])
    assert learner.state_nbytes() == size and learner.to_bytes() != blob
    learner.hold_growth(False)
    learner.learn_many(X[300:], y[300:])
    assert learner.state_nbytes() > size  # resumed: the dictionaries grow again


@pytest.mark.parametrize("kind", ["preprocessed:nystrom_kons", "auto:classification"])
def test_held_during_the_warm_up_builds_held_models(kind: str) -> None:
    learner = _build(kind)
    X, y = _stream(learner)
    learner.learn_many(X[:5], y[:5])
    learner.hold_growth(True)
    learner.learn_many(X[5:40], y[5:40])  # the model is built at row 32
    assert learner.max_growth_nbytes(100) == 0
    size = learner.state_nbytes()
    learner.learn_many(X[40:140], y[40:140])
    assert learner.state_nbytes() == size


@pytest.mark.parametrize("kind", ["nystrom_kons", "preprocessed:nystrom_kons", "auto:classification"])
def test_held_ness_is_state_and_replays_exactly(kind: str) -> None:
    def run(save_at: int | None) -> tuple[list[float], bytes]:
        learner = _build(kind)
        X, y = _stream(learner)
        played = []
        for t, (x, label) in enumerate(zip(X[:260], y[:260], strict=True)):
            if t == 60:
                learner.hold_growth(True)
            if t == 200:
                learner.hold_growth(False)
            if t == save_at:
                blob = learner.to_bytes()
                assert json.loads(blob[PREFIX.size : PREFIX.size + PREFIX.unpack_from(blob)[2]]).get(
                    "growth_held") is (True if 60 <= t < 200 else None)
                learner = kons.load(blob)
                assert learner.growth_held is (60 <= t < 200)
            played.append(learner.learn_one(x, label))
        return played, learner.to_bytes()

    reference = run(None)
    assert run(None) == reference  # deterministic
    assert run(120) == reference  # saved while held
    assert run(230) == reference  # saved after resuming
