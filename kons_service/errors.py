"""The service's one error tree and the single place where every error becomes an HTTP answer.

Every error body has the shape ``{"error": {"code": "...", "message": "..."}}`` (plus ``"details"`` for
schema errors). kons's own errors (bad input, bad parameters, rejected rounds, bad state blobs) are all
4xx; an unreachable store is a 503; anything else is a logged 500 with no internals in the body.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

import kons
from kons_service.logs import current_request_id
from kons_service.store import (
    NotReplicatedError,
    SnapshotUnstableError,
    StoreFullError,
    StoreUnavailableError,
)

__all__ = [
    "ApiError",
    "BatchTooLargeError",
    "BusyError",
    "ConfigConflictError",
    "InvalidBodyError",
    "InvalidJSONError",
    "InvalidNameError",
    "LearnerNotFoundError",
    "ParserUnavailableError",
    "PayloadTooLargeError",
    "RequestIdConflictError",
    "ResourceLimitError",
    "StateMismatchError",
    "StoreMayEvictError",
    "TooManyRequestsError",
    "UnauthorizedError",
    "UnknownIdError",
    "error_body",
    "install_error_handlers",
]

log = logging.getLogger("kons_service.errors")


class ApiError(StarletteHTTPException):
    """Base of the service's errors: an HTTP status, a stable machine-readable code and a message.

    It derives from Starlette's ``HTTPException`` so that FastAPI passes it through unchanged when it
    is raised while the request body is read.
    """

    status: int = 400
    code: str = "bad_request"

    def __init__(self, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(status_code=self.status, detail=message, headers=headers)
        self.message = message


class InvalidJSONError(ApiError):
    status, code = 400, "invalid_json"


class InvalidBodyError(ApiError):
    """A body that does not match its route's schema, found by the parser process: answered as FastAPI's
    ``RequestValidationError`` is (which, raised while the body is read, FastAPI would make a bare 400)."""

    status, code = 422, "validation_error"

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("The request does not match the schema.")
        self._errors = errors

    def errors(self) -> list[dict[str, Any]]:
        return self._errors


class UnauthorizedError(ApiError):
    status, code = 401, "unauthorized"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"WWW-Authenticate": "Bearer"})


class LearnerNotFoundError(ApiError):
    status, code = 404, "learner_not_found"


class UnknownIdError(ApiError):
    status, code = 404, "unknown_id"


class ConfigConflictError(ApiError):
    status, code = 409, "config_conflict"


class StateMismatchError(ApiError):
    status, code = 409, "state_mismatch"


class RequestIdConflictError(ApiError):
    status, code = 409, "request_id_conflict"


class PayloadTooLargeError(ApiError):
    """A body over the limit, refused before its end is read: the connection is closed rather than
    drained."""

    status, code = 413, "payload_too_large"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"Connection": "close"})


class BatchTooLargeError(ApiError):
    status, code = 413, "batch_too_large"


class ResourceLimitError(ApiError):
    """A learner whose state would exceed the service's memory budget (nothing was allocated)."""

    status, code = 422, "resource_limit"


class InvalidNameError(ApiError):
    status, code = 422, "invalid_name"


class TooManyRequestsError(ApiError):
    status, code = 429, "too_many_requests"

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message, headers={"Retry-After": str(max(retry_after, 1))})


class BusyError(ApiError):
    status, code = 503, "learner_busy"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"Retry-After": "1"})


class StoreMayEvictError(ApiError):
    """Redis's eviction policy may delete keys: a write is not acknowledged (see
    :mod:`kons_service.eviction`)."""

    status, code = 503, "store_may_evict"

    def __init__(self, message: str, retry_after: str) -> None:
        super().__init__(message, headers={"Retry-After": retry_after})


class ParserUnavailableError(BusyError):
    """The process parsing a large body died (the pool starts a new one for the next body)."""

    code = "parser_unavailable"


#: kons's errors: all are the caller's doing and leave the learner unchanged.
_KONS_ERRORS: dict[type[kons.KonsError], tuple[int, str]] = {
    kons.InvalidInputError: (422, "invalid_input"),
    kons.InvalidParameterError: (422, "invalid_parameter"),
    kons.NumericalError: (422, "numerical_error"),
    kons.StateFormatError: (422, "invalid_state"),
}

_STATUS_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}


def error_body(code: str, message: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if details:
        body["details"] = details
    if request_id := current_request_id():
        body["request_id"] = request_id
    return {"error": body}


def _response(status: int, code: str, message: str, headers: Mapping[str, str] | None = None,
              details: list[dict[str, Any]] | None = None) -> JSONResponse:
    return JSONResponse(error_body(code, message, details), status_code=status, headers=headers)


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


def install_error_handlers(app: FastAPI) -> None:
    """Map every exception to the one JSON error shape (the only such mapping in the service)."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _response(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(kons.KonsError)
    async def _kons_error(request: Request, exc: kons.KonsError) -> JSONResponse:
        status, code = next(
            (v for cls, v in _KONS_ERRORS.items() if isinstance(exc, cls)), (422, "invalid_request")
        )
        return _response(status, code, str(exc))

    @app.exception_handler(RequestValidationError)
    @app.exception_handler(InvalidBodyError)
    async def _validation(request: Request, exc: RequestValidationError | InvalidBodyError) -> JSONResponse:
        status, code, message, details = _describe_validation(exc)
        return _response(status, code, message, details=details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        return _response(exc.status_code, code, str(exc.detail), exc.headers)

    @app.exception_handler(StoreUnavailableError)
    async def _store(request: Request, exc: StoreUnavailableError) -> JSONResponse:
        log.warning("store error on %s %s: %s", request.method, request.url.path, exc)
        if isinstance(exc, StoreFullError):  # memory pressure: has an evicting policy been switched on?
            request.app.state.service.eviction.suspect()
        return _response(503, "store_unavailable", "The learner store (Redis) is unavailable; retry later.",
                         {"Retry-After": "1"})

    @app.exception_handler(NotReplicatedError)
    async def _not_replicated(request: Request, exc: NotReplicatedError) -> JSONResponse:
        log.warning("not replicated on %s %s: %s", request.method, request.url.path, exc)
        return _response(503, "not_replicated", str(exc), {"Retry-After": "1"})

    @app.exception_handler(SnapshotUnstableError)
    async def _unstable(request: Request, exc: SnapshotUnstableError) -> JSONResponse:
        return _response(BusyError.status, BusyError.code, str(exc), {"Retry-After": "1"})

    @app.exception_handler(MemoryError)
    async def _memory(request: Request, exc: MemoryError) -> JSONResponse:
        # The budget refuses configs before they allocate; this is the last line, never a 500.
        log.warning("out of memory on %s %s", request.method, request.url.path)
        return _response(ResourceLimitError.status, ResourceLimitError.code,
                         "The request needs more memory than this server has.")

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return _response(500, "internal_error", "Internal server error.")
