"""A Python client of the kons service, synchronous (:class:`Client`) and asynchronous (:class:`AsyncClient`).

    from kons_service import Client

    with Client("http://127.0.0.1:8000", api_key="...") as kons:  # default: $KONS_URL, $KONS_API_KEY
        kons.create_learner("m", "sketched_kons", dim=3)
        kons.feedback("m", y=0.5, x=[0.0, 1.0, 2.0])
        kons.predict("m", x=[0.0, 1.0, 2.0]).prediction

Every call is retried on a broken connection, a timeout, a 503 or a 429 (waiting ``Retry-After``, else an
exponential backoff with jitter), by default for 26 to 53 seconds in all: longer than a restart of the
service (measured in docs/faq.md). That is safe because no call applies anything twice: each feedback
carries a ``request_id`` (the caller's, or one the client draws once per call), so the service answers
a retry of an already applied feedback with the original answer; a predict's ``ids`` are remembered
again with the same features; a create of the same config is a no-op; a delete whose retry finds the
learner gone has deleted it.

Each client remembers the newest version of each learner it was answered and sends it back
(``Kons-Seen-Version``) with its next predict, feedback or ``get_learner`` of that learner, so that a
service whose Redis lost those rounds (a rollback) reports it even after a restart (see
docs/reliability.md); a create, a delete or a state upload through the client forgets it.

A batch the service refuses as too large for now (413 ``batch_too_large``, "at most N rows") is sent again
as parts of at most N rows, in order, each part applied once: a feedback batch's part carries the
request id ``<request_id>.<first row>``, so a retry of the whole call with the same ``request_id`` replays
the parts already applied (or, if the service now allows another part size, is refused 409
``request_id_conflict``): no row is lost or applied twice. The parts' answers are joined into one, whose
``version`` is the last part's (a split predict batch's parts may see different versions).

An error answer raises a :class:`KonsServiceError` subclass, one per family of the service's error
codes (``error.code`` in the body). The client needs httpx and pydantic, not the server's dependencies.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import re
import time
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Self, TypeVar, cast

import httpx
from pydantic import BaseModel

from kons_service.http.schemas import (
    BatchFeedbackResponse,
    BatchPredictResponse,
    Challengers,
    FeedbackResponse,
    LearnerHistory,
    LearnerInfo,
    LearnerList,
    LearnerSummary,
    LearnerVersions,
    PredictResponse,
    PromotedAnswer,
    RolledBack,
    StateImported,
)

__all__ = [
    "AsyncClient",
    "AuthenticationError",
    "Client",
    "ConflictError",
    "InvalidRequestError",
    "KonsServiceError",
    "NotFoundError",
    "PayloadTooLargeError",
    "ServerError",
    "ServiceConnectionError",
    "UnavailableError",
]

#: Dense features (any sequence of numbers, numpy arrays included), ``{"indices": [...], "values": [...]}``
#: or a record ``{name: number | str | bool | None}``.
FeaturesLike = Sequence[float] | Mapping[str, Any] | Any
#: A label: a number (regression) or a class (a string, an integer or a boolean); NumPy scalars too.
LabelLike = float | int | str | bool | Any

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

#: The service's address when a client is given none and ``KONS_URL`` is not set: ``kons serve``'s default.
DEFAULT_URL = "http://127.0.0.1:8000"


def service_url(given: str | None = None) -> str:
    """``given``, else the ``KONS_URL`` environment variable, else :data:`DEFAULT_URL`."""
    return given or os.environ.get("KONS_URL") or DEFAULT_URL


# ---------------------------------------------------------------------------------------------- errors
class KonsServiceError(Exception):
    """An error answer of the service: its HTTP ``status``, ``code`` (e.g. ``"learner_not_found"``),
    ``message`` and, for schema errors, ``details`` (``[{"field", "problem"}]``)."""

    #: The service's error codes of this family (the client maps ``error.code`` through them).
    codes: tuple[str, ...] = ()

    def __init__(self, status: int, code: str, message: str, details: list[dict[str, Any]] | None = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or []


class InvalidRequestError(KonsServiceError):
    """400/422: the body is not JSON, does not match the schema, or kons rejected it; nothing changed."""

    codes = ("invalid_json", "invalid_text", "validation_error", "invalid_name", "invalid_input",
             "invalid_parameter", "numerical_error", "invalid_state", "invalid_request", "resource_limit",
             "invalid_shadow")


class AuthenticationError(KonsServiceError):
    """401: a missing or unknown API key."""

    codes = ("unauthorized",)


class NotFoundError(KonsServiceError):
    """404: no such learner in the caller's tenant, an unknown (used, expired) predict id, or no route."""

    codes = ("learner_not_found", "unknown_id", "not_found")


class ConflictError(KonsServiceError):
    """409: another config under this name, a state blob of another config, a reused request_id, a retry
    applied before whose answer is no longer kept, a version the learner does not keep, or feedback sent
    to a shadow challenger."""

    codes = ("config_conflict", "state_mismatch", "request_id_conflict", "already_applied",
             "version_not_kept", "learner_is_shadow")


class PayloadTooLargeError(KonsServiceError):
    """413: the body or the batch exceeds the service's limits."""

    codes = ("payload_too_large", "batch_too_large")


class UnavailableError(KonsServiceError):
    """503 (or 429) once the retries are spent: the store (Redis) is unreachable, may evict keys or did not
    replicate a write in time, the learner stays busy (or the body parser restarted), or the tenant is over
    its rate or keeps too many requests in flight."""

    codes = ("store_unavailable", "store_may_evict", "not_replicated", "learner_busy", "parser_unavailable",
             "too_many_requests")


class ServerError(KonsServiceError):
    """500 (or another status the service does not document): a bug on the server's side."""

    codes = ("internal_error",)


class ServiceConnectionError(KonsServiceError):
    """No answer at all once the retries are spent (refused or broken connections, timeouts)."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "connection_error", message)


_FAMILIES: tuple[type[KonsServiceError], ...] = (
    InvalidRequestError, AuthenticationError, NotFoundError, ConflictError, PayloadTooLargeError,
    UnavailableError, ServerError,
)
_BY_CODE = {code: family for family in _FAMILIES for code in family.codes}
_BY_STATUS: dict[int, type[KonsServiceError]] = {
    400: InvalidRequestError, 401: AuthenticationError, 403: AuthenticationError, 404: NotFoundError,
    409: ConflictError, 413: PayloadTooLargeError, 422: InvalidRequestError, 429: UnavailableError,
    503: UnavailableError,
}


def error_from_response(response: httpx.Response) -> KonsServiceError:
    """The exception for an error answer: by the body's ``error.code``, else by the HTTP status."""
    try:
        error = response.json()["error"]
        code, message, details = str(error["code"]), str(error["message"]), error.get("details")
    except (ValueError, KeyError, TypeError):
        code, message, details = "http_error", response.text[:500] or response.reason_phrase, None
    family = _BY_CODE.get(code) or _BY_STATUS.get(response.status_code)
    if family is None:
        family = ServerError if response.status_code >= 500 else KonsServiceError
    return family(response.status_code, code, message, details)


# ---------------------------------------------------------------------------------------------- calls
@dataclass(frozen=True, slots=True)
class _Call(Generic[T]):
    """One endpoint call, built once and sent (and re-sent) unchanged by either client."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    json: Any = None
    content: bytes | None = None
    params: dict[str, Any] | None = None
    #: A 404 on a retry means that an earlier attempt did the job (delete).
    gone_is_done: bool = False
    #: The learner whose newest version the client was answered this call sends back, and whose version
    #: its answer (a ``version``) updates; with ``new_history`` (create, delete, state upload) the call
    #: forgets it instead.
    learner: str = ""
    new_history: bool = False

    def conclude(self, outcome: httpx.Response | httpx.TransportError, attempts: int) -> T:
        if isinstance(outcome, httpx.TransportError):
            raise ServiceConnectionError(
                f"{self.method} {self.path}: no answer after {attempts} attempt(s): {outcome!r}"
            ) from outcome
        if outcome.is_success or (self.gone_is_done and attempts > 1 and outcome.status_code == 404):
            return self.read(outcome)
        raise error_from_response(outcome)


def _model(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: model.model_validate(response.json())


def _features(x: FeaturesLike) -> Any:
    """Features as JSON: a list of floats (from any sequence, numpy arrays included), the sparse dict, or a
    record of JSON scalars."""
    if isinstance(x, Mapping) and set(x) == {"indices", "values"}:
        return {"indices": [int(i) for i in x["indices"]], "values": [float(v) for v in x["values"]]}
    if isinstance(x, Mapping):
        return {str(name): _scalar(value) for name, value in x.items()}
    return [float(v) for v in x]


def _scalar(value: Any) -> Any:
    """A JSON scalar of a value as given (a NumPy scalar as its Python value)."""
    return value.item() if hasattr(value, "item") and not isinstance(value, str | bytes) else value


def _learner(name: str) -> str:
    return f"/v1/learners/{name}"


def _create(
    name: str, algorithm: str, dim: int | None, params: Mapping[str, Any] | None, task: str | None = None
) -> _Call[LearnerSummary]:
    body = {"algorithm": algorithm, "dim": dim, "params": dict(params or {})}
    if task is not None:
        body["task"] = task
    return _Call("PUT", _learner(name), _model(LearnerSummary), json=body, learner=name, new_history=True)


def _shadow(name: str, champion: str, algorithm: str, dim: int | None, params: Mapping[str, Any] | None,
            task: str | None) -> _Call[LearnerSummary]:
    call = _create(name, algorithm, dim, params, task)
    return _Call("PUT", call.path, call.read, json={**call.json, "shadow": champion}, learner=name,
                 new_history=True)


def _fork(name: str, source: str, version: int | None) -> _Call[LearnerSummary]:
    origin = {"from": source, **({"version": version} if version is not None else {})}
    return _Call("PUT", _learner(name), _model(LearnerSummary), json={"fork": origin}, learner=name,
                 new_history=True)


def _versions(name: str) -> _Call[LearnerVersions]:
    return _Call("GET", _learner(name) + "/versions", _model(LearnerVersions))


def _rollback(name: str, version: int) -> _Call[RolledBack]:
    return _Call("POST", _learner(name) + "/rollback", _model(RolledBack), json={"version": version},
                 learner=name)


def _challengers(name: str) -> _Call[Challengers]:
    return _Call("GET", _learner(name) + "/challengers", _model(Challengers))


def _promote(name: str, challenger: str) -> _Call[PromotedAnswer]:
    return _Call("POST", _learner(name) + "/promote", _model(PromotedAnswer), json={"challenger": challenger},
                 learner=name)


def _list(cursor: str | None, limit: int) -> _Call[LearnerList]:
    params = {"limit": limit, **({"cursor": cursor} if cursor is not None else {})}
    return _Call("GET", "/v1/learners", _model(LearnerList), params=params)


def _predict(name: str, x: FeaturesLike, id: str | None) -> _Call[PredictResponse]:
    body = {"x": _features(x), **({"id": id} if id is not None else {})}
    return _Call("POST", _learner(name) + "/predict", _model(PredictResponse), json=body, learner=name)


def _feedback(name: str, y: LabelLike, x: FeaturesLike | None, id: str | None,
              request_id: str | None) -> _Call[FeedbackResponse]:
    body: dict[str, Any] = {"y": _scalar(y), "request_id": request_id or uuid.uuid4().hex}
    if x is not None:
        body["x"] = _features(x)
    if id is not None:
        body["id"] = id
    return _Call("POST", _learner(name) + "/feedback", _model(FeedbackResponse), json=body, learner=name)


def _feedback_items(ys: Sequence[LabelLike], xs: Sequence[FeaturesLike] | None,
                    ids: Sequence[str] | None) -> list[dict[str, Any]]:
    if xs is not None and ids is None:
        keys: Sequence[Any] = [_features(x) for x in xs]  # (xs may be a numpy array: no truth test)
    elif ids is not None and xs is None:
        keys = list(ids)
    else:
        raise ValueError("give exactly one of xs (features) or ids (of earlier predicts)")
    if len(keys) != len(ys):
        raise ValueError(f"{len(ys)} labels for {len(keys)} rows")
    field = "id" if ids is not None else "x"
    return [{field: key, "y": _scalar(y)} for key, y in zip(keys, ys, strict=True)]


def _feedback_part(name: str, items: list[dict[str, Any]], request_id: str) -> _Call[BatchFeedbackResponse]:
    body = {"items": items, "request_id": request_id}
    return _Call("POST", _learner(name) + "/feedback", _model(BatchFeedbackResponse), json=body,
                 learner=name)


def _part_id(request_id: str, start: int) -> str:
    """The request id of the part of a split batch that starts at row ``start`` (within the id's 128
    characters: a long id is shortened to a digest of it)."""
    suffix = f".{start}"
    if len(request_id) + len(suffix) > 128:
        request_id = hashlib.sha256(request_id.encode()).hexdigest()
    return request_id + suffix


# ---------------------------------------------------------------------------------------------- split batches
_ALLOWED_ROWS = re.compile(r"at most (\d+) rows")

#: A plan of calls: it yields each call to send, is sent its answer (or thrown its error) and returns the
#: result. Both clients drive the same plans (:meth:`Client._run`, :meth:`AsyncClient._run`).
_Plan = Generator[_Call[Any], Any, T]
#: What a client's conversation asks of its I/O (:meth:`_Base._conversation`): a request to send (httpx's
#: keyword arguments) or a delay to wait (s); and what it is told back.
_Step = dict[str, Any] | float
_Outcome = httpx.Response | httpx.TransportError | None


@dataclass(frozen=True, slots=True)
class _Done(Generic[T]):
    """A conversation's last step: the plan's result."""

    value: T


def _alone(call: _Call[T]) -> _Plan[T]:
    """The plan of one call."""
    answer: T = yield call
    return answer


def _allowed_rows(error: KonsServiceError) -> int | None:
    """The rows a 413 ``batch_too_large`` says a batch may hold now; None for any other error."""
    found = _ALLOWED_ROWS.search(error.message) if error.code == "batch_too_large" else None
    return int(found.group(1)) if found else None


def _in_parts(rows: int, part: Callable[[int, int], _Call[Any]]) -> Generator[_Call[Any], Any, list[Any]]:
    """Send rows ``[0, rows)`` as ``part(start, stop)`` calls, in order: the whole batch first, and after a
    413 that names fewer rows than the part held, parts of that many (the allowance shrinks as the learner
    grows, so a later part may be split again). Returns the parts' answers in order."""
    answers: list[Any] = []
    start, size = 0, rows
    while start < rows:
        stop = min(start + size, rows)
        try:
            answers.append((yield part(start, stop)))
        except KonsServiceError as refused:
            allowed = _allowed_rows(refused)
            if allowed is None or allowed >= stop - start:
                raise
            size = allowed
            continue
        start = stop
    return answers


def _joined(parts: Sequence[Any], field: str, empty: Any) -> list[Any] | None:
    """A per-row field of the parts' answers, concatenated (None where every part has none)."""
    values = [getattr(part, field) for part in parts]
    if all(value is None for value in values):
        return None
    return [row for part, value in zip(parts, values, strict=True)
            for row in (value if value is not None else [empty] * len(part.predictions))]


def _predict_plan(name: str, xs: Sequence[FeaturesLike],
                  ids: Sequence[str] | None) -> _Plan[BatchPredictResponse]:
    rows = [_features(x) for x in xs]
    keys = None if ids is None else list(ids)

    def part(start: int, stop: int) -> _Call[BatchPredictResponse]:
        body = {"xs": rows[start:stop], **({"ids": keys[start:stop]} if keys is not None else {})}
        return _Call("POST", _learner(name) + "/predict", _model(BatchPredictResponse), json=body,
                     learner=name)

    parts: list[BatchPredictResponse] = yield from _in_parts(len(rows), part)
    if len(parts) == 1:
        return parts[0]
    return BatchPredictResponse(
        predictions=[p for part in parts for p in part.predictions], version=parts[-1].version,
        labels=_joined(parts, "labels", None), probabilities=_joined(parts, "probabilities", {}))


def _feedback_plan(name: str, ys: Sequence[LabelLike], xs: Sequence[FeaturesLike] | None,
                   ids: Sequence[str] | None, request_id: str | None) -> _Plan[BatchFeedbackResponse]:
    items = _feedback_items(ys, xs, ids)
    base = request_id or uuid.uuid4().hex
    parts: list[BatchFeedbackResponse] = yield from _in_parts(
        len(items), lambda start, stop: _feedback_part(
            name, items[start:stop], base if stop - start == len(items) else _part_id(base, start)))
    if len(parts) == 1:
        return parts[0]
    return BatchFeedbackResponse(
        predictions=[p for part in parts for p in part.predictions],
        losses=[loss for part in parts for loss in part.losses], version=parts[-1].version,
        labels=_joined(parts, "labels", None), probabilities=_joined(parts, "probabilities", {}))


def _ok(response: httpx.Response) -> bool:
    return response.is_success


# ---------------------------------------------------------------------------------------------- retries
@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to retry: ``retries`` more attempts after the first, exponential backoff
    from ``backoff`` seconds (with jitter) up to ``max_backoff``; a ``Retry-After`` header is obeyed
    (up to ``max_backoff``). The defaults wait 26 to 53 s in all (0.2, 0.4, ... 6.4, then 10 s four
    times, each jittered down to half), so that a call outlasts a restart of the service."""

    retries: int = 10
    backoff: float = 0.2
    max_backoff: float = 10.0

    def delay(self, attempt: int, outcome: httpx.Response | httpx.TransportError) -> float | None:
        """Seconds to wait before retrying after ``attempt`` (0-based) ended in ``outcome``; None: done."""
        if attempt >= self.retries:
            return None
        if isinstance(outcome, httpx.Response):
            if outcome.status_code not in (429, 502, 503, 504):
                return None
            after = outcome.headers.get("Retry-After", "")
            if after.isdigit():
                return min(float(after), self.max_backoff)
        exponential = min(self.backoff * 2.0**attempt, self.max_backoff)
        return exponential * (0.5 + random.random() / 2)


# ---------------------------------------------------------------------------------------------- clients
class _Base:
    def __init__(self, api_key: str | None, retry: RetryPolicy | None) -> None:
        api_key = api_key or os.environ.get("KONS_API_KEY")
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.retry = retry or RetryPolicy()
        self._seen: dict[str, int] = {}  # learner -> the version of its newest answer

    # The clients' logic is sans I/O (as h11's): :meth:`_conversation` says what to do next (send a
    # request, wait) and is told what came of it; each client only does the I/O, sync or async.
    def _conversation(self, plan: _Plan[T]) -> Generator[_Step | _Done[T], _Outcome, None]:
        """``plan``'s calls, each sent with its retries: yields each request to send (httpx's keyword
        arguments) or delay to wait (s), and is sent what came of it (the response, the transport error
        it raised; None after a wait); yields the plan's result last, as :class:`_Done`."""
        try:
            call = next(plan)
            while True:
                try:
                    answer = yield from self._exchange(call)
                except KonsServiceError as error:
                    call = plan.throw(error)
                else:
                    call = plan.send(answer)
        except StopIteration as done:
            yield _Done(done.value)

    def _exchange(self, call: _Call[T]) -> Generator[_Step, _Outcome, T]:
        """One call, re-sent as the retry policy says; its answer (or its error, raised)."""
        attempt = 0
        while True:
            outcome = yield self._request(call)
            assert outcome is not None  # (a request is answered with what came of it)
            delay = self.retry.delay(attempt, outcome)
            if delay is None:
                return self._noted(call, call.conclude(outcome, attempt + 1))
            yield delay
            attempt += 1

    def _request(self, call: _Call[Any]) -> dict[str, Any]:
        seen = self._seen.get(call.learner) if call.learner and not call.new_history else None
        return {"method": call.method, "url": call.path, "json": call.json, "content": call.content,
                "params": call.params, "headers": None if seen is None else {"Kons-Seen-Version": str(seen)}}

    def _noted(self, call: _Call[T], result: T) -> T:
        """``result``, once its version is remembered (or forgotten: a new history of the learner)."""
        if call.new_history:
            self._seen.pop(call.learner, None)
        elif call.learner and isinstance(version := getattr(result, "version", None), int):
            self._seen[call.learner] = version
        return result


class Client(_Base):
    """The synchronous client of the service at ``base_url`` (default: ``$KONS_URL``, else
    http://127.0.0.1:8000) with ``api_key`` (default: ``$KONS_API_KEY``, else none); ``timeout`` in seconds
    per attempt; ``transport`` for tests and proxies."""

    def __init__(self, base_url: str | None = None, *, api_key: str | None = None,
                 timeout: float = 30.0, retry: RetryPolicy | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(api_key, retry)
        self._http = httpx.Client(base_url=service_url(base_url), headers=self._headers, timeout=timeout,
                                  transport=transport)

    def _send(self, call: _Call[T]) -> T:
        return self._run(_alone(call))

    def _run(self, plan: _Plan[T]) -> T:
        """Send the calls of ``plan`` one after the other; its result."""
        conversation, outcome = self._conversation(plan), cast(_Outcome, None)
        while not isinstance(step := conversation.send(outcome), _Done):
            if not isinstance(step, dict):
                time.sleep(step)
                outcome = None
                continue
            try:
                outcome = self._http.request(**step)
            except httpx.TransportError as exc:
                outcome = exc
        return step.value

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def live(self) -> bool:
        """``GET /healthz``: the process answers."""
        return self._send(_Call("GET", "/healthz", _ok))

    def ready(self) -> bool:
        """``GET /readyz``: the process reaches its store (False once the retries of a 503 are spent)."""
        try:
            return self._send(_Call("GET", "/readyz", _ok))
        except UnavailableError:
            return False

    def metrics(self) -> str:
        """``GET /metrics``: the Prometheus text exposition."""
        return self._send(_Call("GET", "/metrics", lambda r: r.text))

    def create_learner(self, name: str, algorithm: str = "auto", dim: int | None = None,
                       params: Mapping[str, Any] | None = None, task: str | None = None) -> LearnerSummary:
        """``PUT /v1/learners/{name}``: create it (the same config again is a no-op; another is a 409).
        Without ``dim``, the first feedback row fixes it; ``task`` ("regression" or "classification"):
        without it, the algorithm's parameters decide (for ``auto``, the first feedback's label)."""
        return self._send(_create(name, algorithm, dim, params, task))

    def list_learners(self, cursor: str | None = None, limit: int = 100) -> LearnerList:
        """``GET /v1/learners``: a page of the tenant's learners in name order."""
        return self._send(_list(cursor, limit))

    def get_learner(self, name: str) -> LearnerInfo:
        """``GET /v1/learners/{name}``: config, version and stats."""
        return self._send(_Call("GET", _learner(name), _model(LearnerInfo), learner=name))

    def history(self, name: str) -> LearnerHistory:
        """``GET /v1/learners/{name}/history``: the learner's recorded points (rounds, error totals, its
        leader for ``auto``), oldest first; the dashboard draws them."""
        return self._send(_Call("GET", _learner(name) + "/history", _model(LearnerHistory)))

    def create_shadow(self, name: str, champion: str, algorithm: str = "auto", dim: int | None = None,
                      params: Mapping[str, Any] | None = None, task: str | None = None) -> LearnerSummary:
        """``PUT /v1/learners/{name} {"shadow": champion, ...}``: a shadow challenger of ``champion``
        (docs/lifecycle.md)."""
        return self._send(_shadow(name, champion, algorithm, dim, params, task))

    def fork(self, name: str, source: str, version: int | None = None) -> LearnerSummary:
        """``PUT /v1/learners/{name} {"fork": {"from": source, "version": version}}`` (None: its newest)."""
        return self._send(_fork(name, source, version))

    def versions(self, name: str) -> LearnerVersions:
        """``GET /v1/learners/{name}/versions``: the versions it can be restored to."""
        return self._send(_versions(name))

    def rollback(self, name: str, version: int) -> RolledBack:
        """``POST /v1/learners/{name}/rollback``: the learner becomes its state after ``version``."""
        return self._send(_rollback(name, version))

    def challengers(self, name: str) -> Challengers:
        """``GET /v1/learners/{name}/challengers``: its shadow challengers compared with it."""
        return self._send(_challengers(name))

    def promote(self, name: str, challenger: str) -> PromotedAnswer:
        """``POST /v1/learners/{name}/promote``: it serves its challenger's state and config."""
        return self._send(_promote(name, challenger))

    def delete_learner(self, name: str) -> None:
        """``DELETE /v1/learners/{name}``."""
        self._send(_Call("DELETE", _learner(name), lambda _: None, gone_is_done=True, learner=name,
                                new_history=True))

    def export_state(self, name: str) -> bytes:
        """``GET /v1/learners/{name}/state``: the kons state blob (``kons.load`` reads it)."""
        return self._send(_Call("GET", _learner(name) + "/state", lambda r: r.content))

    def import_state(self, name: str, blob: bytes) -> StateImported:
        """``PUT /v1/learners/{name}/state``: replace the state by a blob of the same config."""
        return self._send(_Call("PUT", _learner(name) + "/state", _model(StateImported), content=blob,
                                learner=name, new_history=True))

    def predict(self, name: str, x: FeaturesLike, *, id: str | None = None) -> PredictResponse:
        """``POST .../predict`` of one row; ``id`` remembers ``x`` for a later ``feedback(id=...)``."""
        return self._send(_predict(name, x, id))

    def predict_batch(self, name: str, xs: Sequence[FeaturesLike], *,
                      ids: Sequence[str] | None = None) -> BatchPredictResponse:
        """``POST .../predict`` of many rows, all on the same version (unless the service asks for
        smaller batches: then in parts, see the module's documentation)."""
        return self._run(_predict_plan(name, xs, ids))

    def feedback(self, name: str, y: LabelLike, *, x: FeaturesLike | None = None, id: str | None = None,
                 request_id: str | None = None) -> FeedbackResponse:
        """``POST .../feedback``: one round, on features ``x`` or a predict's ``id``; applied once."""
        return self._send(_feedback(name, y, x, id, request_id))

    def feedback_batch(self, name: str, ys: Sequence[LabelLike], *, xs: Sequence[FeaturesLike] | None = None,
                       ids: Sequence[str] | None = None,
                       request_id: str | None = None) -> BatchFeedbackResponse:
        """``POST .../feedback`` of rounds applied in order, once: all or none, or, when the service asks
        for smaller batches, in parts of the rows it allows (each part all or none)."""
        return self._run(_feedback_plan(name, ys, xs, ids, request_id))


class AsyncClient(_Base):
    """The asynchronous client: the same arguments and methods as :class:`Client`, as coroutines."""

    def __init__(self, base_url: str | None = None, *, api_key: str | None = None,
                 timeout: float = 30.0, retry: RetryPolicy | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(api_key, retry)
        self._http = httpx.AsyncClient(base_url=service_url(base_url), headers=self._headers, timeout=timeout,
                                       transport=transport)

    async def _send(self, call: _Call[T]) -> T:
        return await self._run(_alone(call))

    async def _run(self, plan: _Plan[T]) -> T:
        """Send the calls of ``plan`` one after the other; its result."""
        conversation, outcome = self._conversation(plan), cast(_Outcome, None)
        while not isinstance(step := conversation.send(outcome), _Done):
            if not isinstance(step, dict):
                await asyncio.sleep(step)
                outcome = None
                continue
            try:
                outcome = await self._http.request(**step)
            except httpx.TransportError as exc:
                outcome = exc
        return step.value

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()

    async def live(self) -> bool:
        return await self._send(_Call("GET", "/healthz", _ok))

    async def ready(self) -> bool:
        try:
            return await self._send(_Call("GET", "/readyz", _ok))
        except UnavailableError:
            return False

    async def metrics(self) -> str:
        return await self._send(_Call("GET", "/metrics", lambda r: r.text))

    async def create_learner(self, name: str, algorithm: str = "auto", dim: int | None = None,
                             params: Mapping[str, Any] | None = None,
                             task: str | None = None) -> LearnerSummary:
        return await self._send(_create(name, algorithm, dim, params, task))

    async def list_learners(self, cursor: str | None = None, limit: int = 100) -> LearnerList:
        return await self._send(_list(cursor, limit))

    async def get_learner(self, name: str) -> LearnerInfo:
        return await self._send(_Call("GET", _learner(name), _model(LearnerInfo), learner=name))

    async def history(self, name: str) -> LearnerHistory:
        return await self._send(_Call("GET", _learner(name) + "/history", _model(LearnerHistory)))

    async def create_shadow(self, name: str, champion: str, algorithm: str = "auto", dim: int | None = None,
                            params: Mapping[str, Any] | None = None,
                            task: str | None = None) -> LearnerSummary:
        return await self._send(_shadow(name, champion, algorithm, dim, params, task))

    async def fork(self, name: str, source: str, version: int | None = None) -> LearnerSummary:
        return await self._send(_fork(name, source, version))

    async def versions(self, name: str) -> LearnerVersions:
        return await self._send(_versions(name))

    async def rollback(self, name: str, version: int) -> RolledBack:
        return await self._send(_rollback(name, version))

    async def challengers(self, name: str) -> Challengers:
        return await self._send(_challengers(name))

    async def promote(self, name: str, challenger: str) -> PromotedAnswer:
        return await self._send(_promote(name, challenger))

    async def delete_learner(self, name: str) -> None:
        await self._send(_Call("DELETE", _learner(name), lambda _: None, gone_is_done=True, learner=name,
                                new_history=True))

    async def export_state(self, name: str) -> bytes:
        return await self._send(_Call("GET", _learner(name) + "/state", lambda r: r.content))

    async def import_state(self, name: str, blob: bytes) -> StateImported:
        return await self._send(_Call("PUT", _learner(name) + "/state", _model(StateImported), content=blob,
                                learner=name, new_history=True))

    async def predict(self, name: str, x: FeaturesLike, *, id: str | None = None) -> PredictResponse:
        return await self._send(_predict(name, x, id))

    async def predict_batch(self, name: str, xs: Sequence[FeaturesLike], *,
                            ids: Sequence[str] | None = None) -> BatchPredictResponse:
        return await self._run(_predict_plan(name, xs, ids))

    async def feedback(self, name: str, y: LabelLike, *, x: FeaturesLike | None = None, id: str | None = None,
                       request_id: str | None = None) -> FeedbackResponse:
        return await self._send(_feedback(name, y, x, id, request_id))

    async def feedback_batch(self, name: str, ys: Sequence[LabelLike], *,
                             xs: Sequence[FeaturesLike] | None = None, ids: Sequence[str] | None = None,
                             request_id: str | None = None) -> BatchFeedbackResponse:
        return await self._run(_feedback_plan(name, ys, xs, ids, request_id))
