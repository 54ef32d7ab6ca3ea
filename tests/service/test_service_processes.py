"""Real service processes: SIGKILL mid-stream, several replicas on one Redis, the embedded Redis."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPConnection, RemoteDisconnected
from pathlib import Path

import httpx
import numpy as np
import pytest
import redis

import kons
from testkit.processes import REPO, SPEC, AppFactory, RedisServer, free_port, service_env, start_service

URL = "/v1/learners/m"


def _local() -> kons.Learner:
    return kons.learner_from_params(SPEC["algorithm"], {**SPEC["params"], "dim": SPEC["dim"]})


def _stream(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(n, 3))
    return X, np.sin(X[:, 0])


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        proc.wait(60)


def test_sigkill_mid_stream_loses_no_acknowledged_feedback(redis_url: str, tmp_path: Path) -> None:
    port = free_port()
    env = service_env(KONS_REDIS_URL=redis_url, KONS_PORT=str(port), KONS_SNAPSHOT_EVERY_ROUNDS="25",
                      KONS_SNAPSHOT_INTERVAL_SECONDS="0.2")
    log = tmp_path / "service.log"
    base = f"http://127.0.0.1:{port}"
    X, Y = _stream(400)
    acked: dict[int, tuple[int, float]] = {}
    enough = threading.Event()

    def sender() -> None:
        with httpx.Client(base_url=base, timeout=10) as http:
            for i in range(len(X)):
                try:
                    r = http.post(f"{URL}/feedback", json={"x": X[i].tolist(), "y": float(Y[i])})
                except httpx.HTTPError:
                    return  # the process is gone: the in-flight round may or may not be logged
                assert r.status_code == 200, r.text
                acked[i] = (r.json()["version"], r.json()["prediction"])
                if len(acked) == 80:
                    enough.set()

    uvicorn = [sys.executable, "-m", "uvicorn", "kons_service.main:app",
               "--host", "127.0.0.1", "--port", str(port)]
    proc = start_service(port, env, log, argv=uvicorn)
    try:
        assert httpx.put(base + URL, json=SPEC).status_code == 201
        thread = threading.Thread(target=sender)
        thread.start()
        assert enough.wait(60)
        proc.send_signal(signal.SIGKILL)  # mid-stream: the sender keeps sending
        proc.wait(10)
        thread.join(30)
        count = len(acked)
        assert 80 <= count < len(X)
        assert [acked[i][0] for i in range(count)] == list(range(1, count + 1))

        proc = start_service(port, env, log, argv=uvicorn)
        version = httpx.get(base + URL).json()["version"]
        assert version in (count, count + 1)  # all acknowledged rounds, and maybe the one in flight
        local = _local()
        played = local.learn_many(X[:version], Y[:version])
        assert [acked[i][1] for i in range(count)] == played[:count].tolist()
        probe = [0.3, -0.4, 0.5]
        assert httpx.post(f"{base}{URL}/predict", json={"x": probe}).json() == {
            "prediction": local.predict_one(probe), "version": version}
        after = httpx.post(f"{base}{URL}/feedback", json={"x": probe, "y": 0.1}).json()
        assert after["version"] == version + 1 and after["prediction"] == local.learn_one(probe, 0.1)
    finally:
        _stop(proc)


def test_replica_processes_on_one_redis_agree(redis_url: str, tmp_path: Path) -> None:
    ports = [free_port(), free_port()]
    def start(port: int) -> subprocess.Popen[bytes]:
        return start_service(port, service_env(KONS_REDIS_URL=redis_url, KONS_PORT=str(port)),
                             tmp_path / f"{port}.log")

    with ThreadPoolExecutor(2) as pool:  # start both at once
        procs = list(pool.map(start, ports))
    try:
        bases = [f"http://127.0.0.1:{p}" for p in ports]
        assert httpx.put(bases[0] + URL, json=SPEC).status_code == 201
        X, Y = _stream(80)

        def send(http: httpx.Client, i: int) -> tuple[int, float, int]:
            body = {"x": X[i].tolist(), "y": float(Y[i])}
            r = http.post(f"{bases[i % 2]}{URL}/feedback", json=body)
            assert r.status_code == 200, r.text
            return r.json()["version"], r.json()["prediction"], i

        with httpx.Client(timeout=30) as http, ThreadPoolExecutor(6) as pool:
            acks = sorted(pool.map(lambda i: send(http, i), range(len(X))))
        assert [v for v, _, _ in acks] == list(range(1, len(X) + 1))
        local = _local()
        assert [p for _, p, _ in acks] == [local.learn_one(X[i], Y[i]) for _, _, i in acks]
        probes = np.random.default_rng(8).normal(size=(3, 3)).tolist()
        expected = {"predictions": [local.predict_one(p) for p in probes], "version": len(X)}
        for base in bases:
            assert httpx.post(f"{base}{URL}/predict", json={"xs": probes}).json() == expected
    finally:
        for proc in procs:
            _stop(proc)


def _docker_cmd() -> list[str]:
    last = (REPO / "Dockerfile").read_text().strip().splitlines()[-1]
    assert last.startswith("CMD ")
    argv = json.loads(last.removeprefix("CMD "))
    return [sys.executable if argv[0] == "python" else argv[0], *argv[1:]]


@pytest.mark.redis
def test_image_command_with_embedded_redis_persists_across_restarts_and_kills(tmp_path: Path) -> None:
    """The Dockerfile's CMD, run here with no KONS_REDIS_URL: the embedded Redis keeps every round."""
    port = free_port()
    data = tmp_path / "data"
    env = service_env(KONS_PORT=str(port), KONS_DATA_DIR=str(data), KONS_API_KEYS="acme:secret",
                      KONS_HOST="127.0.0.1")
    auth = {"Authorization": "Bearer secret"}
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "service.log"
    local = _local()
    X, Y = _stream(12)
    proc = start_service(port, env, log, argv=_docker_cmd())
    try:
        assert httpx.get(base + "/readyz").status_code == 200
        assert httpx.put(base + URL, json=SPEC, headers=auth).status_code == 201
        for x, y in zip(X[:6], Y[:6], strict=True):
            httpx.post(f"{base}{URL}/feedback", json={"x": x.tolist(), "y": float(y)}, headers=auth)
            local.learn_one(x, y)
        _stop(proc)  # graceful: snapshots, then stops its Redis
        assert (data / "appendonlydir").is_dir() or (data / "appendonly.aof").is_file()
        assert "single-tenant" not in log.read_text()

        proc = start_service(port, env, log, argv=_docker_cmd())
        embedded = redis.Redis(unix_socket_path=str(data / "redis.sock"))
        assert embedded.hget("kons:{acme/m}:meta", "snap_version") == b"6"  # written on shutdown
        embedded.close()
        for x, y in zip(X[6:], Y[6:], strict=True):
            body = {"x": x.tolist(), "y": float(y)}
            fed = httpx.post(f"{base}{URL}/feedback", json=body, headers=auth).json()
            assert fed["prediction"] == local.learn_one(x, y)
        _stop(proc, signal.SIGKILL)  # its Redis is told to stop with it and flushes the log

        proc = start_service(port, env, log, argv=_docker_cmd())
        probe = [0.1, 0.2, 0.3]
        answer = httpx.post(f"{base}{URL}/predict", json={"x": probe}, headers=auth).json()
        assert answer == {"prediction": local.predict_one(probe), "version": 12}
    finally:
        _stop(proc)
    assert not (data / "redis.sock").exists()


@pytest.mark.anyio
async def test_redis_outage_is_a_503_and_the_service_recovers(
    make_client: AppFactory, tmp_path: Path
) -> None:
    server = RedisServer(tmp_path / "redis").start()
    try:
        client = await make_client(redis_url=server.url, redis_timeout_seconds=0.5)
        assert (await client.put(URL, json=SPEC)).status_code == 201
        assert (await client.post(f"{URL}/feedback", json={"x": [1, 2, 3], "y": 1.0})).status_code == 200
        server.stop()
        for method, suffix, body in [("POST", "/feedback", {"x": [1, 2, 3], "y": 1.0}),
                                     ("POST", "/predict", {"x": [1, 2, 3]}), ("GET", "", None),
                                     ("PUT", "", SPEC)]:
            response = await client.request(method, URL + suffix, json=body)
            assert response.status_code == 503, (suffix, response.text)
            assert response.json()["error"]["code"] == "store_unavailable"
        assert (await client.get("/readyz")).status_code == 503
        assert (await client.get("/healthz")).status_code == 200
        server.start()  # same port, same append-only file
        assert (await client.get("/readyz")).status_code == 200
        fed = await client.post(f"{URL}/feedback", json={"x": [1, 2, 3], "y": 1.0})
        assert fed.status_code == 200 and fed.json()["version"] == 2
    finally:
        server.stop()


def test_python_m_app_refuses_a_malformed_key_list(tmp_path: Path) -> None:
    env = service_env(KONS_API_KEYS="no-colon-here", KONS_REDIS_URL="redis://127.0.0.1:1")
    done = subprocess.run([sys.executable, "-m", "kons_service"], cwd=REPO, env=env, capture_output=True,
                          timeout=60)
    assert done.returncode != 0
    assert b"tenant:key" in done.stderr and b"no-colon-here" not in done.stderr


def _descendants(pid: int) -> dict[int, str]:
    """``pid -> command line`` of every live descendant of ``pid``."""
    found: dict[int, str] = {}
    listed = subprocess.run(["pgrep", "-a", "-P", str(pid)], capture_output=True, text=True)
    for line in listed.stdout.splitlines():
        child, _, command = line.partition(" ")
        found[int(child)] = command
        found.update(_descendants(int(child)))
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_sigkilled_service_leaves_no_child_behind(redis_url: str, tmp_path: Path) -> None:
    """The parser process (started by the first body over 64 KiB) and multiprocessing's resource
    tracker used to outlive a SIGKILLed service for ever (about 100 MB per crash under a supervisor that
    restarts only the main process)."""
    port = free_port()
    proc = start_service(port, service_env(KONS_REDIS_URL=redis_url, KONS_PORT=str(port)),
                         tmp_path / "service.log")
    try:
        base = f"http://127.0.0.1:{port}"
        assert httpx.put(f"{base}{URL}", json=SPEC, timeout=30).status_code == 201
        items = [{"x": [i / 7, i / 11, i / 13], "y": 0.5} for i in range(1000)]
        body = json.dumps({"items": items}).encode()
        assert len(body) > 64 * 1024  # parsed by the parser process
        fed = httpx.post(f"{base}{URL}/feedback", content=body, timeout=60,
                         headers={"content-type": "application/json"})
        assert fed.status_code == 200, fed.text
        children = _descendants(proc.pid)
        assert any("spawn_main" in command for command in children.values()), children
        assert any("resource_tracker" in command for command in children.values()), children
    finally:
        proc.kill()
        proc.wait(30)
    _assert_they_exit(children)


def _assert_they_exit(children: dict[int, str]) -> None:
    """The processes ``children`` (pid: command line) all exit within 5 s; any left are killed, so that a
    failure does not leave them running either."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(pid) for pid in children):
        time.sleep(0.1)
    left = {pid: command for pid, command in children.items() if _alive(pid)}
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, left


def test_a_sigkilled_service_leaves_no_embedded_redis_behind(tmp_path: Path) -> None:
    """Without KONS_REDIS_URL the service runs its own redis-server; a SIGKILLed service (no shutdown
    code runs) must not leave it serving, and holding its data directory's lock, for ever."""
    port = free_port()
    env = service_env(KONS_PORT=str(port), KONS_DATA_DIR=str(tmp_path / "data"))
    env.pop("KONS_REDIS_URL", None)
    proc = start_service(port, env, tmp_path / "service.log")
    try:
        assert httpx.put(f"http://127.0.0.1:{port}{URL}", json=SPEC, timeout=30).status_code == 201
        children = _descendants(proc.pid)
        assert any("redis-server" in command for command in children.values()), children
    finally:
        proc.kill()
        proc.wait(30)
    _assert_they_exit(children)


def _answered_after_idling(port: int, idle_seconds: float) -> bool:
    """Ask /healthz on a keep-alive connection, stay idle, then ask again on the same connection: whether
    the service answered (False if it closed the connection meanwhile)."""
    http = HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        http.request("GET", "/healthz")
        assert http.getresponse().read() == b'{"status":"ok"}'
        time.sleep(idle_seconds)
        http.request("GET", "/healthz")  # (http.client opens no new connection while it holds one)
        return http.getresponse().status == 200
    except (RemoteDisconnected, ConnectionResetError, BrokenPipeError):
        return False
    finally:
        http.close()


def test_an_idle_keep_alive_connection_outlives_uvicorns_five_seconds(redis_url: str, tmp_path: Path) -> None:
    """A pooled client (or a load balancer) reuses a connection after a pause longer than uvicorn's default
    5 s keep-alive: it is still open (KONS_KEEP_ALIVE_SECONDS, 75 s); closed after the setting's time."""
    port = free_port()
    proc = start_service(port, service_env(KONS_REDIS_URL=redis_url, KONS_PORT=str(port)), tmp_path / "a.log")
    try:
        assert _answered_after_idling(port, 6.5)
    finally:
        _stop(proc)
    port = free_port()
    proc = start_service(port, service_env(KONS_REDIS_URL=redis_url, KONS_PORT=str(port),
                                           KONS_KEEP_ALIVE_SECONDS="1"), tmp_path / "b.log")
    try:
        assert not _answered_after_idling(port, 3.0)
    finally:
        _stop(proc)
