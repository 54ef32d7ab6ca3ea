"""Resource budgets: configs whose state would be too large are refused before anything is allocated
(never a 500), and state uploads are bounded as they stream in and checked before they are decoded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest

import kons
from kons import _state
from kons_service.store import LearnerRef
from testkit.memory import SMALL_PEAK, traced_peak
from testkit.processes import AppFactory

pytestmark = pytest.mark.anyio

URL = "/v1/learners/m"
OCTETS = {"content-type": "application/octet-stream"}


@pytest.mark.parametrize(("spec", "what"), [
    ({"algorithm": "ons", "dim": 10_000}, "800 MB"),
    ({"algorithm": "ons", "dim": 200_000}, "320 GB"),
    ({"algorithm": "fd_son", "dim": 10, "params": {"sketch_size": 10**9}}, "a sketch of 10^9 rows"),
    ({"algorithm": "rp_son", "dim": 10, "params": {"sketch_size": 10**9}}, "a sketch of 10^9 rows"),
    ({"algorithm": "kons", "dim": 10**30}, "dim 10^30"),
    ({"algorithm": "ogd", "dim": 10**30}, "dim 10^30"),
])
async def test_a_config_over_the_budget_is_refused_before_it_allocates(
    client: httpx.AsyncClient, spec: dict[str, Any], what: str
) -> None:
    with traced_peak() as peak:
        response = await client.put(URL, json=spec)
    assert response.status_code == 422, (what, response.text)
    error = response.json()["error"]
    assert error["code"] == "resource_limit" and "per learner" in error["message"]
    assert peak[0] < SMALL_PEAK
    assert (await client.get(URL)).status_code == 404


async def test_the_budget_is_a_setting_and_a_config_within_it_is_created(make_client: AppFactory) -> None:
    budget = kons.ONS.state_bytes({"dim": 100})
    client = await make_client(learner_max_bytes=budget)
    exact = {"preprocess": False}  # the paper learner: exactly ONS's state
    assert (await client.put(URL, json={"algorithm": "ons", "dim": 100, "params": exact})).status_code == 201
    refused = await client.put("/v1/learners/n", json={"algorithm": "ons", "dim": 101, "params": exact})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "resource_limit"
    played = await client.post(f"{URL}/feedback", json={"x": [1.0] * 100, "y": 0.5})
    assert played.status_code == 200


async def test_a_regulariser_that_fails_every_round_is_refused_at_creation(client: httpx.AsyncClient) -> None:
    response = await client.put(URL, json={"algorithm": "ons", "dim": 3, "params": {"alpha": 1e-320}})
    assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_parameter"
    assert "alpha" in response.json()["error"]["message"]


def _crafted_ons_blob(dim: int) -> bytes:
    """A checksummed ONS blob of a few hundred bytes whose header claims dimension ``dim``, no arrays."""
    header = _state.decode_header(kons.ONS(dim=2).to_bytes())
    header.pop("arrays")
    header["params"]["dim"] = header["dim"] = dim
    return _state.encode(header, {})


async def test_a_crafted_state_is_compared_with_the_config_before_it_is_built(
    client: httpx.AsyncClient,
) -> None:
    assert (await client.put(URL, json={"algorithm": "ons", "dim": 2})).status_code == 201
    blob = _crafted_ons_blob(10_000)  # building it would take 800 MB
    assert len(blob) < 1000
    with traced_peak() as peak:
        response = await client.put(f"{URL}/state", content=blob, headers=OCTETS)
    # sized from its header and refused (over the budget, and another config) before it is built
    assert response.status_code == 422 and response.json()["error"]["code"] == "resource_limit"
    assert peak[0] < SMALL_PEAK
    assert (await client.get(URL)).json()["version"] == 0


async def test_a_declared_oversized_upload_is_refused_unread_and_a_missing_learner_first(
    make_client: AppFactory
) -> None:
    client = await make_client(max_state_bytes=4096)
    headers = {**OCTETS, "content-length": str(2**30)}
    missing = await client.put("/v1/learners/ghost/state", content=b"", headers=headers)
    assert missing.status_code == 404
    await client.put(URL, json={"algorithm": "ons", "dim": 2})
    response = await client.put(f"{URL}/state", content=b"", headers=headers)
    assert response.status_code == 413 and response.json()["error"]["code"] == "payload_too_large"


async def test_a_streamed_upload_stops_being_read_at_the_limit(make_client: AppFactory) -> None:
    client = await make_client(max_state_bytes=64 * 1024)
    await client.put(URL, json={"algorithm": "ons", "dim": 2})
    sent = []

    async def chunks() -> AsyncIterator[bytes]:  # no content-length: chunked transfer
        for _ in range(10_000):  # 640 MB if it were all read
            sent.append(1)
            yield b"x" * 65536

    response = await client.put(f"{URL}/state", content=chunks(), headers=OCTETS)
    assert response.status_code == 413
    assert len(sent) < 10


async def test_a_growing_learner_over_the_budget_takes_no_more_feedback_but_predicts(
    make_client: AppFactory
) -> None:
    client = await make_client(learner_max_bytes=20_000)
    spec = {"algorithm": "kons", "dim": 3, "params": {"preprocess": False}}  # every round is stored
    assert (await client.put(URL, json=spec)).status_code == 201
    rng = np.random.default_rng(0)
    accepted = 0
    for _ in range(200):
        response = await client.post(f"{URL}/feedback", json={"x": rng.normal(size=3).tolist(), "y": 0.5})
        if response.status_code != 200:
            break
        accepted += 1
    assert response.status_code == 422 and response.json()["error"]["code"] == "resource_limit"
    assert 10 < accepted < 200
    learner = client.app.state.service.cache.entry(LearnerRef("default", "m")).loaded()
    assert 20_000 < learner.state_nbytes() <= 2 * 20_000  # over by at most one batch
    predicted = await client.post(f"{URL}/predict", json={"x": [0.1, 0.2, 0.3]})
    assert predicted.status_code == 200 and predicted.json()["version"] == accepted
