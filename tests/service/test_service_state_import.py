"""A state exported from a learner whose first feedback decided its task goes into a learner created with
the very same body, whose task is still undecided: the state's task decides it."""

from __future__ import annotations

import pytest

from testkit.processes import AppFactory

pytestmark = pytest.mark.anyio

BODY = {"algorithm": "auto", "dim": 8, "params": {}}
OCTETS = {"content-type": "application/octet-stream"}


@pytest.mark.parametrize(("label", "task"), [(0.5, "regression"), ("cat", "classification")])
async def test_a_state_goes_into_a_learner_created_with_the_same_body(make_client: AppFactory, label: object,
                                                                      task: str) -> None:
    client = await make_client()
    for name in ("source", "copy"):
        assert (await client.put(f"/v1/learners/{name}", json=BODY)).status_code == 201
    items = [{"x": [0.1 * i] * 8, "y": label if i % 2 else (1.5 if task == "regression" else "dog")}
             for i in range(12)]
    assert (await client.post("/v1/learners/source/feedback", json={"items": items})).status_code == 200
    state = await client.get("/v1/learners/source/state")
    imported = await client.put("/v1/learners/copy/state", content=state.content, headers=OCTETS)
    assert imported.status_code == 200, imported.text
    assert imported.json() == {"version": 12}
    source = (await client.get("/v1/learners/source")).json()
    copy = (await client.get("/v1/learners/copy")).json()
    assert copy["config"] == source["config"] and copy["task"] == task and copy["version"] == 12
    probe = {"x": [0.3] * 8}
    assert (await client.post("/v1/learners/copy/predict", json=probe)).json() == \
        (await client.post("/v1/learners/source/predict", json=probe)).json()
    # it learns on, as its source would
    more = {"x": [0.2] * 8, "y": label}
    assert (await client.post("/v1/learners/copy/feedback", json=more)).json() == \
        (await client.post("/v1/learners/source/feedback", json=more)).json()


async def test_a_state_of_another_task_is_still_refused(make_client: AppFactory) -> None:
    client = await make_client()
    assert (await client.put("/v1/learners/source", json=BODY)).status_code == 201
    assert (await client.put("/v1/learners/copy", json={**BODY, "task": "classification"})).status_code == 201
    fed = await client.post("/v1/learners/source/feedback", json={"x": [0.1] * 8, "y": 0.5})
    assert fed.status_code == 200
    state = await client.get("/v1/learners/source/state")
    refused = await client.put("/v1/learners/copy/state", content=state.content, headers=OCTETS)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "state_mismatch"
    assert (await client.get("/v1/learners/copy")).json()["task"] == "classification"
