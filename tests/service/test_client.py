"""kons_service.Client / AsyncClient against a running service: every endpoint, the error families, and
retries that never apply a feedback twice (a reply lost after the service applied it, a 503 from a
gateway in front of it)."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import kons
from kons_service import AsyncClient, Client, cli
from kons_service import client as client_module
from kons_service.client import (
    AuthenticationError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    RetryPolicy,
    ServiceConnectionError,
    UnavailableError,
)
from kons_service.core import errors as core_errors
from kons_service.http import errors as edge_errors
from kons_service.http.schemas import LearnerHistory
from testkit.processes import SPEC, AppFactory, free_port, services_on_redis
from tests.service.classes import keyed, learnt

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(retries=3, backoff=0.01, max_backoff=0.05)


class Faulty(httpx.AsyncBaseTransport):
    """In front of the app: for the first ``times`` requests to a path ending in ``suffix``, pass the
    request on (so the service applies it), then lose the reply (``fault="drop"``) or answer 503 in its
    place, as a gateway that timed out would (``fault="503"``)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, suffix: str, fault: str, times: int = 1,
                 method: str = "POST") -> None:
        self.inner, self.suffix, self.fault, self.left, self.method = inner, suffix, fault, times, method
        self.forwarded = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method != self.method or not request.url.path.endswith(self.suffix):
            return response
        self.forwarded += 1
        if self.left == 0:
            return response
        self.left -= 1
        await response.aread()
        if self.fault == "drop":
            raise httpx.ReadError("connection reset by peer", request=request)
        return httpx.Response(503, json={"error": {"code": "store_unavailable", "message": "gateway"}},
                              headers={"Retry-After": "0"})


async def _kons(make_client: AppFactory, fault: tuple[Any, ...] | None = None, api_key: str | None = None,
                **settings: Any) -> AsyncClient:
    """An AsyncClient of a fresh in-process app (on the test's Redis), behind ``Faulty(*fault)`` if given."""
    http = await make_client(**settings)
    transport: httpx.AsyncBaseTransport = httpx.ASGITransport(app=http.app)
    if fault is not None:
        transport = Faulty(transport, *fault)
    return AsyncClient("http://kons.test", api_key=api_key, retry=FAST, transport=transport)


@pytest.fixture
async def kons_client(make_client: AppFactory) -> AsyncIterator[AsyncClient]:
    async with await _kons(make_client) as client:
        yield client


async def test_every_endpoint_round_trips(kons_client: AsyncClient) -> None:
    created = await kons_client.create_learner("m", SPEC["algorithm"], SPEC["dim"], SPEC["params"])
    assert created.version == 0 and created.config["params"]["C"] == 3.0
    again = await kons_client.create_learner("m", SPEC["algorithm"], SPEC["dim"], SPEC["params"])
    assert again == created
    assert await kons_client.live() and await kons_client.ready()

    reference = kons.learner_from_params(SPEC["algorithm"], {**SPEC["params"], "dim": 3})
    first = await kons_client.feedback("m", 0.5, x=np.array([0.0, 1.0, 2.0]))
    assert first.prediction == reference.learn_one([0.0, 1.0, 2.0], 0.5) and first.version == 1
    # arrays where the hints say sequences: what a NumPy user passes, and the client takes
    batch = await kons_client.feedback_batch("m", np.array([1.0, -2.0]),  # type: ignore[arg-type]
                                             xs=np.array([[1, 2, 3], [1, 2, 4]]))  # type: ignore[arg-type]
    expected = [reference.learn_one(x, y) for x, y in (([1.0, 2, 3], 1.0), ([1.0, 2, 4], -2.0))]
    assert batch.predictions == expected and batch.version == 3

    one = await kons_client.predict("m", [1, 2, 3], id="q-1")
    assert one.prediction == reference.predict_one([1.0, 2, 3]) and one.version == 3
    many = await kons_client.predict_batch("m", [[1, 2, 3], [0, 0, 0]], ids=["q-2", "q-3"])
    assert many.predictions[0] == one.prediction and many.version == 3
    by_id = await kons_client.feedback("m", 0.25, id="q-1")
    assert by_id.prediction == reference.learn_one([1.0, 2, 3], 0.25) and by_id.version == 4
    by_ids = await kons_client.feedback_batch("m", [0.1, 0.2], ids=["q-2", "q-3"])
    assert by_ids.version == 6

    info = await kons_client.get_learner("m")
    assert info.version == 6 and info.stats["rounds"] == 6
    page = await kons_client.list_learners(limit=1)
    assert [s.name for s in page.learners] == ["m"] and page.next_cursor is None

    blob = await kons_client.export_state("m")
    assert kons.load(blob).stats()["rounds"] == 6
    await kons_client.feedback("m", 1.0, x=[0, 0, 1])
    assert (await kons_client.import_state("m", blob)).version == 6
    assert (await kons_client.get_learner("m")).version == 6

    await kons_client.delete_learner("m")
    with pytest.raises(NotFoundError) as missing:
        await kons_client.get_learner("m")
    assert missing.value.status == 404 and missing.value.code == "learner_not_found"


async def test_the_lifecycle_verbs(kons_client: AsyncClient) -> None:
    await kons_client.create_learner("m", SPEC["algorithm"], SPEC["dim"], SPEC["params"])
    shadow = await kons_client.create_shadow("c", "m", "ons", 3, {"loss": "squared"})
    assert shadow.config["shadow"] == "m"
    for y in (0.5, 1.0, -0.5):
        await kons_client.feedback("m", y, x=[1.0, 2.0, y])
    assert (await kons_client.versions("m")).newest == 3
    assert (await kons_client.fork("f", "m", 1)).version == 1
    rolled = await kons_client.rollback("m", 2)
    assert (rolled.version, rolled.restored) == (4, 2)
    report = await kons_client.challengers("m")
    assert [c.name for c in report.challengers] == ["c"] and report.challengers[0].learnt == 4
    promoted = await kons_client.promote("m", "c")
    assert promoted.config["algorithm"] == "ons" and promoted.version == 5
    with pytest.raises(ConflictError) as not_kept:
        await kons_client.rollback("f", 0)
    assert not_kept.value.code == "version_not_kept"


async def test_error_codes_become_exceptions(kons_client: AsyncClient) -> None:
    await kons_client.create_learner("m", SPEC["algorithm"], SPEC["dim"], SPEC["params"])
    with pytest.raises(ConflictError) as conflict:
        await kons_client.create_learner("m", SPEC["algorithm"], SPEC["dim"], {**SPEC["params"], "eta": 0.2})
    assert conflict.value.code == "config_conflict"
    with pytest.raises(InvalidRequestError) as bad:
        await kons_client.feedback("m", 1.0, x=[1.0, 2.0])  # dimension 2 for a learner of dimension 3
    assert bad.value.status == 422 and bad.value.code == "invalid_input"
    with pytest.raises(InvalidRequestError) as schema:
        await kons_client.create_learner("n", "sketched_kons", 0)
    assert schema.value.code == "validation_error" and schema.value.details
    with pytest.raises(NotFoundError) as unknown:
        await kons_client.feedback("m", 1.0, id="never-predicted")
    assert unknown.value.code == "unknown_id"
    with pytest.raises(ConflictError, match="request_id"):
        await kons_client.feedback("m", 1.0, x=[1, 2, 3], request_id="r-1")
        await kons_client.feedback("m", 2.0, x=[1, 2, 3], request_id="r-1")
    assert (await kons_client.get_learner("m")).version == 1  # nothing else was applied


async def test_batch_limit_and_authentication(make_client: AppFactory) -> None:
    async with await _kons(make_client, api_key="secret", api_keys="acme:secret", max_batch=2) as client:
        await client.create_learner("m", SPEC["algorithm"], SPEC["dim"], SPEC["params"])
        # refused 413 batch_too_large ("at most 2 rows"), then sent as parts of 2 rows
        assert len((await client.predict_batch("m", [[0, 0, 0]] * 3)).predictions) == 3
        client._http.headers["Authorization"] = "Bearer wrong"
        with pytest.raises(AuthenticationError):
            await client.get_learner("m")


def _service_errors(cls: type[core_errors.ServiceError]) -> list[type[core_errors.ServiceError]]:
    return [cls, *(sub for direct in cls.__subclasses__() for sub in _service_errors(direct))]


def test_every_error_code_of_the_service_has_its_family() -> None:
    codes = {cls.code for cls in _service_errors(core_errors.ServiceError)} - {core_errors.ServiceError.code}
    codes |= {answer.code for answer in edge_errors.ANSWERS.values() if answer.code is not None}
    codes |= set(edge_errors._STATUS_CODES.values()) - {"method_not_allowed"}
    codes |= {"internal_error", "validation_error", "invalid_request"}
    assert codes <= set(client_module._BY_CODE), codes - set(client_module._BY_CODE)


@pytest.mark.parametrize("fault", ["drop", "503"])
async def test_a_feedback_retried_after_a_lost_answer_is_applied_once(
    make_client: AppFactory, fault: str
) -> None:
    async with await _kons(make_client, fault=("/feedback", fault)) as client:
        await client.create_learner("m", SPEC["algorithm"], SPEC["dim"], SPEC["params"])
        reference = kons.learner_from_params(SPEC["algorithm"], {**SPEC["params"], "dim": 3})
        answer = await client.feedback("m", 0.5, x=[0.0, 1.0, 2.0])
        transport = client._http._transport
        assert isinstance(transport, Faulty) and transport.forwarded == 2  # applied, lost, retried
        assert answer.version == 1 and answer.prediction == reference.learn_one([0.0, 1.0, 2.0], 0.5)
        assert (await client.get_learner("m")).stats["rounds"] == 1
        batch = await client.feedback_batch("m", [1.0, 2.0], xs=[[1, 1, 1], [2, 2, 2]])
        assert batch.version == 3 and (await client.get_learner("m")).version == 3


async def test_a_delete_retried_after_a_lost_answer_succeeds(make_client: AppFactory) -> None:
    async with await _kons(make_client, fault=("/m", "drop", 1, "DELETE")) as client:
        await client.create_learner("m", SPEC["algorithm"], SPEC["dim"], SPEC["params"])
        await client.delete_learner("m")  # deleted, the answer lost, the retry finds it gone
        with pytest.raises(NotFoundError):
            await client.delete_learner("m")  # a first attempt's 404 is an error


async def test_a_503_that_lasts_is_raised_after_the_retries(make_client: AppFactory) -> None:
    http = await make_client()
    transport = Faulty(httpx.ASGITransport(app=http.app), "/predict", "503", times=10)
    async with AsyncClient("http://kons.test", retry=FAST, transport=transport) as client:
        await client.create_learner("m", SPEC["algorithm"], SPEC["dim"], SPEC["params"])
        with pytest.raises(UnavailableError) as unavailable:
            await client.predict("m", [0, 0, 0])
        assert unavailable.value.code == "store_unavailable"
        assert transport.forwarded == FAST.retries + 1


class Refusals(httpx.HTTPTransport):
    """The plain transport, counting the connections it could not make."""

    refused = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return super().handle_request(request)
        except httpx.ConnectError:
            self.refused += 1
            raise


@pytest.mark.redis
def test_sync_client_against_a_service_process(tmp_path: Path) -> None:
    with services_on_redis(tmp_path) as (_, [service]), Client(service.url, retry=FAST) as client:
        assert client.live() and client.ready()
        client.create_learner("m", SPEC["algorithm"], SPEC["dim"], SPEC["params"])
        first = client.feedback("m", 0.5, x=[0.0, 1.0, 2.0], request_id="r-1")
        assert client.feedback("m", 0.5, x=[0.0, 1.0, 2.0], request_id="r-1") == first
        assert client.predict("m", [0.0, 1.0, 2.0]).version == 1
        service.kill()
        restart = threading.Timer(0.5, service.start)  # a restarted process replays the log
        restart.start()
        transport = Refusals()
        # patient for 30 s at least (120 retries, jittered waits of at most 0.5 s): a restart (an import and a
        # replay) outlasted the 12 retries of up to 1 s this test had at load 9
        patient = Client(service.url, retry=RetryPolicy(retries=120, backoff=0.1, max_backoff=0.5),
                         transport=transport)
        with patient:  # refused connections until the process is back, then one application
            second = patient.feedback("m", 1.0, x=[1.0, 1.0, 1.0], request_id="r-2")
        restart.join()
        assert transport.refused >= 1
        assert second.version == 2 and client.get_learner("m").version == 2
        assert "kons_feedback_rounds_total" in client.metrics()
    with Client(f"http://127.0.0.1:{free_port()}", retry=FAST) as nobody, \
            pytest.raises(ServiceConnectionError, match="4 attempt"):
        nobody.live()


async def test_create_learner_defaults_to_auto_whose_first_row_fixes_dim(kons_client: AsyncClient) -> None:
    created = await kons_client.create_learner("d")
    assert created.config["algorithm"] == "auto" and created.config["dim"] is None
    assert (await kons_client.get_learner("d")).input_dim is None
    await kons_client.feedback("d", 2.0, x=[1.0, 2.0])
    assert (await kons_client.get_learner("d")).input_dim == 2


async def test_a_classifier_through_the_client(kons_client: AsyncClient) -> None:
    created = await kons_client.create_learner("pets", task="classification")
    assert created.config["params"]["task"] == "classification"
    local = kons.Auto(task="classification")
    rows = np.array([[0.0, 1.0], [1.0, 0.5], [2.0, -1.0], [0.5, 0.5]])
    labels = ["cat", "dog", np.str_("bird"), "cat"]  # NumPy scalars as their Python values
    batch = await kons_client.feedback_batch("pets", labels, xs=list(rows))
    played = [local.learn_proba_one(x, str(y)) for x, y in zip(rows, labels, strict=True)]
    # (none at the first round: no class known before it)
    assert batch.labels == [None, *(max(d, key=d.__getitem__) for d in played[1:])]
    assert batch.probabilities == played
    one = await kons_client.feedback("pets", np.bool_(True), x=rows[0])
    assert one.probabilities == keyed(local.learn_proba_one(rows[0], learnt(True)))
    asked = await kons_client.predict("pets", rows[1])
    assert asked.label in {"cat", "dog", "bird", learnt(True)} and asked.probabilities is not None
    assert sum(asked.probabilities.values()) == pytest.approx(1)
    assert "label=" in repr(asked)
    await kons_client.create_learner("numbers", task="regression")
    assert repr(await kons_client.predict("numbers", [1.0])) == "PredictResponse(prediction=0.0, version=0)"
    assert (await kons_client.get_learner("pets")).classes == local.classes


class Recording(httpx.AsyncBaseTransport):
    """In front of the app: records each request's method, path and ``Kons-Seen-Version`` header."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.sent: list[tuple[str, str, str | None]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append((request.method, request.url.path.rsplit("/", 1)[-1],
                          request.headers.get("kons-seen-version")))
        return await self.inner.handle_async_request(request)


async def test_the_client_sends_back_the_newest_version_it_was_answered(make_client: AppFactory) -> None:
    http = await make_client()
    transport = Recording(httpx.ASGITransport(app=http.app))
    async with AsyncClient("http://kons.test", retry=FAST, transport=transport) as kons_client:
        await kons_client.create_learner("m", SPEC["algorithm"], SPEC["dim"], SPEC["params"])
        await kons_client.feedback("m", 0.5, x=[0.1, 0.2, 0.3])
        await kons_client.feedback_batch("m", [0.1, 0.2], xs=[[0.3, 0.2, 0.1], [0.0, 0.1, 0.0]])
        await kons_client.predict("m", [0.0, 0.0, 1.0])
        await kons_client.get_learner("m")
        await kons_client.import_state("m", await kons_client.export_state("m"))  # a new history: forgotten
        await kons_client.predict_batch("m", [[0.0, 0.0, 1.0]])
        await kons_client.delete_learner("m")
        await kons_client.create_learner("m", SPEC["algorithm"], SPEC["dim"], SPEC["params"])
        await kons_client.predict("m", [0.0, 0.0, 1.0])
    assert transport.sent == [
        ("PUT", "m", None), ("POST", "feedback", None), ("POST", "feedback", "1"), ("POST", "predict", "3"),
        ("GET", "m", "3"), ("GET", "state", None), ("PUT", "state", None), ("POST", "predict", None),
        ("DELETE", "m", None), ("PUT", "m", None), ("POST", "predict", None)]


class Sizes(httpx.AsyncBaseTransport):
    """In front of the app: the rows and the status of every batch sent to a path ending in ``suffix``."""

    def __init__(self, inner: httpx.AsyncBaseTransport, suffix: str) -> None:
        self.inner, self.suffix = inner, suffix
        self.sent: list[tuple[int, int]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        body = json.loads(request.content) if request.content else {}
        rows = body.get("items") or body.get("xs")
        if request.url.path.endswith(self.suffix) and rows is not None:
            self.sent.append((len(rows), response.status_code))
        return response


async def test_a_batch_refused_as_too_large_is_sent_in_parts_of_the_rows_allowed(
    make_client: AppFactory,
) -> None:
    """A 413 batch_too_large names the rows a batch may hold now ("at most N rows"): the client sends the
    rows again in parts of N, in order, none lost or applied twice (the rounds of a learner fed row by row,
    an independent path: a single row always passes). The cap here is the work cap, which shrinks as the
    learner's state grows, so later parts are split again."""
    http = await make_client(batch_max_work_bytes=40_000)
    sizes = Sizes(httpx.ASGITransport(app=http.app), "/feedback")
    rng = np.random.default_rng(3)
    xs, ys = rng.normal(size=(160, 3)).tolist(), rng.normal(size=160).tolist()
    async with AsyncClient("http://kons.test", retry=FAST, transport=sizes) as client:
        for name in ("batched", "one_by_one"):
            await client.create_learner(name, SPEC["algorithm"], SPEC["dim"], SPEC["params"])
            for x, y in zip(xs[:40], ys[:40], strict=True):  # a state of about 4 KB: about 9 rows allowed
                await client.feedback(name, y, x=x)
        xs, ys = xs[40:], ys[40:]
        sizes.sent.clear()
        answer = await client.feedback_batch("batched", ys, xs=xs, request_id="split-1")
        single = [await client.feedback("one_by_one", y, x=x) for x, y in zip(xs, ys, strict=True)]
        assert answer.version == 160 and (await client.get_learner("batched")).stats["rounds"] == 160
        assert answer.predictions == [a.prediction for a in single]
        assert answer.losses == [a.loss for a in single]
        batched = sizes.sent
        refused = [rows for rows, status in batched if status == 413]
        applied = [rows for rows, status in batched if status == 200]
        assert refused[0] == 120 and sum(applied) == 120 and len(applied) >= 3
        assert len(set(applied[:-1])) >= 2  # the allowance shrank as the state grew
        # the whole call again with its request id, now that the learner allows smaller parts: its first
        # part's id comes with fewer rows than it was applied with, refused 409; nothing applied again
        with pytest.raises(ConflictError) as again:
            await client.feedback_batch("batched", ys, xs=xs, request_id="split-1")
        assert again.value.code == "request_id_conflict"
        assert (await client.get_learner("batched")).version == 160
        predicted = await client.predict_batch("batched", xs)
        assert predicted.version == 160
        assert predicted.predictions == [(await client.predict("batched", x)).prediction for x in xs]


async def test_a_batch_over_the_row_limit_is_sent_in_parts(make_client: AppFactory) -> None:
    """max_batch (the service's row limit) refuses with the same words: a classifier's labels and
    probabilities are joined row by row across the parts."""
    async with await _kons(make_client, max_batch=4) as client:
        labels = ["a", "b", "c"] * 5
        xs = [[float(i), float(i % 3), 1.0] for i in range(15)]
        await client.create_learner("m")
        answer = await client.feedback_batch("m", labels, xs=xs)
        assert answer.version == 15 and len(answer.predictions) == len(answer.losses) == 15
        assert answer.labels is not None and len(answer.labels) == 15
        assert answer.probabilities is not None and len(answer.probabilities) == 15
        predicted = await client.predict_batch("m", xs, ids=[f"q-{i}" for i in range(15)])
        assert predicted.labels is not None and len(predicted.predictions) == 15
        assert predicted.labels == [(await client.predict("m", x)).label for x in xs]
        assert (await client.feedback_batch("m", labels, ids=[f"q-{i}" for i in range(15)])).version == 30


async def test_a_retry_of_a_batch_applied_whole_is_answered_when_it_would_now_be_too_large(
    make_client: AppFactory,
) -> None:
    """A replica that appended the learner's earlier rounds (so it writes optimistically, checking a retry
    at the append) gets the retry of a batch another replica applied whole; the batch is over the work cap
    there (the learner grew; here that replica's cap is also set lower): the retry gets the batch's answer,
    not a 413 that the client would split and apply again."""
    first = await make_client()
    second = await make_client(batch_max_work_bytes=40_000)  # 10 rows of a 4.4 KB state are over it
    rng = np.random.default_rng(5)
    xs, ys = rng.normal(size=(50, 3)).tolist(), rng.normal(size=50).tolist()
    a = AsyncClient("http://kons.test", retry=FAST, transport=httpx.ASGITransport(app=first.app))
    b = AsyncClient("http://kons.test", retry=FAST, transport=httpx.ASGITransport(app=second.app))
    async with a, b:
        await a.create_learner("m", SPEC["algorithm"], SPEC["dim"], SPEC["params"])
        for x, y in zip(xs[:40], ys[:40], strict=True):
            await b.feedback("m", y, x=x)
        applied = await a.feedback_batch("m", ys[40:], xs=xs[40:], request_id="whole-1")
        assert applied.version == 50
        over = await second.post("/v1/learners/m/predict", json={"xs": xs[40:]})
        assert over.status_code == 413  # the same rows are over the cap now
        assert await b.feedback_batch("m", ys[40:], xs=xs[40:], request_id="whole-1") == applied
        assert (await b.get_learner("m")).version == 50


@pytest.mark.redis
def test_the_default_client_reads_kons_url_and_outlasts_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """With no address, the client and ``kons learners`` use $KONS_URL; ``history`` is the history route's
    answer; and the default retries outlast a restart of the service that takes 7 s to begin (the old
    default gave up after 3 to 6 s, while scripts/serve.sh took 13 s: docs/faq.md)."""
    with services_on_redis(tmp_path) as (_, [service]):
        monkeypatch.setenv("KONS_URL", service.url)
        with Client() as client:
            client.create_learner("m", SPEC["algorithm"], SPEC["dim"], SPEC["params"])
            assert client.feedback("m", 0.5, x=[0.0, 1.0, 2.0]).version == 1
            raw = httpx.get(f"{service.url}/v1/learners/m/history", timeout=10).json()
            assert client.history("m").model_dump(exclude_none=True) == \
                LearnerHistory.model_validate(raw).model_dump(exclude_none=True)
            assert cli.main(["learners"]) == 0
            listed = capsys.readouterr().out.splitlines()
            assert listed[1].split() == ["m", SPEC["algorithm"], "1"]
            service.kill()
            restart = threading.Timer(7.0, service.start)
            restart.start()
            try:
                assert client.feedback("m", 1.0, x=[1.0, 1.0, 1.0]).version == 2
            finally:
                restart.join()
