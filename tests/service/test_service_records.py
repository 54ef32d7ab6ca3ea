"""Records ``{"x": {name: number | string | bool | null}}``: what the schema refuses (a clear 422, the
learner unchanged: same version, same state bytes), and how the log keeps records and labels of any kind."""

from __future__ import annotations

import json
import struct
from typing import Any

import httpx
import numpy as np
import pytest

import kons
import kons.records
from kons_service.core import codec
from kons_service.http.schemas import NAME_MAX_CHARS, RECORD_MAX_FIELDS, TEXT_MAX_CHARS
from testkit.processes import AppFactory

pytestmark = pytest.mark.anyio

URL = "/v1/learners/m"


def _keyed(distribution: dict[Any, float]) -> dict[str, float]:
    return {c if isinstance(c, str) else json.dumps(c): p for c, p in distribution.items()}


async def _unchanged_probe(client: httpx.AsyncClient) -> tuple[int, bytes]:
    state = await client.get(f"{URL}/state")
    assert state.status_code == 200
    return int(state.headers["X-Kons-Version"]), state.content


@pytest.fixture
async def trained(make_client: AppFactory) -> httpx.AsyncClient:
    client = await make_client()
    assert (await client.put(URL, json={"task": "classification"})).status_code == 201
    for i in range(3):
        fed = await client.post(f"{URL}/feedback", json={"x": [float(i), 1.0], "y": bool(i % 2)})
        assert fed.status_code == 200, fed.text
    return client


BAD_RECORDS = [  # (x, words in the message)
    ({"age": 30, "address": {"city": "Paris"}}, ["'address'", "an object"]),
    ({"age": 30, "tags": ["a", "b"]}, ["'tags'", "a list"]),
    ({"n" * (NAME_MAX_CHARS + 1): 1.0}, ["field name", str(NAME_MAX_CHARS)]),
    ({"city": "P" * (TEXT_MAX_CHARS + 1)}, ["'city'", str(TEXT_MAX_CHARS)]),
    ({f"f{i}": i for i in range(RECORD_MAX_FIELDS + 1)}, [f"at most {RECORD_MAX_FIELDS} fields"]),
]


@pytest.mark.parametrize(("x", "words"), BAD_RECORDS, ids=["nested", "list", "long-name", "long-text",
                                                          "too-many-fields"])
@pytest.mark.parametrize("route", ["feedback", "feedback-batch", "predict", "predict-batch"])
async def test_bad_records_are_a_422_and_change_nothing(trained: httpx.AsyncClient, x: dict[str, Any],
                                                        words: list[str], route: str) -> None:
    before = await _unchanged_probe(trained)
    bodies: dict[str, dict[str, Any]] = {
        "feedback": {"x": x, "y": True},
        "feedback-batch": {"items": [{"x": [1.0, 2.0], "y": True}, {"x": x, "y": 0}]},
        "predict": {"x": x}, "predict-batch": {"xs": [[1.0, 2.0], x]}}
    body = bodies[route]
    answer = await trained.post(f"{URL}/{route.removesuffix('-batch')}", json=body)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "validation_error"
    for word in words:
        assert word in answer.text, (word, answer.text)
    assert await _unchanged_probe(trained) == before


async def test_a_record_of_a_hundred_thousand_fields_is_refused_cheaply(trained: httpx.AsyncClient) -> None:
    before = await _unchanged_probe(trained)
    record = {f"feature_{i}": float(i) for i in range(100_000)}
    answer = await trained.post(f"{URL}/feedback", json={"x": record, "y": True})
    assert answer.status_code == 422, answer.text[:300]
    assert f"at most {RECORD_MAX_FIELDS} fields; got 100000" in answer.json()["error"]["message"] or \
        f"at most {RECORD_MAX_FIELDS} fields; got 100000" in json.dumps(answer.json()["error"].get("details"))
    assert await _unchanged_probe(trained) == before


@pytest.mark.parametrize("y", [[1], {"label": "a"}, None])
async def test_a_label_that_is_not_a_scalar_is_a_422(trained: httpx.AsyncClient, y: Any) -> None:
    before = await _unchanged_probe(trained)
    for body in ({"x": {"a": 1.0}, "y": y}, {"items": [{"x": [1.0, 2.0], "y": y}]}):
        answer = await trained.post(f"{URL}/feedback", json=body)
        assert answer.status_code == 422 and answer.json()["error"]["code"] == "validation_error", answer.text
    assert await _unchanged_probe(trained) == before


@pytest.mark.parametrize("label", [0.1, -3.0, 123800.0, 1e300, 5e-324])
def test_float_labels_are_logged_as_before(label: float) -> None:
    payload = codec.encode_label(label)
    assert payload == struct.pack("<d", label)  # what entries logged before any other label hold
    assert codec.decode_label(payload) == label and isinstance(codec.decode_label(payload), float)
    assert codec.decode_label(codec.encode_label(np.float64(label))) == label


OTHER_LABELS = ["dog", "", "1234567", "12345678", "cat é", True, False, 2, -7, 10**18, "0.5"]


@pytest.mark.parametrize("label", OTHER_LABELS)
def test_other_labels_are_logged_exactly(label: Any) -> None:
    payload = codec.encode_label(label)
    assert len(payload) != 8  # never taken for a float
    decoded = codec.decode_label(payload)
    assert decoded == label and type(decoded) is type(label)


def test_records_are_logged_exactly() -> None:
    record = {"age": 30, "income": 52311.25, "city": "Paris", "member": True, "note": None, "tiny": 5e-324}
    decoded = codec.decode_features(codec.encode_features(codec.to_kons(record)))
    assert decoded == record and [type(v) for v in decoded.values()] == [type(v) for v in record.values()]


def _records(n: int, seed: int = 0) -> tuple[list[dict[str, Any]], list[Any]]:
    """Raw records as an HTTP client sends them: a number, a category, a flag, gaps, a name that appears
    late; and their class."""
    rng = np.random.default_rng(seed)
    rows, labels = [], []
    for t in range(n):
        city = ("Paris", "Lyon", "Lille")[int(rng.integers(3))]
        record: dict[str, Any] = {"rooms": int(rng.integers(1, 6)), "city": city,
                                  "garden": bool(rng.integers(2)),
                                  "floor": None if t % 7 == 0 else float(rng.normal() * 3)}
        if t >= 25:
            record["balcony"] = bool(rng.integers(2))
        rows.append(record)
        labels.append({"Paris": "dear", "Lyon": "fair", "Lille": "cheap"}[city] if t % 9 else "fair")
    return rows, labels


async def test_a_multi_class_records_learner_equals_kons_and_replays_identically(
        make_client: AppFactory) -> None:
    client = await make_client()
    assert (await client.put(URL, json={})).status_code == 201  # the first label (a string) decides
    local = kons.Auto(task="classification")
    rows, labels = _records(60)
    for record, label in zip(rows[:30], labels[:30], strict=True):
        fed = (await client.post(f"{URL}/feedback", json={"x": record, "y": label})).json()
        assert fed["probabilities"] == _keyed(local.learn_proba_one(record, label)), fed
    # a predict remembers the record under its id; the feedback by id learns it as sent
    asked = (await client.post(f"{URL}/predict", json={"x": rows[30], "id": "r30"})).json()
    assert asked["probabilities"] == _keyed(local.predict_proba_dict_one(rows[30]))
    by_id = (await client.post(f"{URL}/feedback", json={"id": "r30", "y": labels[30]})).json()
    assert by_id["probabilities"] == _keyed(local.learn_proba_one(rows[30], labels[30]))
    batch = (await client.post(f"{URL}/feedback", json={"items": [
        {"x": r, "y": y} for r, y in zip(rows[31:], labels[31:], strict=True)]})).json()
    assert batch["probabilities"] == [_keyed(local.learn_proba_one(r, y))
                                      for r, y in zip(rows[31:], labels[31:], strict=True)]
    info = (await client.get(URL)).json()
    assert info["task"] == "classification" and info["encoding"] == local.encoding()
    names = [f["name"] for f in info["encoding"]["features"]]
    assert names == ["city", "floor", "garden", "rooms", "balcony"]
    assert (await client.get(f"{URL}/state")).content == local.to_bytes()
    # a restart, or another replica: the log replayed into the same learner, bit for bit
    replica = await make_client()
    assert (await replica.get(f"{URL}/state")).content == local.to_bytes()
    probe = {"city": "Lyon", "rooms": 2, "garden": False, "floor": None, "cellar": "yes"}  # a new name too
    assert (await replica.post(f"{URL}/predict", json={"x": probe})).json()["probabilities"] == \
        _keyed(local.predict_proba_dict_one(probe))


async def test_a_regression_records_learner_answers_in_the_targets_units(make_client: AppFactory) -> None:
    client = await make_client()
    assert (await client.put(URL, json={})).status_code == 201  # the first label (a number) decides
    local = kons.Auto()
    rows, _ = _records(50, seed=3)
    prices = [100.0 * r["rooms"] + {"Paris": 300.0, "Lyon": 150.0, "Lille": 80.0}[r["city"]] for r in rows]
    fed = (await client.post(f"{URL}/feedback", json={"items": [
        {"x": r, "y": p} for r, p in zip(rows, prices, strict=True)]})).json()
    assert fed["predictions"] == [local.learn_one(r, p) for r, p in zip(rows, prices, strict=True)]
    assert set(fed) == {"predictions", "losses", "version"}
    assert (await client.get(URL)).json()["encoding"] == local.encoding()


async def test_more_categories_than_the_bound_share_one_coordinate_counted(make_client: AppFactory) -> None:
    """kons keeps MAX_CATEGORIES categories of a name; later ones share its 'other' coordinate, counted
    in the encoding (accepted: the vocabulary is bounded, the stream is not refused)."""
    client = await make_client()
    assert (await client.put(URL, json={"task": "regression"})).status_code == 201
    local = kons.Auto()
    most = kons.records.MAX_CATEGORIES
    # sixteen keys make the width 96 (6 a key): room for every category the bound keeps
    numbers = {f"n{k}": 0.5 * k for k in range(15)}
    items = [{"x": {"sku": f"item-{i}", **numbers}, "y": float(i % 5)} for i in range(most + 10)]
    fed = await client.post(f"{URL}/feedback", json={"items": items})
    assert fed.status_code == 200, fed.text
    for item in items:
        local.learn_one(item["x"], item["y"])
    encoding = (await client.get(URL)).json()["encoding"]
    assert encoding == local.encoding()
    (sku,) = [f for f in encoding["features"] if f["name"] == "sku"]
    assert len(sku["categories"]) == most and sku["other"]["count"] == 10


async def test_records_refused_by_kons_change_nothing(make_client: AppFactory) -> None:
    """What only kons can refuse (numbers whose squared norm overflows float64): a 422, nothing changed."""
    client = await make_client()
    assert (await client.put(URL, json={"task": "regression"})).status_code == 201
    for t in range(3):
        fed = await client.post(f"{URL}/feedback", json={"x": {"a": float(t), "city": "Paris"}, "y": t})
        assert fed.status_code == 200, fed.text
    before = await _unchanged_probe(client)
    answer = await client.post(f"{URL}/feedback", json={"x": {"a": 1e200, "b": 1e200}, "y": 1.0})
    assert answer.status_code == 422 and answer.json()["error"]["code"] == "invalid_input", answer.text
    assert await _unchanged_probe(client) == before


async def test_a_first_record_is_budgeted_at_the_width_it_fixes(make_client: AppFactory) -> None:
    """A dim-less learner's first record fixes its width (6 coordinates a name, 32 to 256), not its
    number of names: the budget is checked at that width before the round is played."""
    at_40 = kons.Auto.state_bytes({**kons.Auto().get_params(), "dim": 40})
    client = await make_client(learner_max_bytes=at_40 + 1)  # 40 coordinates fit, 240 do not
    assert (await client.put(URL, json={"task": "regression"})).status_code == 201
    wide = {f"f{k}": float(k) for k in range(40)}  # 40 names: a width of 240
    answer = await client.post(f"{URL}/feedback", json={"x": wide, "y": 1.0})
    assert answer.status_code == 422 and answer.json()["error"]["code"] == "resource_limit", answer.text
    assert (await client.get(URL)).json()["version"] == 0
    narrow = {f"f{k}": float(k) for k in range(5)}  # 5 names: a width of 32 (the least)
    assert (await client.post(f"{URL}/feedback", json={"x": narrow, "y": 1.0})).status_code == 200
