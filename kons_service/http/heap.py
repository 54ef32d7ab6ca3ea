"""Give the memory the process freed back to the system (glibc's malloc, on Linux).

The service allocates and frees large buffers all the time: a snapshot's blob and its chunks (megabytes
for an ``auto`` learner), a learner rebuilt from one, a large body and its answer. glibc keeps freed memory
for its own later use, in one heap ("arena") per thread that allocated it, and raises the size under which
it serves blocks from those heaps (instead of mapping them afresh) each time it frees a mapped block: so a
replica's resident memory grew by about twice its learners' state, with no plateau in an 8-minute soak
(``benchmarks/results/soak.md``). :class:`HeapTrimmer` caps the heaps at ``arenas`` (the worker threads
then share them) and returns their free pages to the system every ``seconds`` (``malloc_trim``: a walk of
the heaps' free lists, about a millisecond, in a worker thread). Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util

import anyio.to_thread

__all__ = ["HeapTrimmer"]

_M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    with contextlib.suppress(OSError):
        libc = ctypes.CDLL(name)
        if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt"):
            return libc
    return None


class HeapTrimmer:
    """Caps glibc's heaps at ``arenas`` (0: glibc's default) when made, and trims them every ``seconds``
    (0: never) while :meth:`run` runs."""

    def __init__(self, seconds: float, arenas: int) -> None:
        self.seconds = seconds
        self._libc = _glibc()
        if self._libc is not None and arenas > 0:
            self._libc.mallopt(_M_ARENA_MAX, arenas)
        self.trims = 0

    def trim(self) -> None:
        if self._libc is not None:
            self._libc.malloc_trim(0)
            self.trims += 1

    async def run(self) -> None:
        if self._libc is None or self.seconds <= 0:
            return
        while True:
            await asyncio.sleep(self.seconds)
            await anyio.to_thread.run_sync(self.trim)
