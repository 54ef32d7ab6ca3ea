"""Operations: liveness, readiness (no authentication) and Prometheus metrics (whole only to a caller who
may see tenants' names: see :meth:`kons_service.http.auth.Authenticator.metrics_tenants`)."""

from __future__ import annotations

import asyncio
from importlib import resources

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse

from kons_service.http.schemas import error_responses
from kons_service.store import StoreUnavailableError

router = APIRouter(tags=["ops"])


async def store_reachable(request: Request) -> bool:
    """Whether the service's store (Redis) answers a ping within two seconds."""
    try:
        async with asyncio.timeout(2.0):
            await request.app.state.service.store.server.ping()
    except (StoreUnavailableError, OSError, TimeoutError):
        return False
    return True


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {
    "description": "Redis is unreachable, may evict keys or refuses writes.", "content": {
        "application/json": {"schema": {"type": "object", "properties": {"status": {"type": "string"}}}}}}})
async def readyz(request: Request) -> JSONResponse:
    problem = refusal = None
    reachable = await store_reachable(request)
    if reachable:
        try:
            async with asyncio.timeout(2.0):
                problem = await request.app.state.service.store_problem()
                refusal = await request.app.state.service.store.server.write_refusal()
        except (StoreUnavailableError, OSError, TimeoutError):
            reachable = False
    if not reachable:
        error = {"code": "store_unavailable", "message": "The learner store (Redis) is unreachable."}
        return JSONResponse({"status": "unavailable", "error": error}, status_code=503)
    for code, message in (("store_may_evict", problem), ("store_full", refusal)):
        if message is not None:
            error = {"code": code, "message": message}
            return JSONResponse({"status": "unavailable", "error": error}, status_code=503)
    try:
        async with asyncio.timeout(2.0):
            durability, _ = await request.app.state.service.durability()
    except (StoreUnavailableError, OSError, TimeoutError):
        durability = None  # a probe answers on reachability and eviction; this part is informative
    rollbacks = request.app.state.service.cache.rollbacks.summary()  # seen by this process since it started
    return JSONResponse({"status": "ready", "durability": durability, "rollbacks": rollbacks})


@router.get("/dashboard", response_class=HTMLResponse)
async def dashboard() -> HTMLResponse:
    """The learners' live learning curves: a static page whose data comes from the API with the caller's
    key (kept in the browser tab's sessionStorage), so it needs no authentication of its own."""
    page = (resources.files("kons_service") / "static" / "dashboard.html").read_text()
    return HTMLResponse(page, headers={"Cache-Control": "no-cache", "X-Frame-Options": "DENY"})


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                             "description": "Prometheus text exposition format."},
                       **error_responses(401)})
async def metrics(request: Request) -> Response:
    metrics = request.app.state.metrics
    tenants = request.app.state.auth.metrics_tenants(request.headers.get("authorization"))
    return Response(metrics.render(tenants), media_type=metrics.content_type)
