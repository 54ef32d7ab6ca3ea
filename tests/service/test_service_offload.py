"""Where learner numerics run: a single round of a small learner, or of one whose rounds are quick, on the
event loop, anything else (a batch, or one round of a large and slow learner) in a worker thread, so that
one tenant's large exact learner does not stall every other tenant's requests (issue 21, fair sharing)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import kons
from kons_service.core import learning
from kons_service.store import LearnerRef
from testkit.processes import AppFactory

pytestmark = pytest.mark.anyio

URL = "/v1/learners/exact"
#: Exact KONS keeps every point it learned: past about 600 rounds its state is over the 1 MiB that a
#: round on the event loop may take.
EXACT = {"algorithm": "kons", "dim": 3, "params": {"preprocess": False}}


async def test_offload_runs_one_small_or_quick_round_inline_and_the_rest_in_a_thread() -> None:
    def where() -> threading.Thread:
        return threading.current_thread()

    loop_thread = threading.current_thread()
    assert await learning.offload(where, 1, 1000, 0.0) is loop_thread
    assert await learning.offload(where, 2, 1000, 0.0) is not loop_thread
    assert await learning.offload(where, 1, 2**21, 0.0) is not loop_thread  # (not timed yet)
    assert await learning.offload(where, 1, 2**21, 0.001) is loop_thread  # auto's round: a few MB, 1 ms
    assert await learning.offload(where, 2, 2**21, 0.001) is not loop_thread
    assert await learning.offload(where, 1, 2**21, 0.02) is not loop_thread


@pytest.mark.parametrize(("round_seconds", "off_the_loop"), [(0.02, True), (0.0005, False)])
async def test_one_round_of_a_large_learner_is_played_off_the_event_loop_unless_quick(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch, round_seconds: float, off_the_loop: bool
) -> None:
    client = await make_client()
    rows = np.random.default_rng(5).normal(size=(700, 4))
    assert (await client.put(URL, json=EXACT)).status_code == 201
    items = [{"x": row[:3].tolist(), "y": float(row[3])} for row in rows]
    for start in range(0, len(items), 350):
        batch = {"items": items[start : start + 350]}
        assert (await client.post(f"{URL}/feedback", json=batch)).status_code == 200
    entry = client.app.state.service.cache.entry(LearnerRef("default", "exact"))
    learner = entry.learner
    assert learner is not None and learner.state_nbytes() > 2**20
    entry.round_cpu_seconds = round_seconds  # (as its rounds were timed: a slow learner, or a quick one)

    threads: list[threading.Thread] = []
    kind: type[kons.Learner] = type(learner)
    learn_round, predict_round = kind.learn_round, kind.predict_round

    def spied_learn(self: kons.Learner, x: object, y: object, *args: Any, **kwargs: Any) -> kons.Round:
        threads.append(threading.current_thread())
        return learn_round(self, x, y, *args, **kwargs)

    def spied_predict(self: kons.Learner, x: object, *args: Any, **kwargs: Any) -> kons.Round:
        threads.append(threading.current_thread())
        return predict_round(self, x, *args, **kwargs)

    # (the learner's rounds, which the feedback writer and the service call)
    monkeypatch.setattr(kind, "learn_round", spied_learn)
    monkeypatch.setattr(kind, "predict_round", spied_predict)
    assert (await client.post(f"{URL}/predict", json={"x": [0.1, 0.2, 0.3]})).status_code == 200
    assert (await client.post(f"{URL}/feedback", json={"x": [0.1, 0.2, 0.3], "y": 0.5})).status_code == 200
    assert len(threads) == 2
    assert all((thread is not threading.current_thread()) is off_the_loop for thread in threads)
