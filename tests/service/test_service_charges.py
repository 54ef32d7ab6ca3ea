"""What a tenant is charged is what it used: the body bytes read (not those a header claims), and, in its
byte budget, the answers kept for retries; and what it is told to wait is bounded."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from kons_service.http.errors import RETRY_AFTER_MAX_SECONDS
from testkit.processes import AppClient, AppFactory

pytestmark = pytest.mark.anyio

KEYS = "alpha:key-a,beta:key-b"
A = {"Authorization": "Bearer key-a"}
ONS = {"algorithm": "ons", "dim": 3}
PREDICT = "/v1/learners/m/predict"


async def _keyed(make_client: AppFactory, **settings: object) -> AppClient:
    client = await make_client(**{"api_keys": KEYS, "tenant_bytes_rate": 1_000_000,
                                  "tenant_bytes_burst": 2_000_000, **settings})
    assert (await client.put("/v1/learners/m", json=ONS, headers=A)).status_code == 201
    return client


async def test_a_body_refused_unread_for_its_claimed_length_is_not_charged(make_client: AppFactory) -> None:
    """``Content-Length: 10000000000`` is a 413 before a byte is read; the tenant's next request is not
    refused for the ten gigabytes it never sent."""
    client = await _keyed(make_client)
    claimed = {**A, "content-type": "application/json", "content-length": "10000000000"}
    answer = await client.post(PREDICT, content=b'{"x": [1, 2, 3]}', headers=claimed)
    assert answer.status_code == 413, answer.text
    for _ in range(3):
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

    answer = await client.post(PREDICT, content=chunks(), headers={**A, "content-type": "application/json"})
    assert answer.status_code == 413, answer.text
    charged = 200_000 - client.app.state.service.limiter._tenants["alpha"].body_bytes.level
    assert 64 * 1024 < charged <= 64 * 1024 + 2 * 8192 + 1000  # (+ what refilled in the meantime)


async def test_retry_after_is_bounded(make_client: AppFactory) -> None:
    """A tenant deep in debt (here of learner work, charged after the fact) is told to come back within
    the bound, not in years."""
    client = await _keyed(make_client)
    client.app.state.service.limiter.charge_work("alpha", 10**18)
    answer = await client.post(PREDICT, json={"x": [1, 2, 3]}, headers=A)
    assert answer.status_code == 429
    assert 1 <= int(answer.headers["retry-after"]) <= RETRY_AFTER_MAX_SECONDS <= 3600
    assert isinstance(answer, httpx.Response)
