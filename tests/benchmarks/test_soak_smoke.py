"""Smoke test of the soak: two replicas on one Redis, a few learners, a few seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks.stamps import assert_stamped


@pytest.mark.redis
@pytest.mark.timeout(120)
def test_the_soak_samples_both_replicas_and_redis_and_reports_the_curves(tmp_path: Path) -> None:
    from benchmarks.soak import main

    assert main(["--seconds", "6", "--sample-seconds", "2", "--learners", "6", "--clients", "2",
                 "--workdir", str(tmp_path / "work"), "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "soak.json").read_text())
    samples = record["samples"]
    assert len(samples) >= 3 and samples[0]["requests"] == 0 < samples[-1]["requests"]
    for sample in samples:
        assert len(sample["rss_mib"]) == len(sample["held_mib"]) == 2
        assert all(rss > 20 for rss in sample["rss_mib"]) and sample["redis_used_mb"] > 0
    assert samples[-1]["redis_parts_mb"]["log"] > 0 and max(samples[-1]["held_mib"]) > 0
    statuses = record["statuses"]
    assert statuses.get("200", 0) >= 0.9 * sum(statuses.values()), statuses
    report = (tmp_path / "soak.md").read_text()
    assert "| RSS replica 1 (MiB) |" in report and "python -m benchmarks.soak --seconds 6" in report
    assert_stamped(tmp_path / "soak.md", tmp_path / "soak.json", "soak.md")
