"""Where a single-row round's CPU goes in the service: the whole app and its parts, in one process.

:mod:`benchmarks.hotpath_paired` measures what a served round costs; this says what it is made of. The app
(:func:`kons_service.http.app.create_app`, on a fresh ``redis-server``) is called in process as uvicorn calls
it (one ASGI call a request, no socket), beside its parts called directly on the same learner (an ``auto``
learner of dimension 8 warmed with 64 rows of ``cadata``, as in the paired run): per single-row predict, the
whole app, ``LearnerService.predict``, the store's read of the learner's head and the learner's
``predict_round``; per feedback, the whole app, ``LearnerService.feedback`` and the learner's ``learn_round``,
``state_nbytes`` and ``stats`` (which the service's writer takes after each round). Each figure is the main
thread's CPU (``time.thread_time``) per request, from its start to its answer (with the service's background
work that ran meanwhile, as a served request's CPU has it), in blocks of ``--rows`` requests taking turns;
"warm": the requests back to back; "cold": each one after a walk through ``--flush-mib`` of memory (untimed),
as a served request comes after the client's, the echo's and the machine's other work on the same cores.
Medians over the blocks::

    OPENBLAS_NUM_THREADS=1 nice -n 5 python -m benchmarks.hotpath_parts \\
        --out benchmarks/results/hotpath_single
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import command_line, machine_summary, markdown_table
from benchmarks.hotpath import LEARNERS, WARM_ROWS, Rows
from benchmarks.provenance import provenance, publish
from kons_service.core.service import Feedback
from kons_service.http.app import create_app
from kons_service.settings import Settings
from kons_service.store import LearnerRef
from testkit.processes import RedisServer

__all__ = ["main", "run"]

SOURCES = ("kons", "kons_service", "benchmarks/hotpath.py", "benchmarks/hotpath_parts.py")
PATH = "/v1/learners/parts"
Step = Callable[[tuple[list[float], float]], Awaitable[object]]


async def _call(app: Any, method: str, path: str, body: dict[str, Any], expected: int = 200) -> None:
    """Send ``body`` to the app as uvicorn hands a request over (one ASGI call); it must answer
    ``expected``."""
    raw = json.dumps(body).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"parts"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(raw)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "state": {}}
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    await app(scope, receive, send)
    if statuses != [expected]:
        raise RuntimeError(f"{method} {path} answered {statuses}, not {expected}")


async def _cpu_ms(step: Step, rows: Sequence[tuple[list[float], float]], flush: np.ndarray | None) -> float:
    """The main thread's CPU per ``step`` over ``rows`` (ms); with ``flush``, each after a walk through it."""
    total = 0.0
    for row in rows:
        if flush is not None:
            flush.sum()
        started = time.thread_time()
        await step(row)
        total += time.thread_time() - started
    return total / len(rows) * 1e3


async def run(*, blocks: int, rows_per_block: int, flush_mib: int) -> dict[str, Any]:
    stream = Rows("cadata")
    flush = np.ones(flush_mib * 2**20 // 8)
    figures: dict[str, list[float]] = {}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="kons-parts-") as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        try:
            app = create_app(Settings(redis_url=server.url))
            async with app.router.lifespan_context(app):
                await _call(app, "PUT", PATH, LEARNERS["auto"], 201)
                warm = stream.rows(0, WARM_ROWS)
                await _call(app, "POST", f"{PATH}/feedback", {"items": [{"x": x, "y": y} for x, y in warm]})
                service = app.state.service
                ref = LearnerRef("default", PATH.rsplit("/", 1)[1])
                learner = service.cache.held(ref)
                assert learner is not None

                async def app_predict(row: tuple[list[float], float]) -> None:
                    await _call(app, "POST", f"{PATH}/predict", {"x": row[0]})

                async def service_predict(row: tuple[list[float], float]) -> object:
                    return await service.predict(ref, [np.asarray(row[0])], None)

                async def store_head(row: tuple[list[float], float]) -> object:
                    return await service.store.head(ref)

                async def learner_predict(row: tuple[list[float], float]) -> object:
                    return learner.predict_round(np.asarray(row[0]), None)

                async def app_feedback(row: tuple[list[float], float]) -> None:
                    await _call(app, "POST", f"{PATH}/feedback", {"x": row[0], "y": row[1]})

                async def service_feedback(row: tuple[list[float], float]) -> object:
                    return await service.feedback(ref, [Feedback(y=row[1], x=np.asarray(row[0]))])

                async def learner_state(row: tuple[list[float], float]) -> object:
                    return learner.state_nbytes(), learner.stats()

                steps: dict[str, Step] = {
                    "predict: the app": app_predict, "predict: LearnerService.predict": service_predict,
                    "predict: the store's head": store_head, "predict: the learner's predict_round":
                    learner_predict, "feedback: the app": app_feedback,
                    "feedback: LearnerService.feedback": service_feedback,
                    "feedback: the learner's state_nbytes and stats": learner_state}
                start = WARM_ROWS
                for _ in range(blocks):
                    rows = stream.rows(start, rows_per_block)
                    for name, step in steps.items():
                        for state, flushed in (("warm", None), ("cold", flush)):
                            figures.setdefault(f"{name}|{state}", []).append(
                                await _cpu_ms(step, rows, flushed))
                    # (the learner's own round, on a copy: the service's learner keeps to its log)
                    copy = type(learner).from_bytes(learner.to_bytes())
                    for state, flushed in (("warm", None), ("cold", flush)):
                        async def copy_round(row: tuple[list[float], float], copy: Any = copy) -> object:
                            return copy.learn_round(np.asarray(row[0]), row[1], None, track=False)

                        figures.setdefault(f"feedback: the learner's learn_round|{state}", []).append(
                            await _cpu_ms(copy_round, rows, flushed))
                    start += rows_per_block
                    loads.append(os.getloadavg()[0])
        finally:
            server.stop()
    return {"blocks": blocks, "rows_per_block": rows_per_block, "flush_mib": flush_mib, "figures": figures,
            "load": [round(min(loads), 1), round(max(loads), 1)]}


def markdown(record: dict[str, Any], command: str) -> str:
    names = list(dict.fromkeys(key.split("|")[0] for key in record["figures"]))
    rows = []
    for name in names:
        cells: list[object] = [name]
        for state in ("warm", "cold"):
            values = record["figures"][f"{name}|{state}"]
            cells.append(f"{statistics.median(values):.3f}")
        rows.append(cells)
    low, high = record["load"]
    return "\n".join([
        "# Where a single-row round's CPU goes in the service", "",
        f"`{command}`; machine: {machine_summary()}, shared: 1-minute load average {low}-{high} during the "
        f"run. {record['blocks']} blocks of {record['rows_per_block']} requests per figure, taking turns; "
        "the main thread's CPU per request in ms, medians over the blocks; cold: each request after a walk "
        f"through {record['flush_mib']} MiB (`benchmarks/hotpath_parts.py` says how each figure is "
        "measured).", "",
        *markdown_table(["per request", "warm ms", "cold ms"], rows, "lrr"), ""])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--rows", type=int, default=40, help="requests per block and figure")
    parser.add_argument("--flush-mib", type=int, default=64, help="memory walked before each cold request")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/hotpath_single"))
    args = parser.parse_args(argv)
    stamp = provenance(SOURCES)
    record = asyncio.run(run(blocks=args.blocks, rows_per_block=args.rows, flush_mib=args.flush_mib))
    text = markdown(record, command_line("benchmarks.hotpath_parts", argv, outputs=("--out",)))
    publish(args.out, "parts", stamp, text, record, indent=1)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
