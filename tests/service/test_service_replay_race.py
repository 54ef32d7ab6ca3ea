"""No false rollback: a replica that catches up on rounds another replica keeps appending must not take
the rounds appended after the head it read for rounds the store lost.

Two apps on one real Redis; the interleaving that made a replica log "the store lost rounds ... at least
versions 228 to 277", count it, show it on /readyz and rebuild its learner, during an ordinary predict, is
forced deterministically: the other replica appends a batch between the reading replica's read of the
head and its read of the log."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from kons_service.core.service import LearnerService
from kons_service.store import LearnerRef
from testkit.processes import SPEC, AppClient, AppFactory
from testkit.scrape import value

pytestmark = pytest.mark.anyio

URL = "/v1/learners/m"
REF = LearnerRef("default", "m")
PROBE = {"x": [0.3, -0.2, 0.5]}


def _batch(first: int, n: int) -> dict[str, Any]:
    return {"items": [{"x": [0.1 * i, -0.05 * i, 0.2], "y": 0.3 * i} for i in range(first, first + n)]}


def _append_before_the_next_log_read(reader: AppClient, append: Callable[[], Awaitable[None]]) -> None:
    """Make ``reader``'s next read of the log wait for ``append`` (another replica's feedback) first."""
    log = reader.app.state.service.store.log
    read = log.read
    pending = [append]

    async def read_after_append(*args: Any, **kwargs: Any) -> Any:
        while pending:
            await pending.pop()()
        return await read(*args, **kwargs)

    log.read = read_after_append


async def test_rounds_appended_after_the_head_was_read_are_not_a_rollback(make_client: AppFactory) -> None:
    writer, reader = await make_client(), await make_client()
    assert (await writer.put(URL, json=SPEC)).status_code == 201
    assert (await writer.post(f"{URL}/feedback", json=_batch(0, 10))).status_code == 200
    assert (await reader.post(f"{URL}/predict", json=PROBE)).json()["version"] == 10  # reader holds it
    assert (await writer.post(f"{URL}/feedback", json=_batch(10, 20))).status_code == 200  # head 30

    async def another_batch() -> None:
        assert (await writer.post(f"{URL}/feedback", json=_batch(30, 50))).status_code == 200  # head 80

    _append_before_the_next_log_read(reader, another_batch)
    # the reader reads the head (30), the writer appends 31..80, the reader reads the log after 10
    answer = await reader.post(f"{URL}/predict", json=PROBE)
    assert answer.status_code == 200, answer.text
    assert answer.json()["version"] in (30, 80)
    service: LearnerService = reader.app.state.service
    assert service.cache.rollbacks.summary() == {"detected": 0, "rounds_lost": 0}
    metrics = (await reader.get("/metrics")).text
    assert not value(metrics, "kons_rollback_rounds_lost_total")
    assert (await reader.get("/readyz")).json()["rollbacks"] == {"detected": 0, "rounds_lost": 0}
    # and the reader, caught up, agrees with the writer bit for bit
    assert (await reader.post(f"{URL}/predict", json=PROBE)).json() == \
        (await writer.post(f"{URL}/predict", json=PROBE)).json()
