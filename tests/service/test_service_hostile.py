"""Hostile bodies: the key is checked before a byte of the body is read, one tenant cannot hold many
large bodies in flight, a large body is parsed and validated by a worker process (with the answers the
serving process gives), a body refused unread closes the connection, the fast JSON path keeps the strict
parser's answers, and the API documents need a key when keys are configured."""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator

import anyio
import httpx
import numpy as np
import pytest

import kons_service.http.body
import kons_service.http.parsers
from kons_service.http.errors import InvalidJSONError
from kons_service.http.parsers import INLINE_BYTES, Parsed, loads_strict, parse_and_validate
from kons_service.http.schemas import PredictRequest
from kons_service.http.v2 import InferenceRequest, rows_of
from kons_service.settings import Settings
from testkit.processes import SPEC, AppFactory, serve

pytestmark = pytest.mark.anyio

KEYS = "alpha:key-a,beta:key-b"
A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}
URL = "/v1/learners/m"


@pytest.fixture
async def multi(make_client: AppFactory) -> httpx.AsyncClient:
    return await make_client(api_keys=KEYS)


async def test_an_unauthenticated_body_is_never_read(multi: httpx.AsyncClient) -> None:
    read = []

    async def body() -> AsyncIterator[bytes]:
        for _ in range(100):  # 6.4 MB if it were read
            read.append(1)
            yield b"[" + b"1," * 32767 + b"1]"

    for headers in ({}, {"Authorization": "Bearer wrong"}):
        response = await multi.post(f"{URL}/predict", content=body(), headers=headers)
        assert response.status_code == 401
        assert read == []


async def test_a_tenant_holds_at_most_one_large_body_and_others_are_unaffected(
    multi: httpx.AsyncClient,
) -> None:
    for headers in (A, B):
        assert (await multi.put(URL, json=SPEC, headers=headers)).status_code == 201
    release, started = anyio.Event(), anyio.Event()

    async def held_body() -> AsyncIterator[bytes]:  # unsized: counts as large
        yield b'{"x": [1, 2'
        started.set()
        await release.wait()
        yield b", 3]}"

    answers: dict[str, httpx.Response] = {}

    async def held() -> None:
        headers = {**A, "content-type": "application/json"}
        answers["held"] = await multi.post(f"{URL}/predict", content=held_body(), headers=headers)

    large = {"x": [0.5] * 20_000}  # over 64 KiB of JSON
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(held)
        await started.wait()
        second = await multi.post(f"{URL}/predict", json=large, headers=A)
        assert second.status_code == 429 and second.headers["retry-after"] == "1"
        assert second.json()["error"]["code"] == "too_many_requests"
        small = await multi.post(f"{URL}/predict", json={"x": [1, 2, 3]}, headers=A)
        assert small.status_code == 200  # small bodies are not limited
        reads = [await multi.get(path, headers=A) for path in (URL, f"{URL}/history", "/v1/learners")]
        assert [r.status_code for r in reads] == [200, 200, 200]  # nor requests without a body
        other = await multi.post(f"{URL}/predict", json=large, headers=B)
        assert other.status_code == 422  # another tenant's large body is served (wrong dimension)
        release.set()
    assert answers["held"].status_code == 200, answers["held"].text
    again = await multi.post(f"{URL}/predict", json=large, headers=A)
    assert again.status_code == 422  # the slot was given back


@pytest.mark.parametrize("body", [
    b'{"x": [1, 2.5, -3e-300, 1.7976931348623157e308], "y": 0}',
    b'{"a": {"b": [[1, 2], [3.25, {"c": 1e308}]]}, "d": "1e999", "e": 123456789012345678901234567890}',
    b'[1e308, 1e308]',  # the sum overflows: each number is still finite
])
def test_the_fast_parser_gives_what_json_gives(body: bytes) -> None:
    assert loads_strict(body) == json.loads(body)


@pytest.mark.parametrize(("body", "error"), [(b'[1, 1e999]', "1e999"), (b'{"a": [NaN]}', "NaN"),
                                             (b'{"a": {"b": -1e400}}', "1e400"), (b"[1,]", "Expecting")])
def test_the_fast_parser_falls_back_to_the_strict_errors(body: bytes, error: str) -> None:
    with pytest.raises((InvalidJSONError, ValueError), match=error):
        loads_strict(body)


PADDING = b" " * (INLINE_BYTES + 1)  # trailing whitespace: the same JSON, parsed by the worker process
BODIES = [  # (path, raw body): every way a body can go wrong, and right ones
    (f"{URL}/predict", b'{"x": [0.5, -1, 2e-3]}'),
    (f"{URL}/predict", b'{"xs": [[0.5, -1, 2e-3], [1, 2, 3]], "ids": ["a", "b"]}'),
    (f"{URL}/feedback", b'{"items": [{"x": [1, 2, 3], "y": 1}, {"x": [1, 2, 4], "y": -2}], '
                        b'"request_id": "r"}'),
    (f"{URL}/feedback", b'{"x": [1, 2, 3], "y": '),
    (f"{URL}/feedback", b"not json"),
    (f"{URL}/feedback", b'{"x": [NaN, 2, 3], "y": 1}'),
    (f"{URL}/feedback", b'{"x": [1e999, 2, 3], "y": 1}'),
    (f"{URL}/feedback", b'{"x": [1, 2, 3], "y": 1e400}'),
    (f"{URL}/feedback", b'{"x": [1, 2, 3]}'),
    (f"{URL}/feedback", b'{"x": [1, true, 3], "y": 1.0}'),
    (f"{URL}/feedback", b'{"x": ["1", 2, 3], "y": 1.0}'),
    (f"{URL}/feedback", b'{"x": [], "y": 1.0}'),
    (f"{URL}/feedback", b'{"x": [1, 2, 3], "y": 1.0, "weight": 2}'),
    (f"{URL}/feedback", b'{"items": [{"x": [1, 2, 3], "y": 1}, {"x": [1, 2, 3]}]}'),
    (f"{URL}/feedback", b'{"x": [1, 2, 3, 4], "y": 1.0}'),
    (f"{URL}/feedback", b"[1, 2, 3]"),
    (f"{URL}/predict", b'{"x": [1, 2, 3], "xs": [[1, 2, 3]]}'),
    (f"{URL}/predict", b'{"x": [1, 2, 3], "id": "bad id!"}'),
    (f"{URL}/predict", b'{"x": {"indices": [0], "values": [1.0]}}'),
    ("/v1/learners/bad name!/predict", b'{"x": [1, 2, 3]}'),
    ("/v2/models/m/infer", b'{"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP64", '
                           b'"data": [1, 2, 3]}]}'),
    ("/v2/models/m/infer", b'{"inputs": [{"name": "x", "shape": [1, 3], "datatype": "INT8", '
                           b'"data": [1, 2, 300]}]}'),
    ("/v2/models/m/infer", b'{"inputs": []}'),
]


def _answer(response: httpx.Response) -> tuple[int, object]:
    body = response.json()
    if isinstance(body.get("error"), dict):
        body["error"].pop("request_id", None)
    return response.status_code, body


async def test_a_large_body_gets_the_answer_its_small_twin_gets(make_client: AppFactory) -> None:
    """The parser process answers as the serving process does: same status, same error, same result."""
    client = await make_client()
    headers = {"content-type": "application/json"}
    assert (await client.put(URL, json=SPEC)).status_code == 201
    for path, raw in BODIES:
        small = await client.post(path, content=raw, headers=headers)
        large = await client.post(path, content=raw + PADDING, headers=headers)
        if small.status_code == 200 and "feedback" in path:
            assert large.json()["version"] == small.json()["version"]  # a retry of the same request_id
            continue
        assert _answer(large) == _answer(small), (path, raw)
        assert small.status_code < 500, small.text


@pytest.fixture
def parsed_here(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the bodies the serving process itself parses (a worker process records nothing)."""
    parsed: list[int] = []

    def recording(body: bytes) -> object:
        parsed.append(len(body))
        return loads_strict(body)

    monkeypatch.setattr(kons_service.http.body, "loads_strict", recording)
    monkeypatch.setattr(kons_service.http.parsers, "loads_strict", recording)
    return parsed


async def test_the_serving_process_does_not_parse_a_large_body(
    make_client: AppFactory, parsed_here: list[int]
) -> None:
    parsed = parsed_here
    client = await make_client()
    assert (await client.put(URL, json=SPEC)).status_code == 201
    raw = b'{"xs": [[0.5, -1, 2e-3], [1, 2, 3]]}'
    headers = {"content-type": "application/json"}
    small = await client.post(f"{URL}/predict", content=raw, headers=headers)
    large = await client.post(f"{URL}/predict", content=raw + PADDING, headers=headers)
    assert small.status_code == 200 and large.json() == small.json()
    assert len(raw) in parsed  # the small one, inline; the large one in the parser process:
    assert max(parsed) <= INLINE_BYTES


async def test_with_keys_the_serving_process_does_not_parse_a_heavy_body(
    make_client: AppFactory, parsed_here: list[int]
) -> None:
    """A body over HEAVY_BYTES (under INLINE_BYTES) takes a turn and is parsed out of the serving process
    when there are tenants to protect; a single-tenant service parses it inline."""
    heavy = json.dumps({"xs": [[0.123456789, -1.23456789, 2.3456789e-3]] * 500}).encode()
    assert kons_service.http.body.HEAVY_BYTES < len(heavy) <= INLINE_BYTES
    for keys, headers, inline in ((KEYS, A, False), (None, {}, True)):
        parsed_here.clear()
        client = await make_client(api_keys=keys) if keys else await make_client()
        assert (await client.put(URL, json=SPEC, headers=headers)).status_code == 201
        answer = await client.post(f"{URL}/predict", content=heavy,
                                   headers={**headers, "content-type": "application/json"})
        assert answer.status_code == 200 and len(answer.json()["predictions"]) == 500
        assert (len(heavy) in parsed_here) == inline


async def test_the_parser_processes_end_with_the_app(redis_url: str) -> None:
    settings = Settings(redis_url=redis_url, parse_workers=2)
    async with serve(settings) as client:
        parsers = client.app.state.parsers
        headers = {"content-type": "application/json"}
        answer = await client.put(URL, content=json.dumps(SPEC).encode() + PADDING, headers=headers)
        assert answer.status_code == 201
        processes = list(parsers._executor._processes.values())  # the pool's own record of its workers
        assert processes and all(p.is_alive() for p in processes)
        assert all(p.pid != os.getpid() for p in processes)
    assert parsers._executor is None
    assert not any(p.is_alive() for p in processes)


async def test_a_body_refused_unread_closes_the_connection(multi: httpx.AsyncClient) -> None:
    assert (await multi.put(URL, json=SPEC, headers=A)).status_code == 201
    large = {"x": [0.5] * 20_000}
    refused = await multi.post(f"{URL}/predict", json=large, headers={"Authorization": "Bearer wrong"})
    assert refused.status_code == 401 and refused.headers["connection"] == "close"
    small = await multi.post(f"{URL}/predict", json={"x": [1, 2, 3]}, headers={"Authorization": "Bearer no"})
    assert small.status_code == 401 and "connection" not in small.headers  # drained: the connection stays
    v2 = await multi.post("/v2/models/m/infer", json={"inputs": [large]}, headers={})
    assert v2.status_code == 401 and v2.headers["connection"] == "close"
    served = await multi.post(f"{URL}/predict", json=large, headers=A)
    assert served.status_code == 422 and "connection" not in served.headers  # read: nothing to drain


async def test_the_too_large_body_closes_the_connection(make_client: AppFactory) -> None:
    client = await make_client(max_request_bytes=4096)
    answer = await client.post(f"{URL}/predict", json={"x": [0.5] * 2000})
    assert answer.status_code == 413 and answer.headers["connection"] == "close"


async def test_the_api_document_needs_a_key_when_keys_are_configured(make_client: AppFactory) -> None:
    multi_tenant = await make_client(api_keys=KEYS)
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        refused = await multi_tenant.get("/openapi.json", headers=headers)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
    document = (await multi_tenant.get("/openapi.json", headers=A)).json()
    single_tenant = await make_client()
    assert document == (await single_tenant.get("/openapi.json")).json()
    assert not {"/docs", "/redoc", "/openapi.json"} & set(document["paths"])


@pytest.mark.parametrize(("path", "script"), [("/docs", "swagger-ui-bundle.js"),
                                              ("/redoc", "redoc.standalone.js")])
async def test_the_documentation_pages_are_public_and_load_nothing_from_elsewhere(
        make_client: AppFactory, path: str, script: str) -> None:
    """The pages (and the dashboard) hold no data: a browser reaches them without a key, and they ask
    for one before fetching the document. Their scripts come from the package, not a CDN."""
    client = await make_client(api_keys=KEYS)
    page = await client.get(path)
    assert page.status_code == 200 and (await client.get("/dashboard")).status_code == 200
    assert "/openapi.json" in page.text and "https://" not in page.text and "http://" not in page.text
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert f"/docs-assets/{script}" in sources and all(s.startswith("/docs-assets/") for s in sources)
    for source in sources:
        asset = await client.get(source)
        assert asset.status_code == 200 and len(asset.content) > 1000, source


def test_the_parser_process_sends_back_arrays_not_python_numbers() -> None:
    """What crosses back to the serving process: float64 buffers (copied whole), never lists of Python
    floats (rebuilt one by one, under the GIL)."""
    x = [0.25 * i for i in range(20_000)]
    predict = parse_and_validate(PredictRequest, json.dumps({"xs": [x, x]}).encode())
    assert isinstance(predict, Parsed)
    assert all(type(row) is np.ndarray and row.dtype == np.float64 for row in predict.body.rows())
    assert np.array_equal(predict.body.rows()[1], x)
    tensor = {"name": "x", "shape": [2, 20_000], "datatype": "FP32", "data": [x, x]}
    infer = parse_and_validate(InferenceRequest, json.dumps({"inputs": [tensor]}).encode())
    assert isinstance(infer, Parsed) and infer.body.inputs[0].data == []  # decoded: the rows, not the data
    rows = rows_of(infer.body)
    assert all(type(row) is np.ndarray for row in rows)
    assert np.array_equal(rows[0], np.array(x, dtype=np.float32).astype(np.float64))


async def test_a_dead_parser_process_costs_one_503_and_is_replaced(make_client: AppFactory) -> None:
    client = await make_client()
    assert (await client.put(URL, json=SPEC)).status_code == 201
    body, headers = b'{"x": [0.5, -1, 2e-3]}' + PADDING, {"content-type": "application/json"}
    first = await client.post(f"{URL}/predict", content=body, headers=headers)
    assert first.status_code == 200
    for process in client.app.state.parsers._executor._processes.values():  # as the OOM killer would
        process.kill()
        process.join()
    lost = await client.post(f"{URL}/predict", content=body, headers=headers)
    assert lost.status_code == 503 and lost.headers["retry-after"] == "1"
    assert lost.json()["error"]["code"] == "parser_unavailable"
    again = await client.post(f"{URL}/predict", content=body, headers=headers)
    assert again.status_code == 200 and again.json() == first.json()
