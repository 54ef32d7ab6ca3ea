"""Budgets by real bytes: a learner reserves what it holds (plus the growth of its next batch), not the
worst case of its config; at its tenant's budget a bounded learner stops growing, not learning."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import redis

from kons_service.core.learning import build
from kons_service.store import LearnerRef
from kons_service.store.keys import tenant_bytes
from testkit.processes import AppFactory

pytestmark = pytest.mark.anyio

ROWS = np.random.default_rng(11).normal(size=(400, 8))


def _items(rows: np.ndarray) -> list[dict[str, Any]]:
    return [{"x": x.tolist(), "y": float(np.sin(x[0]) + x[1] * x[2])} for x in rows]


def _reserved(redis_url: str, tenant: str = "default") -> int:
    """The tenant's reserved bytes as Redis holds them (the total of its reservations)."""
    client = redis.Redis.from_url(redis_url)
    return int(client.hget(tenant_bytes(tenant), "*total") or 0)


async def test_a_thousand_auto_learners_fit_the_default_tenant_budget(make_client: AppFactory) -> None:
    client = await make_client()
    for i in range(1000):  # the worst case of an auto config at dim 8 is about 8 MB: 133 fitted before
        response = await client.put(f"/v1/learners/a{i}", json={"dim": 8})
        assert response.status_code == 201, response.text


async def test_at_the_tenant_budget_bounded_learners_stop_growing_not_learning(
    make_client: AppFactory, redis_url: str
) -> None:
    budget = 4 * 2**20
    client = await make_client(tenant_max_bytes=budget)
    names = [f"n{i}" for i in range(6)]
    for name in names:
        assert (await client.put(f"/v1/learners/{name}", json={"dim": 8})).status_code == 201
    batches = [ROWS[i : i + 50] for i in range(0, len(ROWS), 50)]
    for batch in batches:  # they grow side by side until the tenant's budget is full
        for name in names:
            response = await client.post(f"/v1/learners/{name}/feedback", json={"items": _items(batch)})
            assert response.status_code == 200, response.text  # never refused: held, still learning
    states = [(await client.get(f"/v1/learners/{name}")).json() for name in names]
    assert all(s["version"] == len(ROWS) for s in states)
    assert any(s["stats"]["growth_held"] for s in states)  # the budget was reached
    sizes = [client.app.state.service.cache.entry(LearnerRef("default", n)).loaded().state_nbytes()
             for n in names]
    assert sum(sizes) <= budget  # the budget holds: what they hold together
    assert _reserved(redis_url) <= budget
    # a replica rebuilt from the store (snapshot + log) holds growth at the same rounds: same bits
    replica = await make_client(tenant_max_bytes=budget)
    for name in names:
        assert (await replica.get(f"/v1/learners/{name}/state")).content == (
            await client.get(f"/v1/learners/{name}/state")).content


async def test_a_held_learner_grows_again_when_room_is_found(make_client: AppFactory) -> None:
    client = await make_client(tenant_max_bytes=2 * 2**20)
    for name in ("a", "b", "c"):
        assert (await client.put(f"/v1/learners/{name}", json={"dim": 8})).status_code == 201
    for batch in (ROWS[:200], ROWS[200:]):
        for name in ("a", "b", "c"):
            assert (await client.post(f"/v1/learners/{name}/feedback",
                                      json={"items": _items(batch)})).status_code == 200
    held = [n for n in ("a", "b", "c")
            if (await client.get(f"/v1/learners/{n}")).json()["stats"]["growth_held"]]
    assert held
    for name in ("a", "b", "c"):
        if name != held[0]:
            assert (await client.delete(f"/v1/learners/{name}")).status_code == 204
    entry = client.app.state.service.cache.entry(LearnerRef("default", held[0]))
    entry.resume_at = 0.0  # (it asks again every minute)
    assert (await client.post(f"/v1/learners/{held[0]}/feedback",
                              json={"items": _items(ROWS[:10])})).status_code == 200
    assert not (await client.get(f"/v1/learners/{held[0]}")).json()["stats"]["growth_held"]


async def test_a_learner_that_learns_by_storing_points_is_refused_at_the_budget(
    make_client: AppFactory
) -> None:
    client = await make_client(tenant_max_bytes=64 * 2**10)
    spec = {"algorithm": "sketched_kons", "dim": 8, "params": {"preprocess": False}}
    assert (await client.put("/v1/learners/s", json=spec)).status_code == 201
    statuses = []
    for item in _items(ROWS):
        response = await client.post("/v1/learners/s/feedback", json=item)
        statuses.append(response.status_code)
        if response.status_code != 200:
            assert response.json()["error"]["code"] == "resource_limit"
    assert 422 in statuses and statuses[0] == 200  # refused once its next round could not be covered
    assert (await client.post("/v1/learners/s/predict", json={"x": ROWS[0].tolist()})).status_code == 200


def test_build_is_the_services_learner() -> None:
    assert build({"algorithm": "auto", "dim": 8, "params": {}}).grows


async def test_new_classes_are_covered_by_the_budget_even_while_growth_is_held(
    make_client: AppFactory, redis_url: str
) -> None:
    budget = 4 * 2**20
    client = await make_client(tenant_max_bytes=budget)
    assert (await client.put("/v1/learners/c", json={"task": "classification", "dim": 8})).status_code == 201
    labels = ["a", "b", "c"]
    items = [{"x": x.tolist(), "y": labels[i % 3]} for i, x in enumerate(ROWS)]
    for i in range(0, len(items), 100):
        answer = await client.post("/v1/learners/c/feedback", json={"items": items[i:i + 100]})
        assert answer.status_code == 200, answer.text
    many = [{"x": x.tolist(), "y": f"class {i}"} for i, x in enumerate(ROWS[:250])]  # ~70 KB a class at dim 8
    refused = await client.post("/v1/learners/c/feedback", json={"items": many})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "resource_limit", refused.text
    assert "new class" in refused.json()["error"]["message"]
    assert (await client.get("/v1/learners/c")).json()["classes"] == labels  # nothing learnt
    assert (await client.post("/v1/learners/c/feedback", json={"items": items[:50]})).status_code == 200
    last = await client.post("/v1/learners/c/feedback", json={"items": many[:20]})
    assert last.status_code == 200, last.text
    learner = client.app.state.service.cache.entry(LearnerRef("default", "c")).loaded()
    assert len(learner.classes) == 23 and learner.state_nbytes() <= _reserved(redis_url) <= budget
