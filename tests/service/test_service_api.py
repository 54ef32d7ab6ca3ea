"""The HTTP contract: learner lifecycle, rounds, ids, listing, ops endpoints."""

from __future__ import annotations

import asyncio
import copy

import httpx
import pytest
import redis
from threadpoolctl import threadpool_info

import kons
from testkit.processes import SPEC, AppFactory

pytestmark = pytest.mark.anyio

URL = "/v1/learners/m"


async def test_create_is_idempotent_and_conflicts_on_another_config(client: httpx.AsyncClient) -> None:
    first = await client.put(URL, json=SPEC)
    assert first.status_code == 201
    body = first.json()
    assert body["version"] == 0
    assert body["config"]["algorithm"] == "sketched_kons" and body["config"]["dim"] == 3
    assert body["config"]["params"]["beta"] == 1.0  # defaults filled in by kons
    again = await client.put(URL, json=SPEC)
    assert again.status_code == 200 and again.json() == body
    other = copy.deepcopy(SPEC)
    other["params"]["eta"] = 0.2
    conflict = await client.put(URL, json=other)
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "config_conflict"


async def test_defaults_make_an_explicit_config_equal(client: httpx.AsyncClient) -> None:
    short = {"algorithm": "kernel_ogd", "dim": 2}
    created = await client.put(URL, json=short)
    assert created.status_code == 201
    explicit = {"algorithm": "kernel_ogd", "dim": 2, "params": created.json()["config"]["params"]}
    assert (await client.put(URL, json=explicit)).status_code == 200


@pytest.mark.parametrize("algorithm", sorted(kons.LEARNERS))
async def test_every_kons_learner_can_be_hosted(client: httpx.AsyncClient, algorithm: str) -> None:
    spec = {"algorithm": algorithm, "dim": 3}
    created = await client.put(f"/v1/learners/{algorithm}", json=spec)
    if created.status_code == 422:  # a learner whose parameters have no defaults must say which
        assert created.json()["error"]["code"] == "invalid_parameter"
        return
    assert created.status_code == 201, created.text
    fed = await client.post(f"/v1/learners/{algorithm}/feedback", json={"x": [0.1, 0.2, 0.3], "y": 1.0})
    assert fed.status_code == 200, fed.text
    assert fed.json()["version"] == 1


async def test_rounds_versions_and_stats(client: httpx.AsyncClient) -> None:
    await client.put(URL, json=SPEC)
    first = await client.post(f"{URL}/feedback", json={"x": [0.0, 1.0, 2.0], "y": 0.5})
    assert first.status_code == 200
    assert first.json() == {"prediction": 0.0, "loss": 0.25, "version": 1}
    batch = await client.post(f"{URL}/feedback", json={"items": [{"x": [1, 2, 3], "y": 1},
                                                                 {"x": [1, 2, 4], "y": -2}]})
    assert batch.status_code == 200
    assert batch.json()["version"] == 3 and len(batch.json()["losses"]) == 2
    single = await client.post(f"{URL}/predict", json={"x": [1, 2, 3]})
    assert single.json()["version"] == 3
    many = await client.post(f"{URL}/predict", json={"xs": [[1, 2, 3], [0, 0, 0]]})
    assert many.json()["predictions"][0] == single.json()["prediction"]
    info = (await client.get(URL)).json()
    assert info["version"] == 3
    stats = info["stats"]
    assert stats["rounds"] == 3 and stats["stored_points"] >= 1
    for key in ("dictionary_size", "cumulative_loss", "recent_loss", "effective_dimension"):
        assert key in stats
    assert stats["cumulative_loss"] == pytest.approx(0.25 + sum(batch.json()["losses"]))


async def test_predictions_are_clipped(client: httpx.AsyncClient) -> None:
    spec = {"algorithm": "kernel_ogd", "dim": 1, "params": {"eta": 5.0, "C": 1.0, "schedule": "constant"}}
    await client.put(URL, json=spec)
    for _ in range(3):
        await client.post(f"{URL}/feedback", json={"x": [0.0], "y": 10.0})
    assert (await client.post(f"{URL}/predict", json={"x": [0.0]})).json()["prediction"] == 1.0


async def test_feedback_by_id_uses_the_remembered_features_once(client: httpx.AsyncClient) -> None:
    await client.put(URL, json=SPEC)
    await client.post(f"{URL}/feedback", json={"x": [0.5, 0.5, 0.5], "y": 1.0})
    asked = await client.post(f"{URL}/predict", json={"x": [0.1, 0.2, 0.3], "id": "req-1"})
    fed = await client.post(f"{URL}/feedback", json={"id": "req-1", "y": 1.0})
    assert fed.status_code == 200
    assert fed.json()["prediction"] == asked.json()["prediction"]
    assert fed.json()["version"] == 2
    again = await client.post(f"{URL}/feedback", json={"id": "req-1", "y": 1.0})
    assert again.status_code == 404 and again.json()["error"]["code"] == "unknown_id"
    batch_ids = await client.post(f"{URL}/predict", json={"xs": [[1, 1, 1], [2, 2, 2]], "ids": ["a", "b"]})
    assert batch_ids.status_code == 200
    items = [{"id": "b", "y": 0.0}, {"x": [3, 3, 3], "y": 1}]
    fed = await client.post(f"{URL}/feedback", json={"items": items})
    assert fed.status_code == 200 and fed.json()["version"] == 4
    assert fed.json()["predictions"][0] == batch_ids.json()["predictions"][1]


async def test_ids_expire(make_client: AppFactory) -> None:
    client = await make_client(id_ttl_seconds=1)
    await client.put(URL, json=SPEC)
    await client.post(f"{URL}/predict", json={"x": [0.1, 0.2, 0.3], "id": "late"})
    await asyncio.sleep(1.2)
    late = await client.post(f"{URL}/feedback", json={"id": "late", "y": 1.0})
    assert late.status_code == 404 and late.json()["error"]["code"] == "unknown_id"
    assert (await client.get(URL)).json()["version"] == 0


async def test_listing_is_paginated(client: httpx.AsyncClient) -> None:
    names = [f"n{i:02d}" for i in range(7)]
    for name in names:
        assert (await client.put(f"/v1/learners/{name}", json=SPEC)).status_code == 201
    seen, cursor = [], None
    while True:
        params = {"limit": 3} | ({"cursor": cursor} if cursor else {})
        page = (await client.get("/v1/learners", params=params)).json()
        assert len(page["learners"]) <= 3
        seen += [item["name"] for item in page["learners"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == names
    assert page["learners"][-1]["config"]["algorithm"] == "sketched_kons"


async def test_delete_removes_every_key(make_client: AppFactory, redis_url: str) -> None:
    client = await make_client(snapshot_every_rounds=3, snapshot_interval_seconds=0.1)
    await client.put(URL, json=SPEC)
    await client.post(f"{URL}/predict", json={"x": [1, 2, 3], "id": "pending"})
    for i in range(5):
        await client.post(f"{URL}/feedback", json={"x": [i, 0, 1], "y": 0.1 * i})
    r = redis.Redis.from_url(redis_url)
    for _ in range(100):  # the background snapshot
        if r.hget("kons:{default/m}:meta", "snap_version") == b"5":
            break
        await asyncio.sleep(0.05)
    parts = {k.decode().rsplit(":", 1)[1] for k in r.keys("kons:{default/m}:*") if isinstance(k, bytes)}
    assert parts >= {"meta", "log", "snap", "ids", "ids_exp"}
    assert (await client.delete(URL)).status_code == 204
    assert r.keys("kons:{default/m}:*") == []
    assert (await client.get(URL)).status_code == 404
    assert (await client.delete(URL)).status_code == 404
    assert (await client.get("/v1/learners")).json()["learners"] == []
    assert (await client.put(URL, json=SPEC)).json()["version"] == 0  # a fresh learner


async def test_health_readiness_and_metrics(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).status_code == 200
    await client.put(URL, json=SPEC)
    await client.post(f"{URL}/feedback", json={"x": [1, 2, 3], "y": 1.0})
    text = (await client.get("/metrics")).text
    route = 'method="POST",route="/v1/learners/{name}/feedback",status="200"'
    assert f"kons_http_requests_total{{{route}}} 1.0" in text
    assert "kons_http_request_duration_seconds_bucket" in text
    assert 'kons_learner_rounds_total{learner="m",tenant="default"} 1.0' in text
    assert "kons_learner_cumulative_loss" in text


async def test_per_learner_metrics_can_be_switched_off(make_client: AppFactory) -> None:
    client = await make_client(metrics_per_learner=False)
    await client.put(URL, json=SPEC)
    await client.post(f"{URL}/feedback", json={"x": [1, 2, 3], "y": 1.0})
    text = (await client.get("/metrics")).text
    assert 'learner="m"' not in text
    assert "kons_feedback_rounds_total 1.0" in text


async def test_openapi_documents_the_routes(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    for path in ("/v1/learners", "/v1/learners/{name}", "/v1/learners/{name}/predict",
                 "/v1/learners/{name}/feedback", "/v1/learners/{name}/state"):
        assert path in paths



@pytest.mark.anyio
async def test_the_app_limits_blas_threads_while_it_runs(make_client: AppFactory) -> None:
    """However the app is started (plain uvicorn included), its lifespan caps BLAS at KONS_BLAS_THREADS."""
    def blas_threads() -> list[int]:
        return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]

    client = await make_client(blas_threads=1)
    assert (await client.get("/healthz")).status_code == 200
    assert blas_threads() and all(n == 1 for n in blas_threads())
