"""Records as features (kons.records): bounds, the encoding against a slow reference, persistence and
learning."""

from __future__ import annotations

import json
import math
import time
import warnings
import zlib
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import pytest

import kons
from kons.preprocessing import FeatureScaler, Preprocessed
from kons.records import (
    IMPUTE_BOUND,
    IMPUTE_REFRESH,
    MAX_CATEGORIES,
    MAX_KEYS,
    MAX_NAME_LENGTH,
    Record,
    RecordEncoder,
    parse_record,
)
from kons.sparse import dense

CITIES = ("Paris", "Lyon", "Lille", "Nantes", "Nice")
CITY_EFFECT = {"Paris": 3.0, "Lyon": 1.0, "Lille": -1.0, "Nantes": 0.0, "Nice": -3.0}


def _stream(n: int, seed: int = 0) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Records with a categorical signal (the city), a numeric one, missing values and a late name."""
    rng = np.random.default_rng(seed)
    records, targets = [], []
    for t in range(n):
        city = CITIES[int(rng.integers(len(CITIES)))]
        rooms = int(rng.integers(1, 6))
        record: dict[str, Any] = {"city": city, "rooms": rooms, "noise": float(rng.normal())}
        if rng.random() < 0.1:
            record["rooms"] = None
        if rng.random() < 0.1:
            del record["noise"]
        if t >= 150:  # a name first seen late
            record["garden"] = bool(rng.random() < 0.5)
        records.append(record)
        targets.append(100.0 + 20.0 * CITY_EFFECT[city] + 5.0 * (rooms if record["rooms"] is not None else 3)
                       + rng.normal())
    return records, np.array(targets)


def _learners() -> list[kons.Learner]:
    return [kons.Auto(), kons.learner_from_params("ons", {}), kons.Auto(task="classification")]


def _label(learner: kons.Learner, y: float) -> Any:
    return bool(y > 100.0) if learner.loss == "logistic" else y


# ----------------------------------------------------------------------------- bounds

def _bad_records() -> list[Any]:
    return [
        {"a": {"b": 1.0}},
        {"a": [1.0, 2.0]},
        {"a": (1.0,)},
        {"a": float("nan")},
        {"a": float("inf")},
        {"a": 10**400},
        {"a": 1e200, "b": 1e200},  # the squared norm overflows
        {1: 2.0},
        {"x" * (MAX_NAME_LENGTH + 1): 1.0},
        {"a": "c" * (MAX_NAME_LENGTH + 1)},
        {"a": object()},
        {f"k{i}": 1.0 for i in range(MAX_KEYS + 1)},
    ]


@pytest.mark.parametrize("learned", [0, 5, 60])  # fresh, during the warm-up, after it
def test_every_bound_is_an_input_error_that_changes_nothing(learned: int) -> None:
    records, y = _stream(learned + 1)
    learner = kons.Auto()
    for record, target in zip(records[:learned], y[:learned], strict=True):
        learner.learn_one(record, target)
    before = learner.to_bytes()
    for bad in _bad_records():
        with pytest.raises(kons.InvalidInputError):
            learner.learn_one(bad, 1.0)
        with pytest.raises(kons.InvalidInputError):
            learner.predict_one(bad)
        assert learner.to_bytes() == before, bad
    predicted = learner.predict_one(records[learned])
    assert learner.learn_one(records[learned], y[learned]) == predicted  # it still plays as before


class _Untouchable(dict[str, float]):
    """A dict whose keys must not be read (a record too large is refused on its length alone)."""

    def __iter__(self) -> Any:
        raise AssertionError("the keys were read")

    def items(self) -> Any:
        raise AssertionError("the keys were read")

    def keys(self) -> Any:
        raise AssertionError("the keys were read")


def test_a_record_of_100000_keys_is_refused_without_reading_them() -> None:
    huge = _Untouchable({f"k{i}": 1.0 for i in range(100_000)})
    learner = kons.Auto()
    # (this thread's CPU time, not the clock's: a loaded machine descheduled the process for 68 ms around
    # a refusal that costs microseconds, past the bound; reading the keys costs CPU time)
    start = time.thread_time()
    with pytest.raises(kons.InvalidInputError, match=f"at most {MAX_KEYS} keys"):
        learner.learn_one(huge, 1.0)
    assert time.thread_time() - start < 0.05


def test_the_sparse_form_stays_the_sparse_form() -> None:
    learner = kons.Auto()
    learner.learn_one({"indices": [0, 2], "values": [1.0, 2.0], "dim": 3}, 1.0)
    assert learner.encoding() is None and learner.input_dim == 3
    with pytest.raises(kons.InvalidInputError, match="cannot take a record"):
        learner.learn_one({"a": 1.0}, 1.0)
    records_learner = kons.Auto()
    records_learner.learn_one({"a": 1.0}, 1.0)
    before = records_learner.to_bytes()
    arrays: list[Any] = [np.ones(records_learner.input_dim or 0), {"indices": [0], "values": [1.0]}]
    for array in arrays:
        with pytest.raises(kons.InvalidInputError, match="cannot take an array"):
            records_learner.learn_one(array, 1.0)
    assert records_learner.to_bytes() == before


# ----------------------------------------------------------------------------- the encoding

def test_key_order_never_changes_a_result() -> None:
    records, y = _stream(120)
    rng = np.random.default_rng(1)
    shuffled = [dict(sorted(r.items(), key=lambda _: rng.random())) for r in records]
    makers: list[Callable[[], kons.Learner]] = [kons.Auto, lambda: kons.learner_from_params("ons", {})]
    for make in makers:
        a, b = make(), make()
        plays_a = [a.learn_one(r, t) for r, t in zip(records, y, strict=True)]
        plays_b = [b.learn_one(r, t) for r, t in zip(shuffled, y, strict=True)]
        assert plays_a == plays_b
        assert a.to_bytes() == b.to_bytes()


def test_a_name_first_seen_at_round_300_is_standardised_by_its_own_values() -> None:
    learner = kons.learner_from_params("ons", {})
    rng = np.random.default_rng(2)
    late = []
    for t in range(400):
        record: dict[str, Any] = {"a": float(rng.normal())}
        if t >= 300:
            record["late"] = 1000.0 + float(rng.normal())
            late.append(record["late"])
        learner.learn_one(record, record["a"] + (record.get("late", 1000.0) - 1000.0))
    encoding = learner.encoding()
    assert encoding is not None
    (feature,) = [f for f in encoding["features"] if f["name"] == "late"]
    assert feature["kind"] == "numeric" and feature["numbers"] == 100
    assert feature["missing"] == 0  # the rounds before its first appearance are not missing values
    scaler = learner._prep.x_scaler  # type: ignore[attr-defined]
    slot = feature["coordinate"]
    assert scaler.counts[slot] == 100
    assert scaler.mean[slot] == pytest.approx(np.mean(late), rel=1e-12)
    assert scaler.m2[slot] == pytest.approx(np.sum((np.array(late) - np.mean(late)) ** 2), rel=1e-9)


def test_categories_appearing_late_and_missing_values_are_counted() -> None:
    learner = kons.Auto()
    for t in range(300):
        city = CITIES[t % 3] if t < 200 else CITIES[3 + t % 2]
        record: dict[str, Any] = {"city": city, "size": None if t % 10 == 0 else float(t % 7)}
        if t % 25 == 0:
            del record["city"]
        learner.learn_one(record, float(t % 7))
    encoding = learner.encoding()
    assert encoding is not None
    features = {f["name"]: f for f in encoding["features"]}
    city, size = features["city"], features["size"]
    assert (city["kind"], size["kind"]) == ("categorical", "numeric")
    counts = {c["value"]: c["count"] for c in city["categories"]}
    given = [CITIES[t % 3] if t < 200 else CITIES[3 + t % 2] for t in range(300) if t % 25]
    expected = {c: given.count(c) for c in CITIES}
    assert counts == expected
    # absent at t = 0, 25, ..., 275; round 0 is before the name was known
    assert city["missing"] == 11 and city["missing_coordinate"] is not None
    assert size["missing"] == 30 and size["numbers"] == 270
    coordinates = [c["coordinate"] for c in city["categories"]]
    assert coordinates == sorted(coordinates)  # in order of first appearance
    # the imputer's statistics count the numbers given, not those it imputed (which the scaler counts)
    imputer = learner._prep.imputer
    assert imputer is not None and imputer.coordinates.tolist() == [size["coordinate"]]
    (_, values), (_, rows) = imputer.moments  # the sum of the values given, and the rows giving one
    held = np.array(imputer.held)[:, 0]  # (the rows since the moments took them last)
    rows += np.sum(~np.isnan(held))
    mean = imputer.shift[0] + (values + np.nansum(held - imputer.shift[0])) / rows
    assert rows == 270
    assert mean == pytest.approx(np.mean([float(t % 7) for t in range(300) if t % 10]), rel=1e-12)


def test_a_name_given_numbers_and_strings_holds_both_kinds() -> None:
    encoder = RecordEncoder(16)
    vectors = []
    for value in (30.0, "unknown", 40.0, None):
        vector, pending = encoder.pending(parse_record({"age": value}, 16))
        encoder.commit(pending)
        vectors.append(vector)
    (age,) = encoder.encoding()["features"]
    assert age["kind"] == "mixed" and age["numbers"] == 2 and age["missing"] == 1
    number, missing = age["coordinate"], age["missing_coordinate"]
    category = age["categories"][0]["coordinate"]
    assert vectors[1][number] != vectors[1][number] and vectors[1][category] == 1.0  # NaN: left out
    assert vectors[2][number] == 40.0 and vectors[2][category] == 0.0
    assert math.isnan(vectors[3][number]) and math.isnan(vectors[3][category]) and vectors[3][missing] == 1.0


class _ReferenceEncoder:
    """The encoding rules of kons.records written out again, slowly, with plain dicts."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.buckets = max(1, width // 8)
        self.free = width - self.buckets
        self.slots: dict[tuple[str, str, str], int] = {}
        self.vocabulary: dict[str, int] = {}
        self.names: list[str] = []  # names holding a coordinate, in order
        self.used_buckets: set[int] = set()

    def _bucket(self, key: tuple[str, str, str]) -> int:
        return self.free + zlib.crc32("\x1f".join(key).encode()) % self.buckets

    def round(self, record: dict[str, Any]) -> np.ndarray:
        vector = np.full(self.width, np.nan)
        for (_, kind, _), slot in self.slots.items():
            if kind == "missing":
                vector[slot] = 1.0
        for bucket in self.used_buckets:
            vector[bucket] = 0.0
        hashed: list[tuple[int, float]] = []

        def put(key: tuple[str, str, str], value: float) -> None:
            if key not in self.slots and len(self.slots) < self.free:
                self.slots[key] = len(self.slots)
                if key[0] not in self.names:
                    self.names.append(key[0])
                if key[1] == "category":
                    self.vocabulary[key[0]] = self.vocabulary.get(key[0], 0) + 1
            if key in self.slots:
                vector[self.slots[key]] = value
            else:
                hashed.append((self._bucket(key), value))

        known = list(self.names)
        for name in sorted(record):
            value = record[name]
            if value is None:
                put((name, "missing", ""), 1.0)
                continue
            for (owner, kind, _), slot in self.slots.items():
                if owner == name and kind != "numeric":
                    vector[slot] = 0.0
            if isinstance(value, str):
                if (name, "category", value) in self.slots or self.vocabulary.get(name, 0) < MAX_CATEGORIES:
                    put((name, "category", value), 1.0)
                else:
                    put((name, "other", ""), 1.0)
            else:
                put((name, "numeric", ""), float(value))
        for name in known:
            if name not in record and (name, "missing", "") not in self.slots:
                put((name, "missing", ""), 1.0)
        for bucket, value in hashed:
            vector[bucket] = value if math.isnan(vector[bucket]) else vector[bucket] + value
            self.used_buckets.add(bucket)
        return vector


@pytest.mark.parametrize("width", [12, 40, 200])
def test_the_encoder_matches_a_slow_reference_on_a_random_stream(width: int) -> None:
    rng = np.random.default_rng(width)
    names = [f"n{i}" for i in range(30)]
    encoder, reference = RecordEncoder(width), _ReferenceEncoder(width)
    for t in range(400):
        record: dict[str, Any] = {}
        present = names[: 8 + t // 20]
        for name in rng.choice(present, size=int(rng.integers(1, 8)), replace=False):
            kind = rng.random()
            if kind < 0.4:
                record[str(name)] = float(rng.normal())
            elif kind < 0.8:
                record[str(name)] = f"c{int(rng.integers(0, 3 + (MAX_CATEGORIES + 10) * (name == 'n0')))}"
            elif kind < 0.9:
                record[str(name)] = bool(rng.random() < 0.5)
            else:
                record[str(name)] = None
        vector, pending = encoder.pending(parse_record(record, width))
        reordered = dict(reversed(list(record.items())))  # the hashed sums too are the same in any order
        assert np.array_equal(vector, encoder.encode(parse_record(reordered, width)), equal_nan=True)
        encoder.commit(pending)
        np.testing.assert_array_equal(vector, reference.round(record), err_msg=f"round {t}")
    encoding = encoder.encoding()
    assert encoding["coordinates_taken"] == len(reference.slots)
    if width == 12:
        assert encoding["buckets"]["values"] > 0  # the small width overflowed into the buckets


def test_the_width_is_bounded_and_the_state_flat_with_endless_new_names() -> None:
    learner = kons.learner_from_params("ons", {})
    sizes = {}
    for t in range(1200):
        learner.learn_one({"a": float(t % 5), f"name{t}": float(t % 3), "c": f"v{t}"}, float(t % 5))
        if t in (300, 1199):
            sizes[t] = (len(learner.to_bytes()), learner.state_nbytes())
    encoding = learner.encoding()
    assert encoding is not None
    assert encoding["width"] == 32 and encoding["coordinates_free"] == 0
    assert encoding["buckets"]["values"] > 2000
    (c,) = [f for f in encoding["features"] if f["name"] == "c"]
    assert len(c["categories"]) <= MAX_CATEGORIES
    assert len(encoding["features"]) <= encoding["width"]
    assert len(json.dumps(encoding)) < 200 * encoding["width"]  # JSON, bounded by the width
    # The counters grow by a few digits; nothing else does.
    assert abs(sizes[1199][0] - sizes[300][0]) < 200
    assert sizes[1199][1] == sizes[300][1]
    assert learner.max_growth_nbytes(10) == 0  # every coordinate is taken: the encoder cannot grow


def test_a_given_dim_is_the_width() -> None:
    learner = kons.Auto(dim=10)
    assert learner.predict_one({"a": 1.0}) == 0.0
    learner.learn_one({"a": 1.0, "b": "x"}, 1.0)
    encoding = learner.encoding()
    assert encoding is not None and encoding["width"] == 10 and learner.input_dim == 10
    assert isinstance(parse_record({"b": 1, "a": True}, None), Record)
    assert parse_record({"b": 1, "a": True}, None).items == (("a", 1.0), ("b", 1.0))



def test_a_record_predicted_then_learnt_is_encoded_as_if_learnt_alone() -> None:
    """The encoder keeps the last record's encoding for the learning round after its prediction: a
    record equal to it but for the sign of a zero, or one encoded again after a commit, is encoded
    afresh."""
    encoder, fresh = RecordEncoder(16), RecordEncoder(16)
    negative, positive = parse_record({"a": -0.0, "b": "x"}, 16), parse_record({"a": 0.0, "b": "x"}, 16)
    assert negative == positive and negative.numbers != positive.numbers
    assert encoder.pending(negative)[0].tobytes() != fresh.pending(positive)[0].tobytes()
    vector, pending = encoder.pending(positive)
    assert vector.tobytes() == fresh.pending(positive)[0].tobytes()
    encoder.commit(pending)
    fresh.commit(fresh.pending(positive)[1])
    assert encoder.pending(positive)[0].tobytes() == fresh.pending(positive)[0].tobytes()
    records, y = _stream(300)
    alone, predicted = kons.Auto(), kons.Auto()
    for r, t in zip(records, y, strict=True):
        alone.learn_one(r, t)
        predicted.predict_one(r)
        predicted.learn_one(r, t)
    assert predicted.to_bytes() == alone.to_bytes()

# ----------------------------------------------------------------------------- persistence

@pytest.mark.parametrize("make", [kons.Auto, lambda: kons.learner_from_params("ons", {}),
                                  lambda: kons.Auto(task="classification")])
@pytest.mark.parametrize("split", [10, 200])  # during the warm-up (rows with gaps buffered), after it
def test_save_restore_and_replay_are_bit_identical(make: Any, split: int) -> None:
    records, y = _stream(320)
    whole = make()
    labels = [_label(whole, t) for t in y]
    played = [whole.learn_one(r, t) for r, t in zip(records, labels, strict=True)]
    first = make()
    for r, t in zip(records[:split], labels[:split], strict=True):
        first.learn_one(r, t)
    restored = kons.load(first.to_bytes())
    assert restored.to_bytes() == first.to_bytes()
    assert restored.encoding() == first.encoding()
    # records after the save, with names new after the restore ("garden" from round 150)
    continued = [restored.learn_one(r, t) for r, t in zip(records[split:], labels[split:], strict=True)]
    assert continued == played[split:]
    assert restored.to_bytes() == whole.to_bytes()
    assert [restored.predict_one(r) for r in records[:20]] == [whole.predict_one(r) for r in records[:20]]


def test_a_corrupted_encoding_is_a_state_format_error() -> None:
    learner = kons.Auto()
    for r, t in zip(*_stream(5), strict=True):
        learner.learn_one(r, t)
    encoder = learner._prep.encoder
    assert encoder is not None
    saved = encoder.scalars()
    saved["names"][0][1] = saved["names"][1][1]  # two names on one coordinate
    with pytest.raises(ValueError, match="inconsistent"):
        RecordEncoder.from_scalars(saved, encoder.width)


# ----------------------------------------------------------------------------- learning

@pytest.mark.parametrize("make", [kons.Auto, lambda: kons.learner_from_params("ons", {})])
def test_records_with_a_categorical_signal_are_learned_far_better_than_the_constant(make: Any) -> None:
    records, y = _stream(600, seed=3)
    learner = make()
    played = np.array([learner.learn_one(r, t) for r, t in zip(records, y, strict=True)])
    means = np.concatenate([[0.0], np.cumsum(y)[:-1] / np.arange(1, len(y))])
    late = slice(300, None)
    mse, constant = np.mean((played[late] - y[late]) ** 2), np.mean((means[late] - y[late]) ** 2)
    assert mse < 0.1 * constant  # the city explains most of the variance


def test_a_classifier_learns_a_label_set_by_the_category() -> None:
    records, _ = _stream(600, seed=4)
    labels = [CITY_EFFECT[r["city"]] > 0 for r in records]
    learner = kons.Auto(task="classification")
    played = np.array([learner.learn_one(r, label) for r, label in zip(records, labels, strict=True)])
    assert np.mean((played[300:] > 0) != np.array(labels[300:])) < 0.02


def test_preprocessed_learners_take_records() -> None:
    records, y = _stream(60)
    learner = kons.learner_from_params("nystrom_kons", {})
    assert isinstance(learner, Preprocessed) and learner.accepts_records
    played = [learner.learn_one(r, t) for r, t in zip(records, y, strict=True)]
    assert all(np.isfinite(played))
    encoding = learner.encoding()
    assert encoding is not None and {f["name"] for f in encoding["features"]} == {"city", "noise", "rooms"}


@pytest.mark.parametrize("make", [kons.Auto, lambda: kons.learner_from_params("ons", {})])
def test_the_growth_bound_holds_for_new_names_and_categories(make: Any) -> None:
    learner = make()
    for t in range(40):  # past the warm-up
        learner.learn_one({"a": float(t % 3)}, float(t % 3))
    before, bound = learner.state_nbytes(), learner.max_growth_nbytes(100)
    for t in range(100):
        learner.learn_one({"a": 1.0, "n" * 200 + str(t): "c" * 250 + str(t)}, float(t % 3))
    assert 0 < learner.state_nbytes() - before <= bound


def test_the_scaler_with_gaps_matches_numpy_on_the_values_given() -> None:
    rng = np.random.default_rng(5)
    X = rng.normal(size=(200, 6)) * [1.0, 10.0, 0.1, 5.0, 1.0, 2.0] + 3.0
    X[rng.random(X.shape) < 0.3] = np.nan
    X[:50, 5] = np.nan  # a coordinate first given at row 50
    scaler = FeatureScaler(6, sparse=False)
    for t, x in enumerate(X):
        z = np.asarray(scaler.transform(x, commit=True))
        with warnings.catch_warnings():  # numpy warns of the columns without a value yet
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, std = np.nanmean(X[: t + 1], axis=0), np.nanstd(X[: t + 1], axis=0)
        expected = np.where(np.isnan(x) | ~(std > 0), 0.0, (x - mean) / np.where(std > 0, std, 1.0))
        np.testing.assert_allclose(z, expected, rtol=1e-9, atol=1e-12)
    assert scaler.counts is not None
    np.testing.assert_array_equal(scaler.counts, np.sum(~np.isnan(X), axis=0))
    np.testing.assert_allclose(scaler.mean, np.nanmean(X, axis=0), rtol=1e-12)
    # the warm-up buffer's scaling: by the current statistics, 0 where a value is left out
    expected = np.nan_to_num(X[-1] - scaler.mean) / np.sqrt(scaler.m2 / scaler.counts) * ~np.isnan(X[-1])
    np.testing.assert_allclose(scaler.standardise(X[-1]), expected, rtol=1e-12)


def test_a_multi_class_learner_takes_records_in_every_round_and_probability() -> None:
    records, _ = _stream(400, seed=6)
    labels = [{"Paris": "north", "Lille": "north", "Lyon": "centre"}.get(r["city"], "south") for r in records]
    learner = kons.Auto(task="classification")
    for record, label in zip(records[:200], labels[:200], strict=True):
        learner.learn_one(record, label)
    restored = kons.load(learner.to_bytes())
    hits = 0
    for record, label in zip(records[200:], labels[200:], strict=True):
        distribution = learner.predict_proba_dict_one(record)
        assert distribution == restored.predict_proba_dict_one(record)
        assert sum(distribution.values()) == pytest.approx(1.0)
        hits += max(distribution, key=lambda c: distribution[c]) == label
        assert learner.learn_one(record, label) == restored.learn_one(record, label)
    assert hits / 200 > 0.95
    assert learner.to_bytes() == restored.to_bytes()


# ----------------------------------------------------------------------------- categorical names' scale

def test_a_categorical_names_coordinates_share_the_root_mean_of_their_variances() -> None:
    rng = np.random.default_rng(7)
    X = rng.normal(size=(300, 6)) * [1.0, 10.0, 1.0, 1.0, 1.0, 2.0]
    X[:, 1:4] = np.eye(3)[rng.choice(3, 300, p=[0.9, 0.08, 0.02])]  # one name's categories, one rare
    X[rng.random(300) < 0.2, 5] = np.nan
    group = np.array([1, 2, 3])
    scaler, alone, omitting = (FeatureScaler(6, False, (group,)), FeatureScaler(6, False),
                               FeatureScaler(6, False, (group,), omits_groups=True))
    for t, x in enumerate(X):
        z, z_alone, z_omitted = (np.asarray(s.transform(x, commit=True)) for s in (scaler, alone, omitting))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, variance = np.nanmean(X[: t + 1], axis=0), np.nanvar(X[: t + 1], axis=0)
        shared = np.sqrt(variance[group].mean())
        others = [0, 4, 5]
        np.testing.assert_allclose(z_omitted[group], 0.0)
        np.testing.assert_array_equal(z_omitted[others], z_alone[others])
        np.testing.assert_array_equal(z[others], z_alone[others])
        if shared > 0:
            np.testing.assert_allclose(z[group], (x[group] - mean[group]) / shared, rtol=1e-9, atol=1e-12)
    # the rare category stands out by 1/sqrt(p) on its own, by far less in its name's scale
    rare = np.array([0.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    assert abs(scaler.standardise(rare)[3]) < 0.6 * abs(alone.standardise(rare)[3])


def test_a_categorical_names_group_is_its_categories_other_and_missing_indicator() -> None:
    encoder = RecordEncoder(32)
    rows = [{"city": c, "rooms": r} for c, r in (("Paris", 1.0), ("Lyon", None), (None, 2.0), ("Nice", 3.0))]
    for row in rows:
        encoder.commit(encoder.pending(parse_record(row, 32))[1])
    city, rooms = encoder.names["city"], encoder.names["rooms"]
    (group,) = encoder.category_groups()  # rooms (a number and its missing indicator) has none
    assert sorted(group) == sorted([*city.categories.values(), city.missing])
    assert rooms.missing not in group and rooms.numeric not in group


def test_a_category_that_says_nothing_costs_auto_far_less_than_before() -> None:
    # 20 shops drawn at random beside four numbers that carry the target: each shop's one-hot coordinate
    # standardised on its own made the shops weigh as 20 features in every distance (the main before the
    # shared scale: 4.2x the squared error without the shops over rounds 300-800; docs/auto-log.md)
    rng = np.random.default_rng(0)
    X = rng.uniform(-2.0, 2.0, size=(800, 4))
    y = np.sin(2.0 * X[:, 0]) * X[:, 1] + X[:, 2] ** 2 - X[:, 3] + rng.normal(0.0, 0.1, 800)
    shops = rng.integers(0, 20, 800)
    errors = []
    for with_shop in (True, False):
        learner = kons.Auto()
        played = np.array([learner.learn_one({"a": x[0], "b": x[1], "c": x[2], "d": x[3],
                                              **({"shop": f"s{s}"} if with_shop else {})}, t)
                           for x, s, t in zip(X, shops, y, strict=True)])
        errors.append(np.mean((played[300:] - y[300:]) ** 2))
    assert errors[0] / errors[1] < 2.5


def test_a_number_s_missing_indicator_is_centred_at_the_fixed_variance_not_standardised() -> None:
    # standardised by its own deviation, the indicator of a gap rate p puts a gapped row sqrt((1 - p) / p)
    # deviations out (3 at 10%) and the gaps dominate the row's distances: a number's indicator is scaled
    # by GAP_VARIANCE instead, in the raw and the log view; a categorical name's missing indicator is one
    # more category of the name, in its group (docs/auto-log.md, "A number's missing indicator")
    from kons.auto.grid import signed_log
    from kons.preprocessing import GAP_VARIANCE

    rng = np.random.default_rng(3)
    rooms_given, area = rng.integers(1, 6, 200).astype(float), rng.normal(50.0, 9.0, 200)
    records = [{"rooms": None if t % 10 == 0 else rooms_given[t], "area": area[t],
                "city": None if t % 7 == 0 else CITIES[t % 3]} for t in range(200)]
    y = area + np.where(np.arange(200) % 10 == 0, 10.0, rooms_given)
    fixed, standardised = kons.Auto(), kons.Auto()
    standardised._prep.fixes_gaps = False  # (the rule before)
    for learner in (fixed, standardised):
        for record, target in zip(records, y, strict=True):
            learner.learn_one(record, target)
    encoder = fixed._prep.encoder
    assert encoder is not None and fixed._grid is not None
    rooms, city = encoder.names["rooms"], encoder.names["city"]
    np.testing.assert_array_equal(encoder.number_gaps(), [rooms.missing])
    (group,) = fixed._prep.groups
    assert city.missing in group and rooms.missing not in group
    np.testing.assert_array_equal(fixed._grid.log_scaler.gaps, [rooms.missing])
    gapped = {"rooms": None, "area": 50.0, "city": "Paris"}
    z, z_before = (np.asarray(learner._prep.scaled(learner._prep.encoded(parse_record(gapped, 32), 32)))
                   for learner in (fixed, standardised))
    rate = 21 / 201  # (the scaled row's statistics include it)
    assert z[rooms.missing] == pytest.approx((1.0 - rate) / math.sqrt(GAP_VARIANCE), rel=1e-9)
    assert z_before[rooms.missing] == pytest.approx(math.sqrt((1.0 - rate) / rate), rel=1e-9)
    np.testing.assert_array_equal(np.delete(z, rooms.missing), np.delete(z_before, rooms.missing))
    x = fixed._prep.encoded(parse_record(gapped, 32), 32)
    zlog = np.asarray(fixed._grid.log_scaler.transform(signed_log(x), commit=False))
    gap = math.log(2.0)  # (the signed log of the indicator's 1)
    assert zlog[rooms.missing] == pytest.approx((1.0 - rate) * gap / math.sqrt(GAP_VARIANCE), rel=1e-9)
    # a state saved says so, and goes on so restored
    restored = kons.load(fixed.to_bytes())
    assert isinstance(restored, kons.Auto) and restored._prep.fixes_gaps
    np.testing.assert_array_equal(restored._prep.gaps, [rooms.missing])
    assert restored.learn_one(gapped, 60.0) == fixed.learn_one(gapped, 60.0)
    assert restored.to_bytes() == fixed.to_bytes()


def test_a_records_state_saved_before_the_gaps_fixed_variance_goes_on_as_it_was() -> None:
    records, y = _stream(240)
    before = kons.Auto()
    before._prep.fixes_gaps = False  # what a learner saved before the rule held
    for record, target in zip(records[:160], y[:160], strict=True):
        before.learn_one(record, target)
    blob = before.to_bytes()
    restored = kons.load(blob)
    assert isinstance(restored, kons.Auto) and not restored._prep.fixes_gaps and not len(restored._prep.gaps)
    assert restored.to_bytes() == blob
    for record, target in zip(records[160:], y[160:], strict=True):
        assert restored.learn_one(record, target) == before.learn_one(record, target)
    assert restored.to_bytes() == before.to_bytes()
    # a learner of the same records today scales the gaps, and plays otherwise
    today = kons.Auto()
    for record, target in zip(records[:160], y[:160], strict=True):
        today.learn_one(record, target)
    assert len(today._prep.gaps) and today.to_bytes() != blob


@pytest.mark.parametrize("case", ["regression", "classification"])
def test_a_state_of_records_saved_before_the_shared_scale_goes_on_as_it_was(case: str) -> None:
    from tests.data.make_records_blobs import CASES, CONTINUATION, stream
    from tests.recorded import DATA, RTOL, saved

    recorded = {key.split("/")[1]: value for key, value in saved(DATA / "records_blobs.npz").items()
                if key.startswith(f"{case}/")}
    blob = recorded["blob"].tobytes()
    learner = kons.load(blob)
    assert isinstance(learner, kons.Auto)
    reloaded = kons.load(learner.to_bytes())  # saved again, it still has no shared scale
    assert isinstance(reloaded, kons.Auto) and not reloaded._prep.pooled
    task, rounds = CASES[case]
    records, targets = stream(list(CASES).index(case), rounds + CONTINUATION, task)
    continuation = list(zip(records[rounds:], targets[rounds:], strict=True))
    # the imputer's statistics start at the restore: without it, the learner plays as it did
    imputing = kons.load(blob)
    assert isinstance(imputing, kons.Auto)
    learner._prep.imputer = None
    played = np.array([learner.learn_one(x, y) for x, y in continuation])
    predicted = np.array([learner.predict_one(x) for x, _ in continuation])
    np.testing.assert_allclose(played, recorded["played"], rtol=RTOL)
    np.testing.assert_allclose(predicted, recorded["predicted"], rtol=RTOL)
    started = imputing._prep.imputer
    assert started is not None and not started.moments.any() and not started.held
    for x, y in continuation:
        imputing.learn_one(x, y)
    assert imputing._prep.encoder is not None
    for name in ("rooms", "floor"):
        i = started.coordinates.tolist().index(imputing._prep.encoder.names[name].numeric)
        rows = started.moments[len(started.coordinates) + i, len(started.coordinates) + i]
        rows += sum(not np.isnan(held[i]) for held in started.held)
        assert rows == sum(x[name] is not None for x, _ in continuation)
    assert kons.load(imputing.to_bytes()).to_bytes() == imputing.to_bytes()
    # a learner of the same records today shares the scale (and saves that it does)
    fresh = kons.Auto(task=task)
    for x, y in zip(records[:rounds], targets[:rounds], strict=True):
        fresh.learn_one(x, y)
    assert fresh.to_bytes() != blob
    assert kons.load(fresh.to_bytes()).to_bytes() == fresh.to_bytes()


@pytest.mark.parametrize(("given", "same"), [
    ({"a": 1.0, "b": "x", "c": None}, True),
    ({"c": None, "b": "x", "a": 1.0}, True),  # (another order of the same names)
    ({"a": 1.0, "b": "x"}, False),
    ({"a": 1, "b": "x", "c": None}, False),  # an int where the float was
    ({"a": True, "b": "x", "c": None}, False),
    ({"a": 1.0, "b": "y", "c": None}, False),
    ({"a": 1.0, "b": "x", "d": None}, False),
    ({"a": 1.0, "b": "x", "c": np.float64(0.0)}, False),
])
def test_same_record_takes_only_what_parses_alike(given: dict[str, object], same: bool) -> None:
    from kons.records import same_record

    assert same_record(given, {"a": 1.0, "b": "x", "c": None}) is same


def test_same_record_tells_the_zeros_and_nans_apart() -> None:
    from kons.records import same_record

    assert not same_record({"a": -0.0}, {"a": 0.0})
    assert same_record({"a": 0.0}, {"a": 0.0})
    assert not same_record({"a": float("nan")}, {"a": float("nan")})
    assert not same_record({"a": np.float32(1.0)}, {"a": np.float32(1.0)})  # (not a plain type)


def test_a_record_predicted_then_learnt_plays_as_parsed_each_time() -> None:
    rng = np.random.default_rng(3)
    kept, fresh = kons.Auto(), kons.Auto()
    for i in range(400):
        record = {"f0": float(rng.normal()), "f1": None if i % 7 == 0 else float(rng.normal()),
                  "kind": ["n", "s"][i % 2], "zero": -0.0 if i % 3 == 0 else 0.0}
        target = float(rng.normal())
        assert kept.predict_one(record) == fresh.predict_one(dict(record))
        if i % 5 == 0:
            record["zero"] = 0.0 if record["zero"] else -0.0  # (changed between the prediction and the round)
        fresh._parsed = None  # (parsed afresh every time)
        assert kept.learn_one(record, target) == fresh.learn_one(dict(record), target)
        fresh._parsed = None
    assert kept.to_bytes() == fresh.to_bytes()


def _learnt_forms(records: list[dict[str, Any]],
                  y: np.ndarray) -> tuple[kons.Auto, Any, np.ndarray, dict[Any, np.ndarray]]:
    """An ``auto`` that learnt ``records``, its grid, a row z = 1, 2, ... of its width and each form's view
    of z."""
    learner = kons.Auto()
    for record, target in zip(records, y, strict=True):
        learner.learn_one(record, target)
    grid = learner._grid
    assert grid is not None
    z = np.arange(1.0, learner._dim + 1.0)
    return learner, grid, z, {form: dense(view) for form, view in grid.views_forms(z, z).items()}


def test_the_wide_raw_kernels_take_the_row_without_the_categorical_names() -> None:
    # a name that says nothing blurs every distance a kernel takes it into, and no kernel can learn to
    # ignore it: the raw view's kernel members of width NUMBERS_WIDTH take the row without the names (as
    # the log view does), the narrower ones with them, and the mixture weighs both (docs/auto.md)
    from kons.auto.config import GRID, NUMBERS_WIDTH

    records, y = _stream(120)
    learner, grid, z, forms = _learnt_forms(records, y)
    names = np.concatenate(learner._prep.groups)
    assert len(names) > 0
    wide = [member.form for (view, kind, width, _), member in zip(GRID, grid.members, strict=True)
            if view == "raw" and kind == "nystrom" and width == NUMBERS_WIDTH]
    assert wide and all(form == (2, False) for form in wide)
    assert np.all(forms[2, False][names] == 0.0)
    numbers = np.setdiff1d(np.arange(learner._dim), names)
    assert np.array_equal(forms[2, False][numbers], z[numbers])
    assert np.array_equal(forms[False, False], z)  # the narrow members: every coordinate
    # a state saved says so, and goes on so restored
    restored = kons.load(learner.to_bytes())
    assert isinstance(restored, kons.Auto) and restored._grid is not None
    assert [m.form for m in restored._grid.members] == [m.form for m in grid.members]
    # arrays have no categorical names: every raw member takes the raw view, as before
    arrays = kons.Auto()
    for row, target in zip(np.random.default_rng(0).normal(size=(120, 3)), y, strict=True):
        arrays.learn_one(row, target)
    assert arrays._grid is not None and all(m.form[0] != 2 for m in arrays._grid.members)


def test_the_kernels_without_the_names_take_the_width_of_the_records_without_them() -> None:
    # the fallback a name that says nothing leaves the mixture: the members that leave the names out take
    # the width the raw view's members at factor 1 have on the same records without the name
    # (Grid.numbers_width), not the raw view's width of the whole record times NUMBERS_WIDTH
    from kons.auto.config import GRID, NUMBERS_WIDTH
    from kons.kernel import NystromKONS

    records, y = _stream(120)
    learners = {}
    for label, rows in (("with", records), ("without", [{k: v for k, v in r.items() if k != "city"}
                                                         for r in records])):
        learner = learners[label] = kons.Auto()
        for record, target in zip(rows, y, strict=True):
            learner.learn_one(record, target)
    grid, without = learners["with"]._grid, learners["without"]._grid
    assert grid is not None and without is not None and without.numbers_width is None
    assert grid.numbers_width == pytest.approx(without.widths[0], rel=1e-12)
    assert grid.numbers_width != pytest.approx(grid.widths[0] * NUMBERS_WIDTH, rel=0.01)
    for (view, kind, width, _), member in zip(GRID, grid.members, strict=True):
        if kind == "nystrom":
            assert isinstance(member.base, NystromKONS)
            gamma = member.base.kernel.gamma  # type: ignore[attr-defined]
            leaves_names = view == "raw" and width == NUMBERS_WIDTH
            assert gamma == (grid.numbers_width if leaves_names else grid.widths[view == "log"] * width)
    # a state saved keeps it, and goes on so restored
    blob = learners["with"].to_bytes()
    restored = kons.load(blob)
    assert isinstance(restored, kons.Auto) and restored._grid is not None
    assert restored._grid.numbers_width == grid.numbers_width and restored.to_bytes() == blob
    for record, target in zip(records[:20], y[:20], strict=True):
        assert restored.learn_one(record, target) == learners["with"].learn_one(record, target)
    assert restored.to_bytes() == learners["with"].to_bytes()


def test_a_regression_record_s_linear_models_regularisers_count_its_keys_not_the_width() -> None:
    # a key is one number (or one name) whatever the encoder's width reserves for keys yet to come: the
    # linear models' regularisers of a regression record count its keys times LINEAR_DIM_PER_KEY
    # (Grid.linear_keys); arrays and classification records keep the width (docs/auto.md)
    from kons.auto.config import GRID, LINEAR_DIM_PER_KEY
    from kons.auto.experts.recent import RecentExpert, build_linear
    from kons.linear import ONS

    def linear_regularisers(learner: kons.Auto) -> tuple[set[float], list[float]]:
        """ONS members' alpha, and the Bayesian linear models' prior precisions of a weight (a new
        generation's, then a fresh one of every row's, as the grid builds it)."""
        grid = learner._grid
        assert grid is not None
        alphas = {member.base.alpha for (_, kind, _, _), member in zip(GRID, grid.members, strict=True)
                  if kind == "ons" and isinstance(member.base, ONS)}
        every_row = build_linear(grid) or []
        recent = [grid.new_recent(), *(cast(RecentExpert, expert).model for expert in every_row)]
        return alphas, [float(1.0 / model.P[0, 0]) for model in recent]

    records, y = _stream(120)
    learner = kons.Auto()
    for record, target in zip(records, y, strict=True):
        learner.learn_one(record, target)
    keys = LINEAR_DIM_PER_KEY * len(learner._prep.encoder.names)  # type: ignore[union-attr]
    assert keys == 3 * LINEAR_DIM_PER_KEY < learner._dim and learner._grid is not None
    assert learner._grid.linear_keys == keys
    alphas, precisions = linear_regularisers(learner)
    assert alphas == {keys + 1.0} and precisions == pytest.approx([keys, keys], rel=1e-12)
    # a state saved keeps it, and goes on so restored
    blob = learner.to_bytes()
    restored = kons.load(blob)
    assert isinstance(restored, kons.Auto) and restored._grid is not None
    assert restored._grid.linear_keys == keys and restored.to_bytes() == blob
    for record, target in zip(records[:20], y[:20], strict=True):
        assert restored.learn_one(record, target) == learner.learn_one(record, target)
    assert restored.to_bytes() == learner.to_bytes()
    # arrays, and records whose target is a class, count the width
    arrays = kons.Auto()
    for row, target in zip(np.random.default_rng(0).normal(size=(120, 3)), y, strict=True):
        arrays.learn_one(row, target)
    assert arrays._grid is not None and arrays._grid.linear_keys is None
    alphas, precisions = linear_regularisers(arrays)
    assert alphas == {arrays._dim + 1.0} and precisions == pytest.approx([arrays._dim] * 2, rel=1e-12)
    classes = kons.Auto(task="classification")
    for record, target in zip(records, y, strict=True):
        classes.learn_one(record, bool(target > np.median(y)))
    assert classes._grid is not None and classes._grid.linear_keys is None
    assert linear_regularisers(classes)[0] == {classes._dim + 1.0}
    # a regression record's state saved before the rule (records_blobs.npz) counts the width
    from tests.recorded import DATA, saved

    before = kons.load(saved(DATA / "records_blobs.npz")["regression/blob"].tobytes())
    assert isinstance(before, kons.Auto) and before._grid is not None and before._grid.linear_keys is None
    assert linear_regularisers(before)[0] == {before._dim + 1.0}


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_a_record_s_warm_up_plays_as_at_the_width_of_its_warm_up_ridge(task: str) -> None:
    # the warm-up's linear model weighs its prior by WARMUP_RIDGE_PER_KEY a key, not by the narrower width
    # the first record sets: its plays are those of the same records at that width, given as ``dim``
    # (where the extra coordinates are zeros); a ridge that followed the width again would move them
    from kons.auto.config import WARMUP_RIDGE_PER_KEY
    from kons.preprocessing import WARMUP_ROWS
    from kons.records import WIDTH_PER_KEY

    keys = 9
    rng = np.random.default_rng(3)
    X = rng.normal(size=(WARMUP_ROWS, keys)) * 3.0 + 10.0
    targets = X @ rng.normal(size=keys)
    labels = np.digitize(targets, np.quantile(targets, [1 / 3, 2 / 3]))  # three classes
    records = [{f"k{j}": float(v) for j, v in enumerate(x)} for x in X]
    default, wide = kons.Auto(task=task), kons.Auto(task=task, dim=WARMUP_RIDGE_PER_KEY * keys)
    plays: list[tuple[Any, Any]] = []
    for record, target, label in zip(records, targets, labels, strict=True):
        if task == "regression":
            plays.append((default.learn_one(record, target), wide.learn_one(record, target)))
        else:
            plays.append((default.predict_proba_dict_one(record), wide.predict_proba_dict_one(record)))
            assert default._warmup_class == wide._warmup_class  # (the label its models name)
            default.learn_one(record, int(label))
            wide.learn_one(record, int(label))
    assert default._dim == WIDTH_PER_KEY * keys < wide._dim
    for narrow, at_ridge in plays[2:]:  # (the first rows play the prior, whatever the ridge)
        if task == "regression":
            assert narrow == pytest.approx(at_ridge, rel=1e-9, abs=1e-12)
        else:
            assert narrow.keys() == at_ridge.keys()
            assert list(narrow.values()) == pytest.approx(list(at_ridge.values()), rel=1e-9, abs=1e-12)


# ----------------------------------------------------------------------------- imputation

def _slow_conditional_mean(rows: np.ndarray, row: np.ndarray, ridge: float, bound: float) -> np.ndarray:
    """The missing values of ``row`` by the Gaussian conditional on its present ones, from the pairwise
    complete means and covariances of ``rows`` (NaN: missing), computed pair by pair, solved on the
    present block with the ridge (the correlations' negative eigenvalues taken as 0 if the ridge leaves
    them not positive definite), within ``bound`` deviations of their means."""
    k = rows.shape[1]
    mean = np.array([np.nanmean(rows[:, i]) for i in range(k)])
    covariance = np.zeros((k, k))
    for i in range(k):
        for j in range(k):
            both = ~np.isnan(rows[:, i]) & ~np.isnan(rows[:, j])
            if both.sum() >= 2:
                a, b = rows[both, i], rows[both, j]
                covariance[i, j] = np.mean((a - a.mean()) * (b - b.mean()))
    deviation = np.sqrt(covariance.diagonal())
    correlation = covariance / np.outer(deviation, deviation)
    eigenvalues, vectors = np.linalg.eigh(correlation)
    if eigenvalues.min() + ridge <= 0.0:  # (not positive definite with the ridge: negative eigenvalues as 0)
        correlation = (vectors * np.maximum(eigenvalues, 0.0)) @ vectors.T
    m, o = np.isnan(row), ~np.isnan(row)
    z = (row[o] - mean[o]) / deviation[o]
    gram = correlation[np.ix_(o, o)] + ridge * np.eye(o.sum())
    regressed = correlation[np.ix_(m, o)] @ np.linalg.solve(gram, z)
    imputed: np.ndarray = mean[m] + deviation[m] * np.clip(regressed, -bound, bound)
    return imputed


def _correlated_records(n: int, seed: int, missing: float = 0.2) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Records of four correlated numbers far from 0 (some missing) and a category; a target of them."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n, 1))
    X = 1e4 + base * [1.0, 2.0, -1.0, 0.5] + 0.3 * rng.normal(size=(n, 4))
    records = [{**{n: None if rng.random() < missing else float(v) for n, v in zip("abcd", x, strict=True)},
                "kind": "k" + str(int(rng.integers(3)))} for x in X]
    return records, X @ [1.0, 1.0, 1.0, 1.0]


def test_the_imputed_numbers_are_the_gaussian_conditional_mean_of_a_slow_reference() -> None:
    records, y = _correlated_records(20 * IMPUTE_REFRESH, seed=11)  # (imputing by the moments of them all)
    learner = kons.Auto()
    for r, t in zip(records, y, strict=True):
        learner.learn_one(r, t)
    prep = learner._prep
    assert prep.encoder is not None and prep.imputer is not None
    names = [n for n in "abcd"]
    columns = [prep.encoder.names[n].numeric for n in names]
    rows = np.array([[np.nan if r[n] is None else r[n] for n in names] for r in records])
    for query in ({"a": 1e4 + 1.0, "b": None, "c": 1e4 - 0.5, "d": None, "kind": "k1"},
                  {"a": None, "b": None, "c": None, "d": 1e4 + 0.2},
                  {"a": None, "b": 1e4 - 2.0, "c": 1e4 + 1.0, "d": 1e4},
                  {"a": 1e4 + 10.0, "b": None, "c": None, "d": None}):  # (beyond the bound: clipped)
        encoded, _ = prep.encode(parse_record(query, None), learner._dim)
        row = np.array([np.nan if query.get(n) is None else query[n] for n in names])
        expected = _slow_conditional_mean(rows, row, prep.imputer.ridge, IMPUTE_BOUND)
        np.testing.assert_allclose(dense(encoded)[columns][np.isnan(row)], expected, rtol=1e-9)
        np.testing.assert_array_equal(dense(encoded)[columns][~np.isnan(row)], row[~np.isnan(row)])


def test_a_record_missing_no_number_is_encoded_as_without_the_imputer() -> None:
    records, y = _correlated_records(100, seed=12)
    learner = kons.Auto()
    for r, t in zip(records, y, strict=True):
        learner.learn_one(r, t)
    prep = learner._prep
    assert prep.encoder is not None
    complete, gap = (parse_record({"a": 1e4, "b": 1e4, "c": 1e4, "d": v, "kind": None}, None)
                     for v in (1e4, None))
    assert prep.encode(complete, learner._dim)[0] is prep.encoder.pending(complete)[0]  # (no copy, no solve)
    assert not np.isnan(dense(prep.encode(gap, learner._dim)[0])[prep.encoder.names["d"].numeric])


def test_a_stream_missing_no_number_plays_as_without_the_imputer() -> None:
    records, y = _correlated_records(150, seed=13, missing=0.0)
    imputing, not_imputing = kons.Auto(), kons.Auto()
    not_imputing._prep.imputer = None
    for r, t in zip(records, y, strict=True):
        assert imputing.learn_one(r, t) == not_imputing.learn_one(r, t)


def test_the_imputer_saved_mid_stream_restores_exactly() -> None:
    records, y = _correlated_records(200, seed=14)
    whole, first = kons.Auto(), kons.Auto()
    played = [whole.learn_one(r, t) for r, t in zip(records, y, strict=True)]
    for r, t in zip(records[:120], y[:120], strict=True):
        first.learn_one(r, t)
    restored = kons.load(first.to_bytes())
    assert isinstance(restored, kons.Auto)
    assert restored._prep.imputer is not None and first._prep.imputer is not None
    for key, value in first._prep.imputer.arrays().items():
        np.testing.assert_array_equal(restored._prep.imputer.arrays()[key], value)
    assert [restored.learn_one(r, t) for r, t in zip(records[120:], y[120:], strict=True)] == played[120:]
    assert restored.to_bytes() == whole.to_bytes()


def test_the_imputers_bytes_counted_are_those_of_its_arrays() -> None:
    from kons.base import arrays_nbytes
    from kons.records import IMPUTE_RIDGE, GaussianImputer

    records, y = _correlated_records(3 * IMPUTE_REFRESH + 5, seed=18)  # (rows held after the last refresh)
    learner = kons.Auto()
    imputer = learner._prep.imputer
    assert imputer is not None
    for r, t in zip(records, y, strict=True):
        assert imputer.nbytes() == arrays_nbytes(imputer.arrays())
        learner.learn_one(r, t)
    restored = kons.load(learner.to_bytes())
    assert isinstance(restored, kons.Auto) and restored._prep.imputer is not None
    again = restored._prep.imputer
    assert again.nbytes() == arrays_nbytes(again.arrays()) == imputer.nbytes()
    tracked = GaussianImputer(IMPUTE_RIDGE)  # (a state saved before the imputer: coordinates, no statistics)
    tracked.track([0, 2, 5], np.zeros(3))
    assert tracked.nbytes() == arrays_nbytes(tracked.arrays())


@pytest.mark.parametrize("key", ["impute_moments", "impute_coordinates"])
def test_a_corrupted_imputer_is_a_state_format_error(key: str) -> None:
    from kons import _state

    learner = kons.Auto()
    for r, t in zip(*_correlated_records(30, seed=15), strict=True):
        learner.learn_one(r, t)
    header, arrays = _state.decode(learner.to_bytes())
    arrays = dict(arrays)
    arrays[key] = arrays[key][:-1]
    with pytest.raises(kons.errors.StateFormatError):
        kons.load(_state.encode(header, arrays))


def test_pairwise_correlations_not_positive_definite_impute_by_their_positive_part() -> None:
    from kons.records import IMPUTE_RIDGE, GaussianImputer

    # a and b rise together, b and c too, but a and c oppose: no joint distribution has these correlations
    t = np.random.default_rng(16).normal(size=(3, 3 * IMPUTE_REFRESH))
    nan = np.full(3 * IMPUTE_REFRESH, np.nan)
    rows = np.vstack([np.column_stack(c) for c in ((t[0], t[0], nan), (nan, t[1], t[1]), (t[2], nan, -t[2]))])
    imputer = GaussianImputer(IMPUTE_RIDGE)
    for i, row in enumerate(rows):  # (a coordinate is taken in the round of its first number)
        imputer.commit(row, {0: [0, 1], 3 * IMPUTE_REFRESH: [2]}.get(i, []))
    for query in ([0.7, np.nan, np.nan], [0.5, -0.4, np.nan]):
        row = np.array(query)
        expected = _slow_conditional_mean(rows, row, IMPUTE_RIDGE, IMPUTE_BOUND)
        np.testing.assert_allclose(imputer.filled(row)[np.isnan(row)], expected, rtol=1e-9)


def test_a_kept_gap_imputes_as_computed_afresh_until_the_statistics_change() -> None:
    from kons.records import IMPUTE_RIDGE, GaussianImputer

    rng = np.random.default_rng(17)
    n = 4 * IMPUTE_REFRESH
    rows = rng.normal(size=(n, 1)) * [1.0, 2.0, -1.0] + 0.3 * rng.normal(size=(n, 3))
    rows[1:][rng.random((n - 1, 3)) < 0.3] = np.nan  # (the first row's values are the shift)
    imputer = GaussianImputer(IMPUTE_RIDGE)
    for i, row in enumerate(rows):
        imputer.commit(row, [0, 1, 2] if i == 0 else [])
        fresh = GaussianImputer(IMPUTE_RIDGE)
        fresh.restore(imputer.arrays(), 3)
        for query in ([np.nan, 0.5, -0.2], [0.3, np.nan, np.nan]):  # one gap (kept), two (computed each time)
            np.testing.assert_array_equal(imputer.filled(np.array(query)), fresh.filled(np.array(query)))
    assert len(imputer._kept_gaps[1]) == 1


def _tagged_stream(n: int, tags: int = 4) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Records with a categorical signal (the city) and a name that says nothing of the target (the tag):
    each row's numbers, city and target come ``tags`` times in a row, once with each tag, so that every tag
    has the same targets."""
    rng = np.random.default_rng(1)
    records, targets = [], []
    for base in range(n // tags):
        city, rooms, noise = CITIES[base % len(CITIES)], int(rng.integers(1, 6)), float(rng.normal())
        target = 100.0 + 20.0 * CITY_EFFECT[city] + 5.0 * rooms + rng.normal()
        for tag in range(tags):
            records.append({"city": city, "rooms": rooms, "noise": noise, "tag": f"t{tag}"})
            targets.append(target)
    return records, np.array(targets)


def test_a_name_that_says_nothing_on_the_warm_up_is_left_out_of_the_narrow_raw_kernels() -> None:
    # a kernel that sees a name that says nothing is worse whatever the name's weight; the warm-up's test of
    # each name against the target (Grid.silent, NAME_EVIDENCE_LEVEL) leaves the names it finds saying
    # nothing out of the raw view's narrow kernel members too, at the width of the rows without them, and
    # the names that say something in (docs/auto-log.md)
    from kons.auto.config import GRID, NUMBERS_WIDTH
    from kons.auto.grid import silent_names
    from kons.kernel import NystromKONS

    records, y = _tagged_stream(120)
    learner, grid, z, forms = _learnt_forms(records, y)
    encoder = learner._prep.encoder
    assert encoder is not None
    tag = np.array(sorted(encoder.names["tag"].one_hot_slots()))
    city = np.array(sorted(encoder.names["city"].one_hot_slots()))
    assert len(grid.silent) == 1 and grid.silent[0] in tag  # the tag said nothing, the city much
    assert grid.quiet_width is not None
    for (view, kind, width, _), member in zip(GRID, grid.members, strict=True):
        if view == "raw" and kind == "nystrom" and width != NUMBERS_WIDTH:
            assert member.form == (3, False)
            assert isinstance(member.base, NystromKONS)
            assert member.base.kernel.gamma == grid.quiet_width * width  # type: ignore[attr-defined]
    assert np.all(forms[3, False][tag] == 0.0) and np.array_equal(forms[3, False][city], z[city])
    assert np.array_equal(forms[False, False], z)  # the raw view itself (its linear members, the kept rows)
    # a state saved keeps it, and goes on so restored
    blob = learner.to_bytes()
    restored = kons.load(blob)
    assert isinstance(restored, kons.Auto) and restored._grid is not None
    assert restored._grid.silent == grid.silent and restored._grid.quiet_width == grid.quiet_width
    for record, target in zip(records[:20], y[:20], strict=True):
        assert restored.learn_one(record, target) == learner.learn_one(record, target)
    assert restored.to_bytes() == learner.to_bytes()
    # where every name said nothing, the raw kernels take the geometry of the records without them
    alone = {label: kons.Auto() for label in ("with", "without")}
    for record, target in zip(records, y, strict=True):
        alone["with"].learn_one({k: v for k, v in record.items() if k != "city"}, target)
        alone["without"].learn_one({k: v for k, v in record.items() if k not in ("city", "tag")}, target)
    tagged, untagged = alone["with"]._grid, alone["without"]._grid
    assert tagged is not None and untagged is not None and untagged.silent == ()
    assert tagged.quiet_width == pytest.approx(untagged.widths[0], rel=1e-12)
    assert tagged.numbers_width == pytest.approx(untagged.widths[0] * NUMBERS_WIDTH, rel=1e-12)
    # the tests themselves: a label of the category is heard, one independent of it is not
    rows = [np.eye(3)[k % 3] for k in range(30)]
    groups = (np.arange(3),)
    assert silent_names(rows, [float(k % 3 == 0) for k in range(30)], groups, classes=True) == ()
    assert silent_names(rows, [float(k // 3 % 2) for k in range(30)], groups, classes=True) == (0,)
    assert silent_names(rows, [float(k % 3) for k in range(30)], groups, classes=False) == ()
    # arrays have no categorical names: no name is tested, every raw member as before
    arrays = kons.Auto()
    for row, target in zip(np.random.default_rng(0).normal(size=(60, 3)), y[:60], strict=True):
        arrays.learn_one(row, target)
    assert arrays._grid is not None and arrays._grid.silent == ()
    assert all(m.form[0] in (0, 1) for m in arrays._grid.members)
