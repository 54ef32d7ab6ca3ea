"""Request bodies: a size limit, and JSON parsing that rejects what Python's parser lets through.

``json.loads`` accepts the non-standard tokens ``NaN``, ``Infinity`` and ``-Infinity`` and turns
``1e999`` into ``inf``; none of them may reach a learner. Routes built with :class:`KonsRoute` read their
body through :class:`StrictRequest`, so FastAPI's own body parsing applies both rules.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from kons_service.errors import InvalidJSONError, PayloadTooLargeError

__all__ = ["KonsRoute", "StrictRequest", "loads_strict", "read_limited"]


def _reject_constant(token: str) -> Any:
    raise InvalidJSONError(f"The body is not valid JSON: the token {token!r} is not a number JSON allows.")


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidJSONError(f"The body is not valid JSON: the number {text[:40]!r} is out of range.")
    return value


def loads_strict(body: bytes) -> Any:
    """``json.loads`` without NaN/Infinity tokens or overflowing numbers."""
    return json.loads(body, parse_constant=_reject_constant, parse_float=_parse_float)


async def read_limited(stream: AsyncIterator[bytes], declared: str | None, limit: int) -> bytes:
    """Read a body of at most ``limit`` bytes (checking Content-Length first), else 413."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(f"The body is {declared} bytes; at most {limit} are accepted.")
    chunks, size = [], 0
    async for chunk in stream:
        size += len(chunk)
        if size > limit:
            raise PayloadTooLargeError(f"The body exceeds the limit of {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


class StrictRequest(Request):
    """A request whose body is size-limited (``max_request_bytes``) and parsed by :func:`loads_strict`."""

    async def body(self) -> bytes:
        if not hasattr(self, "_body"):
            limit = self.app.state.settings.max_request_bytes
            self._body = await read_limited(self.stream(), self.headers.get("content-length"), limit)
        return self._body

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads_strict(await self.body())
        return self._json


class KonsRoute(APIRoute):
    """An API route whose handlers see a :class:`StrictRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictRequest(request.scope, request.receive))

        return strict_handler
