"""Request bodies: authentication first, a size limit, and strict JSON parsing out of the serving process.

Routes built with :class:`KonsRoute` check the caller's key, then its tenant's limits
(:mod:`kons_service.core.fairness`, a heavy body's wait for its turn included), before a byte of the body
is read (an unauthenticated sender costs a header check; such refusals are answered after a pause,
:class:`~kons_service.core.fairness.RefusalPause`: a 429 here, a 401 by its error handler in
:mod:`kons_service.http.errors`), and read their body through :class:`StrictRequest`, so FastAPI's own
body parsing applies the size limit and :mod:`kons_service.http.parsers`' strict JSON rules. A large body
is parsed and validated by a worker process (see there why not a thread), so that it does not stall the
other tenants' requests; with keys configured, so is a heavy one (over :data:`HEAVY_BYTES`), which also
takes turns with other tenants'.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Iterator
from typing import Any, cast

from fastapi import Request, Response
from fastapi.datastructures import Default, DefaultPlaceholder
from fastapi.dependencies.utils import get_flat_params
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.types import Receive, Scope

from kons_service.core.errors import TooManyRequestsError
from kons_service.core.streams import read_limited
from kons_service.http.deps import learner_of
from kons_service.http.errors import InvalidBodyError, carried
from kons_service.http.parsers import INLINE_BYTES, Invalid, Malformed, Parsed, loads_strict
from kons_service.http.responses import TextJSONResponse

__all__ = ["KonsRoute", "LargeBodies", "RoundRoute", "StrictRequest"]


#: Bodies over this size take turns (:class:`~kons_service.core.fairness.HeavyTurns`) with other tenants'
#: heavy requests once read, and are parsed and validated in the parser pool: about 1,000 numbers, whose
#: parsing and validation start to weigh on the event loop next to a small predict's (a 60 KiB body of
#: numbers takes about 0.4 ms of the loop inline, 0.01 ms to hand over and take back).
HEAVY_BYTES = 16 * 1024


def _announced_bytes(request: Request) -> int | None:
    """The size the request's headers announce for its body: 0 without a body (a GET has neither header),
    None when the size is unknown until read (chunked, or a malformed ``Content-Length``)."""
    length = request.headers.get("content-length", "0")
    if "chunked" in request.headers.get("transfer-encoding", "").lower() or not length.isdigit():
        return None
    return int(length)


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
                f"At most {self.limit} request(s) with a body over {INLINE_BYTES} bytes may be in flight "
                "per tenant; retry when one is answered."
            )
        self._in_flight[tenant] = count + 1
        try:
            yield
        finally:
            self._in_flight[tenant] -= 1
            if not self._in_flight[tenant]:
                del self._in_flight[tenant]


def _closing_unread(large: bool) -> contextlib.AbstractContextManager[None]:
    """An error answered before a large body is read also closes the connection: otherwise the server
    would go on receiving (and dropping) the whole body, up to ``max_request_bytes``, to keep the
    connection alive (Go's net/http closes the same way past 256 KiB)."""
    return carried({"Connection": "close"}) if large else contextlib.nullcontext()


class StrictRequest(Request):
    """A request whose body is size-limited (``max_request_bytes``) and parsed by :func:`loads_strict`,
    in the parser pool when large, or heavy and taking turns (``heavy_turn``): what comes back is then
    already validated as ``body_type``. ``on_read`` is told the size of each piece of the body as it is
    read (the tenant's byte bucket is charged what is read, not what the headers claim)."""

    def __init__(self, scope: Scope, receive: Receive, body_type: Any,
                 heavy_turn: Callable[[int], Awaitable[None]] | None = None,
                 on_read: Callable[[int], None] | None = None) -> None:
        super().__init__(scope, receive)
        self.body_type = body_type
        self._heavy_turn = heavy_turn
        self._turn_taken = False
        self._on_read = on_read

    async def stream(self) -> AsyncGenerator[bytes, None]:
        counted = self._on_read is not None and not hasattr(self, "_body")  # (else no byte is read again)
        async for chunk in super().stream():
            if counted and chunk:
                self._on_read(len(chunk))  # type: ignore[misc]
            yield chunk

    async def body(self) -> bytes:
        body = await self._read()
        if self.body_type is None:  # (a JSON body takes its turn when parsed: see _parsed)
            await self._turn(len(body))
        return body

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            with carried():  # (raised while FastAPI reads the body)
                self._json = await self._parsed()
        return self._json

    async def _read(self) -> bytes:
        if not hasattr(self, "_body"):
            limit = self.app.state.settings.max_request_bytes
            with carried():  # (raised while FastAPI reads the body)
                self._body = await read_limited(self.stream(), self.headers.get("content-length"), limit)
        return self._body

    async def _turn(self, size: int) -> None:
        """A heavy body waits for its turn (:class:`~kons_service.core.fairness.HeavyTurns`), held until the
        request is answered, once read, and parsed if the parser pool parses it: neither a slow sender nor
        the parser's queue holds a turn, which bounds the event-loop time of what follows."""
        if self._heavy_turn is not None and size > HEAVY_BYTES and not self._turn_taken:
            self._turn_taken = True
            await self._heavy_turn(size)

    async def _parsed(self) -> Any:
        body = await self._read()
        # With turns (keys configured), a heavy body is parsed out of the serving process too, so that the
        # step a light request may wait behind is shorter.
        inline = HEAVY_BYTES if self._heavy_turn is not None else INLINE_BYTES
        if len(body) <= inline:  # (not heavy, or no turns: nothing to wait for)
            return loads_strict(body)
        outcome = await self.app.state.parsers.parse(self.body_type, body)
        await self._turn(len(body))
        if isinstance(outcome, Malformed):
            outcome.raise_()
        if isinstance(outcome, Invalid):
            # Found before the dependencies' own checks (the learner's name), as a malformed body is.
            raise InvalidBodyError(outcome.errors)
        assert isinstance(outcome, Parsed)
        # FastAPI validates it again: a model instance passes as it is (its after-validators run again).
        return outcome.body


class KonsRoute(APIRoute):
    """An API route that authenticates the caller before reading the body, whose handlers see a
    :class:`StrictRequest` (the tenant is resolved again, from the same header, by the dependencies), and
    whose JSON answers are :class:`~kons_service.http.responses.TextJSONResponse`'s."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        if isinstance(kwargs.get("response_class", Default(JSONResponse)), DefaultPlaceholder):
            kwargs["response_class"] = TextJSONResponse
        super().__init__(path, endpoint, **kwargs)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = self.request_handler(super().get_route_handler())
        body_type = None if self.body_field is None else self.body_field.field_info.annotation

        async def strict_handler(request: Request, heavy_turn: Callable[[int], Awaitable[None]] | None = None,
                                 on_read: Callable[[int], None] | None = None) -> Response:
            strict = StrictRequest(request.scope, request.receive, body_type, heavy_turn, on_read)
            return await handler(strict)

        # The routes that take a key are those whose dependencies read the Authorization header (health
        # and server metadata routes do not).
        params = get_flat_params(self.dependant)
        if not any(str(field.alias).lower() == "authorization" for field in params):
            return strict_handler

        async def authenticated_handler(request: Request) -> Response:
            auth = request.app.state.auth
            announced = _announced_bytes(request)
            large = announced is None or announced > INLINE_BYTES
            async with contextlib.AsyncExitStack() as stack:
                with _closing_unread(large):
                    # (a 401 is paused when answered: kons_service.http.errors)
                    tenant = auth.tenant(request.headers.get("authorization"))
                    limiter = request.app.state.service.limiter
                    try:
                        if not auth.single_tenant:
                            # (a body of unknown size waits as the largest allowed; it is charged as read)
                            admitted = request.app.state.settings.max_request_bytes if announced is None \
                                else announced
                            stack.enter_context(limiter.admit(tenant, int(admitted)))
                        if large and not auth.single_tenant:
                            stack.enter_context(request.app.state.large_bodies.slot(tenant))
                    except TooManyRequestsError:
                        await request.app.state.refusals.pause(tenant)
                        raise
                    if not auth.single_tenant and announced is not None and announced > HEAVY_BYTES:
                        # a heavy body whose turn would come too late is refused unread and unparsed
                        request.app.state.heavy_turns.refuse_a_long_wait(tenant, announced)
                if auth.single_tenant:  # (nobody else to take turns with)
                    return await strict_handler(request)
                turns = request.app.state.heavy_turns

                async def heavy_turn(body_bytes: int) -> None:
                    await stack.enter_async_context(turns.turn(tenant, body_bytes))

                charge = functools.partial(limiter.charge_bytes, tenant)
                return await strict_handler(request, heavy_turn, charge)

        return authenticated_handler

    def request_handler(self, handler: Callable[[Request], Coroutine[Any, Any, Response]]
                        ) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The handler of an authenticated request with its :class:`StrictRequest` (FastAPI's)."""
        return handler


class RoundRoute(KonsRoute):
    """The route of a round (predict, feedback: most requests), whose endpoint takes the learner ``ref``
    (:data:`~kons_service.http.deps.LearnerDep`), its JSON ``body``, the ``request`` and ``seen``
    (:data:`~kons_service.http.deps.SeenVersion`). A regular request (a JSON body that its schema
    validates, a valid learner name and seen version) is handed to the endpoint without FastAPI's
    solving of its parameters, a generic walk that weighs on every round; any other goes through FastAPI's
    own handler (the body already read), which answers it, or its error, as on every route. What the
    route documents (OpenAPI) is FastAPI's, unchanged."""

    def request_handler(self, handler: Callable[[Request], Coroutine[Any, Any, Response]]
                        ) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        body_field, endpoint = self.body_field, self.endpoint
        assert body_field is not None and set(inspect.signature(endpoint).parameters) == _ROUND_PARAMETERS

        async def arguments(request: Request) -> dict[str, Any] | None:
            """The endpoint's arguments for a regular request, else None; errors in FastAPI's order (the
            body's JSON, the learner's name, then the parameters' values)."""
            headers = request.headers
            if headers.get("content-type") != "application/json":
                return None
            try:
                parsed = await request.json()
            except ValueError:  # not JSON, or not UTF-8 at all: FastAPI's handler answers either
                return None
            ref = learner_of(request, request.path_params["name"], headers.get("authorization"))
            seen = headers.get("kons-seen-version")
            if seen is not None and not (seen.isascii() and seen.isdigit()):
                return None
            body, errors = body_field.validate(parsed, loc=("body",))
            if errors:
                return None
            return {"ref": ref, "body": body, "request": request, "seen": None if seen is None else int(seen)}

        async def regular_first(request: Request) -> Response:
            given = await arguments(request)
            if given is None:
                return await handler(request)
            return cast(Response, await endpoint(**given))

        return regular_first


_ROUND_PARAMETERS = {"ref", "body", "request", "seen"}
