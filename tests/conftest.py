"""Fixtures shared by the service and reliability tests: a real Redis server and in-process apps.

The process helpers themselves (Redis servers, service processes) are in
:mod:`testkit.processes`, which the benchmarks use too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest

from kons_service.settings import Settings
from testkit.processes import RedisServer, serve


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The shared server, emptied for this test."""
    redis_server.client().flushall()
    return redis_server.url


AppFactory = Callable[..., Any]


@pytest.fixture
async def make_client(redis_url: str) -> AsyncIterator[AppFactory]:
    """``await make_client(**settings)``: a client of a fresh app on the test's Redis (closed at the end)."""
    async with AsyncExitStack() as stack:

        async def factory(**overrides: Any) -> httpx.AsyncClient:
            fields = {"redis_url": redis_url, "snapshot_interval_seconds": 3600.0, **overrides}
            return await stack.enter_async_context(serve(Settings(**fields)))

        yield factory


@pytest.fixture
async def client(make_client: AppFactory) -> httpx.AsyncClient:
    return await make_client()
