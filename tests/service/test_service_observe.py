"""What an operator sees: per-learner metrics, /metrics without tenants' names, the cache's budgets,
learner histories and the dashboard page (the page in a real browser: test_dashboard_browser.py)."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kons_service.store import LearnerRef
from testkit.processes import REPO, SPEC, AppFactory
from testkit.scrape import samples, value
from tests.service.classes import key

pytestmark = pytest.mark.anyio

URL = "/v1/learners/m"
KEYS = "acme:key-a,beta:key-b"
A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}


def rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    return [{"x": list(map(float, xi)), "y": float(np.sin(xi[0]))} for xi in x]


async def feed(
    client: httpx.AsyncClient, url: str, items: list[dict[str, Any]], headers: dict[str, Any] | None = None
) -> dict[str, Any]:
    response = await client.post(f"{url}/feedback", json={"items": items}, headers=headers)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


# ---------------------------------------------------------------------- metrics
async def test_per_learner_counters_and_gauges_match_the_learner(client: httpx.AsyncClient) -> None:
    await client.put(URL, json=SPEC)
    answers = [await feed(client, URL, rows(5, seed)) for seed in range(3)]
    stats = (await client.get(URL)).json()["stats"]
    text = (await client.get("/metrics")).text
    me = {"tenant": "default", "learner": "m"}
    assert value(text, "kons_learner_rounds_total", **me) == 15
    losses = [loss for answer in answers for loss in answer["losses"]]
    assert value(text, "kons_learner_loss_total", **me, loss="squared") == pytest.approx(sum(losses))
    assert value(text, "kons_feedback_loss_total", loss="squared") == pytest.approx(sum(losses))
    assert value(text, "kons_learner_version", **me) == 15
    for stat in ("dictionary_size", "stored_points", "effective_dimension", "recent_loss", "cumulative_loss"):
        assert value(text, f"kons_learner_{stat}", **me) == pytest.approx(stats[stat]), stat
    assert (value(text, "kons_learner_stored_points", **me) or 0.0) > 0
    assert (value(text, "kons_learner_state_bytes", **me) or 0.0) > 0
    assert value(text, "kons_cached_learners") == 1
    assert value(text, "kons_cached_bytes") == value(text, "kons_learner_state_bytes", **me)
    (build, one), = samples(text, "kons_build_info")
    assert one == 1 and build["version"] and build["python"] and build["numpy"]
    assert (value(text, "process_resident_memory_bytes") or 0.0) > 0
    assert (value(text, "kons_worker_resident_memory_bytes") or 0.0) > 0
    # a deleted learner's series go with it
    assert (await client.delete(URL)).status_code == 204
    assert value((await client.get("/metrics")).text, "kons_learner_version", **me) is None


async def test_an_anonymous_scrape_shows_no_tenant_or_learner(make_client: AppFactory) -> None:
    client = await make_client(api_keys=KEYS, metrics_key="scrape-key")
    await client.put("/v1/learners/secret-churn-model", json=SPEC, headers=A)
    await feed(client, "/v1/learners/secret-churn-model", rows(3), A)
    anonymous = await client.get("/metrics")
    assert anonymous.status_code == 200
    assert "secret-churn-model" not in anonymous.text and "acme" not in anonymous.text
    assert value(anonymous.text, "kons_feedback_rounds_total") == 3  # the aggregate series stay
    for wrong in ("Bearer nope", "scrape-key"):
        assert (await client.get("/metrics", headers={"Authorization": wrong})).status_code == 401
    await client.put("/v1/learners/beta-model", json=SPEC, headers=B)
    await feed(client, "/v1/learners/beta-model", rows(2), B)
    full = (await client.get("/metrics", headers={"Authorization": "Bearer scrape-key"})).text
    assert value(full, "kons_learner_rounds_total", tenant="acme", learner="secret-churn-model") == 3
    assert value(full, "kons_learner_rounds_total", tenant="beta", learner="beta-model") == 2
    own = (await client.get("/metrics", headers=B)).text  # a tenant's key: its own learners only
    assert value(own, "kons_learner_rounds_total", tenant="beta", learner="beta-model") == 2
    assert "secret-churn-model" not in own and "acme" not in own
    assert value(own, "kons_feedback_rounds_total") == 5


async def test_without_a_metrics_key_only_tenants_see_their_names(make_client: AppFactory) -> None:
    client = await make_client(api_keys=KEYS)
    await client.put(URL, json=SPEC, headers=A)
    await feed(client, URL, rows(2), A)
    assert 'learner="m"' not in (await client.get("/metrics")).text
    assert 'learner="m"' in (await client.get("/metrics", headers=A)).text
    assert (await client.get("/metrics", headers={"Authorization": "Bearer scrape-key"})).status_code == 401
    # Prometheus with an empty credentials file (compose's blank KONS_METRICS_KEY) sends a blank bearer:
    # the scrape works, as an anonymous one (its target up, no tenant's or learner's name).
    for blank in ("Bearer ", "Bearer", "bearer   "):
        scraped = await client.get("/metrics", headers={"Authorization": blank})
        assert scraped.status_code == 200 and 'learner="m"' not in scraped.text, blank
        assert value(scraped.text, "kons_feedback_rounds_total") == 2


# ---------------------------------------------------------------------- cache
async def test_requests_for_unknown_names_leave_the_cache_unchanged(make_client: AppFactory) -> None:
    client = await make_client(cache_size=2)
    cache = client.app.state.service.cache
    for name in ("a", "b"):
        await client.put(f"/v1/learners/{name}", json=SPEC)
        await feed(client, f"/v1/learners/{name}", rows(3))
    before = {entry.ref: entry for entry in cache.entries()}
    assert set(before) == {LearnerRef("default", "a"), LearnerRef("default", "b")}
    for i in range(1000):
        kind = ("predict", "feedback", "")[i % 3]
        if kind == "predict":
            response = await client.post(f"/v1/learners/ghost-{i}/predict", json={"x": [1, 2, 3]})
        elif kind == "feedback":
            response = await client.post(f"/v1/learners/ghost-{i}/feedback", json={"x": [1, 2, 3], "y": 1})
        else:
            response = await client.get(f"/v1/learners/ghost-{i}")
        assert response.status_code == 404
    after = {entry.ref: entry for entry in cache.entries()}
    assert after.keys() == before.keys() and all(after[r] is before[r] for r in before)  # the very same
    text = (await client.get("/metrics")).text
    assert value(text, "kons_cache_evictions_total") is None  # nothing was evicted
    assert value(text, "kons_cached_learners") == 2


async def test_the_byte_budget_evicts_least_recently_used_learners(make_client: AppFactory) -> None:
    probe = await make_client()
    await probe.put("/v1/learners/p", json=SPEC)
    await feed(probe, "/v1/learners/p", rows(20))
    one = probe.app.state.service.cache.entries()[0].nbytes
    assert one > 0
    client = await make_client(cache_bytes=int(2.5 * one))  # room for two such learners, not three
    for name in ("a", "b", "c"):
        await client.put(f"/v1/learners/{name}", json=SPEC)
        await feed(client, f"/v1/learners/{name}", rows(20))
    cache = client.app.state.service.cache
    assert [e.ref.name for e in cache.entries()] == ["b", "c"]
    text = (await client.get("/metrics")).text
    assert value(text, "kons_cache_evictions_total", budget="bytes") == 1
    assert value(text, "kons_cached_bytes") == sum(e.nbytes for e in cache.entries())
    # the evicted learner comes back from the store, rounds intact
    assert (await client.get("/v1/learners/a")).json()["version"] == 20


# ---------------------------------------------------------------------- history
async def test_history_records_the_run_and_matches_the_learner(client: httpx.AsyncClient) -> None:
    await client.put(URL, json=SPEC)
    assert (await client.get(f"{URL}/history")).json() == {"stride": 1, "points": [], "changes": [],
                                                          "rollbacks": []}
    for seed in range(10):
        await feed(client, URL, rows(1, seed))
    history = (await client.get(f"{URL}/history")).json()
    assert [p["version"] for p in history["points"]] == list(range(1, 11))
    stats = (await client.get(URL)).json()["stats"]
    last = history["points"][-1]
    for stat in ("recent_loss", "cumulative_loss", "dictionary_size", "stored_points", "effective_dimension"):
        assert last[stat] == stats[stat], stat
    assert last["state_bytes"] > 0 and last["time"] > 0
    cumulative = [p["cumulative_loss"] for p in history["points"]]
    assert cumulative == sorted(cumulative)


async def test_history_is_capped_and_downsampled_evenly(make_client: AppFactory) -> None:
    client = await make_client(history_points=16)
    await client.put(URL, json=SPEC)
    for seed in range(100):
        await feed(client, URL, rows(1, seed))
    history = (await client.get(f"{URL}/history")).json()
    versions = [p["version"] for p in history["points"]]
    assert len(versions) <= 16 and versions == sorted(versions)
    assert history["stride"] == 8  # 100 rounds into at most 16 points: 1 -> 2 -> 4 -> 8
    assert versions[0] == 1 and versions[-1] >= 100 - history["stride"]
    gaps = np.diff(versions[1:])
    assert gaps.max() <= history["stride"]  # no hole wider than the stride


async def test_batches_that_cross_a_stride_are_recorded_once(make_client: AppFactory) -> None:
    client = await make_client(history_points=16)
    await client.put(URL, json=SPEC)
    for seed in range(30):
        await feed(client, URL, rows(7, seed))  # versions 7, 14, ...: every batch crosses a multiple
    history = (await client.get(f"{URL}/history")).json()
    versions = [p["version"] for p in history["points"]]
    assert len(versions) <= 16 and len(set(versions)) == len(versions)
    assert versions[-1] > 210 - history["stride"]  # the newest point at most a stride behind


async def test_one_large_request_gives_a_point_per_round_window_with_exact_error_totals(
    make_client: AppFactory
) -> None:
    """A learner fed by one request of 442 rounds still has a curve: the append keeps a point per stride
    window (thinned to the cap), each with the error totals of the rounds up to it, in the user's units."""
    client = await make_client(history_points=64)
    await client.put(URL, json={})  # auto: the played predictions are in the target's units
    rng = np.random.default_rng(3)
    X = rng.normal(size=(442, 4))
    y = 150.0 + 60.0 * X[:, 0] + 10.0 * rng.normal(size=442)
    items = [{"x": x.tolist(), "y": float(t)} for x, t in zip(X, y, strict=True)]
    played = np.array(feed_answer := (await feed(client, URL, items))["predictions"])
    assert len(feed_answer) == 442
    history = (await client.get(f"{URL}/history")).json()
    points, stride = history["points"], history["stride"]
    assert 32 <= len(points) <= 64 and stride == 8  # 442 windows of 1 round, thinned: 1 -> 2 -> 4 -> 8
    versions = [p["version"] for p in points]
    assert versions == sorted(versions) and versions[-1] == 442 and np.diff(versions).max() <= stride
    error = y - played
    for point in points:
        v, totals = point["version"], point["totals"]
        assert point["task"] == "regression" and totals["rounds"] == v
        assert totals["abs_error"] == pytest.approx(np.abs(error[:v]).sum(), rel=1e-12)
        assert totals["squared_error"] == pytest.approx((error[:v] ** 2).sum(), rel=1e-12)
    # only the request's last point carries the learner's stats; the others are its error windows
    assert points[-1]["stored_points"] is not None and points[-1]["time"] > 0
    assert all(p["time"] is None for p in points[:-1])
    # the window between two points: MAE in the target's units, exactly
    a, b = points[-5], points[-1]
    rounds = b["totals"]["rounds"] - a["totals"]["rounds"]
    mae = (b["totals"]["abs_error"] - a["totals"]["abs_error"]) / rounds
    assert mae == pytest.approx(np.abs(error[a["version"]:]).mean(), rel=1e-12)


async def test_history_of_labels_counts_correct_predictions_and_log_loss(client: httpx.AsyncClient) -> None:
    await client.put(URL, json={"params": {"task": "classification"}})
    rng = np.random.default_rng(4)
    X = rng.normal(size=(60, 3))
    labels = (X[:, 0] + 0.3 * rng.normal(size=60) > 0).astype(int)  # 0/1 labels, as users send them
    played: list[dict[str, float]] = []
    said: list[Any] = []
    for start in range(0, 60, 20):
        items = [{"x": x.tolist(), "y": int(t)} for x, t in zip(X[start:start + 20], labels[start:start + 20],
                                                                 strict=True)]
        answer = await feed(client, URL, items)
        played += answer["probabilities"]
        said += answer.get("labels") or [None] * len(items)
    # the totals are the answers' own: the label each answered (none before a class was known), and
    # -log p(label)
    mine = [p[key(int(t))] for p, t in zip(played, labels, strict=True)]
    (last,) = [p for p in (await client.get(f"{URL}/history")).json()["points"] if p["version"] == 60]
    assert last["task"] == "classification" and last["totals"]["rounds"] == 60
    assert last["totals"]["correct"] == sum(s == int(t) for s, t in zip(said, labels, strict=True)) > 30
    assert last["totals"]["log_loss"] == pytest.approx(-np.log(mine).sum(), rel=1e-12)
    assert last["totals"]["abs_error"] == last["totals"]["squared_error"] == 0


async def test_history_of_a_learner_without_probabilities_counts_signs(client: httpx.AsyncClient) -> None:
    await client.put(URL, json={"algorithm": "ons", "dim": 3, "params": {"loss": "logistic"}})
    rng = np.random.default_rng(4)
    X = rng.normal(size=(40, 3))
    labels = np.where(X[:, 0] + 0.3 * rng.normal(size=40) > 0, 1, -1)
    answer = await feed(client, URL, [{"x": x.tolist(), "y": int(t)} for x, t in zip(X, labels, strict=True)])
    assert "probabilities" not in answer and "labels" not in answer  # a score alone, as before
    margin = labels * np.array(answer["predictions"])
    (last,) = [p for p in (await client.get(f"{URL}/history")).json()["points"] if p["version"] == 40]
    assert last["totals"]["correct"] == (margin > 0).sum() > 20
    assert last["totals"]["log_loss"] == pytest.approx(np.logaddexp(0, -margin).sum(), rel=1e-12)


async def test_history_survives_a_restart_and_goes_with_the_learner(make_client: AppFactory) -> None:
    first = await make_client()
    await first.put(URL, json=SPEC)
    for seed in range(5):
        await feed(first, URL, rows(2, seed))
    recorded = (await first.get(f"{URL}/history")).json()
    second = await make_client()  # another process on the same Redis: a replica, or after a restart
    assert (await second.get(f"{URL}/history")).json() == recorded
    await second.get(URL)  # a read is enough for its gauges to show up there
    assert value((await second.get("/metrics")).text, "kons_learner_version", learner="m") == 10
    await feed(second, URL, rows(2, 9))  # ... and it goes on recording there
    assert (await first.get(f"{URL}/history")).json()["points"][-1]["version"] == 12
    assert (await second.delete(URL)).status_code == 204
    assert (await first.get(f"{URL}/history")).status_code == 404
    await first.put(URL, json=SPEC)
    assert (await first.get(f"{URL}/history")).json()["points"] == []  # a new learner, a new series


async def test_history_is_per_tenant(make_client: AppFactory) -> None:
    client = await make_client(api_keys=KEYS)
    await client.put(URL, json=SPEC, headers=A)
    await feed(client, URL, rows(2), A)
    assert (await client.get(f"{URL}/history")).status_code == 401
    assert (await client.get(f"{URL}/history", headers={"Authorization": "Bearer key-b"})).status_code == 404


async def test_an_imported_state_starts_a_new_series(client: httpx.AsyncClient) -> None:
    await client.put(URL, json=SPEC)
    await feed(client, URL, rows(4))
    blob = (await client.get(f"{URL}/state")).content
    await feed(client, URL, rows(4, 1))
    assert (await client.put(f"{URL}/state", content=blob)).json()["version"] == 4
    points = (await client.get(f"{URL}/history")).json()["points"]
    assert [p["version"] for p in points] == [4]


# ---------------------------------------------------------------------- dashboard
async def test_the_dashboard_page_is_self_contained(client: httpx.AsyncClient) -> None:
    page = await client.get("/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "sessionStorage" in page.text and "/history" in page.text
    assert "http://" not in page.text.replace("http://www.w3.org/2000/svg", "")  # no CDN, nothing remote
    assert "https://" not in page.text


# ---------------------------------------------------------------------- request ids and access lines
async def test_request_ids_are_echoed_logged_and_in_error_bodies(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with caplog.at_level(logging.INFO, logger="kons_service.access"):
        headers = {"X-Request-ID": "req-42", "traceparent": trace}
        missing = await client.get("/v1/learners/nope", headers=headers)
    assert missing.status_code == 404
    assert missing.headers["x-request-id"] == "req-42" and missing.headers["traceparent"] == trace
    assert missing.json()["error"]["request_id"] == "req-42"
    (record,) = [r for r in caplog.records if r.name == "kons_service.access"]
    line = record.__dict__  # the access fields ride on the record as extra attributes
    assert (line["request_id"], line["traceparent"], line["status"]) == ("req-42", trace, 404)
    assert line["route"] == "/v1/learners/{name}" and line["duration_ms"] > 0
    # none given, or one that is not a sane token (it would go into logs verbatim): a fresh one
    for headers in ({}, {"X-Request-ID": "bad id\twith spaces"}, {"X-Request-ID": "x" * 200}):
        response = await client.get("/healthz", headers=headers)
        assert len(response.headers["x-request-id"]) == 32 and "traceparent" not in response.headers


async def test_the_grafana_dashboard_queries_metrics_the_service_exports(client: httpx.AsyncClient) -> None:
    dashboard = json.loads((REPO / "deploy/monitoring/grafana/dashboards/kons.json").read_text())
    queried = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"\b(?:kons|process)_[a-z_]+", target["expr"])}
    assert len(queried) >= 10
    await client.put(URL, json=SPEC)
    await feed(client, URL, rows(3))
    await client.get("/v1/learners/none")
    text = (await client.get("/metrics")).text
    exported = {s.name for family in text_string_to_metric_families(text) for s in family.samples}
    # a counter that has not counted yet (no eviction, no divergence) is declared with its # TYPE line
    declared = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert queried <= exported | declared, queried - exported - declared
