"""A smoke run of benchmarks.lifecycle: a tiny stream, its report and record written where asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import lifecycle

pytestmark = pytest.mark.redis  # it starts its own Redis


def test_a_tiny_run_writes_its_report(tmp_path: Path) -> None:
    argv = ["--clean", "120", "--poisoned", "40", "--promotion-rounds", "200", "--window", "100",
            "--cost-rounds", "30", "--cost-repeats", "1", "--snapshot-every", "60", "--out", str(tmp_path)]
    assert lifecycle.main(argv) == 0
    record = json.loads((tmp_path / "lifecycle.json").read_text())
    poison = record["poison"]
    assert poison["mse_after_rollback"] == poison["mse_before_poison"]  # the very state before the poison
    assert poison["mse_poisoned"] > poison["mse_before_poison"]
    kept = {row["keep_versions"]: row for row in record["kept_bytes"]["by_policy"]}
    assert kept[1]["oldest"] == 120 and kept[8]["oldest"] == 0
    assert "## What a shadow costs a feedback" in (tmp_path / "lifecycle.md").read_text()
