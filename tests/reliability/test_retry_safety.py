"""Feedback is retry-safe: a ``request_id`` is applied at most once, and so is every request whose
reply from Redis was lost (redis-py re-sends the script on a new connection)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any, cast

import httpx
import pytest
import redis

from kons_service.store import LearnerRef, script_text
from testkit.processes import SPEC, AppFactory, RedisServer, ReplyDropper, learner_keys
from testkit.scenarios import round_body

pytestmark = pytest.mark.anyio

URL = "/v1/learners/m"
APPEND_SHA = hashlib.sha1(script_text("append").encode()).hexdigest().encode()


def feedback_body(i: int, request_id: str | None = None) -> dict[str, Any]:
    """The i-th round of a fixed stream, with the given request_id (or none)."""
    body = round_body(0, i)
    del body["request_id"]
    return body if request_id is None else {**body, "request_id": request_id}


async def _state(client: httpx.AsyncClient) -> tuple[int, bytes]:
    response = await client.get(f"{URL}/state")
    return int(response.headers["x-kons-version"]), response.content


async def test_a_retry_returns_the_original_answer_and_changes_nothing(client: httpx.AsyncClient) -> None:
    assert (await client.put(URL, json=SPEC)).status_code == 201
    first = await client.post(f"{URL}/feedback", json=feedback_body(0, request_id="r-1"))
    assert first.status_code == 200 and first.json()["version"] == 1
    before = await _state(client)
    again = await client.post(f"{URL}/feedback", json=feedback_body(0, request_id="r-1"))
    assert again.status_code == 200 and again.json() == first.json()
    assert await _state(client) == before
    second = await client.post(f"{URL}/feedback", json=feedback_body(1, request_id="r-2"))
    assert second.json()["version"] == 2
    late = await client.post(f"{URL}/feedback", json=feedback_body(0, request_id="r-1"))
    assert late.json() == first.json()  # the original answer, version 1, even after newer rounds
    assert (await client.get(URL)).json()["version"] == 2
    metrics = (await client.get("/metrics")).text
    assert "kons_feedback_deduplicated_total 2.0" in metrics


async def test_a_reused_request_id_with_another_body_is_a_409(client: httpx.AsyncClient) -> None:
    await client.put(URL, json=SPEC)
    await client.post(f"{URL}/feedback", json=feedback_body(0, request_id="r-1"))
    before = await _state(client)
    other = await client.post(f"{URL}/feedback", json=feedback_body(1, request_id="r-1"))
    assert other.status_code == 409 and other.json()["error"]["code"] == "request_id_conflict"
    assert await _state(client) == before


@pytest.mark.parametrize("request_id", ["", "x" * 129, "a b", "ü", "~private"])
async def test_request_ids_are_bounded_and_plain(client: httpx.AsyncClient, request_id: str) -> None:
    await client.put(URL, json=SPEC)
    response = await client.post(f"{URL}/feedback", json=feedback_body(0, request_id=request_id))
    assert response.status_code == 422
    assert (await client.get(URL)).json()["version"] == 0


async def test_a_batch_is_one_request(client: httpx.AsyncClient) -> None:
    await client.put(URL, json=SPEC)
    items = [{"x": [0.1 * i, 0.2, -0.3], "y": 0.5 * i} for i in range(4)]
    first = await client.post(f"{URL}/feedback", json={"items": items, "request_id": "batch-1"})
    assert first.status_code == 200 and first.json()["version"] == 4
    again = await client.post(f"{URL}/feedback", json={"items": items, "request_id": "batch-1"})
    assert again.json() == first.json()
    assert (await client.get(URL)).json()["version"] == 4


async def test_a_retry_of_feedback_by_id_is_answered_although_the_id_is_used(
    client: httpx.AsyncClient,
) -> None:
    await client.put(URL, json=SPEC)
    await client.post(f"{URL}/predict", json={"x": [0.1, 0.2, 0.3], "id": "q-1"})
    body = {"id": "q-1", "y": 0.4, "request_id": "r-1"}
    first = await client.post(f"{URL}/feedback", json=body)
    assert first.status_code == 200
    assert (await client.post(f"{URL}/feedback", json=body)).json() == first.json()
    used = await client.post(f"{URL}/feedback", json={"id": "q-1", "y": 0.4})
    assert used.status_code == 404 and used.json()["error"]["code"] == "unknown_id"


async def test_concurrent_duplicates_through_two_instances_apply_once(make_client: AppFactory) -> None:
    one, two = await make_client(), await make_client()
    await one.put(URL, json=SPEC)
    sends = [(one if i % 2 else two).post(f"{URL}/feedback", json=feedback_body(7, request_id="dup"))
             for i in range(12)]
    answers = [r.json() for r in await asyncio.gather(*sends)]
    assert all(a == answers[0] for a in answers) and answers[0]["version"] == 1
    assert (await one.get(URL)).json()["version"] == (await two.get(URL)).json()["version"] == 1


@pytest.mark.parametrize("request_id", [None, "r-1"])
async def test_a_lost_reply_of_the_append_is_not_applied_twice(
    make_client: AppFactory, redis_server: RedisServer, redis_url: str, request_id: str | None
) -> None:
    """The append runs in Redis, its reply is lost, redis-py re-sends it: still one round."""
    async with ReplyDropper(redis_server.port) as proxy:
        client = await make_client(redis_url=proxy.url)
        await client.put(URL, json=SPEC)
        await client.post(f"{URL}/feedback", json=feedback_body(0))  # Redis now knows the script
        proxy.drop(APPEND_SHA)
        response = await client.post(f"{URL}/feedback", json=feedback_body(1, request_id=request_id))
        assert proxy.dropped == 1
        assert response.status_code == 200 and response.json()["version"] == 2
        assert (await client.get(URL)).json()["version"] == 2  # (it was 3 before the fix)
        again = await client.post(f"{URL}/feedback", json=feedback_body(2))
        assert again.json()["version"] == 3  # and the cached learner still agrees with the log
    fresh = await make_client(redis_url=redis_url)
    assert (await fresh.get(f"{URL}/state")).content == (await client.get(f"{URL}/state")).content


async def test_remembered_request_ids_expire_and_their_answers_are_capped(make_client: AppFactory,
                                                                         redis_url: str) -> None:
    """``request_ids_max`` caps the answers kept, not the ids: a retry of an id whose answer was dropped is
    a 409 ``already_applied`` and applies nothing (before: the id was dropped with it, and the retry was
    applied again)."""
    # (ids kept 6 s: the 16 feedbacks below must all come within that, which a loaded machine may take
    # seconds for)
    ttl = 6
    client = await make_client(request_id_ttl_seconds=ttl, request_ids_max=5)
    await client.put(URL, json=SPEC)
    for i in range(12):
        sent = await client.post(f"{URL}/feedback", json=feedback_body(i, request_id=f"r-{i}"))
        assert sent.status_code == 200
    r = redis.Redis.from_url(redis_url)
    keys = learner_keys(LearnerRef("default", "m"))
    reqs, reqs_exp, kept = (next(k for k in keys if k.endswith(part))
                            for part in (":reqs", ":reqs_exp", ":reqs_kept"))
    ids = {f"r-{i}".encode() for i in range(12)}
    fields = cast(list[bytes], r.hkeys(reqs))
    assert r.zcard(reqs_exp) == 12 and ids <= set(fields)  # every id
    assert {k for k in fields if k.startswith(b"=")} == {f"=r-{i}".encode() for i in range(7, 12)}
    assert r.lrange(kept, 0, -1) == [f"r-{i}".encode() for i in range(7, 12)]  # the newest five answers
    retried = await client.post(f"{URL}/feedback", json=feedback_body(0, request_id="r-0"))
    assert retried.status_code == 409 and retried.json()["error"]["code"] == "already_applied", retried.text
    answered = await client.post(f"{URL}/feedback", json=feedback_body(11, request_id="r-11"))
    assert answered.status_code == 200 and answered.json()["version"] == 12
    other = await client.post(f"{URL}/feedback", json=feedback_body(5, request_id="r-0"))
    assert other.status_code == 409 and other.json()["error"]["code"] == "request_id_conflict"
    assert (await client.get(URL)).json()["version"] == 12
    assert 0 < r.pttl(reqs) <= ttl * 1000
    deadline = time.monotonic() + ttl + 4
    while r.exists(reqs, reqs_exp, kept) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not r.exists(reqs, reqs_exp, kept)
    # an expired id is a new request (documented: ids are kept for request_id_ttl_seconds)
    renewed = await client.post(f"{URL}/feedback", json=feedback_body(0, request_id="r-0"))
    assert renewed.json()["version"] == 13
