"""The one place where every error becomes an HTTP answer: :data:`ANSWERS`, a table from error type to
status and headers, and the handlers that apply it.

Every error body has the shape ``{"error": {"code": "...", "message": "..."}}`` (plus ``"details"`` for
schema errors). The core's errors (:mod:`kons_service.core.errors`) and kons's own (bad input, bad
parameters, rejected rounds, bad state blobs) are all 4xx or a 503 to retry; an unreachable store is a
503; anything else is a logged 500 with no internals in the body. The few errors only the edge raises,
while it reads a request, are defined here.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

import kons
from kons_service.core.errors import (
    AlreadyAppliedError,
    BatchTooLargeError,
    BusyError,
    ConfigConflictError,
    InvalidNameError,
    InvalidShadowError,
    LearnerNotFoundError,
    PayloadTooLargeError,
    RequestIdConflictError,
    ResourceLimitError,
    RetryLaterError,
    ServiceError,
    ShadowFeedbackError,
    StateMismatchError,
    TooManyRequestsError,
    UnknownIdError,
    VersionNotKeptError,
)
from kons_service.core.fairness import RefusalPause
from kons_service.http.logs import current_request_id
from kons_service.http.responses import TextJSONResponse
from kons_service.store import (
    NotReplicatedError,
    SnapshotUnstableError,
    StoreFullError,
    StoreUnavailableError,
)

__all__ = [
    "ANSWERS",
    "RETRY_AFTER_MAX_SECONDS",
    "Answer",
    "Carried",
    "InvalidBodyError",
    "InvalidJSONError",
    "InvalidTextError",
    "ParserUnavailableError",
    "UnauthorizedError",
    "carried",
    "error_body",
    "install_error_handlers",
]

log = logging.getLogger("kons_service.errors")


class InvalidJSONError(ServiceError):
    """A body that is not JSON, or holds a number JSON does not allow (``NaN``, ``1e999``)."""

    code = "invalid_json"


class InvalidTextError(InvalidJSONError):
    """JSON whose string holds a lone UTF-16 surrogate: valid syntax, but not text."""

    code = "invalid_text"


class InvalidBodyError(ServiceError):
    """A body that does not match its route's schema, found by the parser process: answered as FastAPI's
    ``RequestValidationError`` is."""

    code = "validation_error"

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("The request does not match the schema.")
        self._errors = errors

    def errors(self) -> list[dict[str, Any]]:
        return self._errors


class UnauthorizedError(ServiceError):
    """A missing or unknown API key."""

    code = "unauthorized"


class ParserUnavailableError(BusyError):
    """The process parsing a large body died (the pool starts a new one for the next body)."""

    code = "parser_unavailable"


class Carried(StarletteHTTPException):
    """A service error on its way out of FastAPI's reading of a body, which would turn any other exception
    into a bare 400, with the headers the edge adds to its answer (``Connection: close``)."""

    def __init__(self, error: ServiceError, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(status_code=_answer_to(error).status, detail=error.message, headers=headers)
        self.error = error


#: The longest wait a Retry-After header asks for: a tenant deep in debt (a bucket charged after the fact
#: with a large batch's work) is told to look again within a minute, not in hours; it is refused again,
#: cheaply, if it comes back too early.
RETRY_AFTER_MAX_SECONDS = 60


def _retry_after(exc: RetryLaterError) -> dict[str, str]:
    return {"Retry-After": str(min(exc.retry_after, RETRY_AFTER_MAX_SECONDS))}


def _retry_at_once(exc: Exception) -> dict[str, str]:
    return {"Retry-After": "1"}


@dataclass(frozen=True, slots=True)
class Answer:
    """How the edge answers one type of error: its status, and its code, message and headers when they
    are not the error's own (``code``/``message`` None)."""

    status: int
    code: str | None = None
    message: str | None = None
    headers: Callable[[Any], dict[str, str]] = field(default=lambda exc: {})


#: Every error the service answers, by type: an error takes the answer of the nearest class of its MRO
#: that is here. The status is HTTP's; the code (the error's own unless given) is the body's, stable.
ANSWERS: dict[type[BaseException], Answer] = {
    ServiceError: Answer(400),
    InvalidJSONError: Answer(400),
    InvalidTextError: Answer(422),
    UnauthorizedError: Answer(401, headers=lambda exc: {"WWW-Authenticate": "Bearer"}),
    LearnerNotFoundError: Answer(404),
    UnknownIdError: Answer(404),
    ConfigConflictError: Answer(409),
    StateMismatchError: Answer(409),
    RequestIdConflictError: Answer(409),
    AlreadyAppliedError: Answer(409),
    VersionNotKeptError: Answer(409),
    ShadowFeedbackError: Answer(409),
    InvalidShadowError: Answer(422),
    # refused before its end is read: the connection is closed rather than drained
    PayloadTooLargeError: Answer(413, headers=lambda exc: {"Connection": "close"}),
    BatchTooLargeError: Answer(413),
    ResourceLimitError: Answer(422),
    InvalidNameError: Answer(422),
    InvalidBodyError: Answer(422),  # (its body is a schema error's: see _describe_validation)
    TooManyRequestsError: Answer(429, headers=_retry_after),
    RetryLaterError: Answer(503, headers=_retry_after),  # learner_busy, parser_unavailable, store_may_evict
    # kons's errors: all are the caller's doing and leave the learner unchanged
    kons.KonsError: Answer(422, "invalid_request"),
    kons.InvalidInputError: Answer(422, "invalid_input"),
    kons.InvalidParameterError: Answer(422, "invalid_parameter"),
    kons.NumericalError: Answer(422, "numerical_error"),
    kons.StateFormatError: Answer(422, "invalid_state"),
    # the store's: the operation may or may not have happened, a retry with the same request id is safe
    StoreUnavailableError: Answer(503, "store_unavailable",
                                  "The learner store (Redis) is unavailable; retry later.", _retry_at_once),
    NotReplicatedError: Answer(503, "not_replicated", headers=_retry_at_once),
    SnapshotUnstableError: Answer(503, BusyError.code, headers=_retry_at_once),
    # the budget refuses configs before they allocate: this is the last line, never a 500
    MemoryError: Answer(422, ResourceLimitError.code, "The request needs more memory than this server has."),
}

#: Starlette's own errors (no route, a method the route does not take, ...): their code by status.
_STATUS_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}


def _allowed_methods(routes: Iterable[Any], path: str) -> list[str]:
    """The methods of every route (in included routers too) whose path matches ``path``."""
    methods: set[str] = set()
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            methods.update(_allowed_methods(included.routes, path))
        elif getattr(route, "methods", None) and route.path_regex.fullmatch(path):
            methods.update(route.methods)
    return sorted(methods)


def _answer_to(exc: BaseException) -> Answer:
    return next(ANSWERS[cls] for cls in type(exc).__mro__ if cls in ANSWERS)


def error_body(code: str, message: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if details:
        body["details"] = details
    if request_id := current_request_id():
        body["request_id"] = request_id
    return {"error": body}


def _response(status: int, code: str, message: str, headers: Mapping[str, str] | None = None,
              details: list[dict[str, Any]] | None = None) -> JSONResponse:
    return TextJSONResponse(error_body(code, message, details), status_code=status, headers=headers)


def _describe_validation(
    exc: RequestValidationError | InvalidBodyError,
) -> tuple[int, str, str, list[dict[str, Any]]]:
    errors = exc.errors()
    for err in errors:
        if err.get("type") == "json_invalid":
            reason = (err.get("ctx") or {}).get("error", "malformed JSON")
            return 400, "invalid_json", f"The body is not valid JSON: {reason}.", []
    details = [
        {"field": ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body",
         "problem": err.get("msg", "invalid")}
        for err in errors
    ]
    summary = "; ".join(f"{d['field']}: {d['problem']}" for d in details[:5])
    return 422, "validation_error", f"The request does not match the schema: {summary}.", details


def _answer(exc: BaseException, extra_headers: Mapping[str, str] | None = None) -> JSONResponse:
    """The answer :data:`ANSWERS` gives ``exc``, with ``extra_headers`` after its own."""
    if isinstance(exc, InvalidBodyError):
        status, code, message, details = _describe_validation(exc)
        return _response(status, code, message, extra_headers, details)
    answer = _answer_to(exc)
    code = answer.code or (exc.code if isinstance(exc, ServiceError) else "invalid_request")
    message = answer.message or (exc.message if isinstance(exc, ServiceError) else str(exc))
    headers = {**answer.headers(exc), **(extra_headers or {})}
    return _response(answer.status, code, message, headers or None)


@contextlib.contextmanager
def carried(extra_headers: Mapping[str, str] | None = None) -> Iterator[None]:
    """Raise the service errors of the block as :class:`Carried` (with ``extra_headers``)."""
    try:
        yield
    except ServiceError as exc:
        raise Carried(exc, extra_headers) from exc


def install_error_handlers(app: FastAPI, refusals: RefusalPause) -> None:
    """Map every exception to the one JSON error shape, through :data:`ANSWERS`.

    A 401 is answered after ``refusals``' pause, from whichever route (the API's, ``/metrics``, the API
    documents): a sender retrying a wrong key at once is slowed to a few requests a second. (A tenant's
    429 is paused where it is raised, which knows the tenant: :class:`kons_service.http.body.KonsRoute`.)
    """

    async def _pause_if_unauthorized(exc: BaseException) -> None:
        if isinstance(exc, UnauthorizedError):
            await refusals.pause(None)

    @app.exception_handler(ServiceError)
    @app.exception_handler(kons.KonsError)
    @app.exception_handler(MemoryError)
    async def _listed(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, MemoryError):
            log.warning("out of memory on %s %s", request.method, request.url.path)
        await _pause_if_unauthorized(exc)
        return _answer(exc)

    @app.exception_handler(Carried)
    async def _carried(request: Request, exc: Carried) -> JSONResponse:
        await _pause_if_unauthorized(exc.error)
        return _answer(exc.error, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, code, message, details = _describe_validation(exc)
        return _response(status, code, message, details=details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        headers = exc.headers
        if exc.status_code == 405 and not isinstance(exc, Carried):
            # Starlette names the methods of the first route of the path only (PUT, where GET and DELETE
            # are there too): every route of the path is asked
            headers = {**(headers or {}), "Allow": ", ".join(_allowed_methods(app.router.routes,
                                                                               request.url.path))}
        return _response(exc.status_code, code, str(exc.detail), headers)

    @app.exception_handler(StoreUnavailableError)
    @app.exception_handler(NotReplicatedError)
    @app.exception_handler(SnapshotUnstableError)
    async def _store(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, StoreUnavailableError):
            log.warning("store error on %s %s: %s", request.method, request.url.path, exc)
            if isinstance(exc, StoreFullError):  # memory pressure: has an evicting policy been switched on?
                request.app.state.service.eviction.suspect()
        elif isinstance(exc, NotReplicatedError):
            log.warning("not replicated on %s %s: %s", request.method, request.url.path, exc)
        return _answer(exc)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return _response(500, "internal_error", "Internal server error.")
