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

from benchmarks.auto_round import CASES, _floor_round, _stream, case_stream, child, main
from benchmarks.common import REPO


@pytest.mark.timeout(120)
def test_the_floor_covers_the_generations_and_changes_no_state() -> None:
    import kons
    from kons.auto.restarts import restart

    X, y = _stream(80)
    auto = kons.Auto()
    auto.learn_many(X[:60], y[:60])
    grid = auto._grid
    assert grid is not None and grid.experts_of("bins") is not None  # the threshold model, on dense rows of 8
    grid.last_change = grid.rounds
    for _ in range(2):  # both generations started (as at declared changes), their linear models too
        restart(grid, 8)
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


def test_case_streams_have_the_cases_shapes() -> None:
    rows, labels = case_stream("records", 30)
    assert isinstance(rows[0], dict) and "kind" in rows[0] and len(labels) == 30
    assert any(value is None for row in rows for value in row.values())
    assert sorted(set(case_stream("10 classes", 200)[1])) == list(range(10))
    assert set(case_stream("binary", 50)[1]) == {0, 1}
    assert len(case_stream("regression d=50", 5)[0][0]) == 50


@pytest.mark.timeout(300)
def test_paired_against_this_checkout_as_old(tmp_path: Path) -> None:
    main(["--paired", "--old", str(REPO), "--old-name", "same", "--paired-warmup", "60", "--rounds", "20",
          "--repeats", "1", "--out", str(tmp_path)])
    report = (tmp_path / "auto_round_paired.md").read_text()
    rows = re.findall(r"^\| (.+?) \| (round|predict) \| ([\d.]+) \| ([\d.]+) \| \*\*([\d.]+)\*\*", report,
                      re.MULTILINE)
    assert {(case, part) for case, part, *_ in rows} == {(c, p) for c in CASES for p in ("round", "predict")}
    for case, part, old, new, ratio in rows:
        assert float(old) > 0 and float(new) > 0 and float(ratio) > 0, (case, part)


@pytest.mark.timeout(300)
def test_paired_runs_only_the_cases_asked(tmp_path: Path) -> None:
    main(["--paired", "--old", str(REPO), "--old-name", "same", "--paired-warmup", "60", "--rounds", "20",
          "--repeats", "1", "--cases", "records", "10 classes", "--out", str(tmp_path)])
    report = (tmp_path / "auto_round_paired.md").read_text()
    cases = re.findall(r"^\| (.+?) \| (?:round|predict) \| ", report, re.MULTILINE)
    assert cases == ["records", "records", "10 classes", "10 classes"]
