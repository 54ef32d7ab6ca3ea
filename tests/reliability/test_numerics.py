"""Bad numerics over HTTP: extreme but finite inputs never put a NaN or an infinity into a learner.

Every round either succeeds with finite numbers, or is rejected with a 4xx and the learner's state is
byte-for-byte unchanged; the exported state is checked for non-finite numbers after every round.
"""

from __future__ import annotations

import math
import random
from typing import Any

import httpx
import numpy as np
import pytest

import kons
from kons import _state

pytestmark = pytest.mark.anyio

NASTY: dict[str, tuple[list[float], float]] = {
    "x_1e150": ([1e150, -1e150, 1e150], 1.0),
    "x_1e300": ([1e300, 1e300, -1e300], 1.0),
    "x_max": ([1.7976931348623157e308, 0.0, 0.0], 1.0),
    "denormals": ([5e-324, -5e-324, 2.2250738585072014e-308], 1.0),
    "constant": ([1.0, 1.0, 1.0], 1.0),
    "zeros": ([0.0, 0.0, 0.0], 1.0),
    "y_1e150": ([0.1, 0.2, 0.3], 1e150),
    "y_1e300": ([0.1, 0.2, 0.3], 1e300),
    "y_-1e300": ([0.1, 0.2, 0.3], -1e300),
    "y_denormal": ([0.1, 0.2, 0.3], 5e-324),
}
NORMAL = ([0.3, -0.2, 0.5], 0.5)


def _finite_state(blob: bytes) -> bool:
    header, arrays = _state.decode(blob)
    counters = [float(v) for v in header["counters"]]
    return all(math.isfinite(v) for v in counters) and all(
        bool(np.isfinite(a).all()) for a in arrays.values() if a.dtype.kind in "fc")


def _rejection_code(config: dict[str, Any], x: list[float], y: float) -> str:
    """The code a rejected round must get: ``invalid_input`` if kons's own check refuses the input (on every
    endpoint alike), else ``numerical_error`` (the round overflowed inside the learner)."""
    learner = kons.learner_from_params(config["algorithm"], {**config["params"], "dim": config["dim"]})
    try:
        learner.check_round(x, y)
    except kons.InvalidInputError:
        return "invalid_input"
    return "numerical_error"


async def _round(client: httpx.AsyncClient, url: str, x: list[float], y: float) -> int:
    """One feedback round; asserts the promise for it and returns the status."""
    config = (await client.get(url)).json()["config"]
    before = await client.get(f"{url}/state")
    response = await client.post(f"{url}/feedback", json={"x": x, "y": y})
    after = await client.get(f"{url}/state")
    assert response.status_code < 500, response.text
    assert _finite_state(after.content), (x, y)
    if response.status_code == 200:
        body = response.json()
        assert math.isfinite(body["prediction"]) and math.isfinite(body["loss"])
        assert int(after.headers["x-kons-version"]) == int(before.headers["x-kons-version"]) + 1
    else:
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] == _rejection_code(config, x, y), response.text
        assert after.content == before.content
        assert after.headers["x-kons-version"] == before.headers["x-kons-version"]
    predicted = await client.post(f"{url}/predict", json={"x": x})
    assert predicted.status_code in (200, 422), predicted.text
    if predicted.status_code == 200:
        assert math.isfinite(predicted.json()["prediction"])
    return response.status_code


def _specs() -> list[tuple[str, str]]:
    # "preprocessed" is what the dict path builds for every other name; auto takes a task, not a loss
    return [(name, loss) for name in sorted(kons.LEARNERS) if name != "preprocessed"
            for loss in ("squared", "logistic")]


@pytest.mark.parametrize(("algorithm", "loss"), _specs())
async def test_extreme_inputs_never_make_a_learner_non_finite(client: httpx.AsyncClient, algorithm: str,
                                                              loss: str) -> None:
    url = f"/v1/learners/{algorithm}-{loss}"
    task = "regression" if loss == "squared" else "classification"
    params = {"task": task} if algorithm == "auto" else {"loss": loss}
    created = await client.put(url, json={"algorithm": algorithm, "dim": 3, "params": params})
    assert created.status_code == 201
    label = (lambda y: y) if loss == "squared" else (lambda y: 1.0 if y >= 0 else -1.0)
    statuses: dict[str, list[int]] = {}
    for case, (x, y) in NASTY.items():  # each three times: repeated identical points
        statuses[case] = [await _round(client, url, x, label(y)) for _ in range(3)]
        await _round(client, url, NORMAL[0], label(NORMAL[1]))
    for _ in range(10):  # a repeated identical point, many times
        await _round(client, url, [0.25, 0.25, 0.25], label(0.5))
    assert statuses["zeros"] == statuses["denormals"] == [200] * 3 or algorithm == "rp_son"


async def test_random_extreme_magnitudes(client: httpx.AsyncClient) -> None:
    """A seeded, bounded sample of finite floats of every magnitude, on three learner families."""
    rng = random.Random(6)

    def extreme() -> float:
        sign = rng.choice((-1.0, 1.0))
        kind = rng.random()
        if kind < 0.15:
            return sign * 5e-324 * rng.randint(1, 10**6)
        if kind < 0.3:
            return 0.0
        return sign * 10 ** rng.uniform(-300, 300)

    for algorithm in ("sketched_kons", "ons", "kernel_ogd"):
        url = f"/v1/learners/r-{algorithm}"
        await client.put(url, json={"algorithm": algorithm, "dim": 3, "params": {"loss": "squared"}})
        for _ in range(25):
            await _round(client, url, [extreme() for _ in range(3)], extreme())


def _body(i: int) -> dict[str, Any]:
    return {"x": [0.1 * i, 0.0, 1.0], "y": 0.5}


async def test_a_rejected_item_rejects_the_whole_batch(client: httpx.AsyncClient) -> None:
    url = "/v1/learners/batch"
    await client.put(url, json={"algorithm": "sketched_kons", "dim": 3, "params": {"loss": "squared"}})
    await client.post(f"{url}/feedback", json=_body(0))
    before = (await client.get(f"{url}/state")).content
    items = [_body(1), _body(2), {"x": [0.1, 0.2, 0.3], "y": 1e300}, _body(3)]
    response = await client.post(f"{url}/feedback", json={"items": items})
    assert response.status_code == 422 and "item 2" in response.json()["error"]["message"]
    assert (await client.get(f"{url}/state")).content == before
    assert (await client.post(f"{url}/feedback", json=_body(1))).json()["version"] == 2


async def test_randomly_corrupted_state_uploads_are_422_and_change_nothing(client: httpx.AsyncClient) -> None:
    """The HTTP side of the byte-format property tests in ``tests/kons/test_state.py``: seeded random byte
    flips and cuts of a real exported blob, uploaded with PUT /state."""
    url = "/v1/learners/blob"
    await client.put(url, json={"algorithm": "sketched_kons", "dim": 3, "params": {"loss": "squared"}})
    for i in range(12):
        await client.post(f"{url}/feedback", json=_body(i))
    blob = (await client.get(f"{url}/state")).content
    rng = random.Random(4)
    octets = {"content-type": "application/octet-stream"}
    for _ in range(40):
        bad = bytearray(blob)
        for _ in range(rng.randint(1, 3)):
            bad[rng.randrange(len(bad))] ^= rng.randint(1, 255)
        if rng.random() < 0.3:
            bad = bad[: rng.randrange(len(bad))]
        if bytes(bad) == blob:
            continue
        response = await client.put(f"{url}/state", content=bytes(bad), headers=octets)
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] == "invalid_state"
        assert (await client.get(f"{url}/state")).content == blob
