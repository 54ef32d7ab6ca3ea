"""The eviction scenario with small numbers: a service refuses an ``allkeys-lru`` Redis and reports one
that becomes so; with the explicit override, a memory-capped Redis evicts learners' keys; on the
required ``noeviction`` the same load is refused with 503s and nothing acknowledged vanishes."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.scenarios import eviction_scenario

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


@pytest.mark.slow  # ~25 s; quick: test_service_eviction
async def test_an_evicting_redis_is_refused_and_noeviction_loses_nothing_when_full(tmp_path: Path) -> None:
    result = await eviction_scenario(tmp_path, learners=8, batches=8, rows=100, headroom_bytes=2**19)
    assert result["refused_to_start"] and "allkeys-lru" in result["refusal_log_line"], result
    assert result["readiness_when_policy_changes"] == {
        "status": 503, "code": "store_may_evict", "status_after_policy_restored": 200}
    assert result["override_allkeys_lru"]["evicted_keys"] > 0, result  # the cap did bite
    full = result["noeviction"]
    assert set(full["feedback_statuses"]) == {"200", "503"}, full  # memory ran out: refused, never a 500
    assert full["evicted_keys"] == 0 and full["learners_gone"] == 0, full
    assert full["acknowledged_rounds_gone"] == 0 and full["learners_above_acknowledged"] == 0, full
    assert full["service_log_tracebacks"] == 0, full
