"""Several uvicorn workers and several replicas. Metrics: a scrape may reach any worker, and each replica is
a Prometheus target of its own; counters must still never go down, and add up. Their logs, in JSON, stay
one object per line in every worker; in text, a client's control characters cannot start a line. The
embedded Redis: one server for all workers of `kons serve`, and plain `uvicorn --workers N` without a
Redis URL refused at once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from testkit.processes import REPO, SPEC, free_port, service_env, services_on_redis, start_service, terminate
from testkit.scrape import samples, value

URL = "/v1/learners/m"
ME = {"tenant": "default", "learner": "m"}


@pytest.mark.redis
@pytest.mark.slow  # ~11 s (23 s under load), four service processes; quick: test_service_observe's counters
def test_counters_never_decrease_with_two_workers_and_two_replicas(tmp_path: Path) -> None:
    with services_on_redis(tmp_path, replicas=2, workers=2, log_format="json", log_level="info") as (
            _, services):
        assert httpx.put(f"{services[0].url}{URL}", json=SPEC, timeout=30).status_code == 201
        scrapes: list[list[tuple[float, float]]] = [[] for _ in services]
        acknowledged = 0
        for step in range(20):
            for service in services:  # a new connection per request: the kernel picks the worker
                sent = httpx.post(f"{service.url}{URL}/feedback", json={"x": [step, 1.0, 2.0], "y": 1.0},
                                  timeout=30)
                assert sent.status_code == 200, sent.text
                acknowledged += 1
            for service, seen in zip(services, scrapes, strict=True):
                text = httpx.get(f"{service.url}/metrics", timeout=30).text
                seen.append((value(text, "kons_learner_rounds_total", **ME) or 0.0,
                             value(text, "kons_http_requests_total") or 0.0))
        for seen in scrapes:
            for counter in zip(*seen, strict=True):
                assert list(counter) == sorted(counter), seen  # never a reset
        # each replica counts its own rounds, over both its workers: together, every acknowledged round
        assert sum(seen[-1][0] for seen in scrapes) == acknowledged
        text = httpx.get(f"{services[1].url}/metrics", timeout=30).text
        assert value(text, "kons_learner_version", **ME) == acknowledged  # gauges: the newest value
        pids = {labels["pid"] for labels, _ in samples(text, "kons_worker_resident_memory_bytes")}
        assert len(pids) == 2  # one series per live worker
    for service in services:
        lines = [json.loads(line) for line in service.log.read_text().splitlines()]  # all JSON
        access = [line for line in lines if line["logger"] == "kons_service.access"]
        assert all(line["request_id"] and line["duration_ms"] > 0 for line in access)
        fed = [line for line in access if line["route"] == "/v1/learners/{name}/feedback"]
        assert len(fed) == 20 and {line["status"] for line in fed} == {200}




@pytest.mark.redis
def test_a_client_cannot_forge_a_text_log_line(tmp_path: Path) -> None:
    """The access line writes the decoded path: %0A, %0D, an escape sequence or a C1 / Unicode line break
    in it used to end the line and start the client's own."""
    forged = "2030-01-01 00:00:00,000 INFO kons_service.access [x]: GET /admin 200"
    with services_on_redis(tmp_path, log_level="info") as (_, (service,)):
        for brk in ("%0A", "%0D%0A", "%0D", "%1B[2K%0D", "%C2%85", "%E2%80%A8"):
            missing = httpx.get(f"{service.url}/v1/learners/x{brk}{forged.replace(' ', '%20')}", timeout=30)
            assert missing.status_code in (404, 422), missing.text
    lines = service.log.read_text().splitlines()
    assert not [line for line in lines if line.startswith("2030")], lines
    access = [line for line in lines if " kons_service.access " in line and "/v1/learners/x" in line]
    assert len(access) == 6, lines
    assert "/v1/learners/x\\n2030" in access[0] and "x\\x1b[2K\\r2030" in access[3], access
    assert "x\\x852030" in access[4] and "x\\u20282030" in access[5], access


def test_plain_uvicorn_workers_without_a_redis_url_are_refused_at_once(tmp_path: Path) -> None:
    """Each of `uvicorn --workers 2`'s workers would start an embedded Redis on the same data: the second
    used to wait 30 s for the first one's lock and then take the whole server down. Now it refuses at
    once, naming what to run instead."""
    port = free_port()
    env = service_env(KONS_DATA_DIR=str(tmp_path / "data"))
    argv = [sys.executable, "-m", "uvicorn", "kons_service.main:app", "--workers", "2", "--port", str(port)]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120)
    assert time.monotonic() - started < 25  # the lock wait alone was 30 s
    assert "several workers cannot share it" in done.stderr and "kons serve --workers N" in done.stderr
    assert "Application startup failed" in done.stderr


def _children(pid: int) -> list[str]:
    """``pid command line`` of each child process of ``pid``."""
    listed = subprocess.run(["pgrep", "-a", "-P", str(pid)], capture_output=True, text=True)
    return listed.stdout.splitlines()


@pytest.mark.redis
@pytest.mark.slow
def test_kons_serve_with_two_workers_shares_one_embedded_redis_for_a_minute(tmp_path: Path) -> None:
    """`kons serve --workers 2` without a Redis URL: one embedded server, started by the parent, serves
    both workers for over a minute of traffic; every round a worker acknowledges, the other one sees."""
    port = free_port()
    log = tmp_path / "serve.log"
    env = service_env(KONS_DATA_DIR=str(tmp_path / "data"), KONS_LOG_LEVEL="warning")
    argv = [str(Path(sys.executable).with_name("kons")), "serve", "--workers", "2", "--port", str(port)]
    proc = start_service(port, env, log, argv=argv)
    url = f"http://127.0.0.1:{port}"
    try:
        assert httpx.put(f"{url}{URL}", json=SPEC, timeout=30).status_code == 201
        fed, started = 0, time.monotonic()
        while time.monotonic() - started < 65:
            answer = httpx.post(f"{url}{URL}/feedback", json={"x": [fed % 5, 1.0, 2.0], "y": 1.0}, timeout=30)
            assert answer.status_code == 200, answer.text
            fed += 1
            seen = httpx.get(f"{url}{URL}", timeout=30).json()["version"]  # a new connection: any worker
            assert seen == fed
            time.sleep(0.05)
        text = httpx.get(f"{url}/metrics", timeout=30).text
        assert len({labels["pid"] for labels, _ in samples(text, "kons_worker_resident_memory_bytes")}) == 2
        assert value(text, "kons_learner_rounds_total", **ME) == fed  # one multiprocess metrics directory
        children = _children(proc.pid)
        assert sum("redis-server" in line for line in children) == 1  # started by the parent, once
        workers = [int(line.split()[0]) for line in children if "spawn_main" in line]
        assert len(workers) == 2 and not any(_children(pid) for pid in workers)  # no Redis of their own
        assert proc.poll() is None
    finally:
        terminate(proc, 60)
    assert proc.returncode == 0 and "Traceback" not in log.read_text()
