"""Smoke test of the round's CPU decomposition: every part measured warm and cold, and reported."""

from __future__ import annotations

import asyncio

import pytest

from benchmarks.hotpath_parts import markdown, run
from tests.streams import benchmark_data


@pytest.mark.redis
@pytest.mark.skipif(not benchmark_data("cadata"), reason="benchmark data (../shared/data) not found")
@pytest.mark.timeout(120)
def test_every_part_of_a_round_is_measured_warm_and_cold() -> None:
    record = asyncio.run(run(blocks=1, rows_per_block=3, flush_mib=1))
    figures = record["figures"]
    parts = {key.split("|")[0] for key in figures}
    assert {"predict: the app", "feedback: the app", "feedback: the learner's learn_round"} <= parts
    assert all(f"{part}|{state}" in figures for part in parts for state in ("warm", "cold"))
    assert all(len(values) == 1 and values[0] > 0 for values in figures.values())
    report = markdown(record, "python -m benchmarks.hotpath_parts")
    assert report.count("\n| ") == len(parts) + 1  # a row per part, after the header
