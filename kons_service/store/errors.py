"""The store's errors, and :func:`translated`, which makes every failure of Redis one of them.

The HTTP answer to each is chosen at the edge (:mod:`kons_service.http.errors`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

import redis.exceptions

__all__ = ["NotReplicatedError", "SnapshotUnstableError", "StoreError", "StoreFullError",
           "StoreUnavailableError", "translated"]

S = TypeVar("S")
P = ParamSpec("P")
R = TypeVar("R")


class StoreError(Exception):
    """Base of the store's errors."""


class StoreUnavailableError(StoreError):
    """Redis did not answer, or answered with an error: the operation may or may not have happened."""


class StoreFullError(StoreUnavailableError):
    """Redis refused a write for want of memory (an OOM reply): full under ``noeviction``, or under a
    policy that may evict keys but found none to evict."""


class NotReplicatedError(StoreError):
    """A write reached the primary but fewer replicas than required confirmed it in time: it may be
    lost by a failover. A retry with the same request id is applied at most once."""


class SnapshotUnstableError(StoreError):
    """A learner's snapshot kept being replaced while it was read; the caller may retry."""


def translated(
    method: Callable[Concatenate[S, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """Raise :class:`StoreUnavailableError` for every failure of ``method`` other than the store's own
    errors (Redis stays here): Redis's errors, the cluster client's (a slot not covered during a
    failover), and whatever else redis-py lets out of a connection that a dead node closed under it
    (``RuntimeError``, ``AttributeError``, ``OSError``, ``TimeoutError`` seen on a real cluster), which
    would otherwise be a 500 and kill the background task that made the call."""

    async def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(self, *args, **kwargs)
        except StoreError:
            raise
        except redis.exceptions.ResponseError as exc:  # Redis's own words (an OOM, a full disk)
            full = isinstance(exc, redis.exceptions.OutOfMemoryError) or str(exc).startswith("OOM")
            raise (StoreFullError if full else StoreUnavailableError)(f"{type(exc).__name__}: {exc}") from exc
        except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
            raise StoreUnavailableError(type(exc).__name__) from exc
        except Exception as exc:
            raise StoreUnavailableError(f"{type(exc).__name__}: {exc}") from exc

    functools.update_wrapper(wrapper, method)
    return wrapper

