"""Hostile bodies: the key is checked before a byte of the body is read, one tenant cannot hold many
large bodies in flight, and the fast JSON path keeps the strict parser's answers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

from kons_service.errors import InvalidJSONError
from kons_service.parsers import loads_strict
from testkit.processes import SPEC

pytestmark = pytest.mark.anyio

KEYS = "alpha:key-a,beta:key-b"
A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}
URL = "/v1/learners/m"


@pytest.fixture
async def multi(make_client) -> httpx.AsyncClient:
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
