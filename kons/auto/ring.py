"""A ring of fixed capacity: the bookkeeping behind the kept rounds of the restarts and the local
expert's window."""

from __future__ import annotations

import numpy as np

from kons.errors import StateFormatError

__all__ = ["Ring"]


class Ring:
    """The bookkeeping of a ring of ``capacity`` slots (its owner holds the arrays): how many slots are
    kept (at most ``capacity``) and the slot the next entry takes, the oldest kept once the ring is full."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.count = 0
        self.next = 0

    def advance(self) -> None:
        """The slot :attr:`next` was just written: the next entry takes the one after it."""
        self.next = (self.next + 1) % self.capacity
        self.count = min(self.count + 1, self.capacity)

    def order(self) -> np.ndarray:
        """The kept slots, oldest first."""
        return (self.next - self.count + np.arange(self.count)) % self.capacity

    def scalars(self) -> list[int]:
        return [self.count, self.next]

    def restored(self, scalars: list[int], mismatch: str) -> Ring:
        """A ring of this capacity at the saved :meth:`scalars`; raises ``StateFormatError(mismatch)`` if
        they do not fit it."""
        count, position = (int(v) for v in scalars)
        if not 0 <= count <= self.capacity or not 0 <= position < self.capacity:
            raise StateFormatError(mismatch)
        ring = Ring(self.capacity)
        ring.count, ring.next = count, position
        return ring
