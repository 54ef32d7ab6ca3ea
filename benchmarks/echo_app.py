"""The floor of the load benchmark: a bare FastAPI app whose one endpoint echoes a JSON body.

    uvicorn benchmarks.echo_app:app

It is served under the same uvicorn settings as the kons service, so the ratio of a kons endpoint's latency
to ``POST /echo`` is what the service adds on top of HTTP, JSON and the framework.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body, FastAPI

__all__ = ["app", "create_app"]


def create_app() -> FastAPI:
    """``POST /echo`` returns its JSON object body; ``GET /healthz`` answers ``{"status": "ok"}``."""
    app = FastAPI(title="echo")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/echo")
    async def echo(body: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
        return body

    return app


app = create_app()
