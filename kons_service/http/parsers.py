"""Strict JSON parsing of request bodies: small ones inline, large ones in a worker process.

``json.loads`` accepts the non-standard tokens ``NaN``, ``Infinity`` and ``-Infinity`` and turns
``1e999`` into ``inf``; none of them may reach a learner. :func:`loads_strict` refuses them, using
pydantic-core's parser (about 7x faster than ``json.loads`` on feature vectors) and falling back to the
standard one to name the offending token. Nor may a string that is not text: JSON's grammar lets an escape
write a lone UTF-16 surrogate (``"\\ud800"``, what a JavaScript client sends when it cuts an emoji in two),
which is no character, cannot be encoded in UTF-8 and so could be taken but never answered; such a body is
refused here (:class:`~kons_service.http.errors.InvalidTextError`), the one door of every body's strings.

Parsing 8 MiB of JSON numbers creates about 600,000 Python floats and validating them visits each one:
about 85 ms of a core during which even a worker *thread* holds the GIL, so that every other tenant's
request in the process waits (a victim's predict p50 went from 3 to 81 ms under two senders). So a body
over :data:`INLINE_BYTES` is parsed *and validated* by a worker process, which sends back either the
validated body, whose feature vectors are float64 arrays (one buffer each, copied back in one piece
instead of rebuilt number by number), or what was wrong with it in the terms the serving process would
have used. The serving process only moves bytes.

The pool is small (``KONS_PARSE_WORKERS``, 1 by default: on a machine of few cores a second parser would
take the core the event loop needs) and starts with the first large body; its processes are spawned, not
forked, since the serving process runs threads, and run at a lower CPU priority (:data:`NICENESS`): when
the cores are busy, bulk bodies wait, not the small requests of everyone else. They die with the serving
process, even a SIGKILLed one (:mod:`kons_service.children`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

import pydantic_core
from pydantic import TypeAdapter, ValidationError

from kons_service.children import die_with_parent
from kons_service.http.errors import InvalidJSONError, InvalidTextError, ParserUnavailableError

__all__ = ["INLINE_BYTES", "NICENESS", "Invalid", "Malformed", "Outcome", "Parsed", "ParserPool",
           "loads_strict", "parse_and_validate"]

#: Bodies larger than this are parsed in a worker process (with keys configured, those over
#: :data:`kons_service.http.body.HEAVY_BYTES` too).
INLINE_BYTES = 64 * 1024
#: The parser processes' niceness, added to the serving process's.
NICENESS = 10


def _reject_constant(token: str) -> Any:
    raise InvalidJSONError(f"The body is not valid JSON: the token {token!r} is not a number JSON allows.")


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidJSONError(f"The body is not valid JSON: the number {text[:40]!r} is out of range.")
    return value


def loads_strict(body: bytes) -> Any:
    """``json.loads`` without NaN/Infinity tokens, overflowing numbers or lone surrogates."""
    try:  # the fast parser, whose floats are Python's (correctly rounded); it gives inf for 1e999
        value = pydantic_core.from_json(body, allow_inf_nan=False)
    except ValueError:
        value = None
    else:
        if _finite_numbers(value):
            return value
    # A malformed body, a number out of range or a lone surrogate (which the fast parser refuses, the
    # standard one takes): the standard parser names the offending token, the walk the string.
    try:
        value = json.loads(body, parse_constant=_reject_constant, parse_float=_parse_float)
    except UnicodeDecodeError as exc:  # (a ValueError that is not a JSONDecodeError: it has no position)
        raise InvalidJSONError(f"The body is not valid JSON: it is not UTF-8 text ({exc.reason} at byte "
                               f"{exc.start}).") from None
    _check_text(value, ())
    return value


def _check_text(value: Any, where: tuple[str, ...]) -> None:
    """Refuse the first string (key or value) of ``value`` that holds a lone surrogate, naming its place."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            place, surrogate = ".".join(where) or "the body", ascii(exc.object[exc.start])[1:-1]
            raise InvalidTextError(
                f"The string at {place} holds a lone UTF-16 surrogate ({surrogate}), "
                "which is not a character: send text as UTF-8, or escape a character beyond U+FFFF as its "
                "pair of surrogates (a string cut in the middle of an emoji is the usual cause).") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, (*where, ascii(key)))
            _check_text(item, (*where, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_text(item, (*where, str(i)))


def _finite_numbers(value: Any) -> bool:
    """Whether every float inside a parsed JSON value is finite (a list of numbers is summed in C)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite_numbers(v) for v in value.values())
    if isinstance(value, list):
        try:
            if math.isfinite(sum(value)):
                return True
        except (TypeError, OverflowError):  # not all numbers, or an int beyond float range
            pass
        return all(_finite_numbers(v) for v in value)
    return True


@dataclass(frozen=True)
class Parsed:
    """A valid body: the value the route's handler receives."""

    body: Any


@dataclass(frozen=True)
class Malformed:
    """Not JSON: what the strict parser raised (an :class:`InvalidJSONError`'s message and type, or a
    :class:`json.JSONDecodeError`'s message and position)."""

    message: str
    position: int | None
    error: type[InvalidJSONError] = InvalidJSONError

    def raise_(self) -> None:
        if self.position is None:
            raise self.error(self.message)
        raise json.JSONDecodeError(self.message, "", self.position)


@dataclass(frozen=True)
class Invalid:
    """JSON that does not match the route's body type: the errors FastAPI gives for it."""

    errors: list[dict[str, Any]]


Outcome = Parsed | Malformed | Invalid


@functools.cache
def _adapter(body_type: Any) -> TypeAdapter[Any]:
    return TypeAdapter(body_type)


def parse_and_validate(body_type: Any, body: bytes) -> Outcome:
    """What the serving process would make of ``body`` for a route whose body is ``body_type``."""
    try:
        value = loads_strict(body)
    except InvalidJSONError as exc:
        return Malformed(exc.message, None, type(exc))
    except json.JSONDecodeError as exc:
        return Malformed(exc.msg, exc.pos)
    try:  # as FastAPI validates a body: its field's TypeAdapter, from attributes, errors under "body"
        return Parsed(_adapter(body_type).validate_python(value, from_attributes=True))
    except ValidationError as exc:
        return Invalid([{**err, "loc": ("body", *err["loc"])} for err in exc.errors(include_url=False)])


def _start_worker(parent_pid: int) -> None:
    """A parser process's set-up: it dies with the serving process, and yields the CPU to it."""
    die_with_parent(parent_pid)
    os.nice(NICENESS)


class ParserPool:
    """The worker processes that parse large bodies; closed with the app's lifespan."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._executor: ProcessPoolExecutor | None = None

    async def parse(self, body_type: Any, body: bytes) -> Outcome:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(self.workers, multiprocessing.get_context("spawn"),
                                                 initializer=_start_worker, initargs=(os.getpid(),))
        executor = self._executor
        try:
            return await asyncio.wrap_future(executor.submit(parse_and_validate, body_type, body))
        except BrokenProcessPool:
            # A worker died (killed for memory, say): this body is not parsed; the next gets a new pool.
            if self._executor is executor:
                self._executor = None
            executor.shutdown(wait=False, cancel_futures=True)
            raise ParserUnavailableError("The body parser restarted; retry.") from None

    def close(self) -> None:
        """Stop the workers at once. It runs at shutdown, once uvicorn has answered or cancelled every
        request: a body still being parsed serves no one, and a worker stuck in it (starved of the CPU at
        its niceness, or stopped) must not keep the process alive, as waiting for it did."""
        executor, self._executor = self._executor, None
        if executor is not None:
            # (the standard library has no public way to end a pool's busy workers before Python 3.14)
            for worker in list((executor._processes or {}).values()):
                worker.terminate()
            # (its manager thread sees them gone, fails what was left, and ends; this waits for it)
            executor.shutdown(wait=True, cancel_futures=True)
