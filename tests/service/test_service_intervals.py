"""Intervals and prediction sets over HTTP (issue 38): a learner created with a ``coverage`` answers them in
/predict and /feedback, equal to kons in-process; a replica's replay gives the same state and answers; a
retried request id answers its intervals; bad asks are 422s."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import redis

import kons
from kons_service.settings import DEFAULT_TENANT
from kons_service.store import LearnerRef, keys
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


async def _fed(client: httpx.AsyncClient, rounds: int) -> tuple[kons.Learner, list[kons.Round]]:
    """A regression learner created with coverage 0.9 that learnt ``rounds`` rounds of the stream in one
    request, and its local twin with kons's own rounds of them."""
    assert (await client.put(URL, json={"task": "regression", "coverage": 0.9})).status_code == 201
    local = _local(0.9)
    X, y = _stream(rounds)
    fed = await client.post(f"{URL}/feedback", json={"items": [
        {"x": x.tolist(), "y": float(t)} for x, t in zip(X, y, strict=True)]})
    assert fed.status_code == 200, fed.text
    return local, [local.learn_round(x, float(t), 0.9, track=False) for x, t in zip(X, y, strict=True)]


async def test_metrics_count_the_rounds_covered_and_the_widths(make_client: AppFactory) -> None:
    client = await make_client()
    _, rounds = await _fed(client, 50)
    text = (await client.get("/metrics")).text
    series = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
              if line.startswith("kons_conformal_") and not line.startswith("kons_conformal_rounds_created")}
    assert series['kons_conformal_rounds_total{coverage="0.9"}'] == 50
    assert series['kons_conformal_covered_total{coverage="0.9"}'] == sum(bool(r.covered) for r in rounds)
    widths = sum(r.interval[1] - r.interval[0] for r in rounds if r.interval is not None)
    assert series['kons_conformal_width_total{coverage="0.9"}'] == pytest.approx(widths, rel=1e-12)


async def test_v2_answers_the_interval_as_an_extra_output(make_client: AppFactory) -> None:
    client = await make_client()
    local, _ = await _fed(client, 40)
    probes = [[0.3, 1.0, -0.5], [1.0, 0.0, 0.0]]
    body = {"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP64", "data": probes}]}
    answer = (await client.post("/v2/models/i/infer", json=body)).json()
    outputs = {o["name"]: o for o in answer["outputs"]}
    expected = [bound for p in probes for bound in (local.predict_round(p, 0.9).interval or ())]
    assert outputs["interval"]["shape"] == [2, 2] and outputs["interval"]["data"] == expected
    assert outputs["interval"]["parameters"] == {"coverage": 0.9}
    metadata = (await client.get("/v2/models/i")).json()
    assert {"name": "interval", "datatype": "FP64", "shape": [-1, 2]} in metadata["outputs"]


# ---------------------------------------------------------------------- the history: coverage, calibration
def _items(X: np.ndarray, y: np.ndarray, rows: slice) -> list[dict[str, Any]]:
    return [{"x": x.tolist(), "y": float(t)} for x, t in zip(X[rows], y[rows], strict=True)]


def _entries(point: dict[str, Any] | None, part: str) -> dict[Any, dict[str, Any]]:
    """A point's coverage totals by target, or its calibration totals under None."""
    found = (point or {}).get("totals", {}).get(part)
    if found is None:
        return {}
    return {e["target"]: e for e in found} if part == "coverage" else {None: found}


def _base(part: str, first: dict[str, Any] | None, now: dict[str, Any],
          key: Any = None) -> dict[str, Any] | None:
    """What to subtract from totals ``now`` (of ``part``: target ``key``'s coverage, or calibration) for
    the window after point ``first``, by the rule of docs/intervals.md (zeros: {}); None if the window is
    not known."""
    before = _entries(first, part).get(key)
    if before is not None and before["since"] == now["since"]:
        return before
    return {} if now["since"] >= (first["version"] if first else 0) else None


def _coverage_window(first: dict[str, Any] | None,
                     last: dict[str, Any]) -> dict[float, tuple[int, int, float]]:
    """Per target, (rounds, covered, sum of widths) over the rounds between two points of the history."""
    out = {}
    for target, now in _entries(last, "coverage").items():
        base = _base("coverage", first, now, target)
        if base is not None:
            rounds, covered = now["rounds"] - base.get("rounds", 0), now["covered"] - base.get("covered", 0)
            out[target] = (rounds, covered, now["width"] - base.get("width", 0.0))
    return out


def _ece_window(first: dict[str, Any] | None, last: dict[str, Any]) -> tuple[list[int], float]:
    """The rounds per bin and the expected calibration error over the rounds between two points."""
    now = last["totals"]["calibration"]
    base = _base("calibration", first, now)
    assert base is not None
    diff = {k: np.subtract(now[k], base.get(k, 0)) for k in ("count", "confidence", "correct")}
    errors = np.abs(diff["confidence"] - diff["correct"]).sum()
    return diff["count"].tolist(), float(errors / diff["count"].sum())


@pytest.mark.parametrize("store", ["redis", "embedded"])
async def test_the_history_gives_the_coverage_and_width_of_any_window_per_target(
        make_client: AppFactory, tmp_path: Path, store: str) -> None:
    """Rounds answered at the config's 0.9 and at a request's 0.8, in requests of 1 to 40 rounds: between
    any two points of the history (thinned on the embedded store: 16 points), each target's rounds,
    covered rounds and widths are those of the answers' intervals, counted by hand."""
    settings: dict[str, Any] = {"redis_url": None, "data_dir": tmp_path / "data", "history_points": 16} \
        if store == "embedded" else {}
    client = await make_client(**settings)
    assert (await client.put(URL, json={"task": "regression", "coverage": 0.9})).status_code == 201
    X, y = _stream(80)
    answered = []  # (version, target, covered, width) of each round
    start = 0
    for size, coverage in ((1, None), (9, None), (40, 0.8), (1, None), (29, 0.8)):
        body: dict[str, Any] = {"items": _items(X, y, slice(start, start + size))}
        if coverage is not None:
            body["coverage"] = coverage
        fed = (await client.post(f"{URL}/feedback", json=body)).json()
        for k, (low, high) in enumerate(fed["intervals"]):
            answered.append((start + k + 1, coverage or 0.9, low <= y[start + k] <= high, high - low))
        start += size
    points = (await client.get(f"{URL}/history")).json()["points"]
    assert points[-1]["version"] == 80
    if store == "embedded":
        assert len(points) <= 16
    targets = {e["target"]: e["since"] for e in points[-1]["totals"]["coverage"]}
    assert targets == {0.9: 0, 0.8: 10}
    pairs = [(None, points[-1]), *itertools.pairwise(points), (points[len(points) // 3], points[-1])]
    for first, last in pairs:
        low = first["version"] if first else 0
        got = _coverage_window(first, last)
        for target in (0.9, 0.8):
            rounds = [a for a in answered if low < a[0] <= last["version"] and a[1] == target]
            if not rounds:
                assert got.get(target, (0, 0, 0.0))[0] == 0
                continue
            n, covered, width = got[target]
            assert (n, covered) == (len(rounds), sum(a[2] for a in rounds)), (low, last["version"], target)
            assert width == pytest.approx(sum(a[3] for a in rounds), rel=1e-12)
    overall = _coverage_window(None, points[-1])
    assert 0.7 < overall[0.9][1] / overall[0.9][0] <= 1 and overall[0.8][0] == 69


async def test_the_history_keeps_the_targets_answered_last_and_says_since_when(
        make_client: AppFactory) -> None:
    """Nine targets asked in turn: the history keeps the last eight; the first, asked again, counts anew
    from the round before it (its window from a point before it is still exact)."""
    client = await make_client()
    assert (await client.put(URL, json={"task": "regression", "coverage": 0.9})).status_code == 201
    X, y = _stream(20)
    targets = [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.95, 0.5]
    covered = []
    for k, target in enumerate(targets):
        rows = slice(2 * k, 2 * k + 2)
        body = {"items": _items(X, y, rows), "coverage": target}
        fed = (await client.post(f"{URL}/feedback", json=body)).json()
        covered += [low <= t <= high for (low, high), t in zip(fed["intervals"], y[rows], strict=True)]
    points = {p["version"]: p for p in (await client.get(f"{URL}/history")).json()["points"]}
    kept = {e["target"]: e["since"] for e in points[16]["totals"]["coverage"]}
    assert kept == dict(zip(targets[:8], range(0, 16, 2), strict=True))
    listed = [(e["target"], e["since"]) for e in points[20]["totals"]["coverage"]]
    assert len(listed) == 8 and (0.55, 2) not in listed and listed[-1] == (0.5, 18)  # 0.5 anew; 0.55 dropped
    window = _coverage_window(points[10], points[20])[0.5]
    assert window[:2] == (2, sum(covered[18:]))
    assert window[2] == points[20]["totals"]["coverage"][-1]["width"] > 0
    assert 0.55 not in _coverage_window(points[10], points[20])  # its totals are gone: no window
    assert _coverage_window(points[12], points[20])[0.8][:2] == (2, sum(covered[12:14]))


async def test_a_history_written_before_the_coverage_totals_still_reads(make_client: AppFactory,
                                                                         redis_url: str) -> None:
    """A learner whose history points and totals lack the coverage totals (as an older version wrote them):
    it reads, and the totals start at the next round, with the window from an old point exact."""
    client = await make_client()
    assert (await client.put(URL, json={"task": "regression", "coverage": 0.9})).status_code == 201
    X, y = _stream(60)

    async def feed(rows: slice) -> list[bool]:
        fed = (await client.post(f"{URL}/feedback", json={"items": _items(X, y, rows)})).json()
        return [low <= t <= high for (low, high), t in zip(fed["intervals"], y[rows], strict=True)]

    await feed(slice(0, 30))
    ref = LearnerRef(DEFAULT_TENANT, "i")
    with redis.Redis.from_url(redis_url) as raw:
        meta, hist = keys.learner_key(ref, "meta"), keys.learner_key(ref, "hist")
        raw.hdel(meta, "hist_coverage", "hist_calibration")
        old = []
        for text in raw.lrange(hist, 0, -1):
            point = json.loads(text)
            del point["totals"]["coverage"]
            old.append(json.dumps(point))
        raw.delete(hist)
        raw.rpush(hist, *old)
    covered = await feed(slice(30, 60))
    answer = await client.get(f"{URL}/history")
    assert answer.status_code == 200, answer.text
    points = {p["version"]: p for p in answer.json()["points"]}
    assert points[30]["totals"].get("coverage") is None
    assert points[60]["totals"]["coverage"][0]["since"] == 30
    n, hits, _ = _coverage_window(points[20], points[60])[0.9]
    assert (n, hits) == (30, sum(covered))  # the rounds counted: those after the totals started


async def test_the_history_gives_the_calibration_error_and_set_sizes_of_any_window(
        make_client: AppFactory) -> None:
    """A classifier of three classes: between points of its history, the rounds per bin of the most
    probable class's probability and the expected calibration error are those of the answers'
    probabilities, and the sets' coverage and sizes those of the answers' sets, counted by hand."""
    client = await make_client()
    assert (await client.put(URL, json={"task": "classification", "coverage": 0.9})).status_code == 201
    rng = np.random.default_rng(5)
    X = rng.normal(size=(150, 3))
    labels = [["a", "b", "c"][int(x[0] > 0) + int(x[1] > 0.5) if rng.random() > 0.2 else rng.integers(3)]
              for x in X]
    rounds = []  # (version, confidence, top class right, covered, set size)
    for start, coverage in ((0, None), (50, 0.95), (100, None)):
        rows = range(start, start + 50)
        body: dict[str, Any] = {"items": [{"x": X[i].tolist(), "y": labels[i]} for i in rows]}
        if coverage:
            body["coverage"] = coverage
        fed = (await client.post(f"{URL}/feedback", json=body)).json()
        for i, probabilities, answer in zip(rows, fed["probabilities"], fed["sets"], strict=True):
            top = max(probabilities, key=probabilities.__getitem__) if probabilities else None
            rounds.append((i + 1, probabilities.get(top), top == labels[i], labels[i] in answer, len(answer),
                           coverage or 0.9))
    points = {p["version"]: p for p in (await client.get(f"{URL}/history")).json()["points"]}
    for low, high in ((0, 150), (0, 50), (37, 123), (100, 150)):
        window = [r for r in rounds if low < r[0] <= high and r[1] is not None]
        bins = [min(int(r[1] * 10), 9) for r in window]
        expected = sum(abs(sum(r[1] - r[2] for r, b in zip(window, bins, strict=True) if b == k))
                       for k in range(10)) / len(window)
        count, ece = _ece_window(points.get(low), points[high])
        assert count == [bins.count(k) for k in range(10)], (low, high)
        assert ece == pytest.approx(expected, rel=1e-9, abs=1e-12), (low, high)
        got = _coverage_window(points.get(low), points[high])
        for target in {r[5] for r in rounds if low < r[0] <= high}:
            answered = [r for r in rounds if low < r[0] <= high and r[5] == target]
            assert got[target] == (len(answered), sum(r[3] for r in answered), sum(r[4] for r in answered))
    assert 0 < _ece_window(None, points[150])[1] < 0.5  # a real error of calibration, not a constant


async def test_a_retry_asking_another_coverage_is_a_conflict(make_client: AppFactory) -> None:
    """The coverage is part of a feedback's body: the same request_id with the same body answers the
    original intervals; with another coverage (or none, where the first asked one) it is a 409 that
    applies nothing."""
    client = await make_client()
    assert (await client.put(URL, json={"task": "regression", "coverage": 0.9})).status_code == 201
    X, y = _stream(3)
    items = _items(X, y, slice(None))
    first = await client.post(f"{URL}/feedback", json={"items": items, "request_id": "r", "coverage": 0.8})
    assert first.status_code == 200
    again = await client.post(f"{URL}/feedback", json={"items": items, "request_id": "r", "coverage": 0.8})
    assert again.json() == first.json()
    for other in ({"coverage": 0.9}, {}):
        answer = await client.post(f"{URL}/feedback", json={"items": items, "request_id": "r", **other})
        assert answer.status_code == 409, answer.text
        assert answer.json()["error"]["code"] == "request_id_conflict"
    plain = await client.post(f"{URL}/feedback", json={"items": items, "request_id": "s"})
    retried = await client.post(f"{URL}/feedback", json={"items": items, "request_id": "s"})
    assert retried.json() == plain.json()
    assert (await client.get(URL)).json()["version"] == 6


async def test_a_state_upload_or_a_new_learner_of_the_name_starts_the_totals_anew(
        make_client: AppFactory) -> None:
    """A learner that takes another's state, and a learner created again under a deleted one's name: their
    coverage and calibration totals count only their own rounds."""
    client = await make_client()
    X, _ = _stream(30)
    items = [{"x": x.tolist(), "y": "a" if x[0] > 0 else "b"} for x in X]
    spec = {"task": "classification", "coverage": 0.9}
    assert (await client.put(URL, json=spec)).status_code == 201
    assert (await client.post(f"{URL}/feedback", json={"items": items[:20]})).status_code == 200
    blob = (await client.get(f"{URL}/state")).content
    assert (await client.put(f"{URL}-copy", json=spec)).status_code == 201
    copied = await client.put(f"{URL}-copy/state", content=blob,
                              headers={"Content-Type": "application/octet-stream"})
    assert copied.status_code == 200, copied.text
    assert (await client.delete(URL)).status_code in (200, 204)
    assert (await client.put(URL, json=spec)).status_code == 201
    for url in (URL, f"{URL}-copy"):
        fed = (await client.post(f"{url}/feedback", json={"items": items[20:]})).json()
        last = (await client.get(f"{url}/history")).json()["points"][-1]
        (coverage,) = last["totals"]["coverage"]
        assert coverage["rounds"] == 10 and coverage["covered"] == sum(
            item["y"] in answer for item, answer in zip(items[20:], fed["sets"], strict=True)), url
        assert sum(last["totals"]["calibration"]["count"]) == 10, url
