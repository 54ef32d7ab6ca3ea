"""Smoke test of ``python -m benchmarks.expert_cost``: every kind's time, weight and leads are measured on a
short binary stream and a multi-class one (where the forest plays), the experts' classes are left as they
were, every kind of ``auto``'s experts has its group, and the report is written."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from benchmarks.expert_cost import KINDS, group_of, main, stream_cost
from kons.auto.experts.forest import ForestExpert
from kons.auto.experts.tree import TreeExpert
from kons.auto.grid import EXPERTS
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


def test_every_kind_of_expert_has_its_own_group() -> None:
    groups = [group_of(kind) for kind in EXPERTS]
    assert len(set(groups)) == len(EXPERTS) and set(groups) <= set(KINDS) and "rest" not in groups
    unknown = dataclasses.replace(EXPERTS[0], slots=("an_expert_added_later",))
    with pytest.raises(RuntimeError, match="no group"):
        group_of(unknown)


def test_the_forest_is_measured_among_ten_classes() -> None:
    pytest.importorskip("river")
    learn = ForestExpert.learn
    measured = stream_cost("random_rbf10", 200)
    assert ForestExpert.learn is learn and "learn_class" not in ForestExpert.__dict__  # its own, its base's
    assert measured["task"] == "multi-class" and measured["rounds"] > 100
    assert measured["share"]["forest"] > 0.0 and measured["weight"]["forest"] > 0.0
    assert measured["share"]["linear"] == 0.0 and measured["share"]["lags"] == 0.0  # regression only
    assert sum(measured["share"].values()) == pytest.approx(1.0)
    assert sum(measured["weight"].values()) == pytest.approx(1.0)
