"""Streams several test modules of ``auto`` learn from."""

from __future__ import annotations

import numpy as np


def linear_then_flipped(rows: int, flip: int, *, labels: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """A linear target (its sign as a label with ``labels``) that the Newton and linear members learn, so
    that the other experts' weight falls away, flipped at round ``flip``."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(rows, 5))
    y = X @ np.array([1.0, -2.0, 0.5, 1.5, -1.0])
    if labels:
        y = np.where(y > 0, 1.0, -1.0)
    y[flip:] = -y[flip:]
    return X, y
