"""Shadow challengers over HTTP on a real Redis: a challenger learns exactly its champion's acknowledged
rounds in order (mirroring its rollbacks), on two replicas and through SIGKILLs of either; the comparison
is the champion's and the challenger's errors on those rounds; bad challengers are 4xx and change
nothing."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import httpx
import numpy as np
import pytest
import redis

import kons
from kons_service.core import codec as kons_service_codec
from kons_service.core.service import LearnerService
from kons_service.store import LearnerRef
from testkit.processes import SPEC, AppClient, AppFactory, services_on_redis

pytestmark = pytest.mark.anyio

URL = "/v1/learners/m"
CHALLENGER: dict[str, Any] = {"shadow": "m", "algorithm": "ons", "dim": 3,
                              "params": {"loss": "squared", "C": 3.0}}


def _champion() -> kons.Learner:
    return kons.learner_from_params(SPEC["algorithm"], {**SPEC["params"], "dim": SPEC["dim"]})


def _challenger() -> kons.Learner:
    return kons.learner_from_params("ons", {**CHALLENGER["params"], "dim": 3})


def _challenger_state(rounds: list[tuple[list[float], float]]) -> bytes:
    """The state of a challenger that learnt ``rounds`` in one process (what a caught-up one must be)."""
    local = _challenger()
    for x, y in rounds:
        local.learn_one(np.array(x), y)
    return local.to_bytes()


def _stream(n: int, seed: int = 4) -> list[tuple[list[float], float]]:
    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(n, 3))
    return [(x.tolist(), float(np.sin(x[0]) + 0.5 * x[1])) for x in xs]


async def _feed(client: AppClient, rounds: list[tuple[list[float], float]], url: str = URL) -> None:
    for x, y in rounds:
        answer = await client.post(f"{url}/feedback", json={"x": x, "y": y})
        assert answer.status_code == 200, answer.text


async def _caught_up(client: AppClient, version: int) -> dict[str, Any]:
    for _ in range(100):
        report: dict[str, Any] = (await client.get(f"{URL}/challengers")).json()
        if all(c["learnt"] == version for c in report["challengers"]):
            return report
        await asyncio.sleep(0.05)
    raise AssertionError(report)


async def _locked_out(service: LearnerService, challenger: LearnerRef, holder: str) -> None:
    """Take the challenger's catch-up lock as another process would, once this process's shadow task lets
    go of it (its loop takes it every half second, and as soon as a feedback or a create wakes it)."""
    for _ in range(200):
        if await service.store.shadows.lock(challenger, holder, 60_000):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the catch-up lock of {challenger} was never free")


async def test_a_challenger_learns_the_champions_rounds_and_is_compared(make_client: AppFactory) -> None:
    a = await make_client()
    b = await make_client()
    stream = _stream(70)
    assert (await a.put(URL, json=SPEC)).status_code == 201
    await _feed(a, stream[:10])
    created = await b.put("/v1/learners/c", json=CHALLENGER)
    assert created.status_code == 201, created.text
    assert created.json()["config"]["shadow"] == "m" and created.json()["version"] == 0
    for i in range(10, 50, 5):  # both replicas take the champion's feedback
        await _feed((a, b)[i % 2], stream[i:i + 5])

    report = await _caught_up(a, 50)
    [challenger] = report["challengers"]
    assert (challenger["name"], challenger["start"], challenger["behind"]) == ("c", 10, 0)
    champion, local = _champion(), _challenger()
    for x, y in stream[:10]:
        champion.learn_one(np.array(x), y)
    champion_errors, challenger_errors = [], []
    for x, y in stream[10:50]:
        champion_errors.append((champion.learn_one(np.array(x), y) - y) ** 2)
        challenger_errors.append((local.learn_one(np.array(x), y) - y) ** 2)
    assert (await b.get("/v1/learners/c/state")).content == local.to_bytes()
    comparison = challenger["comparison"]
    assert comparison["rounds"] == 40 and comparison["metric"] == "squared_error"
    assert comparison["champion"] == pytest.approx(np.mean(champion_errors), rel=1e-12)
    assert comparison["challenger"] == pytest.approx(np.mean(challenger_errors), rel=1e-12)
    difference = np.array(champion_errors) - np.array(challenger_errors)
    t = difference.mean() / (difference.std(ddof=1) / np.sqrt(len(difference)))
    assert comparison["t"] == pytest.approx(t, rel=1e-9)
    assert comparison["challenger_wins"] == int((difference > 0).sum())
    assert [w["rounds"] for w in comparison["windows"]] == [40]  # (one window of at most 1000)

    # a rollback of the champion is mirrored: the challenger goes back to its own state at that round
    assert (await a.post(f"{URL}/rollback", json={"version": 30})).status_code == 200
    await _feed(b, stream[50:55])
    await _caught_up(b, 56)
    mirrored = _challenger()
    for x, y in stream[10:30] + stream[50:55]:
        mirrored.learn_one(np.array(x), y)
    assert (await a.get("/v1/learners/c/state")).content == mirrored.to_bytes()
    # the champion's log after the challenger's cursor is kept by its snapshots
    service = a.app.state.service
    assert await service.store.shadows.cursors(LearnerRef("default", "m")) == {"c": 56}

    # a client's feedback to the challenger is refused; deleting it stops it
    refused = await a.post("/v1/learners/c/feedback", json={"x": [0.0, 1.0, 2.0], "y": 1.0})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "learner_is_shadow"
    assert (await b.get("/v1/learners/c")).json()["version"] == 46
    assert (await a.delete("/v1/learners/c")).status_code == 204
    assert (await b.get(f"{URL}/challengers")).json()["challengers"] == []
    assert await service.store.shadows.cursors(LearnerRef("default", "m")) == {}


async def test_a_challenger_deleted_during_its_catch_up_holds_its_champions_log_no_more(
        make_client: AppFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # (a catch-up that had fed the challenger its rounds wrote its cursor after a delete had forgotten it:
    # the champion kept its log after that cursor for ever, and every process kept catching the dead
    # challenger up)
    client = await make_client()
    service = client.app.state.service
    await service.shadows.close()  # (this test runs the one catch-up itself)
    champion, challenger = LearnerRef("default", "m"), LearnerRef("default", "c")
    assert (await client.put(URL, json=SPEC)).status_code == 201
    assert (await client.put("/v1/learners/c", json=CHALLENGER)).status_code == 201
    await _feed(client, _stream(5))
    learn = service.shadows._learn

    async def deleted_after_learning(*args: Any) -> int:
        done: int = await learn(*args)
        assert (await client.delete("/v1/learners/c")).status_code == 204
        return done

    monkeypatch.setattr(service.shadows, "_learn", deleted_after_learning)
    status = await service.shadows.catch_up(challenger)
    assert await service.store.shadows.cursors(champion) == {}
    assert challenger not in await service.store.shadows.all()
    assert status == "gone"


async def test_a_challenger_created_again_keeps_its_place_in_its_champions_log(
        make_client: AppFactory, redis_url: str) -> None:
    # (a create of an existing challenger, the same request sent again, registered the champion's head as
    # its cursor, then, finding the challenger it did not make, forgot the cursor: the champion's next
    # snapshot trimmed the rounds the challenger had yet to learn, and it stopped for good)
    client = await make_client(keep_versions=1)
    service = client.app.state.service
    champion, challenger = LearnerRef("default", "m"), LearnerRef("default", "c")
    stream = _stream(20, seed=3)
    assert (await client.put(URL, json=SPEC)).status_code == 201
    assert (await client.put("/v1/learners/c", json=CHALLENGER)).status_code == 201
    await _locked_out(service, challenger, "elsewhere")  # (it learns nothing for now)
    await _feed(client, stream)
    assert (await client.put("/v1/learners/c", json=CHALLENGER)).status_code == 200  # the same
    assert await service.store.shadows.cursors(champion) == {"c": 0}
    assert await service.snapshots.snapshot(service.cache.entry(champion))
    assert redis.Redis.from_url(redis_url).xlen("kons:{default/m}:log") == 20
    await service.store.shadows.unlock(challenger, "elsewhere")
    await _caught_up(client, 20)
    assert (await client.get("/v1/learners/c/state")).content == _challenger_state(stream)


async def test_a_comparison_while_a_challenger_is_created_leaves_its_place_in_the_log_alone(
        make_client: AppFactory, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # (a GET .../challengers between a challenger's registration and its create found a cursor without a
    # challenger and forgot it: the challenger was never caught up, and the champion's next snapshot
    # trimmed the rounds it had to learn)
    client = await make_client(keep_versions=1)
    service = client.app.state.service
    champion = LearnerRef("default", "m")
    stream = _stream(30, seed=5)
    assert (await client.put(URL, json=SPEC)).status_code == 201
    await _feed(client, stream[:10])
    register = service.shadows.register

    async def compared_meanwhile(ref: LearnerRef, link: Any) -> Any:
        registered = await register(ref, link)
        assert (await client.get(f"{URL}/challengers")).json()["challengers"] == []
        return registered

    monkeypatch.setattr(service.shadows, "register", compared_meanwhile)
    assert (await client.put("/v1/learners/c", json=CHALLENGER)).status_code == 201
    assert await service.store.shadows.cursors(champion) == {"c": 10}
    await _locked_out(service, LearnerRef("default", "c"), "elsewhere")  # (it learns nothing for now)
    await _feed(client, stream[10:])
    assert await service.snapshots.snapshot(service.cache.entry(champion))
    assert redis.Redis.from_url(redis_url).xlen("kons:{default/m}:log") == 20
    await service.store.shadows.unlock(LearnerRef("default", "c"), "elsewhere")
    await _caught_up(client, 30)
    assert (await client.get("/v1/learners/c/state")).content == _challenger_state(stream[10:])


async def _a_ghost_cursor(client: AppClient) -> tuple[LearnerService, LearnerRef]:
    """The service of ``client`` and a champion ``m`` with a cursor ``ghost`` of no challenger (as a create
    that crashed after its registration leaves), which a comparison has seen so."""
    service = client.app.state.service
    champion = LearnerRef("default", "m")
    assert (await client.put(URL, json=SPEC)).status_code == 201
    await service.store.shadows.follow(champion, "ghost", 0, first=True)
    assert (await client.get(f"{URL}/challengers")).json()["challengers"] == []
    return service, champion


async def test_a_cursor_left_without_a_challenger_is_forgotten_by_a_later_comparison(
        make_client: AppFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cursor whose challenger was never created (its create crashed after the registration) pins its
    champion's log only until a comparison has seen it so for longer than a create takes."""
    client = await make_client()
    service, champion = await _a_ghost_cursor(client)
    assert await service.store.shadows.cursors(champion) == {"ghost": 0}  # (it may be being created)
    monkeypatch.setattr("kons_service.core.shadows._UNLINKED_SECONDS", 0.0)
    await asyncio.sleep(0.01)  # (the monotonic clock moves on: it has been seen so for longer than that)
    assert (await client.get(f"{URL}/challengers")).json()["challengers"] == []
    assert await service.store.shadows.cursors(champion) == {}
    assert LearnerRef("default", "ghost") not in await service.store.shadows.all()


async def _until(holds: Callable[[], bool]) -> None:
    """Wait for the shadow task's passes (every half second) to make ``holds()`` true."""
    for _ in range(100):
        if holds():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the shadow task's passes never made it so")


async def test_a_comparison_s_record_of_a_cursor_without_a_challenger_goes_with_its_deleted_champion(
        make_client: AppFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that compared a champion while one of its cursors had no challenger drops that record once
    the champion is deleted (here by another replica) and no comparison of it can come: its records stay
    as few as the last minute's comparisons made, however many learners its tenants create and delete."""
    a, b = await make_client(), await make_client()
    service, champion = await _a_ghost_cursor(a)
    assert list(service.shadows._unlinked) == [(champion, "ghost", 0)]
    assert (await b.delete(URL)).status_code == 204
    monkeypatch.setattr("kons_service.core.shadows._UNLINKED_SECONDS", 0.0)
    await _until(lambda: not service.shadows._unlinked)
    assert await service.store.shadows.cursors(champion) == {}


async def test_a_cursor_left_without_a_challenger_is_forgotten_with_no_later_comparison(
        make_client: AppFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    client = await make_client()
    service, champion = await _a_ghost_cursor(client)
    monkeypatch.setattr("kons_service.core.shadows._UNLINKED_SECONDS", 0.0)
    await _until(lambda: not service.shadows._unlinked)
    assert await service.store.shadows.cursors(champion) == {}
    assert LearnerRef("default", "ghost") not in await service.store.shadows.all()


async def test_the_status_of_a_deleted_challenger_is_not_kept(make_client: AppFactory) -> None:
    client = await make_client()
    service = client.app.state.service
    challenger = LearnerRef("default", "c")
    assert (await client.put(URL, json=SPEC)).status_code == 201
    assert (await client.put("/v1/learners/c", json=CHALLENGER)).status_code == 201
    await _feed(client, _stream(3))
    await _caught_up(client, 3)
    await _until(lambda: challenger in service.shadows._reported)
    assert (await client.delete("/v1/learners/c")).status_code == 204
    await _until(lambda: challenger not in service.shadows._reported)


async def test_the_catch_up_lock_of_a_process_that_is_gone_is_taken_over(make_client: AppFactory) -> None:
    # (a replica SIGKILLed during a catch-up left its lock: the challenger learnt nothing for the lock's
    # minute; a live holder's lock is still waited for)
    a, b = await make_client(), await make_client()
    service = a.app.state.service
    challenger = LearnerRef("default", "c")
    stream = _stream(20, seed=6)
    assert (await a.put(URL, json=SPEC)).status_code == 201
    assert (await a.put("/v1/learners/c", json=CHALLENGER)).status_code == 201
    alive = f"{b.app.state.service.store.process_name}:1"
    await _locked_out(service, challenger, alive)
    await _feed(a, stream[:10])
    assert await service.shadows.catch_up(challenger) == "busy"
    assert await service.store.shadows.holder(challenger) == alive
    await service.store.shadows.unlock(challenger, alive)

    await _locked_out(service, challenger, "kons:gone:1")  # (a named process with no connection to Redis)
    await _feed(a, stream[10:])
    await _caught_up(a, 20)
    assert (await b.get("/v1/learners/c/state")).content == _challenger_state(stream)


async def test_a_comparison_waits_for_the_catch_up_of_its_own_process(
        make_client: AppFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # (told "busy" by the lock of its own process's shadow task, a comparison reported the challenger short
    # of the rounds acknowledged before it was asked: learnt 2 of 4 on a loaded machine)
    a = await make_client()
    service = a.app.state.service
    challenger = LearnerRef("default", "c")
    assert (await a.put(URL, json=SPEC)).status_code == 201
    assert (await a.put("/v1/learners/c", json=CHALLENGER)).status_code == 201
    released = asyncio.Event()
    catch_up = service.shadows._catch_up

    async def held_back(ref: LearnerRef, token: str) -> str:
        await released.wait()
        return cast(str, await catch_up(ref, token))

    monkeypatch.setattr(service.shadows, "_catch_up", held_back)
    stream = _stream(10, seed=7)
    await _feed(a, stream)
    for _ in range(200):  # the shadow task, woken by the feedback, holds the lock until released
        if await service.store.shadows.holder(challenger) is not None:
            break
        await asyncio.sleep(0.01)
    else:
        pytest.fail("the shadow task never took the challenger's catch-up lock")
    asked = asyncio.create_task(a.get(f"{URL}/challengers"))
    await asyncio.sleep(0.1)
    released.set()
    report = (await asked).json()
    assert [(c["name"], c["learnt"], c["behind"]) for c in report["challengers"]] == [("c", 10, 0)]
    assert (await a.get("/v1/learners/c/state")).content == _challenger_state(stream)


async def test_a_comparison_waits_for_the_catch_up_of_another_process(
        make_client: AppFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # (told "busy" by another replica's lock, a comparison reported the challenger "following" but short of
    # the rounds acknowledged before it was asked, while that replica was catching it up)
    a, b = await make_client(), await make_client()
    challenger = LearnerRef("default", "c")
    assert (await a.put(URL, json=SPEC)).status_code == 201
    assert (await a.put("/v1/learners/c", json=CHALLENGER)).status_code == 201
    other = b.app.state.service.shadows
    released, holding = asyncio.Event(), asyncio.Event()
    catch_up = other._catch_up

    async def held_back(ref: LearnerRef, token: str) -> str:
        holding.set()
        await released.wait()
        return cast(str, await catch_up(ref, token))

    monkeypatch.setattr(other, "_catch_up", held_back)
    elsewhere = asyncio.create_task(other.catch_up(challenger))
    await asyncio.wait_for(holding.wait(), 10)  # b holds the challenger's catch-up lock from here on
    stream = _stream(10, seed=9)
    await _feed(a, stream)
    asked = asyncio.create_task(a.get(f"{URL}/challengers"))
    await asyncio.sleep(0.1)
    released.set()
    report = (await asked).json()
    assert await elsewhere == "following"
    assert [(c["name"], c["learnt"], c["behind"], c["status"]) for c in report["challengers"]] == [
        ("c", 10, 0, "following")]
    assert (await a.get("/v1/learners/c/state")).content == _challenger_state(stream)


async def test_the_champions_writer_hands_its_rounds_over_unless_the_log_holds_others(
        make_client: AppFactory) -> None:
    """Rounds the champion's writer in this process logged are learnt without reading them back; rounds
    it holds that are not the log's (a lost append, as after a Redis failover) are never learnt: the
    catch-up reads the log instead."""
    client = await make_client()
    stream = _stream(60, seed=8)
    assert (await client.put(URL, json=SPEC)).status_code == 201
    assert (await client.put("/v1/learners/c", json=CHALLENGER)).status_code == 201
    service = client.app.state.service
    read = service.metrics.shadow_rounds_read
    await _feed(client, stream[:30])
    await _caught_up(client, 30)
    assert read._value.get() == 0  # every round handed over

    # the writer's rounds 31-60 are replaced by others under other ids: none of them is learnt
    challenger, champion = LearnerRef("default", "c"), LearnerRef("default", "m")
    await _locked_out(service, challenger, "elsewhere")  # (no catch-up meanwhile)
    await _feed(client, stream[30:60])
    recent = service.shadows._recent[champion]
    assert [row.version for row in recent.rows][-30:] == list(range(31, 61))
    forged = [row._replace(entry=row.entry.__class__(row.entry.x, kons_service_codec.encode_label(9.0),
                                                     row.entry.played), tip=f"lost/{row.version}")
              for row in recent.rows]
    recent.rows.clear()
    recent.rows.extend(forged)
    await service.store.shadows.unlock(challenger, "elsewhere")
    await _caught_up(client, 60)
    assert read._value.get() == 30
    assert (await client.get("/v1/learners/c/state")).content == _challenger_state(stream)


async def test_a_challenger_too_far_behind_is_stalled_and_holds_its_champions_log_no_more(
        make_client: AppFactory, redis_url: str) -> None:
    """A challenger that stops following (here a catch-up lock held by a stuck process) pins its
    champion's log only until it is KONS_SHADOW_MAX_LAG_ROUNDS behind: then it is stalled, for good, and
    says so."""
    client = await make_client(shadow_max_lag_rounds=20, keep_versions=1)
    service = client.app.state.service
    champion, challenger = LearnerRef("default", "m"), LearnerRef("default", "c")
    r = redis.Redis.from_url(redis_url)
    assert (await client.put(URL, json=SPEC)).status_code == 201
    assert (await client.put("/v1/learners/c", json=CHALLENGER)).status_code == 201
    await _locked_out(service, challenger, "stuck")
    stream = _stream(60, seed=9)
    await _feed(client, stream[:40])
    assert await service.snapshots.snapshot(service.cache.entry(champion))
    assert r.xlen("kons:{default/m}:log") == 40  # pinned by the challenger's cursor, 0

    await service.store.shadows.unlock(challenger, "stuck")  # (its holder died: the lock expired)
    for _ in range(100):
        [report] = (await client.get(f"{URL}/challengers")).json()["challengers"]
        if report["status"] != "following":
            break
        await asyncio.sleep(0.05)
    assert report["status"].startswith("stalled: 40 rounds behind its champion")
    assert (report["learnt"], report["behind"]) == (0, 40)
    assert await service.store.shadows.cursors(champion) == {"c": -1}
    assert service.metrics.shadows_stalled._value.get() == 1

    await _feed(client, stream[40:60])  # the champion's next snapshot trims its log; the challenger stays
    assert await service.snapshots.snapshot(service.cache.entry(champion))
    assert r.xlen("kons:{default/m}:log") == 0
    await asyncio.sleep(0.6)
    assert (await client.get("/v1/learners/c")).json()["version"] == 0
    [report] = (await client.get(f"{URL}/challengers")).json()["challengers"]
    assert report["status"].startswith("stalled") and report["behind"] == 60
    r.close()


async def test_classifiers_that_play_class_probabilities_are_compared_by_log_loss_and_error_rate(
        make_client: AppFactory) -> None:
    client = await make_client()
    spec: dict[str, Any] = {"algorithm": "auto", "dim": 3, "params": {"task": "classification"}}
    assert (await client.put(URL, json=spec)).status_code == 201
    shadow = {**spec, "params": {"task": "classification", "seed": 1}, "shadow": "m"}
    assert (await client.put("/v1/learners/c", json=shadow)).status_code == 201
    rng = np.random.default_rng(11)
    xs = rng.normal(size=(60, 3))
    labels = ["abc"[int(x[0] > 0.3) + int(x[0] > -0.3)] for x in xs]
    for x, label in zip(xs, labels, strict=True):
        answer = await client.post(f"{URL}/feedback", json={"x": x.tolist(), "y": label})
        assert answer.status_code == 200, answer.text
    [report] = (await _caught_up(client, 60))["challengers"]

    expected = {}
    for name, seed in (("champion", 0), ("challenger", 1)):
        learner = kons.Auto(task="classification", seed=seed, dim=3)
        rounds = [learner.learn_round(x, label) for x, label in zip(xs, labels, strict=True)]
        expected[name] = ([cast(float, r.loss) for r in rounds], [float(not r.correct) for r in rounds])
    comparison = report["comparison"]
    assert comparison["metric"] == "log_loss" and comparison["rounds"] == 60
    assert comparison["champion"] == pytest.approx(np.mean(expected["champion"][0]), rel=1e-9)
    assert comparison["challenger"] == pytest.approx(np.mean(expected["challenger"][0]), rel=1e-9)
    errors = comparison["error_rate"]
    assert errors["metric"] == "error_rate" and errors["rounds"] == 60
    assert errors["champion"] == pytest.approx(np.mean(expected["champion"][1]))
    assert errors["challenger"] == pytest.approx(np.mean(expected["challenger"][1]))
    assert [w["rounds"] for w in errors["windows"]] == [60]
    difference = np.array(expected["champion"][1]) - np.array(expected["challenger"][1])
    assert errors["challenger_wins"] == int((difference > 0).sum())


async def test_bad_challengers_are_4xx_and_change_nothing(make_client: AppFactory) -> None:
    a = await make_client(api_keys="acme:k1,rival:k2")
    acme, rival = {"Authorization": "Bearer k1"}, {"Authorization": "Bearer k2"}
    assert (await a.put(URL, json=SPEC, headers=acme)).status_code == 201
    assert (await a.put("/v1/learners/c", json=CHALLENGER, headers=acme)).status_code == 201
    cases = [
        ("d", {**CHALLENGER, "shadow": "c"}, acme, 422, "invalid_shadow"),  # a shadow of a shadow
        ("m", {**CHALLENGER, "shadow": "m"}, acme, 422, "invalid_shadow"),  # of itself
        ("d", {**CHALLENGER, "shadow": "nobody"}, acme, 404, "learner_not_found"),
        ("d", CHALLENGER, rival, 404, "learner_not_found"),  # another tenant's champion: not seen
        ("d", {**CHALLENGER, "shadow": "../m"}, acme, 422, "invalid_name"),
        ("d", {"shadow": "m", "fork": {"from": "m"}}, acme, 422, "validation_error"),
        ("c", {**CHALLENGER, "params": {"C": 1.0}}, acme, 409, "config_conflict"),
        ("d", {**CHALLENGER, "params": {"loss": "absolute"}}, acme, 422, "invalid_parameter"),
    ]
    for name, body, key, status, code in cases:
        answer = await a.put(f"/v1/learners/{name}", json=body, headers=key)
        assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), (body, answer.text)
    listed = (await a.get("/v1/learners", headers=acme)).json()["learners"]
    assert sorted(row["name"] for row in listed) == ["c", "m"]
    assert (await a.get("/v1/learners", headers=rival)).json()["learners"] == []
    assert (await a.get(f"{URL}/challengers", headers=rival)).status_code == 404
    report = (await a.get(f"{URL}/challengers", headers=acme)).json()
    assert [c["name"] for c in report["challengers"]] == ["c"]
    assert await a.app.state.service.store.shadows.cursors(LearnerRef("acme", "m")) == {"c": 0}
    assert (await a.put("/v1/learners/c", json=CHALLENGER, headers=acme)).status_code == 200  # the same


@pytest.mark.redis
@pytest.mark.slow  # ~40 s: two service processes SIGKILLed and restarted
def test_a_shadow_learns_every_acknowledged_round_once_through_sigkills(tmp_path: Path) -> None:
    """Feedback with request ids through two replicas, either SIGKILLed now and then (and restarted):
    once caught up, the challenger's log is exactly the champion's acknowledged rounds, in order."""
    stream = _stream(240, seed=12)
    with services_on_redis(tmp_path, replicas=2, snapshot_min_seconds=0, snapshot_every_rounds=25,
                           snapshot_interval_seconds=0.5) as (server, services):
        first = services[0].url
        httpx.put(f"{first}{URL}", json=SPEC).raise_for_status()
        httpx.put(f"{first}/v1/learners/c", json=CHALLENGER).raise_for_status()
        acknowledged = []
        kills = itertools.cycle([0, 1])
        with httpx.Client(timeout=10) as http:
            for i, (x, y) in enumerate(stream):
                if i % 40 == 39:  # SIGKILL one replica mid-stream; it comes back
                    victim = services[next(kills)]
                    victim.kill()
                    victim.start()
                for attempt in range(20):
                    service = services[(i + attempt) % 2]
                    try:
                        answer = http.post(f"{service.url}{URL}/feedback",
                                           json={"x": x, "y": y, "request_id": f"r{i}"})
                    except httpx.TransportError:
                        continue
                    if answer.status_code == 200:
                        acknowledged.append(answer.json()["version"])
                        break
                    assert answer.status_code == 503, answer.text
                    time.sleep(0.05)
                else:
                    raise AssertionError(f"round {i} was never acknowledged")
            assert acknowledged == list(range(1, len(stream) + 1))
            # the catch-up of the rounds since the last kill (a catch-up lock the kill left is taken over;
            # up to 60 s: two xdist workers share the cores)
            for _ in range(600):
                report = http.get(f"{first}{URL}/challengers").json()
                if report["challengers"][0]["learnt"] == len(stream):
                    break
                time.sleep(0.1)
        r = redis.Redis.from_url(server.url)
        Entries = list[tuple[bytes, dict[bytes, bytes]]]
        champion = cast(Entries, r.xrange("kons:{default/m}:log"))
        challenger = cast(Entries, r.xrange("kons:{default/c}:log"))
        # every round once, in order, on both: what the challenger holds is what the champion logged
        assert [int(i.split(b"-")[0]) for i, _ in challenger] == list(range(1, len(stream) + 1))
        assert len(champion) == len(stream)  # (kept for the challenger and the kept versions)
        assert [(f[b"x"], f[b"y"]) for _, f in challenger] == [(f[b"x"], f[b"y"]) for _, f in champion]
        local = _challenger()
        plays = [local.learn_one(np.array(x), y) for x, y in stream]
        assert [float(np.frombuffer(f[b"p"], "<f8")[0]) for _, f in challenger] == plays


async def test_promotion_under_concurrent_feedback(make_client: AppFactory) -> None:
    """Feedback keeps coming on both replicas while the challenger is promoted: every request is answered
    by the old champion or the new one, none is lost, and the previous champion stays a version."""
    a = await make_client()
    b = await make_client()
    stream = _stream(90, seed=21)
    assert (await a.put(URL, json=SPEC)).status_code == 201
    await _feed(a, stream[:10])
    assert (await a.put("/v1/learners/c", json=CHALLENGER)).status_code == 201
    await _feed(b, stream[10:30])
    answers: dict[int, tuple[int, float]] = {}

    async def feeder(client: AppClient, rounds: range) -> None:
        for i in rounds:
            x, y = stream[i]
            answer = await client.post(f"{URL}/feedback", json={"x": x, "y": y})
            assert answer.status_code == 200, answer.text
            answers[answer.json()["version"]] = (i, answer.json()["prediction"])

    async def promoter() -> dict[str, Any]:
        await asyncio.sleep(0.1)
        promoted = await b.post(f"{URL}/promote", json={"challenger": "c"})
        assert promoted.status_code == 200, promoted.text
        result: dict[str, Any] = promoted.json()
        return result

    *_, promoted = await asyncio.gather(feeder(a, range(30, 60)), feeder(b, range(60, 90)), promoter())
    point = promoted["version"]  # the promotion's own version
    assert (promoted["config"]["algorithm"], promoted["config"]["params"]["C"]) == ("ons", 3.0)
    assert "shadow" not in promoted["config"]
    assert (await a.get(URL)).json()["config"] == promoted["config"]
    assert (await a.get("/v1/learners/c")).status_code == 404
    assert sorted(answers) == [v for v in range(31, 92) if v != point]  # none lost
    # before the promotion the old champion played; after it, the challenger's state, on both replicas
    old, new = _champion(), _challenger()
    for i in range(10):
        old.learn_one(np.array(stream[i][0]), stream[i][1])
    for i in range(10, 30):
        old.learn_one(np.array(stream[i][0]), stream[i][1])
        new.learn_one(np.array(stream[i][0]), stream[i][1])
    for version, (i, prediction) in sorted(answers.items()):
        x, y = np.array(stream[i][0]), stream[i][1]
        played = new.learn_one(x, y)
        if version < point:
            assert prediction == old.learn_one(x, y)
        else:
            assert prediction == played
    assert (await a.get(f"{URL}/state")).content == (await b.get(f"{URL}/state")).content == new.to_bytes()
    # the previous champion is a version: a rollback to it restores its state and its config
    rolled = await a.post(f"{URL}/rollback", json={"version": point - 1})
    assert rolled.status_code == 200, rolled.text
    assert (await b.get(URL)).json()["config"]["algorithm"] == SPEC["algorithm"]
    assert (await b.get(f"{URL}/state")).content == old.to_bytes()


async def test_a_feedback_of_the_promoting_process_waits_for_the_promotion(
        make_client: AppFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # (the promotion held the champion's writer lease under a token of its process that none of its writers
    # held, so a writer of that process waiting for the lease took it for a dead writer's and took it
    # over: the promotion failed, and was tried again, while feedback kept coming)
    client = await make_client()
    service = client.app.state.service
    stream = _stream(12, seed=5)
    assert (await client.put(URL, json=SPEC)).status_code == 201
    assert (await client.put("/v1/learners/c", json=CHALLENGER)).status_code == 201
    await _feed(client, stream[:10])
    catch_up_to = service.shadows._catch_up_to
    fed: list[asyncio.Task[httpx.Response]] = []

    async def fed_while_leased(*args: Any) -> None:
        await catch_up_to(*args)
        if not fed:  # (a feedback that finds the lease held takes the lease for its next attempt)
            x, y = stream[10]
            fed.append(asyncio.create_task(client.post(f"{URL}/feedback", json={"x": x, "y": y})))
            await asyncio.sleep(0.3)

    monkeypatch.setattr(service.shadows, "_catch_up_to", fed_while_leased)
    promoted = await client.post(f"{URL}/promote", json={"challenger": "c"})
    assert promoted.status_code == 200 and promoted.json()["version"] == 11
    assert (await fed[0]).json()["version"] == 12  # played by the new champion
    assert service.metrics.takeovers._value.get() == 0


async def test_bad_promotions_are_4xx_and_change_nothing(make_client: AppFactory) -> None:
    a = await make_client()
    stream = _stream(20)
    assert (await a.put(URL, json=SPEC)).status_code == 201
    assert (await a.put("/v1/learners/other", json=SPEC)).status_code == 201
    assert (await a.put("/v1/learners/c", json=CHALLENGER)).status_code == 201
    await _feed(a, stream[:10])
    await _caught_up(a, 10)
    before = (await a.get(f"{URL}/state")).content
    for name, body, status, code in [
        ("m", {"challenger": "other"}, 422, "invalid_shadow"),  # not a challenger
        ("other", {"challenger": "c"}, 422, "invalid_shadow"),  # another champion's
        ("m", {"challenger": "nobody"}, 404, "learner_not_found"),
        ("m", {"challenger": "../c"}, 422, "invalid_name"),
        ("m", {}, 422, "validation_error"),
    ]:
        answer = await a.post(f"/v1/learners/{name}/promote", json=body)
        assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), (body, answer.text)
    assert (await a.get(f"{URL}/state")).content == before
    assert (await a.get(URL)).json()["config"]["algorithm"] == SPEC["algorithm"]

    # a promote racing a delete of the champion: either it promoted before the delete, or it is a 404
    # and the challenger is as it was
    promote, delete = await asyncio.gather(a.post(f"{URL}/promote", json={"challenger": "c"}),
                                           a.delete(URL))
    assert delete.status_code == 204
    assert promote.status_code in (200, 404), promote.text
    assert (await a.get(URL)).status_code == 404
    if promote.status_code == 404:
        assert promote.json()["error"]["code"] == "learner_not_found"
        assert (await a.get("/v1/learners/c")).json()["version"] == 10
    again = await a.post(f"{URL}/promote", json={"challenger": "c"})
    assert again.status_code == 404
