"""Peak allocations of a block, for the tests that show a refused request allocated nothing large."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["SMALL_PEAK", "traced_peak"]

#: Far below any of the refused states (hundreds of MB to exabytes), far above a request's own needs.
SMALL_PEAK = 64 * 2**20


@contextmanager
def traced_peak() -> Iterator[list[int]]:
    """The peak of Python and NumPy allocations inside the block (NumPy reports to tracemalloc)."""
    result: list[int] = []
    tracemalloc.start()
    try:
        yield result
        result.append(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()
