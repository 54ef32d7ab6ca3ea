"""What the learner cache's bookkeeping costs a request, by how many learners it holds.

Each request takes a learner's entry, locks it and leaves it (``LearnerCache.locked``), which is when the
cache evicts; the learners are stand-ins of a fixed size (no store, no kons: only the cache's own work is
timed). Two workloads: a full cache that evicts nothing (every learner already held, asked in turn), and
churn (each request loads a learner the cache does not hold, so one is evicted). The cache of this checkout
and that of ``--baseline`` (a git revision: its ``kons_service/core/cache.py``, imported beside this one)
run in blocks that alternate, in one process; CPU time per request::

    nice -n 5 python -m benchmarks.cache_evict --baseline 96b1514 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from benchmarks.common import machine_summary, markdown_table, module_at, run_and_publish
from kons_service.core import cache as current_cache
from kons_service.core.metrics import Metrics
from kons_service.settings import Settings
from kons_service.store import Head, LearnerRef

__all__ = ["main", "run"]

SOURCES = ("kons_service/core/cache.py", "benchmarks/cache_evict.py")
_STATE_BYTES = 100_000


class _Learner:
    """A stand-in learner: only its size is asked."""

    def state_nbytes(self) -> int:
        return _STATE_BYTES


async def _request(cache: Any, ref: LearnerRef) -> None:
    async with cache.locked(cache.entry(ref)) as entry:
        if entry.learner is None:
            entry.adopt(_Learner(), {}, Head("i", 0, 0, "i"))


def _cache(module: Any, learners: int) -> Any:
    store = SimpleNamespace(server=SimpleNamespace(may_have_lost=lambda: False))
    settings = Settings(cache_size=learners, cache_bytes=learners * _STATE_BYTES)
    return module.LearnerCache(store, settings, Metrics(per_learner=False), on_evict=lambda entry: None)


async def _block(cache: Any, refs: list[LearnerRef], start: int, requests: int) -> float:
    """CPU seconds per request of ``requests`` requests to ``refs`` in turn, from ``start``."""
    started = time.process_time()
    for i in range(start, start + requests):
        await _request(cache, refs[i % len(refs)])
    return (time.process_time() - started) / requests


async def _workload(modules: dict[str, Any], learners: int, churn: bool, blocks: int,
                    requests: int) -> dict[str, Any]:
    # churn: one learner more than the cache holds, asked in turn, so that each request loads one and evicts
    refs = [LearnerRef("t", f"m{i}") for i in range(learners + 1 if churn else learners)]
    caches = {label: _cache(module, learners) for label, module in modules.items()}
    for cache in caches.values():
        await _block(cache, refs, 0, len(refs))  # filled
    seconds: dict[str, list[float]] = {label: [] for label in caches}
    for block in range(blocks):
        order = list(caches.items()) if block % 2 == 0 else list(reversed(caches.items()))
        for label, cache in order:
            seconds[label].append(await _block(cache, refs, block * requests, requests))
    micro = {label: statistics.median(s) * 1e6 for label, s in seconds.items()}
    return {"learners": learners, "workload": "churn" if churn else "full",
            "current_us": round(micro["current"], 2), "baseline_us": round(micro["baseline"], 2),
            "ratio": round(micro["current"] / micro["baseline"], 3)}


async def run(baseline: ModuleType, *, sizes: Sequence[int], blocks: int, requests: int) -> dict[str, Any]:
    modules = {"current": current_cache, "baseline": baseline}
    rows = [await _workload(modules, n, churn, blocks, requests) for n in sizes for churn in (False, True)]
    return {"rows": rows, "load": round(os.getloadavg()[0], 1)}


def markdown(results: dict[str, Any], command: str, baseline: str) -> str:
    rows = [[r["learners"], r["workload"], r["baseline_us"], r["current_us"], f"{r['ratio']:.3f}x"]
            for r in results["rows"]]
    return "\n".join([
        "# The learner cache's own cost per request, by the learners it holds", "",
        f"`{command}`; machine: {machine_summary()}, shared, load average {results['load']} at the end. "
        f"Baseline: `kons_service/core/cache.py` at {baseline}. Median of the blocks' CPU µs per request "
        "(alternating blocks in one process); stand-in learners, no store: the cache's bookkeeping only.", "",
        *markdown_table(["learners held", "workload", f"µs, {baseline}", "µs, this checkout", "ratio"],
                        rows, "lrrrr"), ""])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="main", help="git revision whose cache to compare with")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--requests", type=int, default=2000, help="requests per block")
    parser.add_argument("--out", type=Path, help="write cache_evict.md and cache_evict.json here")
    args = parser.parse_args(argv)

    def measure() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="kons-cache-") as tmp:
            baseline = module_at(args.baseline, "kons_service/core/cache.py", Path(tmp))
            return asyncio.run(run(baseline, sizes=args.sizes, blocks=args.blocks, requests=args.requests))

    return run_and_publish("benchmarks.cache_evict", argv, name="cache_evict", out=args.out, sources=SOURCES,
                           run=measure, indent=2,
                           page=lambda results, command: markdown(results, command, args.baseline))


if __name__ == "__main__":
    raise SystemExit(main())
