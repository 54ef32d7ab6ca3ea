"""Smoke test of the records benchmark: record-shaped streams keep their gaps and categories, and every
method plays them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.streams import benchmark_data

NEEDED = ("abalone", "housing", "cpu_act", "magic04", "space_ga", "cadata", "power_plant", "kin8nm",
          "cpusmall", "bodyfat")


@pytest.mark.skipif(not all(benchmark_data(n) for n in NEEDED),
                    reason="benchmark data (../shared/data) not found")
@pytest.mark.timeout(120)
def test_record_streams_keep_gaps_and_categories_and_every_method_plays_them() -> None:
    pytest.importorskip("river")
    from benchmarks.records import BLANKED, categoricals, cost, paired_block_interval, quality, record_stream

    records, _, numeric, categorical, complete = record_stream("abalone", 400)
    values = [v for r in records for v in r.values()]
    assert abs(sum(v is None for v in values) / len(values) - BLANKED) < 0.03  # gaps kept, not dropped
    assert categorical == ["sex"] and len(numeric) == 7 and complete.shape == (400, 8)
    assert {r["sex"] for r in records} == {"sex=0", "sex=1", "sex=2", None}
    rows = quality(60)
    assert {row[3] for row in rows} >= {"auto", "ons", "River linear"}
    assert all(math.isfinite(float(row[4])) for row in rows)
    noisy, _, numeric, categorical, complete = record_stream("space_ga", 400)  # a name of 5 random categories
    assert categorical == ["noise"] and len(numeric) == 6 and complete.shape == (400, 6)
    assert {r["noise"] for r in noisy} == {*(f"noise={k}" for k in range(5)), None}
    many, _, numeric, categorical, complete = record_stream("abalone+noise", 400)  # abalone's rows, 20 added
    assert categorical == ["noise"] and len(numeric) == 8 and complete.shape == (400, 8)
    assert {r["noise"] for r in many} == {*(f"noise={k}" for k in range(20)), None}
    assert [row[0] for row in categoricals(60, {"abalone+noise", "kin8nm"})] == ["abalone+noise", "kin8nm"]
    compared = categoricals(60)
    assert {row[1] for row in compared} == {"tuning", "held-out"} and len(compared) == 11
    assert all(float(row[5]) > 0 for row in compared)
    losses = np.random.default_rng(0).random(300)
    assert paired_block_interval(losses, losses) == (1.0, 1.0)
    low, high = paired_block_interval(2.0 * losses, losses)
    assert low == high == pytest.approx(2.0)
    table, width = cost(10, 2)
    assert width == 48 and len(table) == 3 and all(np.isfinite(float(r[2])) for r in table)  # 8 keys, 6 a key
