"""The task is explicit and discoverable: ``PUT {"task": ...}``; with ``{}`` the first feedback's label
decides it by its JSON type and the config records it durably (replicas and restarts agree); a label of
the wrong kind afterwards is a 422 naming the task."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

import kons
from testkit.processes import AppFactory
from tests.service.classes import learnt

pytestmark = pytest.mark.anyio

URL = "/v1/learners/m"
ROWS = [[0.5, 1.0], [1.5, -1.0], [-0.5, 2.0], [2.0, 0.25]]


async def _feed(client: httpx.AsyncClient, y: Any, x: list[float] | None = None) -> httpx.Response:
    return await client.post(f"{URL}/feedback", json={"x": x or ROWS[0], "y": y})


async def test_put_task_is_recorded_and_shown(make_client: AppFactory) -> None:
    client = await make_client()
    created = await client.put(URL, json={"task": "classification"})
    assert created.status_code == 201, created.text
    assert created.json()["config"]["params"]["task"] == "classification"
    info = (await client.get(URL)).json()
    assert info["task"] == "classification"
    # the same ask again is the same learner; the params' own spelling too
    assert (await client.put(URL, json={"task": "classification"})).status_code == 200
    assert (await client.put(URL, json={"params": {"task": "classification"}})).status_code == 200
    assert (await client.put(URL, json={"task": "regression"})).status_code == 409
    both = {"task": "regression", "params": {"task": "classification"}}
    clash = await client.put("/v1/learners/n", json=both)
    assert clash.status_code == 422 and "task" in clash.json()["error"]["message"]
    bad = await client.put("/v1/learners/n", json={"task": "ranking"})
    assert bad.status_code == 422


async def test_task_of_other_algorithms_is_their_loss(make_client: AppFactory) -> None:
    client = await make_client()
    asked = await client.put(URL, json={"algorithm": "ons", "dim": 2, "task": "classification"})
    assert asked.status_code == 201, asked.text
    assert asked.json()["config"]["params"]["loss"] == "logistic"
    assert (await client.get(URL)).json()["task"] == "classification"
    regression = await client.put("/v1/learners/r", json={"algorithm": "ons", "dim": 2})
    assert regression.status_code == 201
    assert (await client.get("/v1/learners/r")).json()["task"] == "regression"
    clash = await client.put("/v1/learners/c", json={"algorithm": "ons", "dim": 2, "task": "classification",
                                                      "params": {"loss": "squared"}})
    assert clash.status_code == 422 and "classification" in clash.json()["error"]["message"], clash.text


FIRST_LABELS = [(1, "regression"), (2.5, "regression"), ("dog", "classification"), (True, "classification")]


@pytest.mark.parametrize(("label", "task"), FIRST_LABELS)
async def test_first_label_decides_and_config_records_it(make_client: AppFactory, label: Any,
                                                         task: str) -> None:
    client = await make_client()
    created = await client.put(URL, json={})
    assert created.status_code == 201 and created.json()["config"]["params"]["task"] is None
    assert (await client.get(URL)).json()["task"] is None
    before = await client.post(f"{URL}/predict", json={"x": ROWS[0]})
    assert before.json() == {"prediction": 0.0, "version": 0}
    first = await _feed(client, label)
    assert first.status_code == 200, first.text
    info = (await client.get(URL)).json()
    assert info["task"] == task and info["config"]["params"]["task"] == task and info["version"] == 1
    # a fresh process (a restart, another replica) reads the decided config from the store
    other = await make_client()
    assert (await other.get(URL)).json()["config"]["params"]["task"] == task
    # `PUT {}` again is this learner (its task was left open and is decided now); the other task is not
    again = await client.put(URL, json={})
    assert again.status_code == 200 and again.json()["config"]["params"]["task"] == task
    flipped = "regression" if task == "classification" else "classification"
    assert (await client.put(URL, json={"task": flipped})).status_code == 409
    wrong = "cat" if task == "regression" else 0.5
    refused = await _feed(other, wrong, ROWS[1])
    assert refused.status_code == 422, refused.text
    message = refused.json()["error"]["message"]
    assert f"does {task}" in message, message
    assert (await client.get(URL)).json()["version"] == 1


async def test_a_refused_first_feedback_decides_nothing(make_client: AppFactory) -> None:
    client = await make_client()
    assert (await client.put(URL, json={})).status_code == 201
    mixed = {"items": [{"x": ROWS[0], "y": 1.5}, {"x": ROWS[1], "y": "cat"}]}
    overflowing = {"x": [1e200, 1e200], "y": "cat"}  # refused by kons: its squared norm overflows
    for body in (mixed, overflowing):
        refused = await client.post(f"{URL}/feedback", json=body)
        assert refused.status_code == 422, refused.text
        info = (await client.get(URL)).json()
        assert info["task"] is None and info["config"]["params"]["task"] is None and info["version"] == 0
    assert (await _feed(client, "dog")).status_code == 200
    assert (await client.get(URL)).json()["task"] == "classification"


async def test_learns_like_kons_after_the_decision(make_client: AppFactory) -> None:
    client = await make_client()
    assert (await client.put(URL, json={})).status_code == 201
    local = kons.learner_from_params("auto", {"task": "classification"})
    labels = [True, False, True, True]
    fed = await client.post(f"{URL}/feedback", json={"items": [{"x": x, "y": y} for x, y in
                                                               zip(ROWS, labels, strict=True)]})
    assert fed.status_code == 200, fed.text
    played = [max(local.learn_proba_one(x, learnt(y)).values()) for x, y in zip(ROWS, labels, strict=True)]
    # the probability of each round's label (0 at the first: no class known before it)
    assert fed.json()["predictions"] == [0.0, *played[1:]]
    replica = await make_client()  # replays the log on a learner built from the decided config
    assert (await replica.post(f"{URL}/predict", json={"x": ROWS[0]})).json()["prediction"] == \
        max(local.predict_proba_dict_one(ROWS[0]).values())


async def test_two_replicas_racing_on_the_first_feedback_agree(make_client: AppFactory) -> None:
    for attempt in range(3):
        name = f"/v1/learners/race{attempt}"
        a, b = await make_client(), await make_client()
        assert (await a.put(name, json={})).status_code == 201
        assert (await b.get(name)).json()["task"] is None  # b holds the undecided learner too
        number, boolean = await asyncio.gather(
            a.post(f"{name}/feedback", json={"x": ROWS[0], "y": 3.0}),
            b.post(f"{name}/feedback", json={"x": ROWS[1], "y": True}))
        codes = sorted([number.status_code, boolean.status_code])
        assert codes == [200, 422], (number.text, boolean.text)
        task = "regression" if number.status_code == 200 else "classification"
        loser = boolean if task == "regression" else number
        assert f"does {task}" in loser.json()["error"]["message"]
        for client in (a, b):
            info = (await client.get(name)).json()
            assert info["task"] == task and info["version"] == 1
        # both replicas keep learning the one learner
        label = 1.5 if task == "regression" else False
        assert (await b.post(f"{name}/feedback", json={"x": ROWS[2], "y": label})).status_code == 200
        assert (await a.post(f"{name}/feedback", json={"x": ROWS[3], "y": label})).json()["version"] == 3
