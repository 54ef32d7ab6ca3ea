"""Smoke test of ``python -m benchmarks.auto_round``: the floor runs on today's grid (restarted generations
included) without changing the learner, and a tiny run against this same checkout as ``--old`` reports
finite positive times. It needs no benchmark data."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.auto_round import _floor_round, _stream, child, main
from benchmarks.common import REPO


@pytest.mark.timeout(120)
def test_the_floor_covers_the_generations_and_changes_no_state() -> None:
    import kons

    X, y = _stream(80)
    auto = kons.Auto()
    auto.learn_many(X[:60], y[:60])
    grid = auto._grid
    assert grid is not None and grid.thresholds is not None  # the threshold model, on dense rows of 8
    grid.last_change = grid.rounds
    for _ in range(2):  # both generations started (as at declared changes), their linear models too
        grid._restart(8)
    assert len(grid._recent()) == 2
    scratch: dict[Any, np.ndarray] = {}
    for x, target in zip(X[60:], y[60:], strict=True):
        before = auto.to_bytes()
        _floor_round(auto, x, scratch)
        assert auto.to_bytes() == before
        auto.learn_one(x, target)
    assert {"bins", "kept"} <= set(scratch)
    assert sum(isinstance(key, tuple) and key[0] == "recent" for key in scratch) == 2


@pytest.mark.timeout(120)
def test_child_times_the_rounds_and_their_floor() -> None:
    result = child(40, 20)
    assert math.isfinite(result["round_us"]) and result["round_us"] > 0
    assert math.isfinite(result["floor_us"]) and result["floor_us"] > 0


@pytest.mark.timeout(300)
def test_main_against_this_checkout_as_old(tmp_path: Path) -> None:
    main(["--old", str(REPO), "--warmup", "40", "--rounds", "20", "--repeats", "1", "--out", str(tmp_path)])
    report = (tmp_path / "auto_round.md").read_text()
    rows = dict(re.findall(r"^\| (this checkout|old) \| ([^|]+\|[^|]+)\|", report, re.MULTILINE))
    assert set(rows) == {"this checkout", "old"}
    for label, cells in rows.items():
        round_us, floor_us = (float(cell) for cell in cells.split("|"))
        assert math.isfinite(round_us) and round_us > 0, label
        assert math.isfinite(floor_us) and floor_us > 0, label
    assert "Round time, this checkout / old:" in report
