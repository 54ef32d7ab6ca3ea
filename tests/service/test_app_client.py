"""The tests' in-process client (:class:`testkit.processes.AppClient`) bounds every request: httpx's ASGI
transport ignores timeouts, and a request its app never answered used to hang its test until
pytest-timeout's 600 s."""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
import pytest
from fastapi import FastAPI

from testkit.processes import AppClient

pytestmark = pytest.mark.anyio


async def test_a_request_the_app_never_answers_fails_within_its_timeout() -> None:
    app = FastAPI()
    released = asyncio.Event()

    @app.get("/never")
    async def never() -> None:
        while not released.is_set():  # even an app that loses its cancel, as redis-py's wait_for can
            with contextlib.suppress(asyncio.CancelledError):
                await released.wait()

    @app.get("/at-once")
    async def at_once() -> dict[str, bool]:
        return {"answered": True}

    async with AppClient(app) as client:
        try:
            started = time.monotonic()
            unanswered = r"GET http://kons\.test/never not answered in 0\.3 s"
            with pytest.raises(httpx.ReadTimeout, match=unanswered):
                await client.get("/never", timeout=0.3)
            assert time.monotonic() - started < 5
            assert (await client.get("/at-once")).json() == {"answered": True}
        finally:
            released.set()
