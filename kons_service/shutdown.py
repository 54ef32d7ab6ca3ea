"""A graceful shutdown's time: each step's bound, which add up within the grace period a process manager
gives a SIGTERMed process before its SIGKILL (Kubernetes' ``terminationGracePeriodSeconds``, 60 s in
``deploy/kubernetes/kons.yaml``); and :func:`within`, which abandons a step that outlasts its time, says
so once, and lets the shutdown go on (a Redis paused or gone must not keep a SIGTERMed process alive).

Shared by every layer (the store's head watch, the core's service, the edge's lifespan): it imports only
the standard library.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

__all__ = ["CONNECTIONS_SECONDS", "LAST_STEP_SECONDS", "SERVICE_SECONDS", "STORE_CLOSE_SECONDS",
           "TOTAL_SECONDS", "within"]

log = logging.getLogger("kons_service")

#: How long uvicorn waits for the requests under way before it cancels them (a feedback's is bounded by
#: the learner's lock wait and Redis's socket timeouts, well within it).
CONNECTIONS_SECONDS = 20  # (uvicorn takes whole seconds)
#: The service's own close: its background tasks' stops, then the snapshots of the learners with new rounds
#: (those left have their acknowledged rounds in the log, replayed at their next load).
SERVICE_SECONDS = 25.0
#: The steps after the service's deadline: the last snapshot's end, then the acknowledged marks' fsync.
LAST_STEP_SECONDS = 1.0
#: The store's connections' close (each waits for Redis's acknowledgement; the head watch's close is
#: bounded within it).
STORE_CLOSE_SECONDS = 5.0
#: The worst case of the bounded steps together, which the deployment's grace period must exceed by the
#: time the rest takes (the parser processes' end, the interpreter's exit).
TOTAL_SECONDS = CONNECTIONS_SECONDS + SERVICE_SECONDS + 2 * LAST_STEP_SECONDS + STORE_CLOSE_SECONDS


async def within(step: Awaitable[object], seconds: float, what: str) -> bool:
    """Run ``step``, waiting for it at most ``seconds``; past them it is cancelled and left, with a
    WARNING naming ``what`` was abandoned. Whether it finished (a failure is logged, not raised)."""
    task = asyncio.ensure_future(step)
    done, _ = await asyncio.wait({task}, timeout=max(0.0, seconds))
    if not done:
        task.cancel()
        log.warning("shutdown: abandoned %s after %.1f s", what, seconds)
        return False
    if not task.cancelled() and task.exception() is not None:
        log.error("shutdown: %s failed", what, exc_info=task.exception())
    return True
