"""A learner created without ``dim``: its first feedback row fixes the dimension (budget checked first),
rows of another length are then a 422, and the learner behaves like kons's own dim-less learner through
restarts, replicas, state export/import and the V2 protocol."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

import kons
from kons import _state
from testkit.memory import SMALL_PEAK, traced_peak
from testkit.processes import AppFactory

pytestmark = pytest.mark.anyio

URL = "/v1/learners/m"
OCTETS = {"content-type": "application/octet-stream"}


def _rows(n: int, dim: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(n, dim)) * 50.0 + 7.0
    return X, 3.0 * X[:, 0] - X[:, 1] + 100.0


async def test_auto_without_dim_is_fixed_by_its_first_feedback_and_matches_kons(
    make_client: AppFactory
) -> None:
    client = await make_client()
    created = await client.put(URL, json={})
    assert created.status_code == 201, created.text
    assert created.json()["config"]["dim"] is None and created.json()["config"]["algorithm"] == "auto"
    assert (await client.get(URL)).json()["input_dim"] is None
    # before any round, a predict is the zero function, of any length, and fixes nothing
    for length in (2, 4, 9):
        asked = await client.post(f"{URL}/predict", json={"x": [1.0] * length})
        assert asked.json() == {"prediction": 0.0, "version": 0}
    local = kons.learner_from_params("auto", {})
    X, y = _rows(40)
    fed = await client.post(f"{URL}/feedback", json={"items": [{"x": x.tolist(), "y": t} for x, t in
                                                               zip(X[:30], y[:30], strict=True)]})
    assert fed.status_code == 200, fed.text
    assert fed.json()["predictions"] == local.learn_many(X[:30], y[:30]).tolist()
    assert (await client.get(URL)).json()["input_dim"] == 4
    for path, body in ((f"{URL}/feedback", {"x": [1.0] * 5, "y": 1.0}), (f"{URL}/predict", {"x": [1.0] * 3})):
        wrong = await client.post(path, json=body)
        assert wrong.status_code == 422 and "dimension 4" in wrong.json()["error"]["message"], wrong.text

    replica = await make_client()  # another process on the same Redis (a replica, or after a restart)
    assert (await replica.get(URL)).json()["input_dim"] == 4
    assert (await replica.post(f"{URL}/predict", json={"x": [1.0] * 3})).status_code == 422
    for x, t in zip(X[30:], y[30:], strict=True):
        more = await replica.post(f"{URL}/feedback", json={"x": x.tolist(), "y": t})
        assert more.json()["prediction"] == local.learn_one(x, t)
    probe = {"x": X[0].tolist()}
    assert (await client.post(f"{URL}/predict", json=probe)).json() == {
        "prediction": local.predict_one(X[0]), "version": 40}
    assert (await client.get(f"{URL}/state")).content == local.to_bytes()


async def test_a_first_batch_of_mixed_lengths_is_refused_whole(client: httpx.AsyncClient) -> None:
    assert (await client.put(URL, json={"algorithm": "ons"})).status_code == 201
    batch = {"items": [{"x": [1.0, 2.0], "y": 1.0}, {"x": [1.0, 2.0, 3.0], "y": 1.0}]}
    refused = await client.post(f"{URL}/feedback", json=batch)
    assert refused.status_code == 422
    assert refused.json()["error"]["message"].startswith("item 1: x must have dimension 2")
    described = (await client.get(URL)).json()
    assert described["version"] == 0 and described["input_dim"] is None  # nothing played, nothing fixed
    sparse = await client.post(f"{URL}/feedback", json={"x": {"indices": [0], "values": [1.0]}, "y": 1.0})
    assert sparse.status_code == 422 and "known dimension" in sparse.json()["error"]["message"]
    assert (await client.post(f"{URL}/feedback", json={"x": [1.0, 2.0, 3.0], "y": 1.0})).status_code == 200
    assert (await client.get(URL)).json()["input_dim"] == 3


async def test_the_budget_holds_for_the_dimension_the_first_row_brings(make_client: AppFactory) -> None:
    exact = {"preprocess": False}
    client = await make_client(learner_max_bytes=kons.ONS.state_bytes({"dim": 100}))
    assert (await client.put(URL, json={"algorithm": "ons", "params": exact})).status_code == 201
    with traced_peak() as peak:
        refused = await client.post(f"{URL}/feedback", json={"x": [1.0] * 2_000, "y": 1.0})  # 32 MB of ONS
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "resource_limit", refused.text
    assert "dim 2000" in refused.json()["error"]["message"]
    assert peak[0] < SMALL_PEAK
    assert (await client.get(URL)).json()["input_dim"] is None
    assert (await client.post(f"{URL}/feedback", json={"x": [1.0] * 100, "y": 1.0})).status_code == 200
    assert (await client.get(URL)).json()["input_dim"] == 100


async def test_state_of_a_dimless_learner_round_trips_and_a_crafted_one_is_sized_first(
    client: httpx.AsyncClient,
) -> None:
    spec = {"algorithm": "ons", "params": {"preprocess": False}}
    assert (await client.put(URL, json=spec)).status_code == 201
    local = kons.learner_from_params("ons", {"preprocess": False})
    local.learn_many(*_rows(5))
    imported = await client.put(f"{URL}/state", content=local.to_bytes(), headers=OCTETS)
    assert imported.status_code == 200, imported.text
    assert (await client.get(URL)).json()["input_dim"] == 4
    assert (await client.get(f"{URL}/state")).content == local.to_bytes()
    # the same config without dim, but a header claiming an ONS of dim 20,000 (3.2 GB): sized and refused
    huge = kons.learner_from_params("ons", {"preprocess": False})
    header_only = _state.decode_header(huge.to_bytes())
    header_only["dim"] = 20_000
    header_only.pop("arrays")
    with traced_peak() as peak:
        crafted = await client.put(f"{URL}/state", content=_state.encode(header_only, {}), headers=OCTETS)
    assert crafted.status_code == 422 and "bytes" in crafted.json()["error"]["message"], crafted.text
    assert peak[0] < SMALL_PEAK
    assert (await client.get(f"{URL}/state")).content == local.to_bytes()


async def test_v2_metadata_shows_any_length_until_the_first_row(client: httpx.AsyncClient) -> None:
    assert (await client.put(URL, json={})).status_code == 201
    shape = (await client.get("/v2/models/m")).json()["inputs"][0]["shape"]
    assert shape == [-1, -1]
    await client.post(f"{URL}/feedback", json={"x": [1.0, 2.0, 3.0], "y": 1.0})
    assert (await client.get("/v2/models/m")).json()["inputs"][0]["shape"] == [-1, 3]


async def test_the_openapi_schema_makes_dim_optional(client: httpx.AsyncClient) -> None:
    schemas = (await client.get("/openapi.json")).json()["components"]["schemas"]
    assert "dim" not in schemas["LearnerSpec"].get("required", [])
    assert "input_dim" in schemas["LearnerInfo"]["properties"]
