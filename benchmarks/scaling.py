"""Time per round against the number of stored points ``n``: KONS, Sketched-KONS, KernelOGD and the floor.

Every learner streams the same rows (:func:`kons.datasets.load_dataset`, bench-protocol order) with the
same RBF kernel and the squared loss, so a point is stored on nearly every round. When the number of
stored points first reaches a checkpoint ``n`` (1k, 2k, 5k, 10k, 20k), the next ``--block`` rounds are
timed one by one with :func:`time.perf_counter` (they are ordinary rounds of the stream); the table gives
the median and the mean of those rounds. Exact KONS costs O(n^2) per round and is only run up to
``--kons-max`` stored points.

The floor is what any kernel method with ``n`` stored points pays per prediction: one kernel row
(``kons.kernels.RBF.row``, the code the learners use) and one dot product with ``n`` coefficients, timed on
the same rows and the same stored points.

Example::

    python -m benchmarks.scaling --data cadata --out benchmarks/results

writes ``OUT/scaling.md``, ``OUT/scaling.png`` and the raw numbers ``OUT/scaling.json``.
``python -m benchmarks.scaling --long-stream [options]`` runs :mod:`benchmarks.long_stream` instead
(time per round and state bytes over 1,000,000 rounds, Sketched-KONS against NystromKONS).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import kons
from benchmarks import registry
from benchmarks.common import blas_threads, command_line, machine_summary, require_datasets, results_dir
from benchmarks.provenance import provenance, stamp_json, stamp_markdown
from kons.datasets import load_dataset
from kons.kernel._newton import KernelNewton
from kons.kernels import RBF, Kernel

__all__ = ["Checkpoint", "Series", "floor_series", "learner_series", "main"]

CHECKPOINTS = (1000, 2000, 5000, 10000, 20000)


@dataclass
class Checkpoint:
    """Timing of one block of rounds that started with ``n`` stored points."""

    n: int
    rounds_before: int  # rounds played before the block
    median_s: float  # median seconds per round in the block
    mean_s: float
    dictionary_size: int
    elapsed_s: float  # wall time of the stream up to the start of the block
    paired_floor_s: float = 0.0  # median seconds of the floor, timed interleaved with the block's rounds


@dataclass
class Series:
    """One method's checkpoints."""

    label: str
    params: dict[str, Any]
    checkpoints: list[Checkpoint] = field(default_factory=list)
    rounds_to: dict[int, float] = field(default_factory=dict)  # wall seconds of the first k rounds

    def at(self, n: int) -> Checkpoint | None:
        return next((c for c in self.checkpoints if c.n == n), None)


def _block(call: Callable[[int], object], start: int, size: int) -> np.ndarray:
    """Seconds of ``call(i)`` for ``i`` in ``start .. start + size``, each timed on its own."""
    times = np.empty(size)
    for j in range(size):
        t0 = time.perf_counter()
        call(start + j)
        times[j] = time.perf_counter() - t0
    return times


def learner_series(
    label: str,
    learner: KernelNewton | kons.KernelOGD,
    X: np.ndarray,
    y: np.ndarray,
    checkpoints: Sequence[int],
    block: int,
    report_rounds: Sequence[int] = (),
) -> Series:
    """Stream ``X, y`` through ``learner``, timing a block of rounds at each checkpoint it reaches.

    Before each timed round the floor (one kernel row over the first ``n`` rows and a dot product) is
    timed on the same input, so that the ratio of the two sees the same machine load.
    """
    series = Series(label, learner.get_params())
    pending = sorted(c for c in checkpoints)
    t = 0
    start = time.perf_counter()
    stored = 0
    while pending and t + block <= len(y):
        if stored >= pending[0]:
            elapsed = time.perf_counter() - start
            n, dictionary = stored, learner.stats()["dictionary_size"]
            floor = _floor_call(X, n, learner.kernel)
            times, floor_times = np.empty(block), np.empty(block)
            for j in range(block):
                floor_times[j] = _block(floor, t + j, 1)[0]
                times[j] = _block(lambda i: learner.learn_one(X[i], y[i]), t + j, 1)[0]
            pending.pop(0)
            series.checkpoints.append(Checkpoint(n, t, float(np.median(times)), float(times.mean()),
                                                 dictionary, elapsed, float(np.median(floor_times))))
            print(f"  {label}: n={n} median {1e3 * series.checkpoints[-1].median_s:.3f} ms/round "
                  f"(dictionary {series.checkpoints[-1].dictionary_size}, {elapsed:.1f} s so far)",
                  flush=True)
            t += block
        else:
            learner.learn_one(X[t], y[t])
            t += 1
        if t in report_rounds:
            series.rounds_to[t] = time.perf_counter() - start
        stored = learner.stats()["stored_points"]
    return series


def _floor_call(X: np.ndarray, n: int, kernel: Kernel, seed: int = 0) -> Callable[[int], float]:
    """``i -> k(X[i], X[:n]) @ c``: the floor with ``n`` stored points (fixed random coefficients)."""
    P = np.ascontiguousarray(X[:n])
    sq = (P * P).sum(axis=1)
    coef = np.random.default_rng(seed).normal(size=n)
    return lambda i: float(kernel.row(X[i], P, sq) @ coef)


def floor_series(X: np.ndarray, kernel: RBF, checkpoints: Sequence[int], block: int, seed: int = 0) -> Series:
    """One kernel row and one dot product over the first ``n`` rows, for the rows that follow them."""
    series = Series("floor: RBF.row + dot", kernel.to_dict())
    for n in checkpoints:
        if n + block > len(X):
            continue
        times = _block(_floor_call(X, n, kernel, seed), n, block)
        series.checkpoints.append(Checkpoint(n, n, float(np.median(times)), float(times.mean()), 0, 0.0))
    return series


def _fmt_ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1e3 * seconds:.3g}"


def write_markdown(path: Path, all_series: list[Series], meta: dict[str, Any], stamp: dict[str, Any]) -> None:
    """The table of median milliseconds per round, the ratio to the floor and the KONS wall time."""
    checkpoints = meta["checkpoints"]
    floor = all_series[-1]
    top = max(checkpoints)
    lines = [
        "# Time per round against stored points",
        "",
        f"Command: `{meta['command']}`",
        "",
        f"Data: `{meta['data']}` ({meta['rows']} rows, {meta['dim']} features, bench-protocol order and "
        f"z-scoring); squared loss, RBF kernel gamma={meta['kernel_gamma']}, C={meta['C']}, alpha=1, "
        f"eta = 1/(8 C^2) for the second-order learners. Each cell is the **median milliseconds per "
        f"round** over a block of {meta['block']} consecutive rounds that starts when the learner first "
        "holds `n` stored points (mean in the raw JSON); `[R]` is the dictionary size there. The floor "
        "row is timed on its own; the *paired* floor is timed interleaved with the learner's rounds "
        "(one floor call before each timed round, same input, same `n`), so that ratio sees the same "
        "load.",
        "",
        f"**Machine caveat**: {meta['machine']}; 2 cores shared with three other engineers' jobs during "
        f"the run (load average {meta['load_before']} at the start, {meta['load_after']} at the end), so "
        "absolute times are noisy and probably pessimistic; ratios measured in the same run are more "
        "trustworthy than any single number.",
        "",
        "| method | " + " | ".join(f"n = {n:,}" for n in checkpoints)
        + f" | ratio to floor at {top:,} | ratio to paired floor at {top:,} |",
        "|---" * (len(checkpoints) + 3) + "|",
    ]
    floor_top = floor.at(top)
    for series in all_series:
        cells = []
        for n in checkpoints:
            c = series.at(n)
            cell = _fmt_ms(c.median_s if c else None)
            if c and series is not floor and c.dictionary_size:
                cell += f" [{c.dictionary_size}]"
            cells.append(cell)
        c_top = series.at(top)
        ratio = f"{c_top.median_s / floor_top.median_s:.1f}x" if c_top and floor_top else "-"
        paired = f"{c_top.median_s / c_top.paired_floor_s:.1f}x" if c_top and c_top.paired_floor_s else "-"
        lines.append(f"| {series.label} | " + " | ".join(cells) + f" | {ratio} | {paired} |")
    kons_series = all_series[0]
    lines += ["", "## Exact KONS wall time", ""]
    for rounds, seconds in sorted(kons_series.rounds_to.items()):
        lines.append(f"* first {rounds:,} rounds of `{meta['data']}` (RBF, exact KONS, including the "
                     f"timed blocks): **{seconds:.1f} s**")
    lines += [
        "",
        "The issue asks that exact KONS get through 5,000 rounds of cadata (RBF) in well under a minute: "
        + meta["kons_verdict"],
        "",
        "`-`: not run (exact KONS beyond `--kons-max`) or not reached within the stream.",
        "",
        "## Notes",
        "",
        "* Cost model: a Sketched-KONS round is one kernel row over the `n` stored points (the floor) plus "
        "two triangular solves of the dictionary sizes (`R` and KORS's own), O(n d + |R|^2); exact KONS has "
        "`|R| = n`: an O(n^2) solve with a packed factor of n^2/2 doubles (100 MB at n = 5,000); its time "
        "grows faster than n^2 between 2,000 and 5,000 points, consistent with the factor leaving the "
        "cache (an inference, not profiled). With `gamma = 0.1` the dictionary reaches ~2,000 "
        "points and its solves, not the kernel row, dominate at n = 20,000.",
        "* BLAS threads: the run uses one BLAS thread (`--blas-threads 1`). An earlier run of this command "
        "with OpenBLAS's default two threads, on the same loaded machine, measured Sketched-KONS "
        "(gamma = 0) at 0.067 ms per round at n = 5,000 but 23 ms per round at n = 10,000, and was "
        "aborted. The thread count makes differences of that size here: with threadpoolctl, 300 dense "
        "300x300 solves took 25-32 s with two threads and 1.3-2.1 s with one (back to back), and the "
        "20,000-round Sketched-KONS drift test 74 s with two and 7 s with one (minutes apart); the "
        "service notes report 28 ms against 2.8 ms per feedback at 10k stored points. Which call waits "
        "was not isolated (a `ddot` micro-benchmark at a quieter moment did not reproduce it). Run kons "
        "on shared cores with `OPENBLAS_NUM_THREADS=1`.",
        "* Small `n` cells (a few hundredths of a millisecond) are dominated by Python overhead and by "
        "scheduling noise; compare the means in `scaling.json` for the spread.",
        "",
        "![time per round](scaling.png)",
        "",
    ]
    path.write_text(stamp_markdown("\n".join(lines), stamp))


def write_plot(path: Path, all_series: list[Series], meta: dict[str, Any]) -> None:
    """Log-log plot of median seconds per round against ``n``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for series in all_series:
        if not series.checkpoints:
            continue
        n = [c.n for c in series.checkpoints]
        ms = [1e3 * c.median_s for c in series.checkpoints]
        style = "k--" if series is all_series[-1] else "o-"
        ax.plot(n, ms, style, label=series.label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("stored points n")
    ax.set_ylabel("median ms per round")
    ax.set_title(f"{meta['data']}: time per round (2 shared cores, noisy)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--long-stream"]:  # the constant-cost run of benchmarks.long_stream (its own options)
        from benchmarks.long_stream import main as long_stream

        return long_stream(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="cadata")
    parser.add_argument("--out", type=Path, default=None,
                        help="where results go (default: a new temporary directory)")
    parser.add_argument("--checkpoints", default=",".join(map(str, CHECKPOINTS)))
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--kons-max", type=int, default=5000, help="largest n for exact KONS")
    parser.add_argument("--gammas", default="0,0.01,0.1", help="Sketched-KONS probability floors")
    parser.add_argument("--kernel-gamma", type=float, default=0.5)
    parser.add_argument("--C", type=float, default=3.0)
    parser.add_argument("--beta", type=float, default=1.0, help="KORS oversampling of Sketched-KONS")
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="BLAS threads (threadpoolctl); 1 avoids waiting on a busy second core")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild scaling.md and scaling.png from OUT/scaling.json without timing")
    args = parser.parse_args(argv)
    if args.report_only:
        if args.out is None:
            parser.error("--report-only rebuilds the report of the directory named by --out")
        raw = json.loads((args.out / "scaling.json").read_text())
        all_series = [Series(s["label"], s["params"], [Checkpoint(**c) for c in s["checkpoints"]],
                             {int(k): v for k, v in s["rounds_to"].items()}) for s in raw["series"]]
        write_markdown(args.out / "scaling.md", all_series, raw["meta"], raw["provenance"])
        write_plot(args.out / "scaling.png", all_series, raw["meta"])
        return 0
    require_datasets([args.data], "benchmarks.scaling")
    args.out = results_dir(args.out, "scaling")
    stamp = provenance(registry.sources_of("scaling.md") or ())  # the code imported now is what runs
    with blas_threads(args.blas_threads) as blas:
        all_series, meta = _measure(args, argv, blas)
    raw = stamp_json({"meta": meta, "series": [asdict(s) for s in all_series]}, stamp)
    (args.out / "scaling.json").write_text(json.dumps(raw, indent=1, default=str))
    write_markdown(args.out / "scaling.md", all_series, meta, stamp)
    write_plot(args.out / "scaling.png", all_series, meta)
    print(f"wrote {args.out / 'scaling.md'}", flush=True)
    return 0


def _measure(
    args: argparse.Namespace, argv: Sequence[str] | None, blas: str
) -> tuple[list[Series], dict[str, Any]]:
    """Run every method over the stream; return the series and the run's description."""
    checkpoints = [int(c) for c in args.checkpoints.split(",")]
    data = load_dataset(args.data)
    X, y = data.X, data.y
    kernel = RBF(gamma=args.kernel_gamma)
    common = {"kernel": kernel, "loss": "squared", "C": args.C, "alpha": 1.0}
    load_before = os.getloadavg()
    all_series: list[Series] = []

    print(f"exact KONS up to n={args.kons_max}", flush=True)
    all_series.append(learner_series(
        "KONS (exact)", kons.KONS(**common), X, y, [c for c in checkpoints if c <= args.kons_max],
        args.block, report_rounds=(1000, 2000, 5000)))
    for floor in (float(g) for g in args.gammas.split(",")):
        label = f"SketchedKONS gamma={floor:g}"
        print(label, flush=True)
        learner = kons.SketchedKONS(**common, beta=args.beta, gamma=floor, seed=0)
        all_series.append(learner_series(label, learner, X, y, checkpoints, args.block))
    print("KernelOGD", flush=True)
    all_series.append(learner_series("KernelOGD", kons.KernelOGD(kernel=kernel, loss="squared", C=args.C),
                                     X, y, checkpoints, args.block))
    all_series.append(floor_series(X, kernel, checkpoints, args.block))

    five_k = all_series[0].rounds_to.get(5000)
    verdict = ("not measured (the stream or --kons-max stopped earlier)." if five_k is None else
               f"measured {five_k:.1f} s for the first 5,000 rounds in this run on the loaded machine "
               f"({'met' if five_k < 30 else 'NOT met with a clear margin' if five_k < 60 else 'NOT met'}"
               "; 'well under a minute' read as < 30 s).")
    meta = {
        "command": command_line("benchmarks.scaling", argv),
        "data": args.data, "rows": len(y), "dim": X.shape[1], "kernel_gamma": args.kernel_gamma,
        "C": args.C, "beta": args.beta, "block": args.block, "checkpoints": checkpoints,
        "machine": f"{machine_summary()}, numpy {np.__version__}, {blas}",
        "load_before": " / ".join(f"{v:.1f}" for v in load_before),
        "load_after": " / ".join(f"{v:.1f}" for v in os.getloadavg()),
        "kons_verdict": verdict,
    }
    return all_series, meta


if __name__ == "__main__":
    sys.exit(main())
