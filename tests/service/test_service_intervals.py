"""Intervals and prediction sets over HTTP (issue 38): a learner created with a ``coverage`` answers them in
/predict and /feedback, equal to kons in-process; a replica's replay gives the same state and answers; a
retried request id answers its intervals; bad asks are 422s."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kons
from testkit.processes import AppFactory

pytestmark = pytest.mark.anyio

URL = "/v1/learners/i"


def _stream(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(n, 3))
    return X, X @ [1.0, -2.0, 0.5] + rng.normal(size=n) * (0.1 + np.abs(X[:, 0]))


def _local(coverage: float, **params: Any) -> kons.Learner:
    learner = kons.Auto(**params)
    learner.track_coverage(coverage)
    return learner


async def test_regression_intervals_equal_kons_and_a_replica_replays_them(make_client: AppFactory) -> None:
    client = await make_client()
    created = await client.put(URL, json={"task": "regression", "coverage": 0.9})
    assert created.status_code == 201, created.text
    assert created.json()["config"]["coverage"] == 0.9
    local = _local(0.9)
    X, y = _stream(60)
    for x, target in zip(X[:30], y[:30], strict=True):
        fed = (await client.post(f"{URL}/feedback", json={"x": x.tolist(), "y": float(target)})).json()
        played = local.learn_round(x, float(target), 0.9, track=False)
        assert fed["interval"] == list(played.interval or ()) and fed["prediction"] == played.value
    batch = (await client.post(f"{URL}/feedback", json={"coverage": 0.8, "request_id": "b1", "items": [
        {"x": x.tolist(), "y": float(t)} for x, t in zip(X[30:], y[30:], strict=True)]})).json()
    rounds = [local.learn_round(x, float(t), 0.8, track=False) for x, t in zip(X[30:], y[30:], strict=True)]
    assert batch["intervals"] == [list(r.interval or ()) for r in rounds]
    retried = (await client.post(f"{URL}/feedback", json={"coverage": 0.8, "request_id": "b1", "items": [
        {"x": x.tolist(), "y": float(t)} for x, t in zip(X[30:], y[30:], strict=True)]})).json()
    assert retried == batch

    probe = [0.3, 1.0, -0.5]
    default = (await client.post(f"{URL}/predict", json={"x": probe})).json()
    assert default["interval"] == list(local.predict_round(probe, 0.9).interval or ())
    asked = (await client.post(f"{URL}/predict", json={"xs": [probe, probe], "coverage": 0.5})).json()
    half = list(local.predict_round(probe, 0.5).interval or ())
    assert asked["intervals"] == [half, half] and "sets" not in asked
    assert half[1] - half[0] < default["interval"][1] - default["interval"][0]
    assert (await client.get(f"{URL}/state")).content == local.to_bytes()

    replica = await make_client()  # replays the log, tracking the config's coverage as the writer did
    assert (await replica.post(f"{URL}/predict", json={"x": probe})).json() == default
    assert (await replica.get(f"{URL}/state")).content == local.to_bytes()


async def test_a_classifier_answers_prediction_sets(make_client: AppFactory) -> None:
    client = await make_client()
    assert (await client.put(URL, json={"task": "classification", "coverage": 0.9})).status_code == 201
    local = _local(0.9, task="classification")
    X, _ = _stream(40)
    labels = ["a" if x[0] > 0 else ("b" if x[1] > 0 else "c") for x in X]
    fed = (await client.post(f"{URL}/feedback", json={"items": [
        {"x": x.tolist(), "y": label} for x, label in zip(X, labels, strict=True)]})).json()
    played = [local.learn_round(x, label, 0.9, track=False) for x, label in zip(X, labels, strict=True)]
    assert fed["sets"] == [r.prediction_set for r in played] and "intervals" not in fed
    asked = (await client.post(f"{URL}/predict", json={"x": [1.0, 0.0, 0.0], "coverage": 0.95})).json()
    assert asked["set"] == local.predict_round([1.0, 0.0, 0.0], 0.95).prediction_set


@pytest.mark.parametrize(("create", "ask", "code"), [
    ({"task": "regression", "coverage": 1.5}, None, "validation_error"),
    ({"task": "regression", "coverage": 0}, None, "validation_error"),
    ({"algorithm": "ons", "params": {"loss": "logistic"}, "coverage": 0.9}, None, "invalid_parameter"),
    ({"task": "regression"}, {"x": [1.0], "coverage": 0.9}, "invalid_parameter"),
    ({"task": "regression", "coverage": 0.9}, {"x": [1.0], "coverage": 1.0}, "validation_error"),
    ({"task": "regression", "coverage": 0.9}, {"x": [1.0], "coverage": "0.9"}, "validation_error"),
])
async def test_bad_coverages_are_422s(make_client: AppFactory, create: dict[str, Any],
                                      ask: dict[str, Any] | None, code: str) -> None:
    client = await make_client()
    created = await client.put(URL, json=create)
    if ask is None:
        assert created.status_code == 422, created.text
        assert created.json()["error"]["code"] == code
        return
    assert created.status_code == 201
    for route, body in (("predict", ask), ("feedback", {**ask, "y": 1.0})):
        answer = await client.post(f"{URL}/{route}", json=body)
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["code"] == code
    assert (await client.get(URL)).json()["version"] == 0  # nothing learnt


async def test_metrics_count_the_rounds_covered_and_the_widths(make_client: AppFactory) -> None:
    client = await make_client()
    assert (await client.put(URL, json={"task": "regression", "coverage": 0.9})).status_code == 201
    local = _local(0.9)
    X, y = _stream(50)
    await client.post(f"{URL}/feedback", json={"items": [
        {"x": x.tolist(), "y": float(t)} for x, t in zip(X, y, strict=True)]})
    rounds = [local.learn_round(x, float(t), 0.9, track=False) for x, t in zip(X, y, strict=True)]
    text = (await client.get("/metrics")).text
    series = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
              if line.startswith("kons_conformal_") and not line.startswith("kons_conformal_rounds_created")}
    assert series['kons_conformal_rounds_total{coverage="0.9"}'] == 50
    assert series['kons_conformal_covered_total{coverage="0.9"}'] == sum(bool(r.covered) for r in rounds)
    widths = sum(r.interval[1] - r.interval[0] for r in rounds if r.interval is not None)
    assert series['kons_conformal_width_total{coverage="0.9"}'] == pytest.approx(widths, rel=1e-12)


async def test_v2_answers_the_interval_as_an_extra_output(make_client: AppFactory) -> None:
    client = await make_client()
    assert (await client.put(URL, json={"task": "regression", "coverage": 0.9})).status_code == 201
    local = _local(0.9)
    X, y = _stream(40)
    await client.post(f"{URL}/feedback", json={"items": [
        {"x": x.tolist(), "y": float(t)} for x, t in zip(X, y, strict=True)]})
    for x, t in zip(X, y, strict=True):
        local.learn_round(x, float(t), 0.9, track=False)
    probes = [[0.3, 1.0, -0.5], [1.0, 0.0, 0.0]]
    body = {"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP64", "data": probes}]}
    answer = (await client.post("/v2/models/i/infer", json=body)).json()
    outputs = {o["name"]: o for o in answer["outputs"]}
    expected = [bound for p in probes for bound in (local.predict_round(p, 0.9).interval or ())]
    assert outputs["interval"]["shape"] == [2, 2] and outputs["interval"]["data"] == expected
    assert outputs["interval"]["parameters"] == {"coverage": 0.9}
    metadata = (await client.get("/v2/models/i")).json()
    assert {"name": "interval", "datatype": "FP64", "shape": [-1, 2]} in metadata["outputs"]
