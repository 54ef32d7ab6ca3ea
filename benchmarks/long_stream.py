"""Long-stream cost: time per round and state bytes against rounds, up to 1,000,000 rounds and beyond.

Run through ``python -m benchmarks.scaling --long-stream [options]`` (or this module directly). The
stream is a data set of the protocol (:func:`kons.datasets.load_dataset`: z-scored, protocol order)
cycled as many times as needed: round ``t`` plays row ``t mod n``. Sketched-KONS and NystromKONS get the
service's kernel configuration (``kons_service.testing.SPEC``: RBF gamma 0.5, squared loss, alpha 1,
eta 0.1, C 3, seed 0) in one process, one after the other, one BLAS thread. At each checkpoint the next
``--block`` rounds are timed one by one (median and mean per round), after the state is measured: bytes
of ``to_bytes()``, the time to save it and to restore it (``kons.load``; a snapshot and a restart's
restore). A checkpoint that falls inside the previous timed block is taken at the block's end.
Sketched-KONS stores a point on nearly every round, so it is stopped at ``--sketched-rounds`` or after
``--sketched-seconds`` of wall time, whichever comes first.

Example::

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.scaling --long-stream --out benchmarks/results

writes ``OUT/long_stream.md``, ``OUT/long_stream.png`` and the raw numbers ``OUT/long_stream.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import kons
from benchmarks import registry
from benchmarks.common import results_dir
from benchmarks.provenance import provenance, stamp_json, stamp_markdown
from kons.base import Learner
from kons.datasets import load_dataset

__all__ = ["LongCheckpoint", "LongSeries", "main", "run_series"]

CHECKPOINTS = (1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000)
#: The service's kernel configuration (kons_service.testing.SPEC), without importing the service.
PARAMS: dict[str, Any] = {"kernel": {"name": "rbf", "gamma": 0.5}, "loss": "squared", "alpha": 1.0,
                          "eta": 0.1, "C": 3.0, "seed": 0}


@dataclass
class LongCheckpoint:
    rounds: int  # rounds played before the state was measured and the block timed
    median_s: float  # median seconds per round over the block
    mean_s: float
    state_bytes: int
    save_s: float  # to_bytes()
    restore_s: float  # kons.load()
    stored_points: int
    dictionary_size: int
    elapsed_s: float  # wall time of the stream so far (timed blocks and measurements included)


@dataclass
class LongSeries:
    label: str
    params: dict[str, Any]
    checkpoints: list[LongCheckpoint] = field(default_factory=list)
    stopped: str = ""


def _measure_state(learner: Learner) -> tuple[int, float, float]:
    start = time.perf_counter()
    blob = learner.to_bytes()
    saved = time.perf_counter()
    kons.load(blob)
    return len(blob), saved - start, time.perf_counter() - saved


def run_series(label: str, learner: Learner, X: np.ndarray, y: np.ndarray, rounds: int,
               checkpoints: Sequence[int], block: int, budget_s: float = float("inf")) -> LongSeries:
    """Play ``rounds`` rounds of the cycled stream, measuring at each checkpoint; stop after ``budget_s``."""
    series = LongSeries(label, learner.get_params())
    n = len(y)
    pending = sorted(c for c in checkpoints if c + block <= rounds)
    start = time.perf_counter()
    t = 0
    while pending:
        target = pending.pop(0)
        while t < target:
            learner.learn_one(X[t % n], y[t % n])
            t += 1
        stats = learner.stats()
        size, save_s, restore_s = _measure_state(learner)  # the state after exactly t rounds
        times = np.empty(block)
        for j in range(block):
            t0 = time.perf_counter()
            learner.learn_one(X[(t + j) % n], y[(t + j) % n])
            times[j] = time.perf_counter() - t0
        elapsed = time.perf_counter() - start
        series.checkpoints.append(LongCheckpoint(t, float(np.median(times)), float(times.mean()), size,
                                                 save_s, restore_s, stats["stored_points"],
                                                 stats["dictionary_size"], elapsed))
        print(f"  {label}: {t:,} rounds, {1e3 * np.median(times):.3f} ms/round, state {size:,} B, "
              f"dictionary {stats['dictionary_size']}, {elapsed:.0f} s", flush=True)
        t += block
        if elapsed > budget_s:
            series.stopped = f"stopped after {t:,} rounds: wall-time budget of {budget_s:.0f} s spent"
            break
    return series


def _ratio(series: LongSeries, late: int, early: int) -> float | None:
    by_rounds = {c.rounds: c for c in series.checkpoints}
    if late in by_rounds and early in by_rounds:
        return by_rounds[late].median_s / by_rounds[early].median_s
    return None


def write_markdown(path: Path, all_series: list[LongSeries], meta: dict[str, Any],
                   stamp: dict[str, Any]) -> None:
    lines = [
        "# Long stream: time per round and state against rounds",
        "",
        f"Command: `{meta['command']}`",
        "",
        f"Stream: `{meta['data']}` ({meta['rows']:,} rows, {meta['dim']} features, protocol order and "
        f"z-scoring) cycled: round t plays row t mod {meta['rows']:,}. Parameters (both learners, the "
        f"service's kernel configuration): `{json.dumps(PARAMS)}`; NystromKONS max_dictionary = "
        f"{meta['max_dictionary']}. At each checkpoint the next {meta['block']:,} rounds are timed one by "
        "one (median ms per round; means in the JSON), right after the state of that round count is saved "
        "(`to_bytes`) and restored (`kons.load`), timed once each. A checkpoint inside the previous timed "
        "block is taken at the block's end (hence 3,000 rather than 2,000).",
        "",
        f"**Machine caveat**: {meta['machine']}; 2 cores shared with other jobs (load average "
        f"{meta['load_before']} at the start, {meta['load_after']} at the end): absolute times are noisy, "
        "ratios within one series are more trustworthy.",
        "",
        "| rounds | " + " | ".join(f"{s.label} ms/round | state bytes | save / restore ms | dictionary"
                                   for s in all_series) + " |",
        "|---" * (1 + 4 * len(all_series)) + "|",
    ]
    rounds = sorted({c.rounds for s in all_series for c in s.checkpoints})
    for r in rounds:
        cells = []
        for s in all_series:
            c = next((c for c in s.checkpoints if c.rounds == r), None)
            cells += (["-"] * 4 if c is None else [
                f"{1e3 * c.median_s:.3f}", f"{c.state_bytes:,}",
                f"{1e3 * c.save_s:.1f} / {1e3 * c.restore_s:.1f}",
                f"{c.dictionary_size} ({c.stored_points:,} stored)"])
        lines.append(f"| {r:,} | " + " | ".join(cells) + " |")
    lines += ["", "## Verdict", ""]
    for s in all_series:
        last = s.checkpoints[-1] if s.checkpoints else None
        if last is None:
            continue
        ratio = _ratio(s, last.rounds, 10_000)
        sizes = [c.state_bytes for c in s.checkpoints if c.dictionary_size == last.dictionary_size]
        lines.append(
            f"* {s.label}: {last.rounds:,} rounds in {last.elapsed_s:.0f} s; median time per round at "
            f"{last.rounds:,} rounds / at 10,000 rounds = "
            + ("-" if ratio is None else f"**{ratio:.2f}x**")
            + f"; state {s.checkpoints[0].state_bytes:,} B at {s.checkpoints[0].rounds:,} rounds, "
            f"{last.state_bytes:,} B at the end"
            + (f" (spread {max(sizes) - min(sizes)} B over the checkpoints with the final dictionary)"
               if len(sizes) > 1 else "")
            + (f"; {s.stopped}" if s.stopped else "") + ".")
    lines += ["", "![long stream](long_stream.png)", ""]
    path.write_text(stamp_markdown("\n".join(lines), stamp))


def write_plot(path: Path, all_series: list[LongSeries], meta: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for s in all_series:
        r = [c.rounds for c in s.checkpoints]
        left.plot(r, [1e3 * c.median_s for c in s.checkpoints], "o-", label=s.label)
        right.plot(r, [c.state_bytes for c in s.checkpoints], "o-", label=s.label)
    for ax, what in ((left, "median ms per round"), (right, "state bytes (to_bytes)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("rounds")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{meta['data']} cycled: cost and state against rounds (2 shared cores, noisy)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="cadata")
    parser.add_argument("--rounds", type=int, default=1_000_000)
    parser.add_argument("--block", type=int, default=2000)
    parser.add_argument("--sketched-rounds", type=int, default=100_000)
    parser.add_argument("--sketched-seconds", type=float, default=300.0)
    parser.add_argument("--max-dictionary", type=int, default=None,
                        help="NystromKONS bound (default: the learner's default)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where results go (default: a new temporary directory)")
    args = parser.parse_args(argv)
    args.out = results_dir(args.out, "long_stream")
    stamp = provenance(registry.sources_of("long_stream.md") or ())  # the code imported now is what runs
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
        blas = "BLAS limited to 1 thread"
    except ImportError:  # pragma: no cover - optional
        blas = "BLAS threads not limited (threadpoolctl missing)"
    data = load_dataset(args.data)
    load_before = os.getloadavg()
    checkpoints = [c for c in CHECKPOINTS if c < args.rounds] + [args.rounds - args.block]
    nystrom_params = dict(PARAMS) if args.max_dictionary is None else {**PARAMS,
                                                                       "max_dictionary": args.max_dictionary}
    nystrom = kons.NystromKONS(**nystrom_params)
    all_series = [
        run_series("SketchedKONS", kons.SketchedKONS(**PARAMS), data.X, data.y, args.sketched_rounds,
                   [c for c in checkpoints if c < args.sketched_rounds] + [args.sketched_rounds - args.block],
                   args.block, args.sketched_seconds),
        run_series("NystromKONS", nystrom, data.X, data.y, args.rounds, checkpoints, args.block),
    ]
    meta = {
        "command": "OPENBLAS_NUM_THREADS=1 python -m benchmarks.scaling --long-stream "
                   + shlex.join(sys.argv[1:] if argv is None else argv),
        "data": args.data, "rows": len(data.y), "dim": data.X.shape[1], "block": args.block,
        "max_dictionary": nystrom.max_dictionary,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
                   f"numpy {np.__version__}, {blas}",
        "load_before": " / ".join(f"{v:.1f}" for v in load_before),
        "load_after": " / ".join(f"{v:.1f}" for v in os.getloadavg()),
    }
    raw = stamp_json({"meta": meta, "series": [asdict(s) for s in all_series]}, stamp)
    (args.out / "long_stream.json").write_text(json.dumps(raw, indent=1))
    write_markdown(args.out / "long_stream.md", all_series, meta, stamp)
    write_plot(args.out / "long_stream.png", all_series, meta)
    print(f"wrote {args.out / 'long_stream.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
