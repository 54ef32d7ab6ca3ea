"""Bounded waits and state in Redis: the writer lease is renewed while its writer works, so that its TTL
(how long a crashed writer blocks its learner) can be short; predict ids are capped per learner."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kons_service.store import LearnerRef, LeaseBusy
from kons_service.store.keys import learner_key
from testkit.processes import SPEC, AppClient, AppFactory

pytestmark = pytest.mark.anyio

URL = "/v1/learners/m"
REF = LearnerRef("default", "m")


async def test_a_writer_keeps_its_lease_for_longer_than_the_ttl(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (a second: renewed every third of it, so that a loaded machine stalling the process for a few tenths
    # of a second between two renewals does not let it expire)
    client = await make_client(lease_ttl_ms=1000)
    assert (await client.put(URL, json=SPEC)).status_code == 201
    service = client.app.state.service
    play = service.writer._play
    playing, played = asyncio.Event(), asyncio.Event()

    async def slow_play(learner: Any, played_rows: Any, entry: Any) -> Any:  # works until told
        playing.set()
        await played.wait()
        return await play(learner, played_rows, entry)

    monkeypatch.setattr(service.writer, "_play", slow_play)
    write = asyncio.create_task(client.post(f"{URL}/feedback", json={"x": [1, 2, 3], "y": 0.5}))
    await asyncio.wait_for(playing.wait(), 30)  # (the lease is taken before the play)
    await asyncio.sleep(3.0)  # three TTLs at least
    assert isinstance(await service.store.leases.acquire(REF, "intruder", 1000), LeaseBusy)
    played.set()
    response = await write
    assert response.status_code == 200 and response.json()["version"] == 1
    assert service.metrics.conflicts._value.get() == 0  # applied at the first attempt


async def test_renewal_only_extends_the_holders_lease(client: AppClient) -> None:
    assert (await client.put(URL, json=SPEC)).status_code == 201
    store = client.app.state.service.store
    await store.leases.acquire(REF, "holder", 200)
    assert not await store.leases.renew(REF, "other", 60_000)
    assert await store.leases.renew(REF, "holder", 60_000)
    assert await store.client.pttl(learner_key(REF, "lease")) > 30_000
    await store.leases.release(REF, "holder")
    assert not await store.leases.renew(REF, "holder", 60_000)  # released: nothing to extend


async def test_predict_ids_are_capped_per_learner_oldest_first(make_client: AppFactory) -> None:
    client = await make_client(ids_max=3)
    assert (await client.put(URL, json=SPEC)).status_code == 201
    for i in range(5):
        response = await client.post(f"{URL}/predict", json={"x": [1, 2, i], "id": f"p{i}"})
        assert response.status_code == 200
    store = client.app.state.service.store
    assert await store.client.hlen(learner_key(REF, "ids")) == 3
    dropped = await client.post(f"{URL}/feedback", json={"id": "p1", "y": 0.5})
    assert dropped.status_code == 404 and dropped.json()["error"]["code"] == "unknown_id"
    kept = await client.post(f"{URL}/feedback", json={"id": "p4", "y": 0.5})
    assert kept.status_code == 200
