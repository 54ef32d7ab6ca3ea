"""Request bodies: authentication first, a size limit, and strict JSON parsing off the event loop.

``json.loads`` accepts the non-standard tokens ``NaN``, ``Infinity`` and ``-Infinity`` and turns
``1e999`` into ``inf``; none of them may reach a learner. Routes built with :class:`KonsRoute` check the
caller's key before a byte of the body is read (an unauthenticated sender costs a header check), and read
their body through :class:`StrictRequest`, so FastAPI's own body parsing applies the size limit and both
rules. A large body is parsed in a worker thread by pydantic-core's parser (about 7x faster than
``json.loads`` on feature vectors), so that it does not stall the other tenants' requests.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any

import anyio.to_thread
import pydantic_core
from fastapi import Request, Response
from fastapi.dependencies.utils import get_flat_params
from fastapi.routing import APIRoute

from kons_service.errors import InvalidJSONError, PayloadTooLargeError, TooManyRequestsError

__all__ = ["KonsRoute", "LargeBodies", "StrictRequest", "loads_strict", "parse_json", "read_limited"]


def _reject_constant(token: str) -> Any:
    raise InvalidJSONError(f"The body is not valid JSON: the token {token!r} is not a number JSON allows.")


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidJSONError(f"The body is not valid JSON: the number {text[:40]!r} is out of range.")
    return value


#: Bodies larger than this are parsed in a worker thread.
_INLINE_BYTES = 64 * 1024


def loads_strict(body: bytes) -> Any:
    """``json.loads`` without NaN/Infinity tokens or overflowing numbers."""
    try:  # the fast parser, whose floats are Python's (correctly rounded); it gives inf for 1e999
        value = pydantic_core.from_json(body, allow_inf_nan=False)
    except ValueError:
        value = None
    else:
        if _finite_numbers(value):
            return value
    # A malformed body or a number out of range: the standard parser names the offending token.
    return json.loads(body, parse_constant=_reject_constant, parse_float=_parse_float)


def _finite_numbers(value: Any) -> bool:
    """Whether every float inside a parsed JSON value is finite (a list of numbers is summed in C)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite_numbers(v) for v in value.values())
    if isinstance(value, list):
        try:
            if math.isfinite(sum(value)):
                return True
        except (TypeError, OverflowError):  # not all numbers, or an int beyond float range
            pass
        return all(_finite_numbers(v) for v in value)
    return True


async def parse_json(body: bytes) -> Any:
    """:func:`loads_strict`, in a worker thread for a large body."""
    if len(body) <= _INLINE_BYTES:
        return loads_strict(body)
    return await anyio.to_thread.run_sync(loads_strict, body)


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


def _large_body(request: Request) -> bool:
    """Whether the request announces a body over :data:`_INLINE_BYTES`, or one of unknown size (chunked);
    a request without a body (a GET) has neither header."""
    length = request.headers.get("content-length")
    if "chunked" in request.headers.get("transfer-encoding", "").lower():
        return True
    return length is not None and (not length.isdigit() or int(length) > _INLINE_BYTES)


class LargeBodies:
    """How many requests with a large (or unsized) body each tenant has in flight, at most ``limit``:
    one tenant cannot occupy the parser with many big bodies at once (the next one is a 429). Applied
    when keys are configured (with a single tenant there is nobody else to protect)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._in_flight: dict[str, int] = {}

    @contextlib.contextmanager
    def slot(self, tenant: str) -> Iterator[None]:
        count = self._in_flight.get(tenant, 0)
        if count >= self.limit:
            raise TooManyRequestsError(
                f"At most {self.limit} request(s) with a body over {_INLINE_BYTES} bytes may be in flight "
                "per tenant; retry when one is answered."
            )
        self._in_flight[tenant] = count + 1
        try:
            yield
        finally:
            self._in_flight[tenant] -= 1
            if not self._in_flight[tenant]:
                del self._in_flight[tenant]


class StrictRequest(Request):
    """A request whose body is size-limited (``max_request_bytes``) and parsed by :func:`loads_strict`."""

    async def body(self) -> bytes:
        if not hasattr(self, "_body"):
            limit = self.app.state.settings.max_request_bytes
            self._body = await read_limited(self.stream(), self.headers.get("content-length"), limit)
        return self._body

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = await parse_json(await self.body())
        return self._json


class KonsRoute(APIRoute):
    """An API route that authenticates the caller before reading the body, and whose handlers see a
    :class:`StrictRequest` (the tenant is resolved again, from the same header, by the dependencies)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictRequest(request.scope, request.receive))

        # The routes that take a key are those whose dependencies read the Authorization header (health
        # and server metadata routes do not).
        params = get_flat_params(self.dependant)
        if not any(str(field.alias).lower() == "authorization" for field in params):
            return strict_handler

        async def authenticated_handler(request: Request) -> Response:
            auth = request.app.state.auth
            tenant = auth.tenant(request.headers.get("authorization"))
            if auth.single_tenant or not _large_body(request):
                return await strict_handler(request)
            with request.app.state.large_bodies.slot(tenant):
                return await strict_handler(request)

        return authenticated_handler
