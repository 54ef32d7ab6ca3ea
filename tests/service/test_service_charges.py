"""What a tenant is charged is what it used: the body bytes read (not those a header claims), and, in its
byte budget, the answers kept for retries; and what it is told to wait is bounded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import httpx
import numpy as np
import pytest

from kons_service.core.codec import decode_answer, encode_answer
from kons_service.http.errors import RETRY_AFTER_MAX_SECONDS
from kons_service.settings import Settings
from kons_service.store import LearnerRef
from kons_service.store.keys import learner_key, tenant_bytes, tenant_record_bytes
from testkit.processes import AppClient, AppFactory, RedisServer, serve

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
    # the Mondrian forest's counts (about 41 KB a class) make this learner's state 13 MB, which would bound
    # a batch to 40 rows: the bound raised so that the audit's batch is sent whole
    client = await make_client(batch_max_work_bytes=2**33)
    spec = {"algorithm": "auto", "dim": 4, "params": {"task": "classification"}}
    assert (await client.put("/v1/learners/c", json=spec)).status_code == 201
    rng = np.random.default_rng(0)
    warm = [{"x": rng.normal(size=4).tolist(), "y": f"class-{k}"} for k in range(256)]
    assert (await client.post("/v1/learners/c/feedback", json={"items": warm})).status_code == 200
    items = [{"x": rng.normal(size=4).tolist(), "y": f"class-{rng.integers(256)}"} for _ in range(209)]
    body = {"items": items, "request_id": "batch-1"}
    first = await client.post("/v1/learners/c/feedback", json=body)
    assert first.status_code == 200, first.text
    reqs = learner_key(LearnerRef("default", "c"), "reqs")
    marker, stored = redis_server.client().hmget(reqs, "batch-1", "=batch-1")
    assert marker is not None and stored is not None
    assert len(marker) < 64  # "<version>:<fingerprint>": what stays when the answer goes
    rows, classes = 209, 256
    assert len(stored) < rows * classes * 11 + 40_000, len(stored)  # (was 1,981,211 bytes)
    again = await client.post("/v1/learners/c/feedback", json=body)
    assert again.status_code == 200
    assert again.json() == first.json()
    assert (await client.get("/v1/learners/c")).json()["version"] == 256 + 209


def test_an_answer_record_reads_back_exactly_in_each_format() -> None:
    """The compact record gives back the distributions bit for bit, labels with their JSON types, and
    the classes predicted; a record written as pairs (before the compact one) or without distributions
    still reads."""
    rounds = [[("a", 0.1), (2, 0.9)], [("a", 1 / 3), (2, 0.5), (True, 1 / 6)]]
    answer, distributions = decode_answer(encode_answer("f", [0.5, 0.25], [0.1, 0.2], rounds))
    assert distributions == rounds
    assert [type(label) for label, _ in distributions[1]] == [str, int, bool]
    assert (answer["body"], answer["predictions"], answer["losses"]) == ("f", [0.5, 0.25], [0.1, 0.2])
    legacy = json.dumps({"body": "f", "predictions": [0.5], "losses": [0.1],
                         "distributions": [[["a", 0.25], [True, 0.75]]]})
    assert decode_answer(legacy)[1] == [[("a", 0.25), (True, 0.75)]]
    assert decode_answer(encode_answer("f", [0.5], [0.1], None))[1] is None
    # the classes predicted, with their JSON types; absent from a record written before them
    labelled, _ = decode_answer(encode_answer("f", [0.5, 0.25], [0.1, 0.2], rounds, [2, True]))
    assert labelled["labels"] == [2, True] and [type(v) for v in labelled["labels"]] == [int, bool]
    assert "labels" not in answer
    assert decode_answer(json.dumps({"body": "f", "predictions": [0.5], "losses": [0.1]}))[1] is None


def _counted(server: RedisServer, ref: LearnerRef) -> tuple[int, int]:
    """The bytes of a learner's request ids (markers) and kept answers, counted from what ``reqs`` holds
    (as ``append.lua`` charges them: the field or list entry, the value, the expiry's member and score)."""
    fields = cast(dict[bytes, bytes], server.client().hgetall(learner_key(ref, "reqs")))
    marks = sum(2 * len(k) + len(v) + 8 for k, v in fields.items() if not k.startswith((b"=", b"*")))
    answers = sum(2 * (len(k) - 1) + 1 + len(v) for k, v in fields.items() if k.startswith(b"="))
    return marks, answers


def _rows(i: int, n: int = 20) -> list[dict[str, object]]:
    rng = np.random.default_rng(i)
    return [{"x": rng.normal(size=3).tolist(), "y": float(rng.normal())} for _ in range(n)]


async def test_the_request_ids_and_answers_kept_for_retries_count_in_the_tenant_budget(
        make_client: AppFactory, redis_server: RedisServer) -> None:
    """The ids and answers kept for retries are reserved in the tenant's byte budget as stored; when the
    learner's share is full the oldest answers go, never an id: each of 80 retries is answered as before
    or refused 409 ``already_applied``, none applied again (on 469cdfb the records were not counted at
    all: no reservation, 80 answers kept whatever the budget)."""
    ref = LearnerRef("alpha", "m")
    client = await _keyed(make_client, request_ids_max_bytes=24_000)
    bodies = [{"items": _rows(i), "request_id": f"req-{i:03d}"} for i in range(80)]
    answers = []
    for body in bodies:
        sent = await client.post("/v1/learners/m/feedback", json=body, headers=A)
        assert sent.status_code == 200, sent.text
        answers.append(sent.json())
    r = redis_server.client()
    reqs = learner_key(ref, "reqs")
    marks, kept = _counted(redis_server, ref)
    assert (int(r.hget(reqs, "*marks") or 0), int(r.hget(reqs, "*answers") or 0)) == (marks, kept)
    reservations = cast(dict[bytes, bytes], r.hgetall(tenant_record_bytes("alpha")))
    reserved = int(reservations[b"m"].split()[0])
    assert marks + kept <= reserved <= 24_000  # charged, within the learner's cap
    state = cast(dict[bytes, bytes], r.hgetall(tenant_bytes("alpha")))
    assert int(state[b"*total"]) >= reserved + int(state[b"m"].split()[0])
    assert r.zcard(learner_key(ref, "reqs_exp")) == 80  # every id is remembered ...
    dropped = [b for b in bodies if not r.hexists(reqs, "=" + str(b["request_id"]))]
    assert 10 < len(dropped) < 80 and dropped == bodies[:len(dropped)]  # ... the oldest answers went
    for body, first in zip(bodies, answers, strict=True):
        again = await client.post("/v1/learners/m/feedback", json=body, headers=A)
        if body in dropped:
            assert again.status_code == 409 and again.json()["error"]["code"] == "already_applied"
        else:
            assert again.status_code == 200 and again.json() == first
    assert (await client.get("/v1/learners/m", headers=A)).json()["version"] == 80 * 20


async def test_a_feedback_whose_request_id_does_not_fit_is_refused_and_applies_nothing(
        make_client: AppFactory, redis_server: RedisServer) -> None:
    """The ids themselves are never dropped to make room: once the learner's share (here 1,024 bytes)
    holds the ids of the last hour, a feedback with a new id is refused 422 ``resource_limit`` and applies
    nothing; one without an id still learns."""
    client = await _keyed(make_client, request_ids_max_bytes=1024)
    statuses = []
    for i in range(30):
        body = {"items": _rows(i, 1), "request_id": f"q{i}"}
        sent = await client.post("/v1/learners/m/feedback", json=body, headers=A)
        statuses.append(sent.status_code)
        if sent.status_code != 200:
            assert sent.json()["error"]["code"] == "resource_limit", sent.text
    applied = statuses.count(200)
    assert 5 <= applied < 30 and statuses == [200] * applied + [422] * (30 - applied)
    marks, _ = _counted(redis_server, LearnerRef("alpha", "m"))
    assert marks <= 1024
    assert (await client.get("/v1/learners/m", headers=A)).json()["version"] == applied
    plain = await client.post("/v1/learners/m/feedback", json={"items": _rows(99, 1)}, headers=A)
    assert plain.status_code == 200 and plain.json()["version"] == applied + 1


async def _records_reserved(client: AppClient, tenant: str) -> tuple[int, int]:
    """The learner m's reservation for request ids and kept answers, and its tenant's total."""
    redis_client = client.app.state.service.store.budget.connection.client
    entry = await redis_client.hget(tenant_record_bytes(tenant), "m")
    total = await redis_client.hget(tenant_bytes(tenant), "*total")
    return int(entry.split(b" ")[0]), int(total)


async def _expired_records_give_back(client: AppClient, tenant: str, headers: dict[str, str]) -> None:
    """A burst of feedbacks with request ids, then none: once the ids expire, the sweep gives their
    reservation back to the tenant (it was held until the learner was deleted), and the next id reserves
    again."""
    client.app.state.service.budget.shrink_min_age_ms = 0  # (a process asks again before each append)
    for i in range(10):
        body = {"items": _rows(i, 5), "request_id": f"burst-{i}"}
        assert (await client.post("/v1/learners/m/feedback", json=body, headers=headers)).status_code == 200
    reserved, total = await _records_reserved(client, tenant)
    assert reserved > 0
    for _ in range(100):  # the ids expire after 2 s; the sweep runs every 0.2 s
        await asyncio.sleep(0.1)
        if (await _records_reserved(client, tenant))[0] == 0:
            break
    assert await _records_reserved(client, tenant) == (0, total - reserved)
    body = {"items": _rows(99, 5), "request_id": "after"}
    assert (await client.post("/v1/learners/m/feedback", json=body, headers=headers)).status_code == 200
    again, total_again = await _records_reserved(client, tenant)
    held = int(await client.app.state.service.store.budget.connection.client.hget(
        learner_key(LearnerRef(tenant, "m"), "reqs"), "*marks"))
    assert 0 < held <= again and total_again == total - reserved + again


async def test_the_sweep_gives_back_the_reservation_of_expired_request_ids(make_client: AppFactory) -> None:
    client = await _keyed(make_client, request_id_ttl_seconds=2, keep_versions_sweep_seconds=0.2)
    await _expired_records_give_back(client, "alpha", A)


@pytest.mark.redis
async def test_the_sweep_gives_back_expired_request_ids_on_the_embedded_store(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, request_id_ttl_seconds=2, keep_versions_sweep_seconds=0.2)
    async with serve(settings) as client:
        assert (await client.put("/v1/learners/m", json=ONS)).status_code == 201
        await _expired_records_give_back(client, "default", {})
