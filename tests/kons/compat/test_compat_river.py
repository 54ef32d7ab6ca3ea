"""kons.compat.river: River's own estimator checks for every learner, pipelines, the feature map, state."""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
import pytest
from river import checks, compose, dummy, evaluate, metrics, preprocessing, stats, stream
from river.base.typing import Stream

import kons
from kons.compat.river import DEFAULT_DIM, KonsClassifier, KonsRegressor
from kons.errors import InvalidInputError, InvalidParameterError, NumericalError, StateFormatError
from tests.streams import load_stream

# The learners of the paper (each through the dict path, so with kons.preprocessing's online scaling);
# "preprocessed" and "auto" are built differently (an algorithm to wrap; a task) and tested in
# tests/kons/test_preprocessing.py and tests/kons/test_auto.py.
NAMES = sorted(n for n, cls in kons.LEARNERS.items() if not cls.preprocesses)
REGRESSION = {"C": 100.0}  # River's regression check data (TrumpApproval) has targets around 40
CLASSIFICATION = {"loss": "logistic", "C": 5.0}

# FD-, RP- and Oja-SON used to raise NumericalError on TrumpApproval's raw features (values up to ~1e5);
# through the dict path they now get kons.preprocessing's online scaling and pass River's checks.
RAW_DATA_FAILURES: dict[str, set[str]] = {}


def _river_checks(kind: str) -> list[object]:
    cases: list[object] = []
    for name in NAMES:
        model: KonsRegressor | KonsClassifier
        if kind == "regressor":
            model = KonsRegressor(kons.learner_from_params(name, REGRESSION))
        else:
            model = KonsClassifier(kons.learner_from_params(name, CLASSIFICATION))
        for i, check in enumerate(checks.yield_checks(model)):
            marks = []
            if kind == "regressor" and check.__name__ in RAW_DATA_FAILURES.get(name, ()):
                marks += [
                    pytest.mark.xfail(raises=NumericalError, strict=True,
                                      reason="raw data: the sketch overflows (NumericalError)"),
                    pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning"),  # NumPy's, before the raise
                    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
                ]
            if check.__name__ == "check_bounded_memory_growth":  # 2000 rows each: most of the suite's time
                marks.append(pytest.mark.slow)
            cases.append(pytest.param(model, check, id=f"{name}-{i}-{check.__name__}", marks=marks))
    return cases


def _default_checks() -> list[object]:
    """River's checks of the adapters with no learner: the self-tuning ``auto`` (multi-class)."""
    cases: list[object] = []
    for model in (KonsRegressor(), KonsClassifier()):
        for i, check in enumerate(checks.yield_checks(model)):
            marks = [pytest.mark.slow] if check.__name__ == "check_bounded_memory_growth" else []
            cases.append(pytest.param(model, check, id=f"{type(model).__name__}-auto-{i}-{check.__name__}",
                                      marks=marks))
    return cases


@pytest.mark.parametrize(("model", "check"), _default_checks())
def test_river_checks_of_the_default_auto_learners(model: KonsRegressor | KonsClassifier,
                                                   check: Callable[[Any], object]) -> None:
    check(model.clone())


def test_the_default_classifier_learns_many_classes_of_any_kind() -> None:
    model = KonsClassifier()
    assert isinstance(model.fitted_learner, kons.Auto) and model._multiclass
    assert model.predict_one({"a": 1.0}) is None and model.predict_proba_one({"a": 1.0}) == {}
    labels = ["red", 3, True, "blue"]
    rng = np.random.default_rng(0)
    hits = []
    for _ in range(400):
        c = int(rng.integers(4))
        x: dict[Hashable, Any] = {"a": c + 0.3 * rng.normal(), "b": 100.0 * (c % 2) + rng.normal(),
                                  "c": rng.normal()}
        hits.append(model.predict_one(x) == labels[c])
        model.learn_one(x, labels[c])
    proba = model.predict_proba_one({"a": 2.0, "b": 0.0, "c": 0.0})
    assert set(proba) == set(labels) and abs(sum(proba.values()) - 1.0) < 1e-12
    assert np.mean(hits[200:]) > 0.9
    restored = KonsClassifier.from_bytes(model.to_bytes())
    assert restored.predict_proba_one({"a": 2.0, "b": 0.0, "c": 0.0}) == proba


@pytest.mark.parametrize(("model", "check"), _river_checks("regressor"))
def test_river_regressor_checks(model: KonsRegressor, check: Callable[[KonsRegressor], object]) -> None:
    check(model.clone())


@pytest.mark.parametrize(("model", "check"), _river_checks("classifier"))
def test_river_classifier_checks(model: KonsClassifier, check: Callable[[KonsClassifier], object]) -> None:
    check(model.clone())


def _housing_stream(n: int | None = None) -> Stream:
    data = load_stream("housing", n)
    return stream.iter_array(data.X, data.y, feature_names=[f"x{i}" for i in range(data.X.shape[1])])


def _mae() -> metrics.MAE:
    return metrics.MAE()  # type: ignore[no-untyped-call]  # River's MAE has no annotations


def _assert_beats_the_mean(model: object, make_stream: Callable[[], Stream]) -> None:
    """River's progressive validation (test, then train) MAE: below 0.9 times the running mean's."""
    mae = evaluate.progressive_val_score(make_stream(), model, _mae()).get()
    baseline = evaluate.progressive_val_score(
        make_stream(), dummy.StatisticRegressor(stats.Mean()), _mae()
    ).get()
    assert mae < 0.9 * baseline, (mae, baseline)


@pytest.mark.parametrize("name", ["sketched_kons", "kons", "kernel_ogd"])
def test_progressive_validation_beats_the_mean(name: str) -> None:
    model = preprocessing.StandardScaler() | KonsRegressor(kons.learner_from_params(name, {"C": 3.0}))
    _assert_beats_the_mean(model, _housing_stream)


def test_dict_rounds_equal_the_learners_rounds_on_arrays() -> None:
    """The adapter feeds the learner exactly the vectors the map says (an independent loop)."""
    data = load_stream("housing", 60)
    names = [f"x{i}" for i in range(data.X.shape[1])]
    model = KonsRegressor(kons.learner_from_params("sketched_kons", {"C": 3.0}), features=names)
    direct = kons.learner_from_params("sketched_kons", {"C": 3.0, "dim": len(names)})
    for x, y in zip(data.X, data.y, strict=True):
        # key order must not matter
        row: dict[Hashable, Any] = dict(zip(reversed(names), reversed(x.tolist()), strict=True))
        assert model.predict_one(row) == direct.predict_one(x)
        model.learn_one(row, y)
        direct.learn_one(x, y)
    assert model.stats()["rounds"] == 60


def test_online_map_grows_in_sorted_order_and_ignores_names_past_the_dimension() -> None:
    # The map is for the paper-exact learners (a preprocessing learner encodes records itself).
    model = KonsRegressor(kons.learner_from_params("ons", {"dim": 3, "C": 5.0, "preprocess": False}))
    model.learn_one({"b": 1.0, "a": 2.0}, 1.0)
    assert model.feature_names == ["a", "b"]
    assert model.predict_one({"a": 1.0, "zz": 5.0}) == model.predict_one({"a": 1.0})  # unknown: no weight
    assert model.feature_names == ["a", "b"]  # predict_one never maps
    model.learn_one({"d": 1.0, "c": 1.0, "a": 0.5}, 0.5)  # one free coordinate: "c" takes it, "d" is dropped
    assert model.feature_names == ["a", "b", "c"]
    assert model.stats()["ignored_features"] == 1
    exact = kons.learner_from_params("ons", {"preprocess": False})
    assert KonsRegressor(exact).fitted_learner.dim == DEFAULT_DIM


def test_feature_hasher_in_front_fills_the_dimension_and_drops_nothing() -> None:
    model = preprocessing.FeatureHasher(n_features=16, seed=0) | KonsRegressor(
        kons.learner_from_params("adagrad", {"dim": 16, "preprocess": False})
    )
    for i in range(200):  # 200 distinct names hashed into 16 coordinates
        model.learn_one({f"word{i}": 1.0, f"word{i + 1}": 0.5}, 0.1)
    adapter = model["KonsRegressor"]
    assert adapter.stats()["ignored_features"] == 0
    assert sorted(adapter.feature_names) == list(range(16))


def test_declared_features_fix_the_map() -> None:
    model = KonsRegressor(kons.learner_from_params("kons", {}), features=["a", "b"])
    model.learn_one({"c": 3.0, "a": 1.0}, 0.5)
    assert model.feature_names == ["a", "b"]
    assert model.stats()["ignored_features"] == 1
    with pytest.raises(InvalidParameterError, match="distinct"):
        KonsRegressor(kons.learner_from_params("kons", {}), features=["a", "a"])
    with pytest.raises(InvalidParameterError, match="dim is 3"):
        KonsRegressor(kons.learner_from_params("kons", {"dim": 3}), features=["a", "b"])
    with pytest.raises(InvalidParameterError, match="kons learner"):
        KonsRegressor("sketched_kons")  # type: ignore[arg-type]  # a name, not a learner, on purpose


def test_bad_input_is_rejected_and_changes_nothing() -> None:
    model = KonsRegressor(kons.learner_from_params("sketched_kons", {"preprocess": False}))
    model.learn_one({"a": 1.0}, 0.5)
    before = model.to_bytes()
    with pytest.raises(InvalidInputError, match="non-numeric"):
        model.learn_one({"a": 1.0, "b": "red"}, 0.5)
    with pytest.raises(InvalidInputError, match="non-finite"):
        model.learn_one({"new": float("nan")}, 0.5)
    with pytest.raises(InvalidInputError):
        model.learn_one({"a": 1.0}, float("inf"))
    assert model.to_bytes() == before and model.feature_names == ["a"]
    clf = KonsClassifier(kons.learner_from_params("ons", {"loss": "logistic"}))
    with pytest.raises(InvalidInputError, match="binary"):
        clf.learn_one({"a": 1.0}, "spam")
    records = KonsRegressor(kons.Auto())
    records.learn_one({"a": 1.0, "b": "red"}, 0.5)
    before = records.to_bytes()
    bad_records: list[dict[Hashable, Any]] = [{"a": [1.0]}, {"a": {"b": 1.0}}, {"a": float("nan")}]
    for bad in bad_records:
        with pytest.raises(InvalidInputError):
            records.learn_one(bad, 0.5)
    assert records.to_bytes() == before


def test_dicts_with_strings_and_none_go_through_the_records_path() -> None:
    rng = np.random.default_rng(0)
    rows = [{"city": ["Paris", "Lyon", "Lille"][i % 3], "rooms": None if i % 9 == 0 else float(i % 4),
             7: float(rng.normal())} for i in range(120)]
    targets = [{"Paris": 3.0, "Lyon": 2.0, "Lille": 1.0}[str(r["city"])] + float(rng.normal(scale=0.1))
               for r in rows]
    model, direct = KonsRegressor(kons.Auto()), kons.Auto()
    for row, y in zip(rows, targets, strict=True):
        record = {str(k): v for k, v in row.items()}
        assert model.predict_one(row) == direct.predict_one(record)
        model.learn_one(row, y)
        direct.learn_one(record, y)
    assert model.fitted_learner.to_bytes() == direct.to_bytes()
    encoding = model.fitted_learner.encoding()
    assert encoding is not None
    assert {f["name"]: f["kind"] for f in encoding["features"]} == {"7": "numeric", "city": "categorical",
                                                                    "rooms": "numeric"}
    assert model.stats()["features"] == 3 and model.feature_names == []
    restored = KonsRegressor.from_bytes(model.to_bytes())
    assert restored.predict_one(rows[0]) == model.predict_one(rows[0])
    classifier = KonsClassifier(kons.learner_from_params("ons", {"loss": "logistic"}))
    for row, y in zip(rows, targets, strict=True):
        classifier.learn_one(row, y > 2.5)
    assert classifier.predict_one({"city": "Paris", "rooms": 1.0}) is True
    assert classifier.predict_one({"city": "Lille", "rooms": None}) is False


def test_classifier_probability_is_the_sigmoid_of_the_log_odds() -> None:
    clf = KonsClassifier(kons.learner_from_params("ons", {"loss": "logistic", "C": 5.0, "preprocess": False}))
    for i in range(50):
        clf.learn_one({"a": float(i % 2), "b": 1.0}, i % 2 == 1)
    margin = clf.fitted_learner.predict_one(np.r_[1.0, 1.0, np.zeros(DEFAULT_DIM - 2)])
    proba = clf.predict_proba_one({"a": 1.0, "b": 1.0})
    assert proba[True] == pytest.approx(1.0 / (1.0 + np.exp(-margin)), rel=1e-12)
    assert proba[True] > 0.5 and clf.predict_one({"a": 1.0, "b": 1.0}) is True
    assert clf.predict_one({"a": 0.0, "b": 1.0}) is False
    hinge = KonsClassifier(kons.learner_from_params("ons", {"loss": "squared_hinge"}))
    with pytest.raises(NotImplementedError, match="logistic"):
        hinge.predict_proba_one({"a": 1.0})


@pytest.mark.parametrize("declared", [False, True])
def test_state_round_trip_continues_identically(declared: bool) -> None:
    names = ["x0", "x1", "x2", 3]  # str and int names both survive the JSON header
    data = load_stream("breast-cancer", 80)
    rows = [dict(zip(names, x[:4].tolist(), strict=True)) for x in data.X]
    learner = kons.learner_from_params("sketched_kons", {"loss": "logistic", "C": 5.0})
    model = KonsClassifier(learner, features=names if declared else None)
    for x, y in zip(rows[:40], data.y[:40], strict=True):
        model.learn_one(x, y > 0)
    restored = KonsClassifier.from_bytes(model.to_bytes())
    unpickled = pickle.loads(pickle.dumps(model))
    assert restored.feature_names == model.feature_names
    for x, y in zip(rows[40:], data.y[40:], strict=True):
        expected = model.predict_proba_one(x)
        assert restored.predict_proba_one(x) == expected == unpickled.predict_proba_one(x)
        for m in (model, restored, unpickled):
            m.learn_one(x, y > 0)
    assert restored.to_bytes() == model.to_bytes()


def test_state_from_elsewhere_is_rejected() -> None:
    model = KonsRegressor(kons.learner_from_params("ons", {"preprocess": False}))
    with pytest.raises(StateFormatError):
        KonsClassifier.from_bytes(model.to_bytes())
    with pytest.raises(StateFormatError):
        KonsRegressor.from_bytes(kons.learner_from_params("ons", {}).to_bytes())
    corrupted = bytearray(model.to_bytes())
    corrupted[40] ^= 1
    with pytest.raises(StateFormatError):
        KonsRegressor.from_bytes(bytes(corrupted))
    model.learn_one({("a", 1): 1.0}, 0.5)  # River allows tuple names; only pickle can save them
    with pytest.raises(InvalidInputError, match="pickle"):
        model.to_bytes()


def test_composes_in_river_pipelines_with_target_scaling() -> None:
    """River's own StandardScaler and TargetStandardScaler around a kons learner, by composition."""
    # River types the wrapped model as a Regressor: a Pipeline ending in one is one, but not to mypy.
    model = preprocessing.TargetStandardScaler(
        compose.Pipeline(  # type: ignore[arg-type]
            preprocessing.StandardScaler(), KonsRegressor(kons.learner_from_params("kons", {}))
        )
    )

    def shifted() -> Stream:  # far outside the learner's [-C, C] = [-1, 1] without the target scaler
        return ((x, 50.0 + 10.0 * y) for x, y in _housing_stream(300))

    _assert_beats_the_mean(model, shifted)


def test_kons_does_not_import_river_or_sklearn() -> None:
    code = "import sys, kons; print(sorted({'river', 'sklearn'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_intervals_and_sets_through_the_adapter_are_kons_own() -> None:
    from river.conf.interval import Interval

    rng = np.random.default_rng(4)
    regressor, direct = KonsRegressor(), kons.Auto()
    classifier, direct_classes = KonsClassifier(), kons.Auto(task="classification")
    covered = []
    for _ in range(400):
        x: dict[Hashable, Any] = {"a": float(rng.normal()), "b": float(rng.normal())}
        y = 2.0 * x["a"] + rng.normal() * (0.1 + abs(x["b"]))
        interval = regressor.predict_one(x, with_interval=True, coverage=0.8)
        assert isinstance(interval, Interval)
        assert (interval.lower, interval.upper) == direct.predict_interval_one(x, 0.8)
        covered.append(y in interval)
        regressor.learn_one(x, y)
        direct.learn_one(x, y)
        label = "up" if x["a"] > 0 else "down"
        assert classifier.predict_set_one(x, 0.9) == direct_classes.predict_set_one(x, 0.9)
        classifier.learn_one(x, label)
        direct_classes.learn_one(x, label)
    assert abs(np.mean(covered[50:]) - 0.8) < 0.06
    assert regressor.predict_one({"a": 1.0, "b": 0.0}) == direct.predict_one({"a": 1.0, "b": 0.0})
