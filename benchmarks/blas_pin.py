"""The per-round price of pinning OpenBLAS to one thread during a round (:mod:`kons._blas`).

Each learner plays the same stream twice in this process, once as shipped and once with the pin
replaced by a no-op (what every round did before), in alternating blocks of rounds so that both see the
same machine load; the report gives microseconds per round of each and their ratio, and the cost of
entering and leaving the pin alone. Run it with one BLAS thread (then the pin changes nothing but its own
cost)::

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.blas_pin --out benchmarks/results
"""

from __future__ import annotations

import argparse
import contextlib
import time
import timeit
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info

import kons.base
from benchmarks import registry
from benchmarks.common import command_line, git_commit, machine_summary, markdown_table
from benchmarks.provenance import provenance, stamp_markdown
from kons._blas import one_blas_thread
from kons.base import learner_from_params

#: (label, algorithm, parameters): the cheapest rounds (where a fixed cost shows most) and the defaults.
LEARNERS: list[tuple[str, str, dict[str, object]]] = [
    ("OGD, paper-exact", "ogd", {"preprocess": False}),
    ("ONS, paper-exact", "ons", {"preprocess": False}),
    ("ONS (defaults)", "ons", {}),
    ("FD-SON (defaults)", "fd_son", {}),
    ("Sketched-KONS (defaults)", "sketched_kons", {}),
    ("Nystrom-KONS (defaults)", "nystrom_kons", {}),
    ("auto (defaults)", "auto", {}),
]
DIM = 8


def _seconds_per_round(
    algorithm: str, params: dict[str, object], rounds: int, blocks: int
) -> tuple[float, float, float]:
    """Median seconds per round with the pin and without it, and the median of the per-block ratios.

    Two learners play the same rows, block after block; which one goes first alternates, so that a
    change of machine load hits both variants alike (the ratio of a block pair is what is robust here).
    """
    rng = np.random.default_rng(0)
    X = rng.standard_normal((rounds * blocks, DIM))
    Y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(len(X))
    learners = {pin: learner_from_params(algorithm, dict(params)) for pin in (True, False)}
    times: dict[bool, list[float]] = {True: [], False: []}
    for block in range(blocks):
        rows = slice(block * rounds, (block + 1) * rounds)
        for pin in (True, False) if block % 2 else (False, True):
            # swaps the pin that kons.base's rounds call (its module global, not re-exported)
            kons.base.one_blas_thread = one_blas_thread if pin else contextlib.nullcontext  # type: ignore[attr-defined, assignment]
            start = time.perf_counter()
            learners[pin].learn_many(X[rows], Y[rows])
            times[pin].append((time.perf_counter() - start) / rounds)
    kons.base.one_blas_thread = one_blas_thread  # type: ignore[attr-defined]
    ratios = np.array(times[True]) / np.array(times[False])
    return float(np.median(times[True])), float(np.median(times[False])), float(np.median(ratios))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=50, help="rounds per block")
    parser.add_argument("--blocks", type=int, default=40, help="blocks per variant (alternated)")
    parser.add_argument("--out", type=Path, default=None, help="write blas_pin.md there")
    args = parser.parse_args()
    stamp = provenance(registry.sources_of("blas_pin.md") or ())  # the code imported now is what runs
    pin_alone = min(timeit.repeat("with pin(): pass", globals={"pin": one_blas_thread}, number=20_000,
                                  repeat=5))
    rows = []
    for label, algorithm, params in LEARNERS:
        with_pin, without, ratio = _seconds_per_round(algorithm, params, args.rounds, args.blocks)
        rows.append((label, f"{without * 1e6:.1f}", f"{with_pin * 1e6:.1f}", f"{ratio:.3f}"))
        print(*rows[-1], flush=True)
    threads = sorted({pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"})
    lines = [
        "# The price of pinning BLAS to one thread per round",
        "",
        f"`{command_line('benchmarks.blas_pin', outputs=['--out'])}` at {git_commit()}; {machine_summary()}; "
        f"BLAS threads of the process: {threads}. Stream: {args.blocks} blocks of {args.rounds} rounds per "
        f"variant, alternated, d = {DIM}, standard normal features; medians over blocks, and the median "
        "of the per-block ratios (with / without).",
        "",
        f"Entering and leaving the pin alone: {pin_alone / 20_000 * 1e6:.2f} us.",
        "",
        *markdown_table(["learner", "us/round before (no pin)", "us/round with the pin", "median ratio"],
                        rows, "lrrr"),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "blas_pin.md").write_text(stamp_markdown(text, stamp))


if __name__ == "__main__":
    main()
