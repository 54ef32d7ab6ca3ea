"""A Redis that loses its last acknowledged rounds (a crash under ``appendfsync everysec``, a failover to
an asynchronous replica) and then takes other rounds at the same versions: a replica that held the lost
rounds must notice, rebuild from the store and agree with every other replica, never serve or extend the
lost history. Real Redis; the rollback is simulated by restoring the learner's keys as they were
(``DUMP``/``RESTORE``), which is what the lost writes leave behind."""

from __future__ import annotations

import asyncio
import logging
from typing import cast

import httpx
import pytest

import kons
from kons_service.core.codec import unpack_float
from kons_service.store import LearnerRef
from kons_service.store.keys import learner_key, learner_keys
from testkit.processes import SPEC, AppFactory, RedisServer, hash_int
from testkit.scrape import value

pytestmark = pytest.mark.anyio

URL = "/v1/learners/m"
REF = LearnerRef("default", "m")
PROBE = [0.3, -0.2, 0.5]


def _rounds(first: int, n: int, shift: float) -> list[tuple[list[float], float]]:
    return [([0.1 * i, -0.05 * i + shift, 0.2], shift + 0.3 * i) for i in range(first, first + n)]


async def _feed(client: httpx.AsyncClient, rounds: list[tuple[list[float], float]]) -> None:
    for x, y in rounds:
        response = await client.post(f"{URL}/feedback", json={"x": x, "y": y})
        assert response.status_code == 200, response.text


def _dump(server: RedisServer, ref: LearnerRef = REF) -> dict[str, bytes | None]:
    """The learner's keys as they are now (None: absent)."""
    client = server.client()
    return {key: client.dump(key) for key in learner_keys(ref)}


def _restore(server: RedisServer, dumped: dict[str, bytes | None]) -> None:
    client = server.client()
    for key, dumped_value in dumped.items():
        client.delete(key)
        if dumped_value is not None:
            client.restore(key, 0, dumped_value)


async def test_a_replica_holding_lost_rounds_rebuilds_and_agrees(
    make_client: AppFactory, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = await make_client(), await make_client()
    assert (await a.put(URL, json=SPEC)).status_code == 201
    common, lost, taken = _rounds(1, 6, 0.0), _rounds(7, 2, 1.0), _rounds(7, 2, -1.0)
    await _feed(a, common)
    assert (await b.post(f"{URL}/predict", json={"x": PROBE})).json()["version"] == 6
    before_loss = _dump(redis_server)
    await _feed(a, lost)  # acknowledged to the client, then lost by Redis
    _restore(redis_server, before_loss)
    await _feed(b, taken)  # the same versions 7 and 8, other rounds

    reference = kons.learner_from_params(SPEC["algorithm"], {**SPEC["params"], "dim": SPEC["dim"]})
    for x, y in common + taken:
        reference.learn_one(x, y)

    # a's cached learner is at (incarnation, 8) too, on the lost history: it must not publish it ...
    service_a = a.app.state.service
    assert not await service_a.snapshots.snapshot(service_a.cache.entry(REF))
    assert hash_int(redis_server.client(), learner_key(REF, "meta"), "snap_version") == 0

    # ... nor serve it: both replicas answer what the store's history gives
    with caplog.at_level(logging.ERROR, logger="kons_service.cache"):
        answers = [(await c.post(f"{URL}/predict", json={"x": PROBE})).json() for c in (a, b)]
    assert answers == [{"prediction": reference.predict_one(PROBE), "version": 8}] * 2
    assert any("lost rounds" in r.getMessage() and "version 8" in r.getMessage() for r in caplog.records)
    # ... and counts it where an operator's alert looks: a's /metrics, not b's (b never held lost rounds)
    scraped = [(await c.get("/metrics")).text for c in (a, b)]
    assert [value(text, "kons_history_rollbacks_total") for text in scraped] == [1, 0]
    assert value(scraped[0], "kons_learner_history_rollbacks_total", tenant="default", learner="m") == 1

    # ... nor extend it: a's next round is played on the store's history and logged as such
    x, y = PROBE, 0.7
    fed = (await a.post(f"{URL}/feedback", json={"x": x, "y": y})).json()
    expected = reference.learn_one(x, y)
    assert fed["prediction"] == expected and fed["version"] == 9
    logged = cast(list[tuple[bytes, dict[bytes, bytes]]],  # a client without decode_responses: bytes
                  redis_server.client().xrange(learner_key(REF, "log"), "9-0", "9-0"))
    assert unpack_float(logged[0][1][b"p"]) == expected
    assert (await b.post(f"{URL}/predict", json={"x": PROBE})).json() == {
        "prediction": reference.predict_one(PROBE), "version": 9}


async def test_a_replica_behind_the_rollback_replays_only_its_own_history(
    make_client: AppFactory, redis_server: RedisServer
) -> None:
    """a held rounds 1..7 with round 7 lost; the store took other rounds 7..9: a is behind the head
    (7 < 9), and a replay from its version would continue a history it does not hold."""
    a, b = await make_client(), await make_client()
    assert (await a.put(URL, json=SPEC)).status_code == 201
    await _feed(a, _rounds(1, 6, 0.0))
    before_loss = _dump(redis_server)
    await _feed(a, _rounds(7, 1, 1.0))
    _restore(redis_server, before_loss)
    await _feed(b, _rounds(7, 3, -1.0))
    reference = kons.learner_from_params(SPEC["algorithm"], {**SPEC["params"], "dim": SPEC["dim"]})
    for x, y in _rounds(1, 6, 0.0) + _rounds(7, 3, -1.0):
        reference.learn_one(x, y)
    answers = [(await c.post(f"{URL}/predict", json={"x": PROBE})).json() for c in (a, b)]
    assert answers == [{"prediction": reference.predict_one(PROBE), "version": 9}] * 2



async def test_a_rollback_is_counted_without_naming_the_learner_to_anonymous_scrapers(
    make_client: AppFactory, redis_server: RedisServer
) -> None:
    keys = {"api_keys": "acme:key-a,beta:key-b", "metrics_key": "scrape-key"}
    a, b = await make_client(**keys), await make_client(**keys)
    for c in (a, b):
        c.headers["Authorization"] = "Bearer key-a"
    assert (await a.put(URL, json=SPEC)).status_code == 201
    await _feed(a, _rounds(1, 3, 0.0))
    before_loss = _dump(redis_server, LearnerRef("acme", "m"))
    await _feed(a, _rounds(4, 1, 1.0))
    _restore(redis_server, before_loss)
    await _feed(b, _rounds(4, 1, -1.0))
    assert (await a.post(f"{URL}/predict", json={"x": PROBE})).json()["version"] == 4

    scrape = {who: (await a.get("/metrics", headers={"Authorization": f"Bearer {key}"})).text
              for who, key in (("operator", "scrape-key"), ("owner", "key-a"), ("other", "key-b"))}
    del a.headers["Authorization"]
    scrape["anonymous"] = (await a.get("/metrics")).text
    for text in scrape.values():
        assert value(text, "kons_history_rollbacks_total") == 1
    mine = {"tenant": "acme", "learner": "m"}
    assert value(scrape["operator"], "kons_learner_history_rollbacks_total", **mine) == 1
    assert value(scrape["owner"], "kons_learner_history_rollbacks_total", **mine) == 1
    for hidden in ("other", "anonymous"):
        assert value(scrape[hidden], "kons_learner_history_rollbacks_total") is None
        assert "acme" not in scrape[hidden]


async def test_a_replica_whose_next_write_finds_its_rounds_lost_reports_it(
    make_client: AppFactory, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The replica that held the lost rounds writes next, without the lease (it made the last append):
    its append loses to the store's other history, and it reports the loss before rebuilding."""
    a, b = await make_client(), await make_client()
    assert (await a.put(URL, json=SPEC)).status_code == 201
    await _feed(a, _rounds(1, 6, 0.0))
    before_loss = _dump(redis_server)
    await _feed(a, _rounds(7, 2, 1.0))  # acknowledged to the client, then lost by Redis
    _restore(redis_server, before_loss)
    await _feed(b, _rounds(7, 3, -1.0))  # versions 7 to 9, other rounds: the store moved past a's head
    with caplog.at_level(logging.ERROR, logger="kons_service.cache"):
        fed = await a.post(f"{URL}/feedback", json={"x": PROBE, "y": 0.5})
    assert fed.status_code == 200 and fed.json()["version"] == 10
    assert any("lost rounds" in r.getMessage() and "version 8" in r.getMessage() for r in caplog.records)
    assert value((await a.get("/metrics")).text, "kons_history_rollbacks_total") == 1
    assert (await a.get(f"{URL}/state")).content == (await b.get(f"{URL}/state")).content


async def _lose_versions_7_and_8(make_client: AppFactory, redis_server: RedisServer) -> httpx.AsyncClient:
    """Replica a answers versions 7 and 8, then Redis loses them (and a, say, restarts): returns replica b,
    which saw version 6 only."""
    a, b = await make_client(), await make_client()
    assert (await a.put(URL, json=SPEC)).status_code == 201
    await _feed(a, _rounds(1, 6, 0.0))
    assert (await b.post(f"{URL}/predict", json={"x": PROBE})).json()["version"] == 6
    before_loss = _dump(redis_server)
    await _feed(a, _rounds(7, 2, 1.0))  # the client was answered version 8, then Redis lost 7 and 8
    _restore(redis_server, before_loss)
    _restart(redis_server)  # (a rollback is a Redis restart, or a replica taking over: nothing else loses)
    return b


def _restart(server: RedisServer) -> None:
    server.stop()  # (SIGTERM: the append-only file keeps the keys as restored)
    server.start()


async def test_a_replica_that_never_held_the_lost_rounds_reports_them_from_a_clients_seen_version(
    make_client: AppFactory, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Only a, which has since lost its memory of them (a restart), held the lost rounds 7 and 8; the
    client that was answered version 8 sends it back to b, which never held them: b reports the loss
    with its extent, once, whichever route the version comes with."""
    b = await _lose_versions_7_and_8(make_client, redis_server)
    seen = {"Kons-Seen-Version": "8"}
    with caplog.at_level(logging.ERROR, logger="kons_service.cache"):
        fed = await b.post(f"{URL}/feedback", json={"x": PROBE, "y": 0.5}, headers=seen)
        assert fed.status_code == 200 and fed.json()["version"] == 7  # the answer is unchanged
        for headers in (seen, {"Kons-Seen-Version": "7"}, {}):  # the same loss again; none; none sent
            assert (await b.post(f"{URL}/predict", json={"x": PROBE}, headers=headers)).status_code == 200
        assert (await b.get(URL, headers=seen)).status_code == 200
    reports = [r.getMessage() for r in caplog.records if "a client was answered" in r.getMessage()]
    assert len(reports) == 1, reports
    assert ("saw version 8, the store's head is version 6; lost at least versions 7 to 8 (2 rounds)"
            in reports[0])
    scraped = (await b.get("/metrics")).text
    assert value(scraped, "kons_rollbacks_detected_total", seen_by="client") == 1
    assert value(scraped, "kons_rollback_rounds_lost_total") == 2
    assert value(scraped, "kons_history_rollbacks_total") == 0  # b's own memory saw nothing
    assert (await b.get("/readyz")).json()["rollbacks"] == {"detected": 1, "rounds_lost": 2}


@pytest.mark.parametrize("sent", ["eight", "-1", "8.5", ""])
async def test_a_malformed_seen_version_is_a_422_that_changes_nothing(
    client: httpx.AsyncClient, sent: str
) -> None:
    assert (await client.put(URL, json=SPEC)).status_code == 201
    answer = await client.post(f"{URL}/feedback", json={"x": PROBE, "y": 0.5},
                               headers={"Kons-Seen-Version": sent})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "validation_error" and error["details"][0]["field"] == "header.Kons-Seen-Version"
    assert (await client.get(URL)).json()["version"] == 0


@pytest.mark.parametrize("route", ["infer", "versions/{version}/infer", "", "ready", "versions/{version}"])
async def test_the_v2_routes_report_a_loss_from_a_clients_seen_version(
    make_client: AppFactory, redis_server: RedisServer, caplog: pytest.LogCaptureFixture, route: str
) -> None:
    """A V2 client (inference through /v2, feedback through /v1) sends back the version /v1 answered it:
    V2's routes check it as /v1's do."""
    b = await _lose_versions_7_and_8(make_client, redis_server)
    version = (await b.get("/v2/models/m")).json()["versions"][0]
    path = f"/v2/models/m/{route.format(version=version)}".rstrip("/")
    infer = {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP64", "data": PROBE}]}
    seen = {"Kons-Seen-Version": "8"}
    with caplog.at_level(logging.ERROR, logger="kons_service.cache"):
        for _ in range(2):  # the same loss, reported once
            sent = (await b.post(path, json=infer, headers=seen) if route.endswith("infer")
                    else await b.get(path, headers=seen))
            assert sent.status_code == 200, sent.text
    reports = [r.getMessage() for r in caplog.records if "a client was answered" in r.getMessage()]
    assert len(reports) == 1, reports
    assert ("saw version 8, the store's head is version 6; lost at least versions 7 to 8 (2 rounds)"
            in reports[0])
    assert value((await b.get("/metrics")).text, "kons_rollbacks_detected_total", seen_by="client") == 1
    malformed = await b.get("/v2/models/m", headers={"Kons-Seen-Version": "eight"})
    assert malformed.status_code == 422 and "Kons-Seen-Version" in malformed.json()["error"]


async def test_a_retry_is_never_applied_twice_across_a_rollback_while_answers_are_dropped_to_fit(
    make_client: AppFactory, redis_server: RedisServer
) -> None:
    """The answers kept for retries are dropped, oldest first, to fit the learner's share of the tenant's
    budget; the ids never are. Redis then loses the last 20 requests (ids, answers and their byte count
    rolled back together): a retry of each of the 20 that survived is answered as before or refused 409
    ``already_applied``, on either replica, never applied again; each lost one is applied once more (its
    rounds were lost), and a second retry of all 40 applies nothing. (A design that dropped the oldest ids
    to fit applied survivors twice in ``test_rollback_storm``.)"""
    a, b = await make_client(request_ids_max_bytes=3_000), await make_client(request_ids_max_bytes=3_000)
    assert (await a.put(URL, json=SPEC)).status_code == 201
    bodies = [{"items": [{"x": x, "y": y} for x, y in _rounds(5 * i, 5, 0.1 * i)], "request_id": f"k{i}"}
              for i in range(40)]
    first = []
    before_loss: dict[str, bytes | None] = {}
    for i, body in enumerate(bodies):
        if i == 20:
            before_loss = _dump(redis_server)
        sent = await a.post(f"{URL}/feedback", json=body)
        assert sent.status_code == 200, sent.text
        first.append(sent.json())
    reqs = learner_key(REF, "reqs")
    assert not redis_server.client().hexists(reqs, "=k0")  # answers were dropped to fit
    _restore(redis_server, before_loss)  # versions 101..200 are lost, with the ids k20..k39

    statuses = []
    for i, body in enumerate(bodies):
        again = await (a, b)[i % 2].post(f"{URL}/feedback", json=body)
        statuses.append(again.status_code)
        if i < 20 and again.status_code == 200:
            assert again.json() == first[i]
        elif i < 20:
            assert again.status_code == 409 and again.json()["error"]["code"] == "already_applied"
        else:
            assert again.status_code == 200 and again.json()["version"] == 100 + 5 * (i - 19), again.text
    assert 409 in statuses[:20] and 200 in statuses[:20]
    for i, body in enumerate(bodies):  # once more: nothing applies
        assert (await (b, a)[i % 2].post(f"{URL}/feedback", json=body)).status_code in (200, 409)
    for c in (a, b):
        assert (await c.get(URL)).json()["version"] == 200
    fields = cast(dict[bytes, bytes], redis_server.client().hgetall(reqs))
    assert sum(1 for k in fields if not k.startswith((b"=", b"*"))) == 40  # every id, once
    marks = sum(2 * len(k) + len(v) + 8 for k, v in fields.items() if not k.startswith((b"=", b"*")))
    answers = sum(2 * len(k) - 1 + len(v) for k, v in fields.items() if k.startswith(b"="))
    assert (int(fields[b"*marks"]), int(fields[b"*answers"])) == (marks, answers)  # counted as stored
    assert marks + answers <= 3_000


@pytest.mark.parametrize("claimed", [10**23, 1_000, 9])
async def test_a_seen_version_the_store_never_acknowledged_is_no_rollback_witness(
    make_client: AppFactory, redis_server: RedisServer, caplog: pytest.LogCaptureFixture, claimed: int
) -> None:
    """A client sends a version above the learner's head while Redis has been up since the learner was
    created: the store proves it never acknowledged it, so nothing is reported (on e12d011 it counted as a
    client-witnessed rollback of up to 10^23 rounds, logged as data loss and shown on /readyz)."""
    while int(redis_server.client().info("server")["uptime_in_seconds"]) < 2:  # (its start, to the second)
        await asyncio.sleep(0.2)
    client = await make_client()
    assert (await client.put(URL, json=SPEC)).status_code == 201
    await _feed(client, _rounds(1, 8, 0.0))
    seen = {"Kons-Seen-Version": str(claimed)}
    with caplog.at_level(logging.INFO, logger="kons_service.cache"):
        fed = await client.post(f"{URL}/feedback", json={"x": PROBE, "y": 0.5}, headers=seen)
        assert fed.status_code == 200 and fed.json()["version"] == 9
        assert (await client.post(f"{URL}/predict", json={"x": PROBE}, headers=seen)).status_code == 200
        assert (await client.get(URL, headers=seen)).json()["version"] == 9
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "kons_service.cache"]
    assert sum("not a rollback" in r.getMessage() for r in caplog.records) == 1  # once, at info
    scraped = (await client.get("/metrics")).text
    assert not value(scraped, "kons_rollbacks_detected_total", seen_by="client")
    assert not value(scraped, "kons_rollback_rounds_lost_total")
    assert (await client.get("/readyz")).json()["rollbacks"] == {"detected": 0, "rounds_lost": 0}
