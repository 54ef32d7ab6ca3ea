"""Running kons learners inside the service: configs, input checks, numeric guards, worker threads.

A learner's config is the JSON object ``{"algorithm", "dim", "params"}``; its canonical text is what the
store keeps, so two configs are the same iff their texts are equal.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import anyio.to_thread

import kons
from kons_service.errors import BatchTooLargeError, ResourceLimitError

__all__ = ["build", "canonical", "check_budget", "check_rows", "check_work", "config_of", "finite",
           "numerics", "offload"]

log = logging.getLogger("kons_service.learning")

T = TypeVar("T")
_INLINE_ROWS = 1  # more rows than this run in a worker thread


def canonical(config: dict[str, Any]) -> str:
    """The stored text of a config: two configs are the same iff their texts are equal."""
    try:
        return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise kons.InvalidParameterError(f"parameters must be finite JSON values: {exc}") from None


def config_of(learner: kons.Learner) -> dict[str, Any]:
    params = learner.get_params()
    dim = params.pop("dim", None)
    if isinstance(learner, kons.Preprocessed):  # shown as the base algorithm it wraps
        base = {**params["params"], "preprocess": True}
        return {"algorithm": params["algorithm"], "dim": dim, "params": base}
    if not learner.preprocesses:  # the paper-exact learner, asked for with "preprocess": false
        params["preprocess"] = False
    return {"algorithm": learner.name, "dim": dim, "params": params}


def build(config: dict[str, Any]) -> kons.Learner:
    """A fresh learner of ``config``."""
    return kons.learner_from_params(config["algorithm"], {**config["params"], "dim": config["dim"]})


def check_budget(learner: kons.Learner, dim: int | None, budget: int) -> int:
    """Refuse (nothing allocated) a learner whose state at input dimension ``dim`` would exceed ``budget``
    bytes; ``learner`` may be one built without its dimension (kons's estimate from its parameters).
    Returns that estimate."""
    state_bytes = type(learner).state_bytes({**learner.get_params(), "dim": dim})
    if state_bytes > budget:
        raise ResourceLimitError(
            f"This learner's state would take {state_bytes:.4g} bytes at dim {dim}; at most {budget} are "
            "allowed per learner (a smaller dim or sketch_size fits)."
        )
    return state_bytes


def check_work(state: int, rows: int, max_work_bytes: int) -> None:
    """Refuse (413, nothing played) a batch whose work, about ``rows`` times the learner's ``state`` bytes
    (a round of every learner reads or updates most of its state: d^2 for ONS, t^2 for exact KONS), is over
    ``max_work_bytes``: one request may not hold the process for long. A single row always passes."""
    if rows > 1 and rows * state > max_work_bytes:
        allowed = max(max_work_bytes // max(state, 1), 1)
        raise BatchTooLargeError(
            f"This learner's state is {state} bytes, so a batch may hold at most {allowed} rows now "
            f"(rows x state bytes <= KONS_BATCH_MAX_WORK_BYTES = {max_work_bytes}); got {rows}. Send smaller "
            "batches.")


def check_rows(learner: kons.Learner, xs: Sequence[Any], ys: Sequence[Any] | None = None) -> list[float]:
    """kons's own check of every row (and label) of a batch, before any round is played, so that bad input
    changes nothing; a message names the item when the batch has several. Returns the labels as the
    learner uses them ({0, 1} and booleans of a preprocessing learner's binary loss become {-1, +1}).

    For a learner whose dimension is not known yet (created without ``dim``), the batch's first row fixes
    it, so every other row must have its length (kons takes any length until its first round).
    """
    labels = []
    first_length = len(xs[0]) if xs and learner.input_dim is None else None
    for i, x in enumerate(xs):
        try:
            _, label = learner.check_round(x, None if ys is None else ys[i])
            if first_length is not None and len(x) != first_length:
                raise kons.InvalidInputError(
                    f"x must have dimension {first_length} (the batch's first row's); got {len(x)}.")
        except kons.InvalidInputError as exc:
            raise kons.InvalidInputError(f"item {i}: {exc}" if len(xs) > 1 else str(exc)) from None
        if label is not None:
            labels.append(label)
    return labels


@contextlib.contextmanager
def numerics() -> Iterator[None]:
    """kons's own errors pass; any other arithmetic failure inside a learner rejects the round (422)."""
    try:
        yield
    except kons.KonsError:
        raise
    except (ArithmeticError, ValueError) as exc:
        log.warning("a learner failed with %s; the round is rejected", type(exc).__name__)
        raise kons.NumericalError(f"the round overflowed float64 ({type(exc).__name__}).") from None


def finite(plays: Sequence[float], losses: Sequence[float], stats: dict[str, Any]) -> bool:
    """Whether played predictions, their losses and the learner's counters are all finite."""
    numbers = [*plays, *losses, *(v for v in stats.values() if isinstance(v, float))]
    return all(math.isfinite(v) for v in numbers)


async def offload(fn: Callable[[], T], rows: int) -> T:
    """Run learner numerics inline when small, else in a worker thread (never abandoned mid-way)."""
    if rows <= _INLINE_ROWS:
        return fn()
    return await anyio.to_thread.run_sync(fn)
