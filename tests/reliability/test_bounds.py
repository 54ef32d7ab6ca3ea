"""Resource bounds: a bounded soak with the service's memory sampled, request and batch size limits on
a real process (with and without Content-Length), and the expiry of the id-join and request_id stores."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from kons_service.store import LearnerRef
from testkit.processes import SPEC, AppFactory, ServiceProcess, learner_keys, services_on_redis
from testkit.scenarios import soak_scenario

pytestmark = [pytest.mark.anyio, pytest.mark.redis]  # every test starts a server

URL = "/v1/learners/m"
MIB = 1024


async def test_a_soak_stays_within_a_memory_envelope(tmp_path: Path) -> None:
    # 6 s of traffic (longer on a loaded machine, until 500 rounds), then 6 s for the TTLs to pass; the
    # reliability battery soaks for 180 s (--soak-seconds)
    result = await soak_scenario(tmp_path, seconds=6, clients=3, learners=6, min_rounds=501)
    assert set(result["statuses"]) == {"200"}, result["statuses"]
    assert result["rounds"] > 500
    # the learners' own state is a few KiB; the process may warm up, not grow with the rounds
    assert result["rss_kib_max"] - result["rss_kib_first"] < 16 * MIB, result["rss_series"]
    assert result["redis_used_memory_max"] < 32 * 2**20
    assert result["leftover_after_ttl"] == {"ids": 0, "reqs": 0, "log": 0}


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    workdir = tmp_path_factory.mktemp("limits")
    with services_on_redis(workdir, max_request_bytes=4096, max_batch=10, max_state_bytes=8192) as (
            _, [service]):
        httpx.put(f"{service.url}{URL}", json=SPEC).raise_for_status()
        yield service


def _chunks(body: bytes) -> Iterator[bytes]:
    for i in range(0, len(body), 1000):
        yield body[i:i + 1000]


@pytest.mark.parametrize("chunked", [False, True])
def test_body_size_limits_with_and_without_content_length(limited: ServiceProcess, chunked: bool) -> None:
    big = json.dumps({"x": [0.1, 0.2, 0.3], "y": 1.0, "request_id": "a" * 10, "pad": " " * 5000}).encode()
    blob = b"\0" * 9000
    with httpx.Client(base_url=limited.url, timeout=30) as http:
        for url, body, media in [(f"{URL}/feedback", big, "application/json"),
                                 (f"{URL}/predict", big, "application/json"),
                                 (f"{URL}/state", blob, "application/octet-stream")]:
            content = _chunks(body) if chunked else body
            method = "PUT" if url.endswith("/state") else "POST"
            response = http.request(method, url, content=content, headers={"content-type": media})
            assert response.status_code == 413, (url, response.text)
            assert response.json()["error"]["code"] == "payload_too_large"
        assert http.get(URL).json()["version"] == 0


def test_batch_size_limits(limited: ServiceProcess) -> None:
    row = [0.1, 0.2, 0.3]
    with httpx.Client(base_url=limited.url, timeout=30) as http:
        for url, body in [(f"{URL}/feedback", {"items": [{"x": row, "y": 0.1}] * 11}),
                          (f"{URL}/predict", {"xs": [row] * 11})]:
            response = http.post(url, json=body)
            assert response.status_code == 413 and response.json()["error"]["code"] == "batch_too_large"
        assert http.get(URL).json()["version"] == 0
        ten = http.post(f"{URL}/feedback", json={"items": [{"x": row, "y": 0.1}] * 10})
        assert ten.json()["version"] == 10


async def test_the_id_join_store_expires_in_redis(make_client: AppFactory, redis_url: str) -> None:
    # (ids kept 3 s, not 1: a loaded machine may take a second from the predict to the reads below)
    client = await make_client(id_ttl_seconds=3)
    await client.put(URL, json=SPEC)
    response = await client.post(f"{URL}/predict", json={"xs": [[0.1, 0.2, 0.3]] * 5,
                                                          "ids": [f"q{i}" for i in range(5)]})
    assert response.status_code == 200
    r = redis.Redis.from_url(redis_url)
    keys = learner_keys(LearnerRef("default", "m"))
    ids, ids_exp = (k for k in keys if k.endswith((":ids", ":ids_exp")))
    assert r.hlen(ids) == 5 and 0 < r.pttl(ids) <= 3000 and 0 < r.pttl(ids_exp) <= 3000
    deadline = time.monotonic() + 7
    while r.exists(ids, ids_exp) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not r.exists(ids, ids_exp)  # gone from Redis, not only refused
    used = await client.post(f"{URL}/feedback", json={"id": "q0", "y": 1.0})
    assert used.status_code == 404 and used.json()["error"]["code"] == "unknown_id"
