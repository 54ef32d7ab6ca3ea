"""Smoke test of ``python -m benchmarks.expert_cost``: every kind's time, weight and leads are measured on a
short binary stream, the experts' classes are left as they were, and the report is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.expert_cost import KINDS, main, stream_cost
from kons.auto.experts.tree import TreeExpert
from tests.streams import benchmark_data


@pytest.mark.skipif(not benchmark_data("heart"), reason="benchmark data (../shared/data) not found")
def test_each_kind_is_measured_and_the_experts_are_restored(tmp_path: Path) -> None:
    observe = TreeExpert.observe
    measured = stream_cost("heart", 300)
    assert TreeExpert.observe is observe
    assert measured["rounds"] > 200 and set(measured["share"]) == set(KINDS)
    assert measured["share"]["trees"] > 0.0 and measured["share"]["rest"] > 0.0
    assert sum(measured["share"].values()) == pytest.approx(1.0)
    assert sum(measured["weight"].values()) == pytest.approx(1.0)
    assert sum(measured["leads"].values()) == pytest.approx(1.0)
    main(["--suites", "holdout", "--rows", "250", "--datasets", "heart", "--out", str(tmp_path)])
    report = (tmp_path / "expert_cost.md").read_text()
    assert "HELD-OUT" in report and "| heart | binary |" in report
    record = json.loads((tmp_path / "expert_cost.json").read_text())
    assert record["suites"]["holdout"][0]["dataset"] == "heart"
