"""The app factory: ``create_app(settings)`` wires the HTTP edge (routers, error mapping, middleware) to
the service core and its store; nothing connects until the app's lifespan starts.

:mod:`kons_service.main` holds the app uvicorn serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from threadpoolctl import threadpool_limits

import kons
from kons_service.core.fairness import HeavyTurns, RefusalPause
from kons_service.core.metrics import Metrics
from kons_service.core.service import LearnerService
from kons_service.http.auth import Authenticator
from kons_service.http.body import LargeBodies
from kons_service.http.errors import install_error_handlers
from kons_service.http.heap import HeapTrimmer
from kons_service.http.lane import RoundLane
from kons_service.http.logs import RequestContextMiddleware, stamp_records
from kons_service.http.openapi import install_openapi, operation_id
from kons_service.http.parsers import INLINE_BYTES, ParserPool
from kons_service.http.routers import learners, ops, rounds, v2
from kons_service.settings import Settings
from kons_service.shutdown import STORE_CLOSE_SECONDS, within
from kons_service.store import Store, StoreUnavailableError
from kons_service.store.embedded import EmbeddedRedis

__all__ = ["create_app"]

log = logging.getLogger("kons_service")


async def _check_the_store(service: LearnerService) -> None:
    """Stop the start-up if Redis may evict keys, and say what an acknowledged feedback survives (an
    unreachable Redis is left to /readyz)."""
    try:
        problem = await service.store_problem()
        report, survives = await service.durability()
    except StoreUnavailableError:
        return
    if problem is not None:
        log.error("refusing to start: %s", problem)
        raise RuntimeError(f"refusing to start: {problem}")
    weak = report["appendonly"] is False or report["appendfsync"] == "no"
    log.log(logging.WARNING if weak else logging.INFO, "%s", survives)


def _freeze_the_start_up_heap() -> None:
    """Leave the objects of the start-up (the modules of FastAPI, pydantic, NumPy, SciPy and kons: most
    of the heap) out of every later garbage collection, once per process. Otherwise each full collection
    walks them all: 65-115 ms measured on this 2-core machine, every several seconds under load, during
    which the event loop answers no tenant (issue 21's fairness audit). Collected first, so that no
    garbage is kept for ever (a process running many apps, as the tests do, freezes only at the first)."""
    if not gc.get_freeze_count():
        gc.collect()
        gc.freeze()


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service; nothing connects until the app's lifespan starts."""
    settings = settings or Settings()
    stamp_records()
    auth = Authenticator(settings)  # fails fast on a malformed key list
    metrics = Metrics(per_learner=settings.metrics_per_learner)
    parsers = ParserPool(settings.parse_workers)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        auth.log_mode()
        # Applied here, not through environment variables, so that plain
        # `uvicorn kons_service.main:app` gets it too.
        blas = threadpool_limits(limits=settings.blas_threads, user_api="blas")
        embedded = None
        url = settings.redis_url
        if url is None:
            embedded = EmbeddedRedis(settings.data_dir)
            try:
                url = embedded.start()
            except RuntimeError as exc:  # e.g. one of several `uvicorn --workers N` (see embedded.py)
                log.error("%s", exc)
                raise
        store = Store.connect(url, settings.redis_timeout_seconds, named=settings.lease_takeover,
                              cluster=settings.redis_cluster, wait_replicas=settings.redis_wait_replicas,
                              wait_timeout_ms=settings.redis_wait_timeout_ms, held=settings.cache_size)
        service = LearnerService(store, settings, metrics)
        started = False
        trimming = asyncio.create_task(HeapTrimmer(settings.heap_trim_seconds, settings.heap_arenas).run())
        try:
            await _check_the_store(service)
            app.state.service = service
            app.state.heavy_turns.contended = service.limiter.contended
            service.start()
            started = True
            _freeze_the_start_up_heap()
            yield
        finally:
            trimming.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await trimming
            try:
                if started:
                    await service.close()
            finally:
                # (its connections' closes wait for Redis's acknowledgement, each for at most a socket
                # timeout: a Redis paused or gone must not keep the process alive)
                await within(store.close(), STORE_CLOSE_SECONDS, "the close of the Redis connections")
                parsers.close()
                metrics.worker_exits()
                if embedded is not None:
                    embedded.stop()
                blas.restore_original_limits()

    app = FastAPI(
        title="kons service",
        version=kons.__version__,
        summary="Online kernel learners for many tenants, durable in Redis.",
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
        openapi_url=None,  # install_openapi serves these three behind the API key
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.auth = auth
    app.state.large_bodies = LargeBodies(settings.tenant_large_bodies)
    app.state.heavy_turns = HeavyTurns(settings.heavy_turns, settings.heavy_bytes_rate, INLINE_BYTES,
                                       settings.heavy_turn_max_wait_seconds, metrics.heavy_turn_waits.observe,
                                       metrics.heavy_turns_refused.inc)
    app.state.refusals = RefusalPause(settings.refusal_pause_ms / 1000, settings.tenant_large_bodies + 1)
    app.state.parsers = parsers
    app.state.metrics = metrics
    install_error_handlers(app, app.state.refusals)
    # The rounds first: each request's route is found by trying the routes in order (a regular expression
    # each), and predictions and feedback are most of them.
    app.include_router(rounds.router)
    app.include_router(learners.router)
    app.include_router(ops.router)
    app.include_router(v2.router)
    install_openapi(app)
    # (added first, so that it runs inside the request context: every request keeps its id and access line)
    app.add_middleware(RoundLane, routes=rounds.router.routes, handlers=app.exception_handlers)
    app.add_middleware(RequestContextMiddleware, metrics=metrics)
    return app

