"""Smoke test of the service floors' report and of its bare ASGI echo (no server started)."""

from __future__ import annotations

import asyncio

import httpx

from benchmarks.service_floors import markdown, raw_echo


def test_the_bare_asgi_echo_answers_a_body_with_itself_and_none_with_ok() -> None:
    async def requests() -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=raw_echo)
        async with httpx.AsyncClient(transport=transport, base_url="http://floors") as client:
            return await client.post("/echo", json={"x": [1.0, 2.5]}), await client.get("/healthz")

    echoed, bare = asyncio.run(requests())
    assert (echoed.status_code, echoed.json()) == (200, {"x": [1.0, 2.5]})
    assert (bare.status_code, bare.json()) == (200, {"status": "ok"})


def test_the_report_sets_the_service_rounds_against_the_in_process_ones() -> None:
    record = {"rows": 3, "repeats": 1, "gaps": [0.0, 0.01], "idle_ms_per_s": 2.0, "load": [1.0, 2.0],
              "cpu_ms": {"raw ASGI, bare GET": [0.2, 0.3], "service predict": [0.9, 1.2],
                         "service feedback": [3.0, 3.5]},
              "in_process": {"predict_ms": 0.3, "round_ms": 1.0}}
    report = markdown(record, "python -m benchmarks.service_floors")
    assert "| service predict | 0.900 | 1.200 | 3.00x / 4.00x |" in report
    assert "| service feedback | 3.000 | 3.500 | 3.00x / 3.50x |" in report
    assert "| raw ASGI, bare GET | 0.200 | 0.300 | - |" in report
    assert report.count("\n| ") == 1 + 3 + 2  # the header, a row per target, the in-process pair
