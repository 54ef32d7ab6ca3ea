"""Fixtures shared by the service and reliability tests: a real Redis server and in-process apps.

The process helpers themselves (Redis servers, service processes) are in
:mod:`testkit.processes`, which the benchmarks use too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator, Iterator
from contextlib import AsyncExitStack
from typing import Any

import pytest

from kons_service.settings import Settings
from testkit.processes import AppClient, AppFactory, RedisServer, serve

# The fixtures that start (or hand out) the shared Redis server; item.fixturenames is the closure of a
# test's fixtures, so a test also gets the marker through a fixture of its own built on one of these.
REDIS_FIXTURES = frozenset({"redis_server", "redis_url", "make_client", "client"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses a Redis fixture ``redis``, so that ``-m redis`` cannot miss one.

    A test that starts its own server without these fixtures carries the marker by hand;
    :func:`_start_in_a_redis_test` holds it to that."""
    for item in items:
        if REDIS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.redis)


_running: list[pytest.Item] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


_start_redis = RedisServer.start


@pytest.fixture(scope="session", autouse=True)
def _redis_only_in_redis_tests() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RedisServer, "start", _start_in_a_redis_test)
        yield


def _start_in_a_redis_test(server: RedisServer) -> RedisServer:
    """``RedisServer.start``, refused in a test without the ``redis`` marker (a fixture's server included:
    it starts in the setup of the first test that asks for it), so that ``-m "not redis"`` never needs one.
    Servers started by a service process itself (the embedded store) are beyond this check."""
    if _running and _running[-1].get_closest_marker("redis") is None:
        pytest.fail(f"{_running[-1].nodeid} starts a Redis server: mark it @pytest.mark.redis", pytrace=False)
    return _start_redis(server)


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


@pytest.fixture
async def make_client(redis_url: str) -> AsyncIterator[AppFactory]:
    """``await make_client(**settings)``: a client of a fresh app on the test's Redis (closed at the end)."""
    async with AsyncExitStack() as stack:

        async def factory(**overrides: Any) -> AppClient:
            fields = {"redis_url": redis_url, "snapshot_interval_seconds": 3600.0, **overrides}
            return await stack.enter_async_context(serve(Settings(**fields)))

        yield factory


@pytest.fixture
async def client(make_client: AppFactory) -> AppClient:
    return await make_client()
