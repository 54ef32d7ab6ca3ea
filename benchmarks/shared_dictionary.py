"""The grid's shared Nystrom dictionaries against the same grid with each member's own, in one process.

Two mature ``auto`` learners of the same stream, one as built (the members of one view and width share a
dictionary, :func:`kons.kernel.nystrom_kons.share_dictionaries`) and one whose members were each given a
private copy (the rounds of before), play the same rows in alternating blocks (``predict_one`` then
``learn_one`` per row), so that both see the same machine load; their plays are checked equal. Run it with
one BLAS thread::

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.shared_dictionary --task binary
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import numpy as np

import kons
from benchmarks.auto_round import _stream
from kons.kernel.nystrom_kons import NystromKONS

_BLOCK = 20


def _unshared(learner: kons.Auto) -> kons.Auto:
    """A copy of ``learner`` whose Nystrom members each hold a private copy of their dictionary."""
    alone = copy.deepcopy(learner)
    assert alone._grid is not None
    for base in alone._grid.bases:
        if isinstance(base, NystromKONS):
            base._detach()
    return alone


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=("regression", "binary"), default="regression")
    parser.add_argument("--warmup", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=600)
    args = parser.parse_args(argv)
    X, y = _stream(args.warmup + args.rounds)
    if args.task == "binary":
        y = np.where(y > np.median(y), 1.0, -1.0)
    shared = kons.Auto()
    shared.learn_many(X[:args.warmup], y[:args.warmup])
    alone = _unshared(shared)
    times: dict[str, list[float]] = {"shared": [], "alone": []}
    plays: dict[str, list[float]] = {"shared": [], "alone": []}
    for at in range(args.warmup, args.warmup + args.rounds, _BLOCK):
        order = [("shared", shared), ("alone", alone)]
        for name, learner in order if (at // _BLOCK) % 2 else order[::-1]:
            start = time.process_time()
            for x, target in zip(X[at:at + _BLOCK], y[at:at + _BLOCK], strict=True):
                plays[name].append(learner.predict_one(x))
                plays[name].append(learner.learn_one(x, target))
            times[name].append(time.process_time() - start)
    assert plays["shared"] == plays["alone"], "the shared dictionaries changed a play"
    ratios = [s / a for s, a in zip(times["shared"], times["alone"], strict=True)]
    print(f"{args.task}: CPU per round shared {1e6 * sum(times['shared']) / args.rounds:.0f} us, alone "
          f"{1e6 * sum(times['alone']) / args.rounds:.0f} us; ratio of the totals "
          f"{sum(times['shared']) / sum(times['alone']):.3f}, median of the {len(ratios)} paired blocks "
          f"{statistics.median(ratios):.3f}; plays identical; state bytes {len(shared.to_bytes())} and "
          f"{len(alone.to_bytes())}")


if __name__ == "__main__":
    main()
