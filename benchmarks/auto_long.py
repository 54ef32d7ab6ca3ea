"""``auto`` on a long changing stream (issue 20): time per round and state flat in the number of rounds.

Regression: ``cadata`` in raw units, protocol order, cycled (round ``t`` plays row ``t mod n``), with the
target's sign flipped every ``--period`` rounds, so that ``auto`` declares changes and starts restarted
generations of its bases all along the stream (the case where its cost could grow). Classification:
``magic04`` the same way, its two labels swapped every ``--period`` rounds, for ``--class-rounds`` rounds
(the classifier's Hoeffding trees keep growing through it, slowly: 3 leaves each at 10,000 rounds, 8-9 at
30,000, at most 64; their bound is the state's). At each checkpoint the next ``--block`` rounds are timed
one by one (median ms per round), and the state is measured: ``state_nbytes()`` and the saved blob's
length. The verdict compares the last checkpoint with the one at 10,000 rounds.

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.auto_long --out benchmarks/results
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

import kons
from benchmarks import registry
from benchmarks.common import command_line, git_commit, machine_summary, markdown_table, require_datasets
from benchmarks.provenance import provenance, publish
from kons.datasets import load_dataset

CHECKPOINTS = (1_000, 10_000, 50_000, 100_000, 200_000, 500_000, 1_000_000)


#: The stream of each task: its data set.
STREAMS = {"regression": "cadata", "classification": "magic04"}
HEADER = ["rounds", "median ms/round", "state_nbytes", "saved blob bytes", "changes declared"]


def measure(rounds: int, period: int, block: int,
            task: str = "regression") -> list[tuple[int, float, int, int, int]]:
    """``(rounds, median ms per round, state_nbytes, blob bytes, changes declared)`` at each checkpoint
    (the ±1 targets of ``magic04`` flip sign as ``cadata``'s do: its labels are swapped)."""
    data = load_dataset(STREAMS[task], standardize=False)
    n = len(data.y)
    model = kons.Auto(task=task)
    marks = [c for c in CHECKPOINTS if c + block <= rounds]
    rows: list[tuple[int, float, int, int, int]] = []
    t = 0

    def play(count: int, timed: bool) -> list[float]:
        nonlocal t
        times = []
        for _ in range(count):
            sign = -1.0 if (t // period) % 2 else 1.0
            start = time.perf_counter()
            model.learn_one(data.X[t % n], sign * data.y[t % n])
            times.append(time.perf_counter() - start)
            t += 1
        return times if timed else []

    for mark in marks:
        play(mark - t, timed=False)
        state, blob = model.state_nbytes(), len(model.to_bytes())
        times = play(block, timed=True)
        rows.append((mark, 1e3 * float(np.median(times)), state, blob, model.changes_detected))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=1_002_000)
    parser.add_argument("--period", type=int, default=5_000, help="rounds between sign flips")
    parser.add_argument("--class-rounds", type=int, default=202_000,
                        help="rounds of the classification stream")
    parser.add_argument("--block", type=int, default=2_000, help="rounds timed at each checkpoint")
    parser.add_argument("--out", type=Path, default=None, help="write auto_long.md there")
    args = parser.parse_args()
    require_datasets(list(STREAMS.values()), "auto_long")
    commit = git_commit()
    stamp = provenance(registry.sources_of("auto_long.md") or ())  # the code imported now is what runs
    load_before = os.getloadavg()[0]
    changed = {"regression": "the target's sign flipped", "classification": "its two labels swapped"}
    sections: list[str] = []
    for task, rounds in (("regression", args.rounds), ("classification", args.class_rounds)):
        started = time.process_time()
        rows = measure(rounds, args.period, args.block, task)
        cpu = time.process_time() - started
        early = next((r for r in rows if r[0] == 10_000), rows[0])
        last = rows[-1]
        sections += [
            "",
            f"## {task.capitalize()}",
            "",
            f"`{STREAMS[task]}` raw, cycled, {changed[task]} every {args.period:,} rounds; at each "
            f"checkpoint the next {args.block:,} rounds timed one by one.",
            "",
            *markdown_table(HEADER, [(f"{r:,}", f"{ms:.3f}", f"{s:,}", f"{b:,}", c)
                                     for r, ms, s, b, c in rows], "rrrrr"),
            "",
            f"**Verdict:** median time per round at {last[0]:,} rounds / at {early[0]:,} rounds = "
            f"**{last[1] / early[1]:.2f}x**; state {early[2]:,} B at {early[0]:,} rounds, {last[2]:,} B at "
            f"{last[0]:,} (largest over the checkpoints: {max(r[2] for r in rows):,} B). {cpu:.0f} s of CPU.",
        ]
    lines = [
        "# `auto` on a long changing stream: time per round and state against rounds",
        "",
        f"`{command_line('benchmarks.auto_long', outputs=('--out',))}` at {commit}; {machine_summary()}; "
        f"1-minute load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
        f"(a shared machine: read the ratio within each series). Written by `benchmarks/auto_long.py`; "
        "do not edit by hand.",
        *sections,
    ]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        publish(args.out, "auto_long", stamp, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
