"""Streams several test modules of ``auto`` learn from, and the check that a saved one goes on as it would."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import kons


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


def goes_on_identically(model: kons.Auto, X: np.ndarray | Sequence[Any], y: np.ndarray, start: int) -> None:
    """``model`` saved and restored plays and learns rows ``start:`` of ``(X, y)`` as ``model`` does."""
    restored = kons.load(model.to_bytes())
    assert restored.to_bytes() == model.to_bytes()
    for x, t in zip(X[start:], y[start:], strict=True):
        assert restored.predict_one(x) == model.predict_one(x)
        assert restored.learn_one(x, t) == model.learn_one(x, t)
    assert restored.to_bytes() == model.to_bytes()
