"""Every kind of bad input gets a 4xx JSON error naming the problem, and the learner is unchanged."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from testkit.processes import SPEC, AppFactory

pytestmark = pytest.mark.anyio

URL = "/v1/learners/m"
PROBE = {"xs": [[0.3, -0.2, 1.0], [1.0, 1.0, 1.0]]}
JSON = {"content-type": "application/json"}


async def _fingerprint(client: httpx.AsyncClient, url: str = URL) -> tuple[int, list[float], dict[str, Any]]:
    info = (await client.get(url)).json()
    predictions = (await client.post(f"{url}/predict", json=PROBE)).json()["predictions"]
    return info["version"], predictions, info["stats"]


@pytest.fixture
async def trained(make_client: AppFactory) -> httpx.AsyncClient:
    client = await make_client(max_request_bytes=4096, max_batch=4)
    assert (await client.put(URL, json=SPEC)).status_code == 201
    for i in range(3):
        fed = await client.post(f"{URL}/feedback", json={"x": [i, 1.0, -i], "y": 0.5 * i})
        assert fed.status_code == 200
    hinge = {"algorithm": "kernel_ogd", "dim": 2, "params": {"loss": "hinge"}}
    assert (await client.put("/v1/learners/h", json=hinge)).status_code == 201
    return client


def _expect(response: httpx.Response, status: int, code: str, *words: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == code, body
    message = body["error"]["message"]
    assert isinstance(message, str) and message
    for word in words:
        assert word in message, (word, message)


RAW_BODIES = [  # (path suffix, raw body, status, code, words)
    ("/feedback", b'{"x": [1, 2, 3], "y": ', 400, "invalid_json", ["JSON"]),
    ("/feedback", b"not json", 400, "invalid_json", []),
    ("/feedback", b'{"x": [NaN, 2, 3], "y": 1}', 400, "invalid_json", ["NaN"]),
    ("/feedback", b'{"x": [1, 2, 3], "y": Infinity}', 400, "invalid_json", ["Infinity"]),
    ("/predict", b'{"x": [-Infinity, 2, 3]}', 400, "invalid_json", ["-Infinity"]),
    ("/feedback", b'{"x": [1e999, 2, 3], "y": 1}', 400, "invalid_json", ["1e999"]),
    ("/feedback", b'{"x": [1, 2, 3], "y": 1e400}', 400, "invalid_json", ["out of range"]),
    ("/feedback", b"", 422, "validation_error", []),
    # not UTF-8 (a fuzzer's body; the rounds' fast path once answered it with a 500)
    ("/predict", b'1\x1cFl;\xff\x01">@\xca\x9e', 400, "invalid_json", ["UTF-8"]),
    ("/feedback", b'{"x": [1, 2, 3], "y": "\xff"}', 400, "invalid_json", ["UTF-8"]),
]


@pytest.mark.parametrize(("suffix", "raw", "status", "code", "words"), RAW_BODIES)
async def test_malformed_and_non_finite_json(trained: httpx.AsyncClient, suffix: str, raw: bytes,
                                             status: int, code: str, words: list[str]) -> None:
    before = await _fingerprint(trained)
    _expect(await trained.post(URL + suffix, content=raw, headers=JSON), status, code, *words)
    assert await _fingerprint(trained) == before


SCHEMA_CASES = [  # (path suffix, body, code, words)
    ("/feedback", {"x": [1, 2, 3]}, "validation_error", ["y"]),
    ("/feedback", {"y": 1.0}, "validation_error", ["x"]),
    ("/feedback", {"x": [1, 2, 3], "id": "a", "y": 1.0}, "validation_error", ["exactly one"]),
    ("/feedback", {"x": ["1", 2, 3], "y": 1.0}, "validation_error", ["item 0"]),
    ("/feedback", {"x": [1, True, 3], "y": 1.0}, "validation_error", ["item 1"]),
    ("/feedback", {"x": [1, None, 3], "y": 1.0}, "validation_error", ["item 1"]),
    ("/feedback", {"x": [[1, 2, 3]], "y": 1.0}, "validation_error", ["item 0"]),
    ("/feedback", {"x": [], "y": 1.0}, "validation_error", ["empty"]),
    ("/feedback", {"x": "1,2,3", "y": 1.0}, "validation_error", ["list of numbers"]),
    ("/feedback", {"x": [1, 2, 3], "y": [1.0]}, "validation_error", ["y", "number, a string or a boolean"]),
    ("/feedback", {"x": [1, 2, 3], "y": {"class": 1}}, "validation_error", ["y"]),
    ("/feedback", {"x": [1, 2, 3], "y": "y" * 257}, "validation_error", ["label", "256"]),
    ("/feedback", {"x": [1, 2, 3], "y": None}, "validation_error", ["y"]),
    ("/feedback", {"x": [1, 2, 3], "y": 1.0, "weight": 2}, "validation_error", ["weight"]),
    ("/feedback", {"items": []}, "validation_error", ["empty"]),
    ("/feedback", {"items": [{"x": [1, 2, 3], "y": 1}, {"x": [1, 2, 3]}]}, "validation_error", ["items.1"]),
    ("/predict", {}, "validation_error", ["exactly one"]),
    ("/predict", {"x": [1, 2, 3], "xs": [[1, 2, 3]]}, "validation_error", ["exactly one"]),
    ("/predict", {"xs": [[1, 2, 3]], "ids": ["a", "b"]}, "validation_error", ["ids"]),
    ("/predict", {"x": [1, 2, 3], "id": "bad id!"}, "validation_error", ["id"]),
]


@pytest.mark.parametrize(("suffix", "body", "code", "words"), SCHEMA_CASES)
async def test_schema_errors(trained: httpx.AsyncClient, suffix: str, body: dict[str, Any], code: str,
                             words: list[str]) -> None:
    before = await _fingerprint(trained)
    _expect(await trained.post(URL + suffix, json=body), 422, code, *words)
    assert await _fingerprint(trained) == before


INPUT_CASES = [  # (learner, path suffix, body, words): rejected by kons's own validation
    ("m", "/predict", {"x": [1, 2]}, ["dimension 3"]),
    ("m", "/predict", {"xs": [[1, 2, 3], [1, 2, 3, 4]]}, ["dimension 3"]),
    ("m", "/feedback", {"x": [1, 2, 3, 4], "y": 1.0}, ["dimension 3"]),
    ("m", "/feedback", {"x": [1, 2, 3], "y": "1.0"}, ["does regression", "number"]),
    ("m", "/feedback", {"items": [{"x": [1, 2, 3], "y": 1}, {"x": [1, 2, 3], "y": True}]},
     ["item 1", "does regression"]),
    ("m", "/feedback", {"items": [{"x": [1, 2, 3], "y": 1}, {"x": [1, 2], "y": 1}]}, ["item 1", "dimension"]),
    ("h", "/feedback", {"x": [1, 2], "y": 0.5}, ["label"]),
    # (0 is a valid binary label since the dict path preprocesses: {0, 1} and booleans are accepted)
    ("h", "/feedback", {"items": [{"x": [1, 2], "y": 1}, {"x": [1, 2], "y": 2}]}, ["item 1", "label"]),
]


@pytest.mark.parametrize(("name", "suffix", "body", "words"), INPUT_CASES)
async def test_wrong_dimension_and_labels(
    trained: httpx.AsyncClient, name: str, suffix: str, body: dict[str, Any], words: list[str]
) -> None:
    url = f"/v1/learners/{name}"
    before = await _fingerprint(trained), (await trained.get(url)).json()
    _expect(await trained.post(url + suffix, json=body), 422, "invalid_input", *words)
    assert (await _fingerprint(trained), (await trained.get(url)).json()) == before


CREATE_CASES = [  # (body, code, words)
    ({"algorithm": "nope", "dim": 3}, "invalid_parameter", ["nope"]),
    ({"algorithm": "kons", "dim": 3, "params": {"bogus": 1}}, "invalid_parameter", ["bogus"]),
    ({"algorithm": "kons", "dim": 3, "params": {"eta": -1.0}}, "invalid_parameter", ["eta"]),
    ({"algorithm": "kons", "dim": 3, "params": {"kernel": {"name": "nope"}}}, "invalid_parameter", []),
    ({"algorithm": "kons", "dim": 3, "params": {"loss": "cubic"}}, "invalid_parameter", ["cubic"]),
    ({"algorithm": "kons", "dim": 3, "params": {"dim": 3}}, "invalid_parameter", ["dim"]),
    ({"algorithm": "kons", "dim": 0}, "validation_error", ["dim"]),
    ({"algorithm": "kons", "dim": "3"}, "validation_error", ["dim"]),
    ({"algorithm": "kons", "dim": 2.5}, "validation_error", ["dim"]),  # omitted: test_service_dimless
    ({"algorithm": None, "dim": 3}, "validation_error", ["algorithm"]),  # omitted: auto (test_service_auto)
    ({"algorithm": "kons", "dim": 3, "extra": 1}, "validation_error", ["extra"]),
]


@pytest.mark.parametrize(("body", "code", "words"), CREATE_CASES)
async def test_bad_learner_specs(
    trained: httpx.AsyncClient, body: dict[str, Any], code: str, words: list[str]
) -> None:
    _expect(await trained.put("/v1/learners/fresh", json=body), 422, code, *words)
    assert (await trained.get("/v1/learners/fresh")).status_code == 404


async def test_bad_spec_for_an_existing_name_changes_nothing(trained: httpx.AsyncClient) -> None:
    before = await _fingerprint(trained)
    _expect(await trained.put(URL, json={"algorithm": "nope", "dim": 3}), 422, "invalid_parameter")
    assert await _fingerprint(trained) == before


# Percent-encoded where a client would otherwise resolve or refuse the segment: "secret\n" (a '$' matches
# before a final newline), ".", ".." and "..." (dot-only names are refused).
@pytest.mark.parametrize("name", ["a" * 65, "white space", "semi;colon", "br{ace}", "ünï", "secret%0A",
                                  "%0Asecret", "%2E", "%2E%2E", "..."])
async def test_invalid_names(trained: httpx.AsyncClient, name: str) -> None:
    _expect(await trained.put(f"/v1/learners/{name}", json=SPEC), 422, "invalid_name", "name")
    _expect(await trained.get(f"/v1/learners/{name}"), 422, "invalid_name")
    _expect(await trained.post(f"/v1/learners/{name}/predict", json={"x": [1, 2, 3]}), 422, "invalid_name")


@pytest.mark.parametrize(("method", "suffix", "body"), [
    ("GET", "", None), ("DELETE", "", None), ("GET", "/state", None),
    ("POST", "/predict", {"x": [1, 2, 3]}), ("POST", "/feedback", {"x": [1, 2, 3], "y": 1.0}),
])
async def test_unknown_learner(trained: httpx.AsyncClient, method: str, suffix: str, body: Any) -> None:
    response = await trained.request(method, f"/v1/learners/ghost{suffix}", json=body)
    _expect(response, 404, "learner_not_found", "ghost")


async def test_unknown_route_and_method(trained: httpx.AsyncClient) -> None:
    _expect(await trained.get("/v1/nothing"), 404, "not_found")  # (/v2 answers V2 bodies: test_v2)
    _expect(await trained.patch(URL), 405, "method_not_allowed")


async def test_oversized_body_and_batch(trained: httpx.AsyncClient) -> None:
    before = await _fingerprint(trained)
    big = json.dumps({"items": [{"x": [1.0, 2.0, 3.0], "y": 1.0}] * 200}).encode()
    assert len(big) > 4096
    too_big = await trained.post(f"{URL}/feedback", content=big, headers=JSON)
    _expect(too_big, 413, "payload_too_large", "4096")

    async def chunked() -> Any:  # no Content-Length: the limit still holds while reading
        for start in range(0, len(big), 1000):
            yield big[start : start + 1000]

    _expect(await trained.post(f"{URL}/feedback", content=chunked(), headers=JSON), 413, "payload_too_large")
    five = {"items": [{"x": [1.0, 2.0, 3.0], "y": 1.0}] * 5}
    _expect(await trained.post(f"{URL}/feedback", json=five), 413, "batch_too_large", "4")
    _expect(await trained.post(f"{URL}/predict", json={"xs": [[1, 2, 3]] * 5}), 413, "batch_too_large")
    assert await _fingerprint(trained) == before


# One kind of bad input gets one answer, whichever endpoint carries it: (kind, learner, bad field, its raw
# JSON text, status, code). "m" is SPEC (squared loss, C = 3, dim 3), "h" a hinge learner of dim 2.
BAD_ROUNDS = [
    ("wrong dimension", "m", "x", "[1, 2]", 422, "invalid_input"),
    ("non-finite value", "m", "x", "[1, NaN, 3]", 400, "invalid_json"),
    ("squared norm overflows", "m", "x", "[1e300, 1, 1]", 422, "invalid_input"),
    ("label not in {-1, +1}", "h", "y", "0.5", 422, "invalid_input"),
    ("loss of the label overflows", "m", "y", "1e300", 422, "invalid_input"),
]


def _carriers(field: str, bad: str, good_x: str) -> dict[str, str]:
    """Every way to send a round with a bad ``x`` (predicting is enough to send features) or a bad ``y``
    (with good features, also by the id of a remembered predict); batches hold the bad round second."""
    good = f'{{"x": {good_x}, "y": 1.0}}'
    if field == "x":
        return {
            "/predict": f'{{"x": {bad}}}',
            "/predict xs": f'{{"xs": [{good_x}, {bad}]}}',
            "/predict id": f'{{"x": {bad}, "id": "bad"}}',
            "/feedback": f'{{"x": {bad}, "y": 1.0}}',
            "/feedback items": f'{{"items": [{good}, {{"x": {bad}, "y": 1.0}}]}}',
        }
    return {
        "/feedback": f'{{"x": {good_x}, "y": {bad}}}',
        "/feedback items": f'{{"items": [{good}, {{"x": {good_x}, "y": {bad}}}]}}',
        "/feedback id": f'{{"id": "good", "y": {bad}}}',
        "/feedback id items": f'{{"items": [{good}, {{"id": "good", "y": {bad}}}]}}',
    }


@pytest.mark.parametrize(("kind", "name", "field", "bad", "status", "code"), BAD_ROUNDS)
async def test_one_code_per_kind_of_bad_input_on_every_endpoint(
    trained: httpx.AsyncClient, kind: str, name: str, field: str, bad: str, status: int, code: str
) -> None:
    url = f"/v1/learners/{name}"
    good_x = "[0.1, 0.2, 0.3]" if name == "m" else "[0.1, 0.2]"
    remember = f'{{"x": {good_x}, "id": "good"}}'
    remembered = await trained.post(f"{url}/predict", content=remember, headers=JSON)
    assert remembered.status_code == 200, remembered.text
    before = await _fingerprint(trained), (await trained.get(url)).json()
    answers = {}
    for carrier, body in _carriers(field, bad, good_x).items():
        response = await trained.post(url + carrier.split()[0], content=body, headers=JSON)
        error = response.json()["error"]
        answers[carrier] = (response.status_code, error["code"])
        if code != "invalid_json" and ("items" in carrier or "xs" in carrier):
            assert error["message"].startswith("item 1: "), (carrier, error)
    assert answers == dict.fromkeys(answers, (status, code)), (kind, answers)
    assert (await _fingerprint(trained), (await trained.get(url)).json()) == before
