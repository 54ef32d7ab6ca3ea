"""The dashboard in a real browser: headless Chromium loads /dashboard from a running service whose
learner has learned; the rendered DOM must show its curves and the API's numbers, the screenshot a drawing.

``scripts/test.sh`` installs Debian's ``chromium`` when it is missing and the tests run as root;
otherwise these tests are skipped, saying so.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import numpy as np
import pytest
from matplotlib import image

from testkit.browser import CHROMIUM, chromium
from testkit.processes import SPEC, ServiceProcess, services_on_redis

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (scripts/test.sh installs Debian's "
                                                "chromium when run as root)"),
]

KEY = "key-a"
HEADERS = {"Authorization": f"Bearer {KEY}"}
LEARNER = "churn-model"
RED = np.array([0xD1, 0x49, 0x5B]) / 255  # the first error curve's colour (MAE, accuracy) in dashboard.html


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """A service (API keys on) with a learner that has learned 200 rounds and one that has not started."""
    with services_on_redis(tmp_path_factory.mktemp("dashboard"), api_keys=f"acme:{KEY}") as (_, (svc,)):
        with httpx.Client(base_url=svc.url, headers=HEADERS, timeout=30) as http:
            assert http.put(f"/v1/learners/{LEARNER}", json=SPEC).status_code == 201
            fresh = {"algorithm": "kernel_ogd", "dim": 3}
            assert http.put("/v1/learners/fresh", json=fresh).status_code == 201
            rng = np.random.default_rng(0)
            for _ in range(40):
                X = rng.normal(size=(5, 3))
                items = [{"x": x.tolist(), "y": float(np.sin(x[0]))} for x in X]
                assert http.post(f"/v1/learners/{LEARNER}/feedback", json={"items": items}).status_code == 200
        yield svc


class Elements(HTMLParser):
    """Every element's tag and attributes, with the ``data-learner`` of the card it is in."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.found: list[tuple[str | None, str, dict[str, str]]] = []
        self._card: str | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = {k: v or "" for k, v in attrs}
        if tag == "section":
            self._card = named.get("data-learner")
        self.found.append((self._card, tag, named))

    def of(self, card: str | None, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [a for c, t, a in self.found
                if c == card and t == tag and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())]


def test_the_dashboard_draws_the_learning_curves_with_the_api_numbers(service: ServiceProcess,
                                                                      tmp_path: Path) -> None:
    dom = Elements(chromium(f"{service.url}/dashboard#key={KEY}", tmp_path, "--dump-dom"))
    (status,) = dom.of(None, "div", id="status")
    assert status.get("data-state") == "ok"
    with httpx.Client(base_url=service.url, headers=HEADERS, timeout=30) as http:
        details = http.get(f"/v1/learners/{LEARNER}").json()
        history = http.get(f"/v1/learners/{LEARNER}/history").json()
    assert [a["data-learner"] for _, t, a in dom.found if t == "section"] == ["churn-model", "fresh"]
    shown = {a["data-stat"]: a["data-value"] for a in dom.of(LEARNER, "td") if "data-stat" in a}
    assert float(shown["rounds"]) == details["version"] == 200
    points = history["points"]
    assert len(points) == 200  # a point per round (stride 1), although they came in requests of 5
    for series in ("mae", "rmse"):
        (line,) = dom.of(LEARNER, "polyline", data_series=series)
        assert int(line["data-points"]) == 200
        assert len(line["points"].split()) == 200
        assert len(dom.of(LEARNER, "circle", data_series=series)) == 200
    # the default window: the last 100 rounds, from the history's error totals (in the target's units),
    # the curve's last value and the number in the table
    newest, base = points[-1]["totals"], points[-101]["totals"]
    (mae,) = dom.of(LEARNER, "polyline", data_series="mae")
    expected = (newest["abs_error"] - base["abs_error"]) / 100
    assert float(mae["data-last"]) == pytest.approx(expected, rel=1e-12)
    assert float(shown["mae"]) == float(mae["data-last"])
    assert float(shown["state_bytes"]) == [p["state_bytes"] for p in points if p["state_bytes"]][-1]
    # the user-facing figures only: no loss in the learner's scaled units, no dictionary internals
    assert set(shown) == {"rounds", "mae", "rmse", "state_bytes"}
    assert dom.of("fresh", "polyline") == []  # no rounds, no curve


def test_the_screenshot_shows_the_curves(service: ServiceProcess, tmp_path: Path) -> None:
    shot = tmp_path / "dashboard.png"
    chromium(f"{service.url}/dashboard#key={KEY}", tmp_path, f"--screenshot={shot}")
    pixels = image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (900, 1280)
    colours = np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 100  # text, axes, curves: not a blank or single-colour page
    red = np.all(np.abs(pixels - RED) < 0.05, axis=-1).sum()
    assert red > 100  # the recent-loss curve and its points are drawn


def test_without_a_key_the_page_asks_for_one_and_shows_nothing(service: ServiceProcess,
                                                                tmp_path: Path) -> None:
    html = chromium(f"{service.url}/dashboard", tmp_path, "--dump-dom")
    dom = Elements(html)
    (status,) = dom.of(None, "div", id="status")
    assert status.get("data-state") == "unauthorized"
    assert LEARNER not in html and dom.of(None, "section") == []
    (form,) = dom.of(None, "form", id="keyform")
    assert "display: block" in form.get("style", "")



def test_an_auto_learner_shows_its_input_dim_and_large_losses_keep_short_axis_labels(
        service: ServiceProcess, tmp_path: Path) -> None:
    """An ``auto`` learner has no dim in its config (its first row fixes it): the card shows that one,
    never "dim null"; targets in the billions give errors of ~1e9, whose axis labels must still fit the
    chart's margin (they were cut to "8534e+9")."""
    rng = np.random.default_rng(1)
    with httpx.Client(base_url=service.url, headers=HEADERS, timeout=30) as http:
        assert http.put("/v1/learners/prices", json={}).status_code == 201
        try:
            for _ in range(3):
                X = rng.normal(size=(20, 4))
                items = [{"x": x.tolist(), "y": float(5e9 + 1e9 * x[0])} for x in X]
                assert http.post("/v1/learners/prices/feedback", json={"items": items}).status_code == 200
            html = chromium(f"{service.url}/dashboard#key={KEY}", tmp_path, "--dump-dom")
        finally:
            http.delete("/v1/learners/prices")
    card = html[html.index('data-learner="prices"'):]
    card = card[:card.index("</section>")]
    assert '<small data-task="regression">auto, regression, dim 4</small>' in card
    ticks = re.findall(r'<text[^>]*class="tick"[^>]*>([^<]*)</text>', card)
    assert len(ticks) == 2 and all(len(t) <= 7 for t in ticks), ticks
    assert any("e9" in t for t in ticks), ticks  # the errors are that large


def test_a_multi_class_learner_shows_its_classes_accuracy_and_log_loss(
        service: ServiceProcess, tmp_path: Path) -> None:
    """A classifier of string, integer and boolean labels: the card names its task and classes, and its
    curves are accuracy and log loss, the last values those of the history's totals."""
    rng = np.random.default_rng(3)
    labels = ["cat", "dog", 7, True]
    with httpx.Client(base_url=service.url, headers=HEADERS, timeout=30) as http:
        assert http.put("/v1/learners/pets", json={}).status_code == 201  # the first label decides
        try:
            X = rng.normal(size=(120, 3))
            items = [{"x": x.tolist(), "y": labels[int(abs(x[0]) * 3) % 4] if i else "cat"}  # a string first
                     for i, x in enumerate(X)]
            assert http.post("/v1/learners/pets/feedback", json={"items": items}).status_code == 200
            totals = http.get("/v1/learners/pets/history").json()["points"][-1]["totals"]
            stats = http.get("/v1/learners/pets").json()["stats"]
            html = chromium(f"{service.url}/dashboard?window=all#key={KEY}", tmp_path, "--dump-dom")
        finally:
            http.delete("/v1/learners/pets")
    dom = Elements(html)
    assert len(dom.of("pets", "small", data_task="classification")) == 1
    label = '("cat"|"dog"|7|true)'  # the user's own labels, true a class of its own
    assert re.search(f"auto, classification, dim 3, 4 classes: {label}( {label}){{3}}<", html), html[-2000:]
    shown = {a["data-stat"]: a["data-value"] for a in dom.of("pets", "td") if "data-stat" in a}
    for series, value in (("accuracy", totals["correct"] / 120), ("log_loss", totals["log_loss"] / 120)):
        (line,) = dom.of("pets", "polyline", data_series=series)
        assert float(line["data-last"]) == pytest.approx(value, rel=1e-12), series
        assert float(shown[series]) == float(line["data-last"])  # the number now, in the table
    assert not dom.of("pets", "polyline", data_series="mae")
    # accuracy (a fraction), log loss (nats) and the calibration error of its probabilities on axes of
    # their own (no coverage asked: no coverage chart)
    charts = [a["data-chart"] for c, t, a in dom.found if c == "pets" and t == "svg"]
    assert charts == ["accuracy (all rounds)", "log loss (all rounds)",
                      "calibration error of the probabilities (all rounds)"]
    assert shown["leader"] == stats["leader"] and float(shown["changes"]) == stats["changes"]


def test_one_large_request_draws_a_curve_of_the_chosen_window(service: ServiceProcess,
                                                              tmp_path: Path) -> None:
    """442 rounds in one request: the error curve has a point per round window; with ``?window=all``
    its last value is the MAE of every round, as the feedback answer's predictions give it; the
    screenshot shows the curve."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(442, 3))
    y = 150.0 + 60.0 * X[:, 0]
    with httpx.Client(base_url=service.url, headers=HEADERS, timeout=60) as http:
        assert http.put("/v1/learners/batch", json={}).status_code == 201
        try:
            items = [{"x": x.tolist(), "y": float(t)} for x, t in zip(X, y, strict=True)]
            answer = http.post("/v1/learners/batch/feedback", json={"items": items})
            assert answer.status_code == 200
            played = np.array(answer.json()["predictions"])
            dom = Elements(chromium(f"{service.url}/dashboard?window=all#key={KEY}", tmp_path, "--dump-dom"))
            shot = tmp_path / "batch.png"
            chromium(f"{service.url}/dashboard?window=all#key={KEY}", tmp_path, f"--screenshot={shot}",
                     "--window-size=1280,2400")
        finally:
            http.delete("/v1/learners/batch")
    (mae,) = dom.of("batch", "polyline", data_series="mae")
    assert int(mae["data-points"]) > 100  # a curve, not the single point of one request
    assert float(mae["data-last"]) == pytest.approx(np.abs(y - played).mean(), rel=1e-12)
    charts = [a["data-chart"] for c, t, a in dom.found if c == "batch" and t == "svg"]
    assert charts == ["MAE, RMSE (all rounds)"]
    pixels = image.imread(shot)[..., :3]
    assert np.all(np.abs(pixels - RED) < 0.05, axis=-1).sum() > 300  # the MAE curve is drawn


def test_a_declared_change_of_the_data_is_marked_on_the_curves(service: ServiceProcess,
                                                               tmp_path: Path) -> None:
    """An ``auto`` learner whose target flips its sign at round 600 declares a change: both of its charts
    carry a marker at the round of the history's change event."""
    rng = np.random.default_rng(20)
    X = rng.normal(size=(1000, 3)) * [1.0, 20.0, 0.1] + [0.0, 300.0, 5.0]
    y = 10.0 * X[:, 0] + 0.5 * (X[:, 1] - 300.0) + rng.normal(size=1000)
    y[600:] *= -1.0
    with httpx.Client(base_url=service.url, headers=HEADERS, timeout=60) as http:
        assert http.put("/v1/learners/drifting", json={}).status_code == 201
        try:
            for start in range(0, 1000, 200):
                items = [{"x": x.tolist(), "y": float(t)} for x, t in zip(X[start:start + 200],
                                                                         y[start:start + 200], strict=True)]
                assert http.post("/v1/learners/drifting/feedback", json={"items": items}).status_code == 200
            answer = http.get("/v1/learners/drifting/history")
            for _ in range(50):  # 1,000 rounds of auto are much of the tenant's work rate for a second
                if answer.status_code != 429:
                    break
                time.sleep(0.2)
                answer = http.get("/v1/learners/drifting/history")
            assert answer.status_code == 200, answer.text
            changes = answer.json()["changes"]
            dom = Elements(chromium(f"{service.url}/dashboard?window=all#key={KEY}", tmp_path, "--dump-dom"))
        finally:
            http.delete("/v1/learners/drifting")
    assert changes and 600 < changes[0]["version"] < 650
    markers = dom.of("drifting", "line", data_change=str(changes[0]["version"]))
    assert len(markers) == 1  # on the error curves
    assert dom.of(LEARNER, "line", **{"class": "change"}) == []  # a learner without changes has none


def test_a_learner_of_records_counts_its_columns_and_an_imported_state_draws_no_infinite_round(
        service: ServiceProcess, tmp_path: Path) -> None:
    """A learner of 19 named columns says so (its encoding's width, "dim 144", is internal); a learner whose
    state was imported has a new history without error totals: no axis reads "round Infinity"."""
    rng = np.random.default_rng(4)
    names = [f"col{i}" for i in range(19)]
    with httpx.Client(base_url=service.url, headers=HEADERS, timeout=60) as http:
        for name in ("records", "imported"):  # (a task given: issue 41's item 15 refuses the blob without)
            assert http.put(f"/v1/learners/{name}", json={"task": "regression"}).status_code == 201
        try:
            items = [{"x": {n: float(v) for n, v in zip(names, rng.normal(size=19), strict=True)},
                      "y": float(rng.normal())} for _ in range(30)]
            assert http.post("/v1/learners/records/feedback", json={"items": items}).status_code == 200
            blob = http.get("/v1/learners/records/state").content
            assert http.put("/v1/learners/imported/state", content=blob).status_code == 200
            html = chromium(f"{service.url}/dashboard#key={KEY}", tmp_path, "--dump-dom")
        finally:
            for name in ("records", "imported"):
                http.delete(f"/v1/learners/{name}")
    card = html[html.index('data-learner="records"'):]
    card = card[:card.index("</section>")]
    assert '<small data-task="regression">auto, regression, 19 named columns</small>' in card
    assert "Infinity" not in html and "NaN" not in html
    imported = html[html.index('data-learner="imported"'):]
    imported = imported[:imported.index("</section>")]
    assert 'data-stat="rounds" data-value="30"' in imported


def test_a_rollback_is_marked_and_the_challengers_are_shown_beside_the_curves(service: ServiceProcess,
                                                                            tmp_path: Path) -> None:
    """A learner rolled back once and followed by a shadow challenger: its charts carry a marker at the
    rollback's version, its table counts the rollback, and beside its curves the challenger has a row and
    a chart of both learners' error per window, with the numbers of /challengers."""
    rng = np.random.default_rng(3)
    champion, challenger = "lifecycle", "lifecycle-c"
    with httpx.Client(base_url=service.url, headers=HEADERS, timeout=60) as http:
        def feed(rounds: int) -> None:
            X = rng.normal(size=(rounds, 3))
            items = [{"x": x.tolist(), "y": float(np.sin(x[0]))} for x in X]
            assert http.post(f"/v1/learners/{champion}/feedback", json={"items": items}).status_code == 200

        assert http.put(f"/v1/learners/{champion}", json=SPEC).status_code == 201
        try:
            feed(60)
            rolled = http.post(f"/v1/learners/{champion}/rollback", json={"version": 20})
            assert rolled.status_code == 200, rolled.text
            shadow = {"shadow": champion, "algorithm": "ons", "dim": 3,
                      "params": {"loss": "squared", "C": 3.0}}
            assert http.put(f"/v1/learners/{challenger}", json=shadow).status_code == 201
            feed(40)
            for _ in range(100):  # the challenger learns in the background, within a second
                compared = http.get(f"/v1/learners/{champion}/challengers").json()["challengers"][0]
                if compared["behind"] == 0 and compared["comparison"] is not None:
                    break
                time.sleep(0.1)
            assert compared["behind"] == 0 and compared["comparison"] is not None
            kept = http.get(f"/v1/learners/{champion}/versions").json()
            dom = Elements(chromium(f"{service.url}/dashboard?window=all#key={KEY}", tmp_path, "--dump-dom"))
        finally:
            http.delete(f"/v1/learners/{challenger}")
            http.delete(f"/v1/learners/{champion}")
    version = str(rolled.json()["version"])
    assert len(dom.of(champion, "line", data_rollback=version)) == 1  # on its one error chart (MAE, RMSE)
    assert dom.of(champion, "td", data_stat="rollbacks")[0]["data-value"] == "1"
    assert dom.of(LEARNER, "line", **{"class": "rollback"}) == []  # a learner never rolled back has none
    assert len(dom.of(champion, "tr", data_challenger=challenger)) == 1
    verdict = dom.of(champion, "td", data_verdict=compared["comparison"]["verdict"])
    assert len(verdict) == 1
    window_chart = dom.of(champion, "svg", data_chart=f"squared error per window: {champion} vs {challenger}")
    assert len(window_chart) == 1
    drawn = dom.of(champion, "polyline", data_series="challenger")
    last_window = compared["comparison"]["windows"][-1]
    assert [float(line["data-last"]) for line in drawn] == [last_window["challenger"]]
    # its kept versions, newest first: the rollback's state and the learner as created
    listed = [int(row["data-version"]) for row in dom.of(champion, "tr") if "data-version" in row]
    bases = [v for v in kept["versions"] if v["base"]]
    assert listed == [v["version"] for v in reversed(bases)] == [int(version), 0]
    # with the rounds and error of its history at the rollback's state (the nearest earlier point)
    at = [v for v in kept["versions"] if v["rounds"] is not None and v["version"] <= int(version)][-1]
    values = [cell.get("data-value") for cell in dom.of(champion, "td") if "data-value" in cell
              and "data-stat" not in cell]
    assert values[:2] == [str(at["rounds"]), repr(at["error"])]


GREEN = np.array([0x2E, 0x7D, 0x32]) / 255  # the first target's colour in dashboard.html


def test_intervals_and_sets_show_their_coverage_width_and_calibration_per_window(
        service: ServiceProcess, tmp_path: Path) -> None:
    """A regression learner answering intervals at its config's 90% and then at a request's 80%, and a
    classifier answering sets: over the last 100 rounds, each target's curve ends at the coverage and mean
    width the answers' own intervals give (the 80% one counted from its first round), with its target as a
    dashed line; the classifier's last expected calibration error and mean set size are those of its
    answers' probabilities and sets; the screenshot shows the coverage curves."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(150, 3))
    y = 3.0 * X[:, 0] - X[:, 1] + rng.normal(size=150) * (0.2 + np.abs(X[:, 2]))
    labels = [["a", "b", "c"][int(x[0] > 0) + int(x[1] > 0.5) if rng.random() > 0.2 else int(rng.integers(3))]
              for x in X[:120]]
    answered = []  # regression: (round, target, covered, width)
    classes = []  # classifier: (confidence of the most probable class, whether it was the label, set size)
    with httpx.Client(base_url=service.url, headers=HEADERS, timeout=60) as http:
        for name, task in (("sure", "regression"), ("sure-classes", "classification")):
            created = http.put(f"/v1/learners/{name}", json={"task": task, "coverage": 0.9})
            assert created.status_code == 201, created.text
        try:
            for start, size, coverage in ((0, 50, None), (50, 50, None), (100, 50, 0.8)):
                rows = range(start, start + size)
                body: dict[str, object] = {"items": [{"x": X[i].tolist(), "y": float(y[i])} for i in rows]}
                if coverage:
                    body["coverage"] = coverage
                fed = http.post("/v1/learners/sure/feedback", json=body).json()
                answered += [(i + 1, coverage or 0.9, low <= y[i] <= high, high - low)
                             for i, (low, high) in zip(rows, fed["intervals"], strict=True)]
            items = [{"x": x.tolist(), "y": label} for x, label in zip(X, labels, strict=False)]
            fed = http.post("/v1/learners/sure-classes/feedback", json={"items": items}).json()
            for p, label, answer in zip(fed["probabilities"], labels, fed["sets"], strict=True):
                top = max(p, key=p.__getitem__)
                classes.append((p[top], top == label, len(answer)))
            dom = Elements(chromium(f"{service.url}/dashboard#key={KEY}", tmp_path, "--dump-dom"))
            shot = tmp_path / "sure.png"
            chromium(f"{service.url}/dashboard#key={KEY}", tmp_path, f"--screenshot={shot}",
                     "--window-size=1280,3000")
        finally:
            for name in ("sure", "sure-classes"):
                http.delete(f"/v1/learners/{name}")
    charts = [a["data-chart"] for c, t, a in dom.found if c == "sure" and t == "svg"]
    assert charts == ["MAE, RMSE (last 100 rounds)", "coverage achieved vs target (last 100 rounds)",
                      "mean interval width (last 100 rounds)"]
    shown = {a["data-stat"]: a["data-value"] for a in dom.of("sure", "td") if "data-stat" in a}
    for target, since in ((0.9, 50), (0.8, 100)):  # the last 100 rounds; the 80% ones since their first
        window = [a for a in answered if a[0] > since and a[1] == target]
        assert len(window) == 50
        (curve,) = dom.of("sure", "polyline", data_series=f"coverage@{target}")
        assert float(curve["data-last"]) == pytest.approx(np.mean([a[2] for a in window]), rel=1e-12)
        assert float(shown[f"coverage@{target}"]) == float(curve["data-last"])
        (width,) = dom.of("sure", "polyline", data_series=f"width@{target}")
        assert float(width["data-last"]) == pytest.approx(np.mean([a[3] for a in window]), rel=1e-12)
        assert len(dom.of("sure", "line", data_target=str(target))) == 1
    (first,) = dom.of("sure", "polyline", data_series="coverage@0.8")
    assert int(first["data-points"]) == 50  # the 80% curve starts with its first round
    assert not dom.of("sure", "polyline", data_series="ece")  # no probabilities: no calibration chart

    last = classes[-100:]
    bins = [min(int(c * 10), 9) for c, _, _ in last]
    gaps = [sum(c - right for (c, right, _), b in zip(last, bins, strict=True) if b == k) for k in range(10)]
    ece = sum(abs(gap) for gap in gaps) / 100
    (curve,) = dom.of("sure-classes", "polyline", data_series="ece")
    assert float(curve["data-last"]) == pytest.approx(ece, rel=1e-9) and ece > 0
    (sizes,) = dom.of("sure-classes", "polyline", data_series="width@0.9")
    assert float(sizes["data-last"]) == pytest.approx(np.mean([n for _, _, n in last]), rel=1e-12)
    charts = [a["data-chart"] for c, t, a in dom.found if c == "sure-classes" and t == "svg"]
    assert charts[2:] == ["coverage achieved vs target (last 100 rounds)", "mean set size (last 100 rounds)",
                          "calibration error of the probabilities (last 100 rounds)"]
    pixels = image.imread(shot)[..., :3]
    assert np.all(np.abs(pixels - GREEN) < 0.05, axis=-1).sum() > 200  # the 90% coverage curves are drawn
