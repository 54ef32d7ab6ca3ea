"""The learner contract, checked for every learner in ``kons.LEARNERS`` (as River's ``checks`` do)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

import kons
from kons.auto.config import RANGE_MARGIN
from kons.base import Learner, learner_from_params
from kons.kernels import Polynomial
from tests.reference import make_learner, stream_for
from tests.streams import load_stream

NAMES = sorted(kons.LEARNERS)
ROUNDS = 40


@functools.cache
def _data() -> tuple[np.ndarray, np.ndarray]:
    data = load_stream("housing", 120)
    return data.X, data.y


def _learned(name: str, rounds: int = ROUNDS, **overrides: Any) -> tuple[Learner, np.ndarray, np.ndarray]:
    learner = make_learner(name, **overrides)
    X, y = stream_for(learner, *_data())
    learner.learn_many(X[:rounds], y[:rounds])
    return learner, X, y


def _accepts(name: str, param: str) -> bool:
    return param in kons.LEARNERS[name]._param_names()


def _raises_kons_value_error(call: Callable[..., object], *args: object) -> None:
    with pytest.raises(kons.KonsError) as info:
        call(*args)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("name", NAMES)
def test_registry_entry(name: str) -> None:
    cls = kons.LEARNERS[name]
    assert cls.name == name and issubclass(cls, Learner)
    # The dict path preprocesses by default; "preprocess": false gives the paper-exact learner.
    exact = {} if cls.preprocesses else {"preprocess": False}
    assert isinstance(learner_from_params(name, exact), cls)


def test_unknown_algorithm_is_rejected() -> None:
    with pytest.raises(kons.InvalidParameterError):
        learner_from_params("no_such_learner", {})


@pytest.mark.parametrize("name", NAMES)
def test_predict_before_learning_is_pure(name: str) -> None:
    learner = make_learner(name)
    before = learner.to_bytes()
    value = learner.predict_one(_data()[0][0])
    assert np.isfinite(value) and abs(value) <= learner.C
    assert learner.to_bytes() == before
    assert learner.stats()["rounds"] == 0


@pytest.mark.parametrize("name", NAMES)
def test_predict_never_mutates_the_learner_or_the_input(name: str) -> None:
    learner, X, y = _learned(name)
    before = learner.to_bytes()
    probe = X[ROUNDS : ROUNDS + 15].copy()
    first = learner.predict_many(probe)
    again = np.array([learner.predict_one(list(x)) for x in probe])
    assert np.array_equal(first, again)
    assert np.all(np.abs(first) <= learner.C)
    assert learner.to_bytes() == before
    assert np.array_equal(probe, X[ROUNDS : ROUNDS + 15])
    x = X[ROUNDS].copy()
    learner.learn_one(x, y[ROUNDS])
    assert np.array_equal(x, X[ROUNDS])  # learn_one does not modify its input either
    assert learner.to_bytes() != before


def _bad_inputs(dim: int) -> list[object]:
    ok = np.zeros(dim)
    nan, inf = ok.copy(), ok.copy()
    nan[1], inf[2] = np.nan, -np.inf
    return [
        ok[:-1],  # wrong dimension
        np.zeros(dim + 1),
        nan,
        inf,
        "abc",
        ["a"] * dim,
        [None] * dim,
        np.zeros((1, dim)),  # 2-D
        np.zeros((dim, dim)),
        [],
        np.zeros(0),
        None,
        3.0,  # a scalar is 0-D
        {"a": [1.0]},  # a list inside a record
        {"a": {"b": 1.0}},  # a nested record
        {"a": float("nan")},
    ]


@pytest.mark.parametrize("name", [n for n in NAMES if not kons.LEARNERS[n].accepts_records])
def test_a_paper_exact_learner_refuses_a_record_naming_auto(name: str) -> None:
    learner = make_learner(name)
    fresh = learner.to_bytes()
    with pytest.raises(kons.InvalidInputError, match="'auto'"):
        learner.learn_one({"a": 1.0}, 1.0)
    assert learner.to_bytes() == fresh


BAD_LABELS = [True, False, "1", None, float("nan"), float("inf"), [1.0], np.array([1.0, 2.0])]


@pytest.mark.parametrize("name", NAMES)
def test_invalid_examples_raise_and_change_nothing(name: str) -> None:
    learner, X, y = _learned(name)
    before = learner.to_bytes()
    for bad in _bad_inputs(X.shape[1]):
        _raises_kons_value_error(learner.learn_one, bad, y[0])
        _raises_kons_value_error(learner.predict_one, bad)
        assert learner.to_bytes() == before, bad
    for bad in BAD_LABELS:
        _raises_kons_value_error(learner.learn_one, X[0], bad)
        assert learner.to_bytes() == before, bad


@pytest.mark.parametrize("name", NAMES)
def test_invalid_first_example_leaves_a_fresh_learner(name: str) -> None:
    learner = make_learner(name)
    fresh = learner.to_bytes()
    X, y = stream_for(learner, *_data())
    for bad in _bad_inputs(X.shape[1])[2:]:  # dimension is not fixed yet: skip the wrong-length ones
        _raises_kons_value_error(learner.learn_one, bad, y[0])
        assert learner.to_bytes() == fresh, bad
    for bad in BAD_LABELS:
        _raises_kons_value_error(learner.learn_one, X[0], bad)
    assert learner.to_bytes() == fresh
    # The dimension is fixed by the first valid round, not by a rejected one.
    learner.learn_one(X[0, :5], y[0])
    _raises_kons_value_error(learner.learn_one, X[1], y[1])


@pytest.mark.parametrize("name", [n for n in NAMES if _accepts(n, "loss")])
@pytest.mark.parametrize("loss", ["logistic", "squared_hinge", "hinge"])
def test_binary_losses_reject_other_labels(name: str, loss: str) -> None:
    overrides: dict[str, Any] = {"loss": loss}
    if loss == "hinge" and _accepts(name, "eta"):
        overrides["eta"] = 0.1  # the hinge loss has no curvature, so no default step
    learner, X, _ = _learned(name, **overrides)
    before = learner.to_bytes()
    for label in (0.0, 0.5, 2.0, -3.0, 1.5):
        _raises_kons_value_error(learner.learn_one, X[0], label)
    assert learner.to_bytes() == before
    learner.learn_one(X[0], -1.0)
    learner.learn_one(X[1], 1)  # an int label is fine


@pytest.mark.parametrize("name", NAMES)
def test_clone_is_fresh_and_independent(name: str) -> None:
    learner, X, y = _learned(name)
    clone = learner.clone()
    assert type(clone) is type(learner)
    assert clone.get_params() == learner.get_params()
    assert clone.to_bytes() == make_learner(name).to_bytes()
    before = learner.to_bytes()
    clone.learn_many(X[:ROUNDS], y[:ROUNDS])
    assert learner.to_bytes() == before
    assert clone.to_bytes() == before  # same stream from scratch: the same state
    learner.learn_one(X[ROUNDS], y[ROUNDS])
    assert clone.to_bytes() == before


@pytest.mark.parametrize("name", NAMES)
def test_learn_many_is_a_loop_of_learn_one(name: str) -> None:
    batch, looped = make_learner(name), make_learner(name)
    X, y = stream_for(batch, *_data())
    played = batch.learn_many(X[:60], y[:60])
    one_by_one = np.array([looped.learn_one(x, label) for x, label in zip(X[:60], y[:60], strict=True)])
    assert played.shape == (60,)
    assert np.array_equal(played, one_by_one)
    assert batch.to_bytes() == looped.to_bytes()
    assert batch.stats() == looped.stats()
    with pytest.raises(kons.InvalidParameterError):
        batch.learn_many(X[:3], y[:2])


@pytest.mark.parametrize("name", NAMES)
def test_learn_many_keeps_the_rounds_before_a_bad_row(name: str) -> None:
    learner = make_learner(name)
    X, y = stream_for(learner, *_data())
    rows = X[:6].copy()
    rows[4, 0] = np.nan
    with pytest.raises(kons.InvalidInputError):
        learner.learn_many(rows, y[:6])
    assert learner.stats()["rounds"] == 4


@pytest.mark.parametrize("name", NAMES)
def test_same_parameters_and_stream_give_identical_runs(name: str) -> None:
    first, second = make_learner(name), make_learner(name)
    X, y = stream_for(first, *_data())
    assert np.array_equal(first.learn_many(X, y), second.learn_many(X, y))
    assert first.to_bytes() == second.to_bytes()
    assert first.stats() == second.stats()


@pytest.mark.parametrize("name", NAMES)
def test_params_round_trip_through_json(name: str) -> None:
    learner = _learned(name)[0]
    params = learner.get_params()
    again = type(learner).from_params(json.loads(json.dumps(params)))
    assert again.get_params() == params
    assert again.to_bytes() == make_learner(name).to_bytes()
    exact = {} if type(learner).preprocesses else {"preprocess": False}
    assert learner_from_params(name, {**params, **exact}).get_params() == params
    assert repr(again) == repr(learner)
    with pytest.raises(kons.InvalidParameterError):
        type(learner).from_params({**params, "no_such_parameter": 1})
    with pytest.raises(kons.InvalidParameterError):
        type(learner).from_params([("C", 1.0)])  # type: ignore[arg-type]  # not a dict, on purpose
    with pytest.raises(kons.InvalidParameterError):
        type(learner).from_params({**params, "C": -1.0})


@pytest.mark.parametrize("name", NAMES)
def test_stats_are_counters_of_the_run(name: str) -> None:
    stats = _learned(name)[0].stats()
    assert stats["rounds"] == ROUNDS
    assert 0 <= stats["dictionary_size"] <= stats["stored_points"] <= ROUNDS
    assert stats["cumulative_loss"] >= 0.0 and stats["effective_dimension"] >= 0.0
    json.dumps(stats)


def test_recent_loss_is_a_weighted_average_from_the_first_round() -> None:
    """Recent loss = sum_s w_s loss_s / sum_s w_s with w_s = 0.99**(t - s): no pull towards 0 early on."""
    learner = kons.ONS(dim=3)
    rng = np.random.default_rng(5)
    losses = []
    for _ in range(30):
        x, y = rng.normal(size=3), float(rng.normal() + 5.0)
        before = learner.stats()["cumulative_loss"]
        learner.learn_one(x, y)
        losses.append(learner.stats()["cumulative_loss"] - before)
        weights = 0.99 ** np.arange(len(losses))[::-1]
        assert learner.stats()["recent_loss"] == pytest.approx(weights @ losses / weights.sum(), rel=1e-9)


KERNEL_NAMES = [n for n in NAMES if _accepts(n, "kernel")]
# Finite squared norm (passes input validation), but a cubic Polynomial kernel row overflows on it.
HUGE = 1e150


@pytest.mark.parametrize("name", NAMES)
def test_input_whose_squared_norm_overflows_is_rejected_unchanged(name: str) -> None:
    learner, X, y = _learned(name)
    before = learner.to_bytes()
    with pytest.raises(kons.InvalidInputError, match="squared norm"):
        learner.learn_one(np.full(X.shape[1], 1e200), y[0])
    assert learner.to_bytes() == before


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.filterwarnings("error")  # a numpy RuntimeWarning would reach a service's stderr
def test_overflowing_input_is_an_error_not_a_warning(name: str) -> None:
    learner, X, y = _learned(name)
    with pytest.raises(kons.InvalidInputError, match="squared norm"):
        learner.check_round(np.full(X.shape[1], 1e300), y[0])


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_overflowing_round_is_rejected_unchanged(name: str) -> None:
    """A Polynomial kernel at 1e200 overflows: NumericalError, and the learner is as before."""
    learner, X, y = _learned(name, kernel=Polynomial(degree=3, coef0=1.0, scale=0.1))
    before = learner.to_bytes()
    huge = np.full(X.shape[1], HUGE)
    with np.errstate(over="ignore", invalid="ignore"), pytest.raises(kons.NumericalError):
        learner.learn_one(huge, y[0])
    assert learner.to_bytes() == before
    with np.errstate(over="ignore", invalid="ignore"), pytest.raises(kons.NumericalError):
        learner.predict_one(huge)
    assert learner.to_bytes() == before
    # The learner keeps working on ordinary rounds, exactly as an untouched copy does.
    twin = kons.load(before)
    assert np.array_equal(learner.learn_many(X[ROUNDS:], y[ROUNDS:]), twin.learn_many(X[ROUNDS:], y[ROUNDS:]))


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_overflowing_point_is_never_stored(name: str) -> None:
    """Even as the first round: a point whose own kernel value overflows would poison every later round."""
    learner = make_learner(name, kernel=Polynomial(degree=3, coef0=1.0, scale=0.1))
    X, y = stream_for(learner, *_data())
    fresh = learner.to_bytes()
    with np.errstate(over="ignore", invalid="ignore"), pytest.raises(kons.NumericalError):
        learner.learn_one(np.full(X.shape[1], HUGE), y[0])
    assert learner.to_bytes() == fresh
    played = learner.learn_many(X[:20], y[:20])
    assert np.all(np.isfinite(played))


def _recording(draw: Callable[[], float], draws: list[float]) -> Callable[[], float]:
    """``draw`` that also appends each value to ``draws``."""

    def recorded() -> float:
        draws.append(draw())
        return draws[-1]

    return recorded


def test_rejected_round_after_the_coins_restores_the_generator() -> None:
    """Sketched-KONS draws its coins before it knows the round overflows; a rejection must undo them."""
    learner, X, y = _learned("sketched_kons", kernel=Polynomial(degree=3, coef0=1.0, scale=0.1))
    blob = learner.to_bytes()
    rejected_after_coins = 0
    # Polynomial values near the top of the float range: k(x, x) is finite, later products are not.
    for c in np.geomspace(1e50, 3e51, 60):
        trial = cast(kons.SketchedKONS, kons.load(blob))
        draws: list[float] = []
        trial._uniform = _recording(trial._uniform, draws)  # type: ignore[method-assign]  # records the coins
        with np.errstate(over="ignore", invalid="ignore"):
            try:
                trial.learn_one(np.full(X.shape[1], c), 1.0)
                continue
            except kons.NumericalError:
                pass
        assert trial.to_bytes() == blob
        if draws:
            rejected_after_coins += 1
            del trial._uniform
            twin = kons.load(blob)
            played = trial.learn_many(X[ROUNDS:], y[ROUNDS:])
            assert np.array_equal(played, twin.learn_many(X[ROUNDS:], y[ROUNDS:]))
            assert trial.to_bytes() == twin.to_bytes()
    assert rejected_after_coins > 0  # the scan did reach the path it is meant to test


@pytest.mark.parametrize("name", [n for n in NAMES if not _accepts(n, "kernel")])
def test_extreme_input_without_kernel(name: str) -> None:
    """Linear learners: 1e200 features are either rejected unchanged or leave a learner that works."""
    learner, X, y = _learned(name)
    before = learner.to_bytes()
    try:
        with np.errstate(all="ignore"):
            played = learner.learn_one(np.full(X.shape[1], HUGE), y[0])
    except kons.NumericalError:
        assert learner.to_bytes() == before
        return
    assert np.isfinite(played)
    if isinstance(learner, kons.Auto):
        # auto's regression plays reach past the targets seen, by RANGE_MARGIN times their range on each
        # side (heavy tails: docs/series.md), not to C, the largest target magnitude seen
        seen = np.append(y[:ROUNDS], y[0])
        reach = RANGE_MARGIN * (seen.max() - seen.min())
        assert seen.min() - reach <= played <= seen.max() + reach
    else:
        assert abs(played) <= learner.C
    kons.load(learner.to_bytes())
    for x, label in zip(X[ROUNDS : ROUNDS + 5], y[ROUNDS : ROUNDS + 5], strict=True):
        assert np.isfinite(learner.learn_one(x, label))


def test_the_package_never_imports_the_service() -> None:
    """``import kons`` (every learner module included) pulls in neither the app nor its dependencies."""
    code = (
        "import importlib, pkgutil, sys, kons\n"
        "for m in pkgutil.walk_packages(kons.__path__, 'kons.'):\n"
        "    importlib.import_module(m.name)\n"
        "service = ('app', 'kons_service', 'fastapi', 'redis', 'starlette', 'uvicorn')\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in service)))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=Path(kons.__file__).parent.parent)
    assert result.stdout.strip() == ""


def test_a_learner_missing_a_hook_cannot_be_built() -> None:
    """The hooks are abstract: forgetting one fails at construction, not in the middle of a stream."""

    class NoRestore(Learner):  # _restore is missing
        def __init__(self, *, loss: str = "squared", C: float = 1.0, dim: int | None = None) -> None:
            self._set_params(loss=loss, C=C, dim=dim)
            self._reset()

        def _reset_model(self) -> None:
            self._w = np.zeros(self._dim)

        def _predict(self, x: np.ndarray) -> float:
            return float(self._w @ x)

        def _learn(self, x: np.ndarray, y: float) -> tuple[float, float]:
            return self._clip(self._predict(x)), 0.0

        def _arrays(self) -> dict[str, np.ndarray]:
            return {"w": self._w}

    with pytest.raises(TypeError, match="_restore"):
        NoRestore()  # type: ignore[abstract]  # the missing _restore is what the test is about


@pytest.mark.parametrize("name", sorted(kons.LEARNERS))
def test_every_parameter_has_declared_limits(name: str) -> None:
    cls = kons.LEARNERS[name]
    assert set(cls._param_names()) <= set(cls._parameter_constraints)


def test_kernels_are_immutable() -> None:
    kernel = Polynomial(degree=3)
    with pytest.raises(AttributeError):
        kernel.degree = 4  # type: ignore[misc]
    assert kernel == Polynomial(degree=3) and hash(kernel) == hash(Polynomial(degree=3))
