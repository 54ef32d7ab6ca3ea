"""The rounds' lane: a predict or feedback request goes straight to its route.

Most requests are rounds (:class:`~kons_service.http.body.RoundRoute`), and every request walks FastAPI's
inner layers before its route's handler runs: the exception middleware, an exit stack for files, and the
router, which tries the routers included in turn (each a level of scope bookkeeping). :class:`RoundLane`
sits inside the request-context middleware (ids, access line, metrics: every request still gets them) and
hands a ``POST`` whose path is a round's to that route, under the app's own exception handlers
(Starlette's :class:`~starlette.middleware.exceptions.ExceptionMiddleware`, built from the same table) and
FastAPI's exit stack, so that its answer and its errors are the ones the full walk gives
(``tests/service/test_service_hotpath.py`` compares them). Any other request, and any request under
a ``root_path`` (whose matching the router owns), takes the full walk.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fastapi.middleware.asyncexitstack import AsyncExitStackMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from kons_service.http.body import RoundRoute

__all__ = ["RoundLane"]


async def _handled(scope: Scope, receive: Receive, send: Send) -> None:
    await scope["route"].handle(scope, receive, send)


class RoundLane:
    """Round requests to their :class:`RoundRoute` among ``routes``; the rest to ``app``. ``handlers``: the
    app's exception handlers, as FastAPI gives them to its exception middleware (the catch-all ``Exception``
    left to the server-error middleware, outside)."""

    def __init__(self, app: ASGIApp, routes: Iterable[BaseRoute], handlers: Mapping[Any, Any]) -> None:
        self.app = app
        self._routes = [route for route in routes if isinstance(route, RoundRoute)]
        # (FastAPI's two layers inside the user's middleware, in its order: the exit stack is FastAPI's own
        # handler's, which answers a round that is not regular)
        self._answered = ExceptionMiddleware(AsyncExitStackMiddleware(_handled), handlers={
            key: value for key, value in handlers.items() if key not in (500, Exception)})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            for route in self._routes:
                match, child_scope = route.matches(scope)
                if match is Match.FULL:
                    scope.update(child_scope)  # (its endpoint, path parameters and route, as the router's)
                    await self._answered(scope, receive, send)
                    return
        await self.app(scope, receive, send)
