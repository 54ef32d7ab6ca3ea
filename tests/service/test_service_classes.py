"""Classification answers what users need: labels of any kind, classes as they appear, ``label`` and
``probabilities`` in every answer (single, batch, remembered ids, retried request ids), equal to kons
in-process; a restart and a replica replay the multi-class learner bit for bit; accuracy in /metrics."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

import kons
from testkit.processes import AppFactory
from tests.service.classes import key, keyed, learnt

pytestmark = pytest.mark.anyio

URL = "/v1/learners/c"
CLASSES = ["setosa", "versicolor", "virginica", 7, True]


def _stream(n: int, seed: int = 0) -> tuple[np.ndarray, list[Any]]:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(len(CLASSES), 3)) * 3.0
    which = rng.integers(len(CLASSES), size=n)
    X = centers[which] + rng.normal(size=(n, 3))
    return X, [CLASSES[k] for k in which]


async def test_multi_class_answers_equal_kons(make_client: AppFactory) -> None:
    client = await make_client()
    assert (await client.put(URL, json={"task": "classification"})).status_code == 201
    local = kons.Auto(task="classification")
    X, y = _stream(80)
    for x, label in zip(X[:40], y[:40], strict=True):  # one at a time
        fed = (await client.post(f"{URL}/feedback", json={"x": x.tolist(), "y": label})).json()
        played_round = local.learn_round(x, learnt(label))  # (True: the class True, as the user sent it)
        played = dict(played_round.distribution or [])
        assert fed["probabilities"] == keyed(played) and fed.get("label") == played_round.predicted, fed
        assert math.isclose(sum(fed["probabilities"].values()), 1.0, rel_tol=1e-12)
        assert fed["loss"] == pytest.approx(-math.log(played[label]), rel=1e-12)
    batch = (await client.post(f"{URL}/feedback", json={"items": [
        {"x": x.tolist(), "y": label} for x, label in zip(X[40:], y[40:], strict=True)]})).json()
    rounds = [local.learn_round(x, learnt(label)) for x, label in zip(X[40:], y[40:], strict=True)]
    played_many = [dict(r.distribution or []) for r in rounds]
    assert batch["probabilities"] == [keyed(d) for d in played_many]
    assert batch["labels"] == [r.predicted for r in rounds]  # the class of fewest errors (kons's)
    # the probability of "labels"
    assert batch["predictions"] == [d[r.predicted] for d, r in zip(played_many, rounds, strict=True)]
    assert set(batch["probabilities"][-1]) == {"setosa", "versicolor", "virginica", "7", "true"}

    probe = [0.5, -1.0, 2.0]
    asked = (await client.post(f"{URL}/predict", json={"x": probe})).json()
    expected = local.predict_proba_dict_one(probe)
    predicted = local.predict_round(probe).predicted
    assert asked == {"prediction": expected[predicted], "version": 80, "label": predicted,
                     "probabilities": keyed(expected)}
    info = (await client.get(URL)).json()
    assert info["classes"] == local.classes and info["task"] == "classification"
    assert (await client.get(f"{URL}/state")).content == local.to_bytes()

    # a restart (another process on the same Redis) replays the log into the same learner
    replica = await make_client()
    assert (await replica.post(f"{URL}/predict", json={"x": probe})).json() == asked
    assert (await replica.get(f"{URL}/state")).content == local.to_bytes()
    more = (await replica.post(f"{URL}/feedback", json={"x": probe, "y": "dog"})).json()
    assert more["probabilities"] == keyed(local.learn_proba_one(probe, "dog")) and more["version"] == 81


@pytest.mark.parametrize("labels", [("no", "yes"), (False, True), (0, 1)])
async def test_binary_answers_equal_kons(make_client: AppFactory, labels: tuple[Any, Any]) -> None:
    """A binary round's distribution is computed from the score kons played (one prediction, not two):
    the very numbers of kons's learn_proba_one and predict_proba_dict_one."""
    client = await make_client()
    assert (await client.put(URL, json={"task": "classification"})).status_code == 201
    local = kons.Auto(task="classification")
    rng = np.random.default_rng(5)
    X = rng.normal(size=(150, 2))
    y = [labels[int(x[0] + 0.05 * x[1] > 0)] for x in X]  # nearly separable: scores grow large
    answer = (await client.post(f"{URL}/feedback", json={"items": [
        {"x": x.tolist(), "y": label} for x, label in zip(X, y, strict=True)]})).json()
    played = [local.learn_proba_one(x, learnt(label)) for x, label in zip(X, y, strict=True)]
    assert answer["probabilities"] == [keyed(d) for d in played]
    # the user's own labels (none at the first round: no class known before it)
    assert answer["labels"] == [None, *(max(d, key=d.__getitem__) for d in played[1:])]
    assert set(answer["labels"]) == {None, *labels}
    # the probability of "labels"
    assert answer["predictions"] == [0.0, *(max(d.values()) for d in played[1:])]
    probes = [[4.0, 0.0], [-4.0, 0.0], [0.01, 0.0], [40.0, 3.0]]
    asked = (await client.post(f"{URL}/predict", json={"xs": probes})).json()
    assert asked["probabilities"] == [keyed(local.predict_proba_dict_one(p)) for p in probes]
    assert asked["predictions"] == [max(local.predict_proba_dict_one(p).values()) for p in probes]
    assert min(asked["predictions"]) >= 0.5 and max(asked["predictions"]) <= 1.0


async def test_remembered_ids_and_retried_requests_answer_the_classes(make_client: AppFactory) -> None:
    client = await make_client()
    assert (await client.put(URL, json={"task": "classification"})).status_code == 201
    X, y = _stream(12, seed=1)
    await client.post(f"{URL}/feedback", json={"items": [{"x": x.tolist(), "y": label}
                                                         for x, label in zip(X[:10], y[:10], strict=True)]})
    asked = (await client.post(f"{URL}/predict", json={"x": X[10].tolist(), "id": "q1"})).json()
    body = {"id": "q1", "y": y[10], "request_id": "r-1"}
    fed = await client.post(f"{URL}/feedback", json=body)
    assert fed.status_code == 200, fed.text
    assert set(fed.json()["probabilities"]) >= set(asked["probabilities"])
    again = await client.post(f"{URL}/feedback", json=body)  # answered from its record, not applied again
    assert again.json() == fed.json()
    batch = {"items": [{"x": X[11].tolist(), "y": 3}, {"x": X[11].tolist(), "y": False}], "request_id": "r-2"}
    first = (await client.post(f"{URL}/feedback", json=batch)).json()
    assert "3" in first["probabilities"][0] and key(False) in first["probabilities"][1]
    other = await make_client()  # another replica answers the retry from the store's record
    assert (await other.post(f"{URL}/feedback", json=batch)).json() == first


async def test_accuracy_and_log_loss_in_metrics(make_client: AppFactory) -> None:
    client = await make_client(metrics_per_learner=True)
    assert (await client.put(URL, json={"task": "classification"})).status_code == 201
    X, y = _stream(30, seed=2)
    answer = (await client.post(f"{URL}/feedback", json={"items": [
        {"x": x.tolist(), "y": label} for x, label in zip(X, y, strict=True)]})).json()
    correct = sum(predicted is not None and key(predicted) == key(label)
                  for predicted, label in zip(answer["labels"], y, strict=True))
    text = (await client.get("/metrics")).text
    samples = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
               if line and not line.startswith("#")}
    assert samples["kons_feedback_classified_total"] == 30
    assert samples["kons_feedback_correct_total"] == correct
    assert samples['kons_learner_correct_total{learner="c",tenant="default"}'] == correct
    loss = samples['kons_learner_loss_total{learner="c",loss="logistic",tenant="default"}']
    assert loss == pytest.approx(sum(answer["losses"]), rel=1e-12)


async def test_regression_answers_keep_their_shape(make_client: AppFactory) -> None:
    client = await make_client()
    assert (await client.put(URL, json={"task": "regression"})).status_code == 201
    fed = await client.post(f"{URL}/feedback", json={"x": [1.0, 2.0], "y": 3.5})
    assert set(fed.json()) == {"prediction", "loss", "version"}
    assert fed.content == json.dumps(fed.json(), separators=(",", ":")).encode()
    asked = await client.post(f"{URL}/predict", json={"xs": [[1.0, 2.0]]})
    assert set(asked.json()) == {"predictions", "version"}
    assert (await client.get(URL)).json()["classes"] is None


async def test_prediction_is_the_probability_of_the_label_with_two_classes_and_with_three(
    make_client: AppFactory,
) -> None:
    """A classifier's `prediction` means one thing in every answer: the probability of the answer's
    `label`, the same number as `probabilities[label]`, before and after its third class (it was the
    log-odds with two classes and a probability from the third on; and a feedback's was the probability of
    the class learnt, not of the one predicted). The V2 protocol's output says the same."""
    client = await make_client()
    assert (await client.put(URL, json={"task": "classification"})).status_code == 201
    rng = np.random.default_rng(11)
    X = rng.normal(size=(60, 2))
    labels = ["no", "yes"] * 15 + ["no", "yes", "maybe"] * 10
    for i, (x, label) in enumerate(zip(X, labels, strict=True)):
        fed = (await client.post(f"{URL}/feedback", json={"x": x.tolist(), "y": label})).json()
        if "label" in fed:
            assert fed["prediction"] == fed["probabilities"][fed["label"]], (i, fed)
        asked = (await client.post(f"{URL}/predict", json={"xs": [x.tolist(), [0.3, -0.2]]})).json()
        for prediction, label_asked, probabilities in zip(
                asked["predictions"], asked["labels"], asked["probabilities"], strict=True):
            assert prediction == probabilities[label_asked] and 0.0 <= prediction <= 1.0
    v2 = (await client.post("/v2/models/c/infer", json={"inputs": [
        {"name": "x", "shape": [1, 2], "datatype": "FP64", "data": [0.3, -0.2]}]})).json()
    output = next(o for o in v2["outputs"] if o["name"] == "prediction")
    assert output["data"] == asked["predictions"][1:]
