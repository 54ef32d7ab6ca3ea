"""Bearer keys map to tenants; learners are namespaced per tenant."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from kons_service.main import create_app
from kons_service.settings import Settings
from testkit.processes import SPEC, AppFactory

pytestmark = pytest.mark.anyio

KEYS = "alpha:key-a,beta:key-b,alpha:key-a2"
A = {"Authorization": "Bearer key-a"}
A2 = {"Authorization": "Bearer key-a2"}
B = {"Authorization": "Bearer key-b"}


@pytest.fixture
async def multi(make_client: AppFactory) -> httpx.AsyncClient:
    return await make_client(api_keys=KEYS)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nope"}, {"Authorization": "key-a"},
                                     {"Authorization": "Basic key-a"}, {"Authorization": "Bearer "}])
async def test_requests_without_a_valid_key_are_401(
    multi: httpx.AsyncClient, headers: dict[str, Any]
) -> None:
    for method, url, body in [("PUT", "/v1/learners/m", SPEC), ("GET", "/v1/learners", None),
                              ("POST", "/v1/learners/m/predict", {"x": [1, 2, 3]})]:
        response = await multi.request(method, url, json=body, headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"
    assert (await multi.get("/v1/learners", headers=A)).json()["learners"] == []  # nothing was created


async def test_tenants_are_isolated(multi: httpx.AsyncClient) -> None:
    assert (await multi.put("/v1/learners/m", json=SPEC, headers=A)).status_code == 201
    await multi.post("/v1/learners/m/feedback", json={"x": [1, 2, 3], "y": 1.0}, headers=A)
    for method, suffix, body in [("GET", "", None), ("POST", "/predict", {"x": [1, 2, 3]}),
                                 ("POST", "/feedback", {"x": [1, 2, 3], "y": 1.0}), ("GET", "/state", None),
                                 ("DELETE", "", None)]:
        response = await multi.request(method, f"/v1/learners/m{suffix}", json=body, headers=B)
        assert response.status_code == 404, (method, suffix)
    assert (await multi.get("/v1/learners", headers=B)).json()["learners"] == []
    # the same name is another learner for tenant beta
    assert (await multi.put("/v1/learners/m", json=SPEC, headers=B)).status_code == 201
    assert (await multi.get("/v1/learners/m", headers=B)).json()["version"] == 0
    assert (await multi.get("/v1/learners/m", headers=A)).json()["version"] == 1
    # every key of a tenant reaches the same learners
    assert (await multi.get("/v1/learners/m", headers=A2)).json()["version"] == 1


async def test_keys_file(make_client: AppFactory, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# tenant:key\nalpha:file-key\n\n")
    client = await make_client(api_keys_file=keys)
    assert (await client.get("/v1/learners", headers={"Authorization": "Bearer file-key"})).status_code == 200
    assert (await client.get("/v1/learners")).status_code == 401


async def test_single_tenant_mode_says_so_and_needs_no_key(
    make_client: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="kons_service.auth"):
        client = await make_client()
    assert "single-tenant" in caplog.text
    assert (await client.put("/v1/learners/m", json=SPEC)).status_code == 201


def test_bind_host_follows_the_tenancy() -> None:
    assert Settings(api_keys=None).bind_host() == "127.0.0.1"
    assert Settings(api_keys="a:k").bind_host() == "0.0.0.0"
    assert Settings(api_keys="a:k", host="10.1.2.3").bind_host() == "10.1.2.3"


@pytest.mark.parametrize("keys", ["nocolon", "bad tenant:k", "a:", "a:k,b:k", "..:k", "a\nb:k"])
def test_malformed_key_lists_fail_at_startup(keys: str) -> None:
    with pytest.raises(ValueError, match="entry"):
        create_app(Settings(api_keys=keys, redis_url="redis://127.0.0.1:1"))


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KONS_REDIS_URL", "redis://example:6379/2")
    monkeypatch.setenv("KONS_API_KEYS", "t:k")
    monkeypatch.setenv("KONS_SNAPSHOT_EVERY_ROUNDS", "7")
    monkeypatch.setenv("KONS_SNAPSHOT_INTERVAL_SECONDS", "2.5")
    monkeypatch.setenv("KONS_ID_TTL_SECONDS", "30")
    monkeypatch.setenv("KONS_MAX_REQUEST_BYTES", "2048")
    s = Settings()
    assert (s.redis_url, s.snapshot_every_rounds) == ("redis://example:6379/2", 7)
    assert s.snapshot_interval_seconds == 2.5
    assert (s.id_ttl_seconds, s.max_request_bytes, s.tenant_keys()) == (30, 2048, {"k": "t"})
