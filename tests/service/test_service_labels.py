"""A classifier answers the user's own labels: ``0``/``1`` in, ``0``/``1`` out; ``false``/``true`` in,
``false``/``true`` out (single, batch, remembered ids, V2, a replica's replay), ``true`` and ``1`` two
classes; the history's accuracy and log loss are those of the played distributions; and a learner whose
log was written before (the labels as the floats -1.0 and +1.0) replays and goes on learning."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

import kons
from kons_service.core import feedback
from testkit.processes import AppFactory
from tests.service.classes import key

pytestmark = pytest.mark.anyio

URL = "/v1/learners/c"


def _rows(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 3))


def _same(a: Any, b: Any) -> bool:
    """The same JSON value, type included (``true`` is not ``1``)."""
    return type(a) is type(b) and a == b


def _position(classes: Sequence[Any], label: Any) -> int:
    return next(i for i, c in enumerate(classes) if _same(c, label))


@pytest.mark.parametrize("labels", [(0, 1), (False, True), ("cat", "dog")])
async def test_the_answers_echo_the_users_labels(make_client: AppFactory, labels: tuple[Any, Any]) -> None:
    client = await make_client()
    assert (await client.put(URL, json={"task": "classification"})).status_code == 201
    X = _rows(12)
    ys = [labels[int(x[0] > 0)] for x in X]
    ys[0], ys[1] = labels  # both classes early, whatever the draw
    local = kons.Auto(task="classification")
    keys = {key(label) for label in labels}

    batch = (await client.post(f"{URL}/feedback", json={"items": [
        {"x": x.tolist(), "y": y} for x, y in zip(X[:8], ys[:8], strict=True)]})).json()
    assert batch["labels"][0] is None  # the first round: no class known before it
    assert all(any(_same(answer, label) for label in labels) for answer in batch["labels"][1:]), batch
    assert all(set(p) <= keys for p in batch["probabilities"]) and set(batch["probabilities"][-1]) == keys
    single = (await client.post(f"{URL}/feedback", json={"x": X[8].tolist(), "y": ys[8]})).json()
    assert any(_same(single["label"], label) for label in labels) and set(single["probabilities"]) == keys
    asked = (await client.post(f"{URL}/predict", json={"x": X[9].tolist(), "id": "q"})).json()
    assert any(_same(asked["label"], label) for label in labels)
    assert math.isclose(sum(asked["probabilities"].values()), 1.0, rel_tol=1e-12)
    by_id = (await client.post(f"{URL}/feedback", json={"id": "q", "y": ys[9]})).json()
    assert set(by_id["probabilities"]) == keys
    for x, y in zip(X[:10], ys[:10], strict=True):
        local.learn_one(x, y)
    assert (await client.get(URL)).json()["classes"] == local.classes
    assert [type(c) for c in local.classes] == [type(label) for label in labels]

    v2 = (await client.post("/v2/models/c/infer", json={"inputs": [
        {"name": "x", "shape": [2, 3], "datatype": "FP64", "data": X[10:].ravel().tolist()}]})).json()
    outputs = {o["name"]: o for o in v2["outputs"]}
    expected = [local.predict_proba_by_class_one(x) for x in X[10:]]
    assert outputs["probabilities"]["parameters"]["classes"] == [key(c) for c in local.classes]
    assert outputs["probabilities"]["data"] == [p for row in expected for p in row.tolist()]
    assert outputs["label"]["data"] == [key(local.classes[int(np.argmax(row))]) for row in expected]

    replica = await make_client()  # replays the log (the labels as sent) into the same state
    assert (await replica.get(f"{URL}/state")).content == local.to_bytes()
    again = (await replica.post(f"{URL}/predict", json={"x": X[9].tolist()})).json()
    assert _same(again["label"], local.classes[int(np.argmax(local.predict_proba_by_class_one(X[9])))])


async def test_true_and_1_are_two_classes(make_client: AppFactory) -> None:
    client = await make_client()
    assert (await client.put(URL, json={"task": "classification"})).status_code == 201
    X = _rows(30, seed=3)
    ys = [[1, True, "cat"][i % 3] for i in range(len(X))]
    answer = (await client.post(f"{URL}/feedback", json={"items": [
        {"x": x.tolist(), "y": y} for x, y in zip(X, ys, strict=True)]})).json()
    local = kons.Auto(task="classification")
    played = [local.learn_proba_by_class_one(x, y) for x, y in zip(X, ys, strict=True)]
    assert local.classes == [True, 1, "cat"] and [type(c) for c in local.classes] == [bool, int, str]
    last = answer["probabilities"][-1]
    assert set(last) == {"1", "true", "cat"} and math.isclose(sum(last.values()), 1.0, rel_tol=1e-12)
    assert last == {key(c): p for c, p in zip(local.classes, played[-1].tolist(), strict=True)}
    assert answer["predictions"][-1] == max(played[-1])  # the probability of the label predicted
    asked = (await client.post(f"{URL}/predict", json={"x": X[0].tolist()})).json()
    expected = local.predict_proba_by_class_one(X[0]).tolist()
    assert asked["probabilities"] == {key(c): p for c, p in zip(local.classes, expected, strict=True)}
    assert _same(asked["label"], local.classes[int(np.argmax(expected))])


@pytest.mark.parametrize(("first", "clash"), [(1, "1"), ("1", 1), (True, "true"), ("false", False)])
async def test_a_label_whose_probabilities_key_is_another_class_s_is_refused(
        make_client: AppFactory, first: Any, clash: Any) -> None:
    client = await make_client()
    assert (await client.put(URL, json={"task": "classification"})).status_code == 201
    X = _rows(4, seed=5)
    assert (await client.post(f"{URL}/feedback", json={"x": X[0].tolist(), "y": first})).status_code == 200
    before = (await client.get(f"{URL}/state")).content
    for body in ({"x": X[1].tolist(), "y": clash},  # alone, and as the second item of a batch
                 {"items": [{"x": X[2].tolist(), "y": "dog"}, {"x": X[3].tolist(), "y": clash}]}):
        answer = await client.post(f"{URL}/feedback", json=body)
        assert answer.status_code == 422, answer.text
        assert "would share the key" in answer.json()["error"]["message"]
    in_one_batch = await client.post(f"{URL}/feedback", json={"items": [
        {"x": X[1].tolist(), "y": "dog"}, {"x": X[2].tolist(), "y": 7}, {"x": X[3].tolist(), "y": "7"}]})
    assert in_one_batch.status_code == 422 and "item 2:" in in_one_batch.json()["error"]["message"]
    assert (await client.get(f"{URL}/state")).content == before  # nothing learnt
    assert (await client.post(f"{URL}/feedback", json={"x": X[1].tolist(), "y": first})).status_code == 200


async def test_history_accuracy_and_log_loss_by_hand(make_client: AppFactory) -> None:
    client = await make_client()
    assert (await client.put(URL, json={"task": "classification"})).status_code == 201
    X = _rows(7, seed=4)
    ys: list[Any] = [1, True, 1, "cat", True, 1, "cat"]
    for x, y in zip(X, ys, strict=True):  # one request each: a history point at each version
        assert (await client.post(f"{URL}/feedback", json={"x": x.tolist(), "y": y})).status_code == 200
    local = kons.Auto(task="classification")
    correct, log_loss = 0, 0.0
    for t, (x, y) in enumerate(zip(X, ys, strict=True)):
        probabilities = local.learn_proba_by_class_one(x, y).tolist()
        mine = probabilities.pop(_position(local.classes, y))
        correct += t > 0 and mine > max(probabilities, default=-1.0)  # (the first round predicts none)
        log_loss -= math.log(mine)
    totals = (await client.get(f"{URL}/history")).json()["points"][-1]["totals"]
    assert totals["rounds"] == len(ys) and totals["correct"] == correct
    assert totals["log_loss"] == pytest.approx(log_loss, rel=1e-12)


async def test_a_log_written_before_replays_and_goes_on_learning(
        make_client: AppFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The service of before gave kons, and logged, its binary labels as check_round's -1.0 and +1.0."""
    X = _rows(20, seed=5)
    before = [X[i].tolist() for i in range(12)]
    old_labels = [bool(x[0] > 0) for x in X[:12]]
    old_labels[0], old_labels[1] = False, True

    def check_rows_before(learner: kons.Learner, xs: Sequence[Any], ys: Sequence[Any] | None = None
                          ) -> list[Any]:
        return [learner.check_round(x, None if ys is None else ys[i])[1] for i, x in enumerate(xs)]

    with monkeypatch.context() as patched:
        patched.setattr(feedback, "check_rows", check_rows_before)
        writer = await make_client()
        assert (await writer.put(URL, json={"task": "classification"})).status_code == 201
        fed = await writer.post(f"{URL}/feedback", json={"items": [
            {"x": x, "y": y} for x, y in zip(before, old_labels, strict=True)]})
        assert fed.status_code == 200 and fed.json()["labels"][-1] in (-1, 1)  # the old answers

    upgraded = await make_client()  # replays the floats: the classes False and True, the same plays
    after: list[Any] = [0, 1, True, False, 0, 1, 1, 0]  # the users' 0/1 and false/true: those two classes
    answer = (await upgraded.post(f"{URL}/feedback", json={"items": [
        {"x": x.tolist(), "y": y} for x, y in zip(X[12:], after, strict=True)]})).json()
    assert all(isinstance(label, bool) for label in answer["labels"])
    local = kons.Auto(task="classification")
    for x, y in zip([*X[:12], *X[12:]], [*old_labels, *after], strict=True):
        local.learn_one(x, y)
    assert local.classes == [False, True]
    assert (await upgraded.get(f"{URL}/state")).content == local.to_bytes()
    metrics = (await upgraded.get("/metrics")).text
    assert "kons_replay_divergence_total 0.0" in metrics
