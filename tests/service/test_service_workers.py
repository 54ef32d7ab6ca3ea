"""Metrics with several uvicorn workers and several replicas: a scrape may reach any worker, and each
replica is a Prometheus target of its own; counters must still never go down, and add up. Their logs, in
JSON, stay one object per line in every worker."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from testkit.processes import SPEC, services_on_redis
from testkit.scrape import samples, value

pytestmark = pytest.mark.redis

URL = "/v1/learners/m"
ME = {"tenant": "default", "learner": "m"}


def test_counters_never_decrease_with_two_workers_and_two_replicas(tmp_path: Path) -> None:
    json_logs = {"log_format": "json", "log_level": "info"}
    with services_on_redis(tmp_path, replicas=2, workers=2, **json_logs) as (_, services):
        assert httpx.put(f"{services[0].url}{URL}", json=SPEC, timeout=30).status_code == 201
        scrapes: list[list[tuple[float, float]]] = [[] for _ in services]
        acknowledged = 0
        for step in range(20):
            for service in services:  # a new connection per request: the kernel picks the worker
                fed = httpx.post(f"{service.url}{URL}/feedback", json={"x": [step, 1.0, 2.0], "y": 1.0},
                                 timeout=30)
                assert fed.status_code == 200, fed.text
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


