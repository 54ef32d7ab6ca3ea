"""The feedback hot path: one Redis call for a feedback on a loaded learner, and group commit of
concurrent feedbacks to one learner (each answered with its own rounds; the log replays to the same bits)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, cast

import httpx
import numpy as np
import pytest
import redis

import kons
from kons_service.core.learning import build
from kons_service.settings import Settings
from kons_service.store import LearnerRef
from testkit.processes import SPEC, AppClient, AppFactory
from tests.service.redis_counts import commands, used_between

pytestmark = pytest.mark.anyio

URL = "/v1/learners/m"
ROWS = np.random.default_rng(3).normal(size=(64, 3))


def _body(i: int) -> dict[str, Any]:
    x = ROWS[i]
    return {"x": x.tolist(), "y": float(x[0] - 0.5 * x[1])}


async def _local(client: httpx.AsyncClient) -> kons.Learner:
    """A fresh learner of the service's learner's stored config."""
    return build((await client.get(URL)).json()["config"])


async def test_a_feedback_on_a_loaded_learner_is_one_redis_call(
    make_client: AppFactory, redis_url: str
) -> None:
    # a lease of a minute: its renewal (every third of the lease, in the background) would otherwise land in a
    # measured request's window now and then on a loaded machine and count as a second call
    client = await make_client(history_points=16, lease_ttl_ms=60_000)
    server = redis.Redis.from_url(redis_url)
    # a learner of fixed size (a growing one also asks for more of its tenant's budget now and then)
    assert (await client.put(URL, json={"algorithm": "ons", "dim": 3})).status_code == 201
    for i in range(40):  # the first takes the lease (the learner is loaded); the stride grows to 4
        assert (await client.post(f"{URL}/feedback", json=_body(i))).status_code == 200
    calls = []
    for i in range(40, 48):
        before = commands(server)
        response = await client.post(f"{URL}/feedback", json=_body(i))
        after = commands(server)
        assert response.status_code == 200 and response.json()["version"] == i + 1
        calls.append(used_between(before, after))
    for used in calls:
        assert used["evalsha"] == 1  # one call: the append script, nothing before it
        assert "set" not in used and "del" not in used  # no lease taken
    # the script's own commands: HMGET (the head and the history's totals), GET (is a lease held?), XADD,
    # HSET (the head and the totals); with a history point, an RPUSH more
    assert [sum(used.values()) for used in calls].count(5) >= 4
    assert max(sum(used.values()) for used in calls) <= 6, str(calls)  # (a string: shown whole when it fails)


async def _busy_writer(client: AppClient, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A learner with one round, whose writer takes 0.2 s per group so that the next requests queue behind
    it; returns the list the size (in requests) of each group it plays is appended to."""
    assert (await client.put(URL, json=SPEC)).status_code == 201
    assert (await client.post(f"{URL}/feedback", json=_body(0))).status_code == 200
    writer, groups = client.app.state.service.writer, []
    play = writer._play

    async def slow_play(learner: Any, played: Any, entry: Any) -> Any:
        groups.append(len(played.xs))
        await asyncio.sleep(0.2)
        return await play(learner, played, entry)

    monkeypatch.setattr(writer, "_play", slow_play)
    return groups


async def test_concurrent_feedbacks_are_written_as_one_group_each_with_its_own_answer(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await make_client()
    groups = await _busy_writer(client, monkeypatch)
    writer = client.app.state.service.writer
    store, appends = writer.store, []

    async def counted_append(*args: Any, **kwargs: Any) -> Any:
        appends.append(1)
        return await append(*args, **kwargs)

    append = store.log.append
    monkeypatch.setattr(store.log, "append", counted_append)
    responses = await asyncio.gather(*(client.post(f"{URL}/feedback", json=_body(i)) for i in range(1, 17)))
    assert all(r.status_code == 200 for r in responses)
    assert sorted(r.json()["version"] for r in responses) == list(range(2, 18))  # each its own round
    assert max(groups) > 1 and len(groups) < 16  # requests were coalesced
    assert len(appends) == len(groups)  # one append per group
    # the acknowledged order replays to the acknowledged predictions, and the log to the same state
    local = await _local(client)
    local.learn_one(*_row(0))
    for response in sorted(responses, key=lambda r: r.json()["version"]):
        i = next(j for j in range(1, 17) if responses[j - 1] is response)
        assert response.json()["prediction"] == local.learn_one(*_row(i))
    fresh = await make_client()
    assert (await fresh.get(f"{URL}/state")).content == (await client.get(f"{URL}/state")).content
    assert (await client.get(f"{URL}/state")).content == local.to_bytes()


async def test_a_bad_request_in_a_group_fails_alone(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await make_client()
    await _busy_writer(client, monkeypatch)
    bodies = [_body(1), _body(2), {"x": [1.0, 2.0], "y": 0.0}, {"id": "never-predicted", "y": 1.0}, _body(3)]
    responses = await asyncio.gather(*(client.post(f"{URL}/feedback", json=b) for b in bodies))
    assert [r.status_code for r in responses] == [200, 200, 422, 404, 200]
    assert sorted(r.json()["version"] for r in responses if r.status_code == 200) == [2, 3, 4]
    assert (await client.get(URL)).json()["version"] == 4


def _row(i: int) -> tuple[np.ndarray, float]:
    body = _body(i)
    return np.asarray(body["x"]), body["y"]


async def test_without_group_commit_each_request_is_its_own_append(
    make_client: AppFactory, redis_url: str
) -> None:
    client = await make_client(group_commit=False)
    server = redis.Redis.from_url(redis_url)
    assert (await client.put(URL, json=SPEC)).status_code == 201
    before = commands(server).get("evalsha", 0)
    responses = await asyncio.gather(*(client.post(f"{URL}/feedback", json=_body(i)) for i in range(8)))
    assert sorted(r.json()["version"] for r in responses) == list(range(1, 9))
    assert commands(server)["evalsha"] - before >= 8 + 1  # 8 appends, and the first's lease


def test_group_commit_is_on_by_default() -> None:
    assert Settings().group_commit


async def test_an_optimistic_append_that_loses_is_retried_leased_and_backs_off(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a back-off of a minute, not the second it starts at: a loaded machine may take that long to play the
    # round again and answer it
    monkeypatch.setattr("kons_service.core.feedback._LEASED_SECONDS", 60.0)
    a, b = await make_client(), await make_client()
    assert (await a.put(URL, json=SPEC)).status_code == 201
    for i in range(2):  # a made the last append: its next one is optimistic
        assert (await a.post(f"{URL}/feedback", json=_body(i))).json()["version"] == i + 1
    assert (await b.post(f"{URL}/feedback", json=_body(2))).json()["version"] == 3  # moves the head
    conflicts = a.app.state.metrics.conflicts._value.get()
    answer = (await a.post(f"{URL}/feedback", json=_body(3))).json()
    assert answer["version"] == 4
    assert a.app.state.metrics.conflicts._value.get() == conflicts + 1
    entry = a.app.state.service.cache.entry(LearnerRef("default", "m"))
    assert entry.leased_until > time.monotonic()  # it takes the lease for a while now
    local = await _local(a)
    plays = [local.learn_one(*_row(i)) for i in range(4)]
    assert answer["prediction"] == plays[-1]  # played on the rebuilt learner, as a replay does
    assert (await a.get(f"{URL}/state")).content == (await b.get(f"{URL}/state")).content == local.to_bytes()


async def test_a_regular_round_skips_fastapis_solving_and_answers_as_it_would(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round with a plain JSON body goes straight to its endpoint (kons_service.http.body.RoundRoute);
    the same round sent so that FastAPI's handler takes it (a content type with parameters) is answered
    alike, and so is a seen version either way."""
    from fastapi.dependencies.utils import solve_dependencies as solve

    solved = []

    async def counted(*args: Any, **kwargs: Any) -> Any:
        solved.append(kwargs["request"].url.path)
        return await solve(*args, **kwargs)

    monkeypatch.setattr("fastapi.routing.solve_dependencies", counted)
    client = await make_client()
    answers: dict[str, list[Any]] = {}
    for content_type, url in (("application/json", URL), ("application/json; charset=utf-8", f"{URL}2")):
        assert (await client.put(url, json={"algorithm": "ons", "dim": 3})).status_code == 201
        solved.clear()
        got = []
        for i in range(4):
            headers = {"Content-Type": content_type, "Kons-Seen-Version": str(i)}
            for route, body in (("feedback", _body(i)), ("predict", {"x": _body(i + 1)["x"]})):
                response = await client.post(f"{url}/{route}", content=json.dumps(body), headers=headers)
                assert response.status_code == 200, response.text
                got.append(response.json())
        answers[content_type] = got
        assert solved == ([] if url == URL else [f"{url}/feedback", f"{url}/predict"] * 4)
    assert answers["application/json"] == answers["application/json; charset=utf-8"]


async def test_the_rounds_lane_answers_as_the_full_walk_does(make_client: AppFactory) -> None:
    """Rounds go to their route through kons_service.http.lane.RoundLane, past FastAPI's router; every
    answer, errors included (unknown learner, bad JSON, bad body, bad name, bad header, other content
    type, other method), is the one the full walk gives, as an app without the lane shows."""
    from kons_service.http.lane import RoundLane

    async def answers(client: AppClient) -> list[tuple[int, str, Any]]:
        got = []
        requests: list[tuple[str, str, Any, dict[str, str]]] = [
            ("POST", f"{URL}/predict", {"x": [1.0, 2.0, 3.0]}, {}),  # unknown learner
            ("PUT", URL, {"algorithm": "ons", "dim": 3}, {}),
            *[("POST", f"{URL}/feedback", _body(i), {}) for i in range(3)],
            ("POST", f"{URL}/predict", {"x": _body(4)["x"]}, {"Kons-Seen-Version": "2"}),
            ("POST", f"{URL}/predict", {"xs": [_body(5)["x"]] * 2}, {}),
            ("POST", f"{URL}/feedback", {"items": [_body(6), _body(7)]}, {}),
            ("POST", f"{URL}/predict", "{not json", {}),
            ("POST", f"{URL}/predict", {"x": [1.0, 2.0]}, {}),
            ("POST", f"{URL}/predict", {"z": 1}, {}),
            ("POST", f"{URL}/feedback", {"x": [1.0, "a", 3.0], "y": 1.0}, {}),
            ("POST", f"{URL}/predict", {"x": [1.0, 2.0, 3.0]}, {"Kons-Seen-Version": "-1"}),
            ("POST", f"{URL}/predict", {"x": [1.0, 2.0, 3.0]}, {"Content-Type": "text/plain"}),
            ("POST", "/v1/learners/bad%20name/predict", {"x": [1.0, 2.0, 3.0]}, {}),
            ("GET", f"{URL}/predict", None, {}),
            ("DELETE", URL, None, {}),
        ]
        for method, url, body, headers in requests:
            content = body if isinstance(body, str) else None if body is None else json.dumps(body)
            response = await client.request(method, url, content=content,
                                            headers={"Content-Type": "application/json", **headers})
            kind = response.headers.get("content-type", "")
            shown = response.json() if kind.startswith("application/json") else response.text
            if isinstance(shown, dict) and isinstance(shown.get("error"), dict):
                shown["error"].pop("request_id", None)
            assert response.headers["x-request-id"]
            got.append((response.status_code, kind, shown))
        return got

    lane = await make_client()
    assert any(cast(Any, m).cls is RoundLane for m in lane.app.user_middleware)
    walk = await make_client()
    walk.app.user_middleware = [m for m in walk.app.user_middleware if cast(Any, m).cls is not RoundLane]
    walk.app.middleware_stack = walk.app.build_middleware_stack()
    taken = await answers(lane)
    assert [status for status, _, _ in taken] == [404, 201, 200, 200, 200, 200, 200, 200, 400, 422, 422, 422,
                                                   422, 422, 422, 405, 204], taken
    assert taken == await answers(walk)
