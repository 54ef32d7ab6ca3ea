"""Schemathesis against the service's own OpenAPI schema, on a real ``python -m kons_service`` process.

Bounded: ``FUZZ_EXAMPLES`` examples per operation (default 15; ``python -m benchmarks.reliability``
runs more and reads the counts written to ``FUZZ_REPORT``). Every response must be a non-5xx that
matches the schema's documented body and content type. Path names are sometimes mapped to learners
that exist, so that the generated bodies reach the learners and not only the 404 path.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from testkit.processes import SPEC, ServiceProcess, services_on_redis
from testkit.scenarios import HEADERS, TENANT_KEYS

pytestmark = pytest.mark.redis

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "15"))
REPORT = os.environ.get("FUZZ_REPORT")
EXISTING = ("fz", "fz-linear")
COUNTS: Counter[str] = Counter()
_pick = random.Random(0)


@schemathesis.hook
def map_path_parameters(context: Any, path_parameters: dict[str, Any] | None) -> dict[str, Any] | None:
    if path_parameters and "name" in path_parameters and _pick.random() < 0.6:
        path_parameters["name"] = _pick.choice(EXISTING)
    return path_parameters


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    workdir = tmp_path_factory.mktemp("fuzz")
    with services_on_redis(workdir, api_keys=TENANT_KEYS, max_batch=50, max_request_bytes=65536) as (
            _, [svc]):
        specs = {"fz": SPEC, "fz-linear": {"algorithm": "ons", "dim": 3, "params": {"loss": "squared"}}}
        for name, spec in specs.items():
            httpx.put(f"{svc.url}/v1/learners/{name}", json=spec, headers=HEADERS).raise_for_status()
        yield svc
    # pytest resumes the fixture after the module's last test, whatever the outcome: count once stopped
    COUNTS["service_log_tracebacks"] = svc.log.read_text().count("Traceback")
    if REPORT:
        Path(REPORT).write_text(json.dumps({
            "requests": COUNTS["requests"], "operations": len([k for k in COUNTS if k.startswith("op ")]),
            "examples_per_operation": EXAMPLES, "server_errors": COUNTS["server_errors"],
            "schema_violations": COUNTS["schema_violations"],
            "statuses": {k[7:]: v for k, v in sorted(COUNTS.items()) if k.startswith("status ")},
            "service_log_tracebacks": COUNTS["service_log_tracebacks"]}))


@pytest.fixture(scope="module")
def api_schema(service: ServiceProcess) -> Any:
    return schemathesis.openapi.from_url(f"{service.url}/openapi.json", headers=HEADERS)  # keys are on


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.mark.slow  # ~22 s with its server; quick: test_service_bad_input, test_service_hostile, test_openapi
@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_the_api_keeps_its_schema_and_never_answers_5xx(case: Any) -> None:
    response = case.call(headers=HEADERS, timeout=30)
    COUNTS["requests"] += 1
    COUNTS[f"op {case.operation.label}"] += 1
    COUNTS[f"status {response.status_code}"] += 1
    if response.status_code >= 500:
        COUNTS["server_errors"] += 1
    try:
        case.validate_response(response, checks=[not_a_server_error, response_schema_conformance,
                                                 status_code_conformance, content_type_conformance])
    except Exception:
        COUNTS["schema_violations"] += response.status_code < 500
        raise
