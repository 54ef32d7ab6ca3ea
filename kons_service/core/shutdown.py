"""Bounded steps of a graceful shutdown: a step that outlasts its time is abandoned, said once, and the
shutdown goes on (a Redis paused or gone must not keep a SIGTERMed process alive)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

__all__ = ["within"]

log = logging.getLogger("kons_service")


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
