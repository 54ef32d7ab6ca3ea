"""Logs: one format for the service's and uvicorn's loggers (text, or JSON lines with
``KONS_LOG_FORMAT=json``), one access line per request with its status and latency, and the request's id
in every line.

In the text format, control characters in a line (a decoded path such as ``/v1/learners/x%0A...``, any
client's text an error message quotes) are written escaped (``\\n``, ``\\x1b``), so that a client cannot
start a line of its own; the JSON format escapes them as JSON does.

A request's id is its ``X-Request-ID`` header when it is a sane token (else one is generated); it is echoed
in the response's ``X-Request-ID``, put in error bodies (``error.request_id``) and in every log line written
while the request is served. A W3C ``traceparent`` header is echoed and logged the same way.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import time
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kons_service.core.metrics import Metrics

__all__ = [
    "RequestContextMiddleware", "TextFormatter", "current_request_id", "escape_controls", "logging_config",
    "stamp_records",
]

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("kons_request_id", default="")
_traceparent: contextvars.ContextVar[str] = contextvars.ContextVar("kons_traceparent", default="")
_ACCESS_FIELDS = ("method", "path", "route", "status", "duration_ms", "client")
#: C0 and C1 control characters, DEL, and the Unicode line and paragraph separators: any of them from a
#: client could end a text log line early and start a forged one (or rewrite the terminal showing it).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"

access_log = logging.getLogger("kons_service.access")


def current_request_id() -> str:
    """The id of the request being served ('' outside a request)."""
    return _request_id.get()


def _stamp(record: logging.LogRecord) -> None:
    if not hasattr(record, "request_id"):
        record.request_id = _request_id.get()
        record.traceparent = _traceparent.get()


def stamp_records() -> None:
    """Give every log record made from now on, by any logger, the request's id and traceparent (so that
    any handler can show them, not only the one :func:`logging_config` installs). Idempotent."""
    make = logging.getLogRecordFactory()
    if getattr(make, "kons_stamps", False):
        return

    def stamped(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        _stamp(record)
        return record

    stamped.kons_stamps = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(stamped)


class _RequestContext(logging.Filter):
    """Adds ``request_id`` and ``traceparent`` to records made before :func:`stamp_records` ran."""

    def filter(self, record: logging.LogRecord) -> bool:
        _stamp(record)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request context, access fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage(),
        }
        for name in ("request_id", "traceparent", *_ACCESS_FIELDS):
            value = getattr(record, name, None)
            if value not in (None, ""):
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


JsonFormatter.converter = time.gmtime


def escape_controls(text: str) -> str:
    """``text`` with each control character written as its Python escape (``\\n``, ``\\r``, ``\\x85``)."""
    return _CONTROL.sub(lambda found: ascii(found.group())[1:-1], text)


class TextFormatter(logging.Formatter):
    """The text format: one line per record, whatever its message holds (a traceback follows on lines of
    its own, as the logging module writes it)."""

    def __init__(self) -> None:
        super().__init__(_TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        return escape_controls(super().formatMessage(record))


def logging_config(level: str, fmt: str) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for the service and uvicorn (uvicorn applies it in every worker).
    uvicorn's own access log is off: the service writes one line per request with its latency."""
    formatter: dict[str, Any] = {"()": JsonFormatter if fmt == "json" else TextFormatter}
    handler = {"class": "logging.StreamHandler", "formatter": "kons", "filters": ["context"],
               "stream": "ext://sys.stderr"}
    quiet = {"handlers": [], "propagate": True}
    return {
        "version": 1, "disable_existing_loggers": False,
        "filters": {"context": {"()": _RequestContext}},
        "formatters": {"kons": formatter},
        "handlers": {"default": handler},
        "root": {"handlers": ["default"], "level": level.upper()},
        "loggers": {name: quiet for name in ("uvicorn", "uvicorn.error", "uvicorn.access")},
    }


class RequestContextMiddleware:
    """Gives each request its id (and traceparent), echoes them, writes its access line and counts it in
    the metrics."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = traceparent = ""
        for name, value in scope.get("headers", ()):  # (the last of each, as a dict of them would keep)
            name = name.lower()
            if name == b"x-request-id":
                given = value.decode("latin-1")
            elif name == b"traceparent":
                traceparent = value.decode("latin-1")
        request_id = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
        traceparent = traceparent if _TRACEPARENT.match(traceparent) else ""
        tokens = (_request_id.set(request_id), _traceparent.set(traceparent))
        status = 500
        start = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                extra = [(b"x-request-id", request_id.encode())]
                if traceparent:
                    extra.append((b"traceparent", traceparent.encode()))
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            seconds = time.perf_counter() - start
            duration_ms = round(seconds * 1000, 3)
            method, path = scope.get("method", ""), scope.get("path", "")
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.observe_request(method, route, status, seconds)
            if access_log.isEnabledFor(logging.INFO):  # (else its fields are not worth building)
                client = scope.get("client")
                access_log.info("%s %s %d %.1f ms", method, path, status, duration_ms,
                                extra={"method": method, "path": path, "route": route, "status": status,
                                       "duration_ms": duration_ms,
                                       "client": f"{client[0]}:{client[1]}" if client else ""})
            _request_id.reset(tokens[0])
            _traceparent.reset(tokens[1])
