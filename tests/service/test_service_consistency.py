"""The service computes exactly what kons computes, and every instance on one Redis agrees.

Predictions are compared with ``==``: JSON floats round-trip exactly, and kons is deterministic.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import numpy as np
import pytest
import redis

import kons
from kons_service.store import Head, LearnerRef, LeaseBusy, LogEntry, Store
from testkit.processes import AppFactory, eventually, hash_int

pytestmark = pytest.mark.anyio

SPECS = {
    "kons": {"algorithm": "kons", "dim": 4,
             "params": {"kernel": {"name": "rbf", "gamma": 0.3}, "loss": "squared", "C": 2.0}},
    "sketched_kons": {"algorithm": "sketched_kons", "dim": 4,
                      "params": {"kernel": {"name": "rbf", "gamma": 0.3}, "loss": "squared", "alpha": 1.0,
                                 "eta": 0.1, "C": 3.0, "beta": 0.5, "seed": 3}},
    "nystrom_kons": {"algorithm": "nystrom_kons", "dim": 4,
                     "params": {"kernel": {"name": "rbf", "gamma": 0.3}, "loss": "squared", "alpha": 1.0,
                                "eta": 0.1, "C": 3.0, "max_dictionary": 20, "seed": 3}},
    "kernel_ogd": {"algorithm": "kernel_ogd", "dim": 4,
                   "params": {"kernel": {"name": "rbf", "gamma": 0.3}, "loss": "hinge", "eta": 0.5}},
}


def _local(spec: dict[str, Any]) -> kons.Learner:
    return kons.learner_from_params(spec["algorithm"], {**spec["params"], "dim": spec["dim"]})


def _label(spec: dict[str, Any], x: np.ndarray) -> float:
    if spec["params"].get("loss") == "hinge":
        return 1.0 if x[0] + 0.3 * x[1] > 0 else -1.0
    return float(np.sin(x[0]) + 0.5 * x[1])


@pytest.mark.parametrize("algorithm", sorted(SPECS))
async def test_service_equals_kons_in_process(
    make_client: AppFactory, redis_url: str, algorithm: str
) -> None:
    """Singles, batches, ids and predicts, with snapshots mid-stream; then a cold instance agrees."""
    spec = SPECS[algorithm]
    client = await make_client(snapshot_every_rounds=7, snapshot_interval_seconds=0.05, keep_versions=2)
    url = f"/v1/learners/{algorithm}"
    assert (await client.put(url, json=spec)).status_code == 201
    local = _local(spec)
    rng = np.random.default_rng(11)
    version = 0
    for step in range(45):
        kind = step % 4
        if kind == 0:  # a batch
            X = rng.normal(size=(3, 4))
            Y = [_label(spec, x) for x in X]
            body = (await client.post(f"{url}/feedback", json={
                "items": [{"x": x.tolist(), "y": y} for x, y in zip(X, Y, strict=True)]})).json()
            assert body["predictions"] == local.learn_many(X, Y).tolist()
            version += 3
        elif kind == 1:  # predict with an id, then feedback by id
            x = rng.normal(size=4)
            asked = (await client.post(f"{url}/predict", json={"x": x.tolist(), "id": f"q{step}"})).json()
            assert asked == {"prediction": local.predict_one(x), "version": version}
            answer = await client.post(f"{url}/feedback", json={"id": f"q{step}", "y": _label(spec, x)})
            body = answer.json()
            assert body["prediction"] == local.learn_one(x, _label(spec, x))
            version += 1
        else:
            x = rng.normal(size=4)
            body = (await client.post(f"{url}/feedback", json={"x": x.tolist(), "y": _label(spec, x)})).json()
            expected = local.learn_one(x, _label(spec, x))
            assert body["prediction"] == expected
            assert body["loss"] == kons.losses.get_loss(local.loss).value(expected, _label(spec, x))
            version += 1
        assert body["version"] == version
        if step % 9 == 0:
            await asyncio.sleep(0.12)  # let the background snapshotter run
    probes = rng.normal(size=(5, 4))
    predictions = [local.predict_one(p) for p in probes]
    got = (await client.post(f"{url}/predict", json={"xs": probes.tolist()})).json()
    assert got == {"predictions": predictions, "version": version}
    stats = (await client.get(url)).json()["stats"]
    assert stats == {**local.stats(), "rounds": version}

    r = redis.Redis.from_url(redis_url)
    key = f"kons:{{default/{algorithm}}}"
    snap_version = hash_int(r, f"{key}:meta", "snap_version")
    assert snap_version > 0
    keep_from = hash_int(r, f"{key}:meta", "keep_from")  # the older of the (at most) two kept states
    assert keep_from < snap_version
    assert r.xlen(f"{key}:log") == version - keep_from  # the log is trimmed behind it
    cold = await make_client()  # recovery = newest snapshot + replay of the log after it
    got = (await cold.post(f"{url}/predict", json={"xs": probes.tolist()})).json()
    assert got == {"predictions": predictions, "version": version}
    assert (await cold.get(f"{url}/state")).content == local.to_bytes()


async def test_two_instances_interleaving_feedback_agree(make_client: AppFactory) -> None:
    """Concurrent feedback through two app instances: one total order, no lost update, no fork."""
    spec = SPECS["sketched_kons"]
    a, b = await make_client(), await make_client()
    url = "/v1/learners/shared"
    await a.put(url, json=spec)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(60, 4))

    async def send(i: int) -> tuple[int, float, int]:
        instance = a if i % 2 == 0 else b
        await asyncio.sleep(random.random() * 0.01)
        if i % 10 == 9:  # a small batch now and then
            items = [{"x": X[i].tolist(), "y": _label(spec, X[i])}]
            body = (await instance.post(f"{url}/feedback", json={"items": items})).json()
            return body["version"], body["predictions"][0], i
        answer = await instance.post(f"{url}/feedback", json={"x": X[i].tolist(), "y": _label(spec, X[i])})
        body = answer.json()
        return body["version"], body["prediction"], i

    acks = sorted(await asyncio.gather(*(send(i) for i in range(len(X)))))
    assert [v for v, _, _ in acks] == list(range(1, len(X) + 1))  # every round acknowledged once, in order
    local = _local(spec)
    for _, played, i in acks:  # the acknowledged order replays to the acknowledged predictions
        assert played == local.learn_one(X[i], _label(spec, X[i]))
    probes = rng.normal(size=(4, 4)).tolist()
    expected = {"predictions": [local.predict_one(p) for p in probes], "version": len(X)}
    assert (await a.post(f"{url}/predict", json={"xs": probes})).json() == expected
    assert (await b.post(f"{url}/predict", json={"xs": probes})).json() == expected
    assert (await a.get(f"{url}/state")).content == (await b.get(f"{url}/state")).content == local.to_bytes()
    replayed = [c.app.state.metrics.replayed._value.get() for c in (a, b)]
    assert min(replayed) > 0  # each instance really caught up with rounds the other one logged


async def test_a_lagging_instance_rebuilds_past_a_trimmed_log(
    make_client: AppFactory, redis_url: str
) -> None:
    spec = SPECS["kernel_ogd"]
    a = await make_client()
    b = await make_client(snapshot_every_rounds=5, snapshot_interval_seconds=0.05)
    url = "/v1/learners/lag"
    await a.put(url, json=spec)
    rng = np.random.default_rng(9)
    X = rng.normal(size=(30, 4))
    local = _local(spec)
    for x in X[:3]:
        await a.post(f"{url}/feedback", json={"x": x.tolist(), "y": _label(spec, x)})
        local.learn_one(x, _label(spec, x))
    for x in X[3:]:
        await b.post(f"{url}/feedback", json={"x": x.tolist(), "y": _label(spec, x)})
        local.learn_one(x, _label(spec, x))
    # b snapshots at 30 and trims rounds 4..30 that a has not seen (a loaded machine may take a while)
    r = redis.Redis.from_url(redis_url)
    await eventually(lambda: r.hget("kons:{default/lag}:meta", "snap_version") == b"30", 30, "b's snapshot")
    r.close()
    probe = [0.2, -0.1, 0.4, 0.0]
    assert (await a.post(f"{url}/predict", json={"x": probe})).json() == {
        "prediction": local.predict_one(probe), "version": 30}
    fed = (await a.post(f"{url}/feedback", json={"x": probe, "y": 1.0})).json()
    assert fed == {"prediction": local.learn_one(probe, 1.0), "loss": fed["loss"], "version": 31}


async def test_append_is_fenced_by_version_and_lease(redis_url: str) -> None:
    """The store-level guarantees the service relies on, against a real Redis."""
    store = Store(redis.asyncio.Redis.from_url(redis_url))
    ref = LearnerRef("t", "fence")
    created, _ = await store.create(ref, "{}", "inc-1", 0)
    assert created
    entry = LogEntry(b"D" + np.zeros(1).tobytes(), b"\0" * 8, b"\0" * 8)
    # (a lease of a second: a loaded machine may take a good part of it between these two calls)
    head = await store.leases.acquire(ref, "w1", 1000)
    assert head == Head("inc-1", 0, 0, "inc-1")
    busy = await store.leases.acquire(ref, "w2", 1000)
    assert isinstance(busy, LeaseBusy) and busy.wait_ms > 0  # w1 holds it
    await asyncio.sleep(busy.wait_ms / 1000 + 0.05)  # w1 stalls past its lease
    head2 = await store.leases.acquire(ref, "w2", 1000)
    assert head2 == Head("inc-1", 0, 0, "inc-1")
    assert (await store.log.append(ref, "w1", head, [entry])).reason == "lease_lost"
    assert (await store.log.append(ref, "w2", head2, [entry, entry])).version == 2
    head3 = await store.leases.acquire(ref, "w1", 1000)
    assert isinstance(head3, Head) and head3.version == 2
    assert (await store.log.append(ref, "w1", head, [entry])).reason == "moved"  # a stale head never forks
    assert [row.version for row in await store.log.read(ref, 0, 10)] == [1, 2]
    await store.leases.release(ref, "w1")
    assert await store.delete(ref)
    assert await store.leases.acquire(ref, "w1", 1000) is None
    await store.client.aclose()
