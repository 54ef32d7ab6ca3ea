"""Operations: liveness, readiness and Prometheus metrics (no authentication)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from kons_service.store import StoreUnavailableError

router = APIRouter(tags=["ops"])


async def store_reachable(request: Request) -> bool:
    """Whether the service's store (Redis) answers a ping within two seconds."""
    try:
        async with asyncio.timeout(2.0):
            await request.app.state.service.store.ping()
    except (StoreUnavailableError, OSError, TimeoutError):
        return False
    return True


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "Redis is unreachable.", "content": {
    "application/json": {"schema": {"type": "object", "properties": {"status": {"type": "string"}}}}}}})
async def readyz(request: Request) -> JSONResponse:
    if not await store_reachable(request):
        error = {"code": "store_unavailable", "message": "The learner store (Redis) is unreachable."}
        return JSONResponse({"status": "unavailable", "error": error}, status_code=503)
    return JSONResponse({"status": "ready"})


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                             "description": "Prometheus text exposition format."}})
async def metrics(request: Request) -> Response:
    metrics = request.app.state.metrics
    return Response(metrics.render(), media_type=metrics.content_type)
