"""Records ``{"x": {name: number | string | bool | null}}``: what the schema refuses (a clear 422, the
learner unchanged: same version, same state bytes), and how the log keeps records and labels of any kind."""

from __future__ import annotations

import json
import struct
from typing import Any

import httpx
import numpy as np
import pytest

from kons_service.core import codec
from kons_service.http.schemas import NAME_MAX_CHARS, RECORD_MAX_FIELDS, TEXT_MAX_CHARS
from testkit.processes import AppFactory

pytestmark = pytest.mark.anyio

URL = "/v1/learners/m"


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
