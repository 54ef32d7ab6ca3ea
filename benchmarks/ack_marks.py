"""What the acknowledged versions kept outside Redis (``KONS_ACK_MARKS_DIR``) cost a feedback.

Two apps in this process on one real redis-server, one with marks and one without, take sequential
single-round feedbacks to a learner each, in blocks that alternate between them (and which app starts
each run alternates too), so that the machine's other load falls on both. Also timed on their own: one
mark (``AckMarks.acknowledged``: a JSON line and a ``write``) and one ``fsync`` of the marks' file, the
cost the batches (``KONS_ACK_MARKS_FSYNC_SECONDS``) keep off the feedback path::

    python -m benchmarks.ack_marks --runs 4 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import timeit
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import machine_summary, markdown_table, run_and_publish
from kons_service.core.marks import AckMarks
from kons_service.settings import Settings
from kons_service.store import Head, LearnerRef
from testkit.processes import SPEC, AppClient, RedisServer, serve

__all__ = ["main", "run"]

SOURCES = ("kons_service", "benchmarks/ack_marks.py")


async def _block(client: AppClient, name: str, rounds: int) -> list[float]:
    seconds = []
    for i in range(rounds):
        started = time.perf_counter()
        answer = await client.post(f"/v1/learners/{name}/feedback",
                                   json={"x": [0.1 * (i % 7), -0.2, 0.3], "y": 0.5})
        seconds.append(time.perf_counter() - started)
        answer.raise_for_status()
    return seconds


async def _one_run(redis_url: str, marks_dir: Path, marks_first: bool, blocks: int,
                   rounds: int) -> dict[str, float]:
    without = Settings(redis_url=redis_url)
    with_marks = Settings(redis_url=redis_url, ack_marks_dir=marks_dir)
    first, second = (with_marks, without) if marks_first else (without, with_marks)
    async with serve(first) as a, serve(second) as b:
        apps = {"marks": a, "none": b} if marks_first else {"none": a, "marks": b}
        times: dict[str, list[float]] = {"none": [], "marks": []}
        for label, client in apps.items():
            name = f"m-{label}-{marks_first}"
            (await client.put(f"/v1/learners/{name}", json=SPEC)).raise_for_status()
            await _block(client, name, rounds)  # warm-up
        for block in range(blocks):
            order = list(apps.items()) if block % 2 == 0 else list(reversed(apps.items()))
            for label, client in order:
                times[label] += await _block(client, f"m-{label}-{marks_first}", rounds)
    medians = {label: statistics.median(t) * 1e3 for label, t in times.items()}
    return {"marks_first": marks_first, "median_ms_without": round(medians["none"], 3),
            "median_ms_with_marks": round(medians["marks"], 3),
            "ratio": round(medians["marks"] / medians["none"], 3), "feedbacks_each": len(times["none"])}


def _micro(directory: Path) -> dict[str, float]:
    marks = AckMarks(directory / "micro", "bench", 0.1)
    marks.open()
    ref, head = LearnerRef("tenant", "learner"), Head("0" * 32, 123_456, 0, f"{'p' * 40}/123456")
    per_mark = min(timeit.repeat(lambda: marks.acknowledged(ref, head), number=2000, repeat=5)) / 2000
    fsyncs = []
    for _ in range(100):
        marks.acknowledged(ref, head)
        started = time.perf_counter()
        os.fsync(marks._fd)
        fsyncs.append(time.perf_counter() - started)
    marks.close()
    return {"mark_us": round(per_mark * 1e6, 2), "fsync_median_ms": round(statistics.median(fsyncs) * 1e3, 3)}


async def run(workdir: Path, *, runs: int = 4, blocks: int = 10, rounds: int = 200) -> dict[str, Any]:
    server = RedisServer(workdir / "redis").start()
    try:
        per_run = [await _one_run(server.url, workdir / f"marks{i}", i % 2 == 0, blocks, rounds)
                   for i in range(runs)]
    finally:
        server.stop()
    return {"runs": per_run, **_micro(workdir), "load": round(os.getloadavg()[0], 1)}


def markdown(results: dict[str, Any], command: str) -> str:
    rows = [[i, "marks" if r["marks_first"] else "none", r["feedbacks_each"], r["median_ms_without"],
             r["median_ms_with_marks"], f"{r['ratio']:.2f}x"] for i, r in enumerate(results["runs"])]
    return "\n".join([
        "# Feedback with and without acknowledged-version marks (`KONS_ACK_MARKS_DIR`)", "",
        f"`{command}`; machine: {machine_summary()}, shared, load average {results['load']} at the end.", "",
        *markdown_table(["run", "app started first", "feedbacks each", "median ms, no marks",
                         "median ms, marks", "marks / none"], rows, "lrrrrr"), "",
        f"One mark alone (`AckMarks.acknowledged`, best of 5 x 2,000): {results['mark_us']} µs. One "
        f"`fsync` of the marks' file: median {results['fsync_median_ms']} ms, which the background batches "
        "keep off the feedback path.", ""])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=200, help="feedbacks per block")
    parser.add_argument("--out", type=Path, help="write ack_marks.md and ack_marks.json here")
    args = parser.parse_args(argv)

    def measure() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="kons-marks-") as tmp:
            return asyncio.run(run(Path(tmp), runs=args.runs, blocks=args.blocks, rounds=args.rounds))

    return run_and_publish("benchmarks.ack_marks", argv, name="ack_marks", out=args.out, sources=SOURCES,
                           run=measure, page=markdown, indent=2)


if __name__ == "__main__":
    raise SystemExit(main())
