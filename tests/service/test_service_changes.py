"""Changes of the data are visible (issue 20): an ``auto`` learner whose stream changes declares the change,
and the service records it at its exact round in ``/history`` (in the store: a second app reads the same),
counts it in ``kons_changes_total`` and keeps the one-Redis-call feedback."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import redis

import kons
from testkit.processes import AppFactory
from testkit.scrape import value
from tests.service.redis_counts import commands, used_between

pytestmark = pytest.mark.anyio

URL = "/v1/learners/drifting"
CHANGE = 600


def _stream(n: int = 1000, flip: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Raw rows of a linear target, whose sign flips at round ``CHANGE`` if ``flip``."""
    rng = np.random.default_rng(20)
    X = rng.normal(size=(n, 3)) * [1.0, 20.0, 0.1] + [0.0, 300.0, 5.0]
    y = 10.0 * X[:, 0] + 0.5 * (X[:, 1] - 300.0) + rng.normal(size=n)
    if flip:
        y[CHANGE:] *= -1.0
    return X, y + 50.0


def _items(X: np.ndarray, y: np.ndarray) -> list[dict[str, Any]]:
    return [{"x": x.tolist(), "y": float(t)} for x, t in zip(X, y, strict=True)]


async def test_a_change_is_recorded_at_its_round_in_the_history_and_counted(make_client: AppFactory) -> None:
    client = await make_client(history_points=16)  # a short series: thinned many times, the events are not
    assert (await client.put(URL, json={"dim": 3})).status_code == 201
    X, y = _stream()
    local = kons.Auto(dim=3)
    declared: list[int] = []
    for start in range(0, len(y), 50):
        answer = await client.post(f"{URL}/feedback", json={"items": _items(X[start:start + 50],
                                                                            y[start:start + 50])})
        assert answer.status_code == 200, answer.text
        for x, t in zip(X[start:start + 50], y[start:start + 50], strict=True):
            local.learn_one(x, t)
            if local.changes_detected > len(declared):
                declared.append(int(local.last_change_round or 0))
    assert declared and CHANGE < declared[0] < CHANGE + 50  # the flip is declared within a few rounds
    history = (await client.get(f"{URL}/history")).json()
    assert history["stride"] > 16  # the points were thinned ...
    # ... not the events
    assert history["changes"] == [{"version": v, "changes": k + 1} for k, v in enumerate(declared)]
    stats = (await client.get(URL)).json()["stats"]
    assert stats["changes"] == len(declared) and stats["last_change_round"] == declared[-1]
    assert stats["leader_since"] > CHANGE  # the base that leads took the lead after the change
    assert history["points"][-1]["leader_since"] == stats["leader_since"]
    text = (await client.get("/metrics")).text
    assert value(text, "kons_changes_total") == len(declared)
    assert value(text, "kons_learner_changes_total", tenant="default", learner="drifting") == len(declared)
    replica = await make_client()  # the events live in the store with the learner
    assert (await replica.get(f"{URL}/history")).json()["changes"] == history["changes"]


async def test_a_stationary_stream_records_no_change(make_client: AppFactory) -> None:
    client = await make_client()
    assert (await client.put(URL, json={"dim": 3})).status_code == 201
    X, y = _stream(flip=False)
    answer = await client.post(f"{URL}/feedback", json={"items": _items(X, y)})
    assert answer.status_code == 200, answer.text
    assert (await client.get(f"{URL}/history")).json()["changes"] == []
    assert (await client.get(URL)).json()["stats"]["changes"] == 0
    assert value((await client.get("/metrics")).text, "kons_changes_total") == 0


async def test_a_feedback_that_declares_a_change_is_still_one_redis_call(
    make_client: AppFactory, redis_url: str
) -> None:
    """The event is written by the append's own script, with the head: no command of its own."""
    client = await make_client(history_points=100_000)  # a point per round: no thinning in the count
    server = redis.Redis.from_url(redis_url)
    assert (await client.put(URL, json={"dim": 3})).status_code == 201
    X, y = _stream()
    for start in range(0, CHANGE, 100):
        part = slice(start, start + 100)
        answer = await client.post(f"{URL}/feedback", json={"items": _items(X[part], y[part])})
        assert answer.status_code == 200
    used = []
    for start in (CHANGE, CHANGE + 20):  # the change is declared in the first of these two
        part = slice(start, start + 20)
        before = commands(server)
        answer = await client.post(f"{URL}/feedback", json={"items": _items(X[part], y[part])})
        assert answer.status_code == 200
        used.append(used_between(before, commands(server)))
        changes = (await client.get(f"{URL}/history")).json()["changes"]
        assert len(changes) == 1  # declared in the first
    assert used[0] == used[1]  # the same script calls and the same commands in them, change or not
    assert used[0]["evalsha"] == 1
