"""What a tenant is charged is what it used: the body bytes read (not those a header claims), and, in its
byte budget, the answers kept for retries; and what it is told to wait is bounded."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import numpy as np
import pytest

from kons_service.core.codec import decode_answer, encode_answer
from kons_service.http.errors import RETRY_AFTER_MAX_SECONDS
from kons_service.store import LearnerRef
from kons_service.store.keys import learner_key
from testkit.processes import AppClient, AppFactory, RedisServer

pytestmark = pytest.mark.anyio

KEYS = "alpha:key-a,beta:key-b"
A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}
ONS = {"algorithm": "ons", "dim": 3}
PREDICT = "/v1/learners/m/predict"


async def _keyed(make_client: AppFactory, **settings: object) -> AppClient:
    client = await make_client(**{"api_keys": KEYS, "tenant_bytes_rate": 1_000_000,
                                  "tenant_bytes_burst": 2_000_000, "tenant_contention_seconds": 600.0,
                                  **settings})
    assert (await client.put("/v1/learners/m", json=ONS, headers=A)).status_code == 201
    return client


async def _contend(client: AppClient) -> None:
    """Another tenant uses the process: the shares apply (a tenant alone may use what nobody waits for)."""
    assert (await client.get("/v1/learners", headers=B)).status_code == 200


async def test_a_body_refused_unread_for_its_claimed_length_is_not_charged(make_client: AppFactory) -> None:
    """``Content-Length: 10000000000`` is a 413 before a byte is read; the tenant's next request is not
    refused for the ten gigabytes it never sent."""
    client = await _keyed(make_client)
    claimed = {**A, "content-type": "application/json", "content-length": "10000000000"}
    await _contend(client)
    answer = await client.post(PREDICT, content=b'{"x": [1, 2, 3]}', headers=claimed)
    assert answer.status_code == 413, answer.text
    for _ in range(3):
        await _contend(client)
        answer = await client.post(PREDICT, json={"x": [1, 2, 3]}, headers=A)
        assert answer.status_code == 200, (answer.status_code, answer.headers.get("retry-after"))


async def test_a_streamed_body_over_the_limit_is_charged_what_was_read(make_client: AppFactory) -> None:
    """A body of unknown length (chunked) over ``max_request_bytes`` is charged the bytes read before it
    was refused, about the limit: the tenant waits that off, seconds, not the size it might have had."""
    client = await _keyed(make_client, max_request_bytes=64 * 1024, tenant_bytes_rate=100_000,
                          tenant_bytes_burst=200_000)

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(40):
            yield b" " * 8192

    await _contend(client)
    answer = await client.post(PREDICT, content=chunks(), headers={**A, "content-type": "application/json"})
    assert answer.status_code == 413, answer.text
    charged = 200_000 - client.app.state.service.limiter._tenants["alpha"].body_bytes.level
    assert 64 * 1024 < charged <= 64 * 1024 + 2 * 8192 + 1000  # (+ what refilled in the meantime)


async def test_retry_after_is_bounded(make_client: AppFactory) -> None:
    """A tenant deep in debt (here of learner work, charged after the fact while another tenant contends:
    a tenant alone is never limited) is told to come back within the bound, not in years."""
    client = await _keyed(make_client)
    await _contend(client)
    client.app.state.service.limiter.charge_work("alpha", 10**18)
    answer = await client.post(PREDICT, json={"x": [1, 2, 3]}, headers=A)
    assert answer.status_code == 429
    assert 1 <= int(answer.headers["retry-after"]) <= RETRY_AFTER_MAX_SECONDS <= 3600
    assert isinstance(answer, httpx.Response)


async def test_the_answer_kept_for_a_retry_is_compact_and_the_retry_gets_it_whole(
        make_client: AppFactory, redis_server: RedisServer) -> None:
    """A 209-row batch to a 256-class classifier: the record kept for a retry holds each probability in 8
    bytes (base64: under 11 characters), the classes once, not a JSON pair per class per row (1.99 MB in
    the audit); a retry is answered exactly as the request was."""
    client = await make_client()
    spec = {"algorithm": "auto", "dim": 4, "params": {"task": "classification"}}
    assert (await client.put("/v1/learners/c", json=spec)).status_code == 201
    rng = np.random.default_rng(0)
    warm = [{"x": rng.normal(size=4).tolist(), "y": f"class-{k}"} for k in range(256)]
    assert (await client.post("/v1/learners/c/feedback", json={"items": warm})).status_code == 200
    items = [{"x": rng.normal(size=4).tolist(), "y": f"class-{rng.integers(256)}"} for _ in range(209)]
    body = {"items": items, "request_id": "batch-1"}
    first = await client.post("/v1/learners/c/feedback", json=body)
    assert first.status_code == 200, first.text
    stored = redis_server.client().hget(learner_key(LearnerRef("default", "c"), "reqs"), "batch-1")
    assert stored is not None
    rows, classes = 209, 256
    assert len(stored) < rows * classes * 11 + 40_000, len(stored)  # (was 1,981,211 bytes)
    again = await client.post("/v1/learners/c/feedback", json=body)
    assert again.status_code == 200
    assert again.json() == first.json()
    assert (await client.get("/v1/learners/c")).json()["version"] == 256 + 209


def test_an_answer_record_reads_back_exactly_in_each_format() -> None:
    """The compact record gives back the distributions bit for bit, labels with their JSON types; a
    record written as pairs (before the compact one) or without distributions still reads."""
    rounds = [[("a", 0.1), (2, 0.9)], [("a", 1 / 3), (2, 0.5), (True, 1 / 6)]]
    answer, distributions = decode_answer(encode_answer("f", [0.5, 0.25], [0.1, 0.2], rounds))
    assert distributions == rounds
    assert [type(label) for label, _ in distributions[1]] == [str, int, bool]
    assert (answer["body"], answer["predictions"], answer["losses"]) == ("f", [0.5, 0.25], [0.1, 0.2])
    legacy = json.dumps({"body": "f", "predictions": [0.5], "losses": [0.1],
                         "distributions": [[["a", 0.25], [True, 0.75]]]})
    assert decode_answer(legacy)[1] == [[("a", 0.25), (True, 0.75)]]
    assert decode_answer(encode_answer("f", [0.5], [0.1], None))[1] is None
    assert decode_answer(json.dumps({"body": "f", "predictions": [0.5], "losses": [0.1]}))[1] is None
