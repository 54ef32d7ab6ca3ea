"""The local expert of ``auto``'s mixture (:mod:`kons._local`): exact against a slow reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kons._local import RecentNeighbours
from kons.errors import StateFormatError


def _reference_targets(rows: list[np.ndarray], targets: list[float], capacity: int, k: int,
                       x: np.ndarray) -> list[float]:
    """The targets of the k nearest of the last ``capacity`` rows, by a full sort."""
    window = list(zip(rows[-capacity:], targets[-capacity:], strict=True))
    window.sort(key=lambda pair: float(np.sum((pair[0] - x) ** 2)))
    return [t for _, t in window[:k]]


@pytest.mark.parametrize("task", ["binary", "regression", "classes"])
def test_the_local_expert_plays_its_nearest_kept_rows(task: str) -> None:
    rng = np.random.default_rng(3)
    capacity, k, dim, clip = 7, 3, 4, 2.0
    neighbours = RecentNeighbours(capacity, dim, k=k, clip=clip)
    rows: list[np.ndarray] = []
    targets: list[float] = []
    for _ in range(30):  # past the ring's capacity several times
        x = rng.normal(size=dim)
        nearest = _reference_targets(rows, targets, capacity, k, x)
        if task == "classes":
            label = int(rng.integers(3))
            played = neighbours.learn_class(x, label, 3)
            counts = np.array([nearest.count(c) for c in range(3)], dtype=float)
            np.testing.assert_allclose(played, (counts + 1.0) / (len(nearest) + 3), rtol=1e-12)
            t = float(label)
        elif task == "binary":
            t = float(rng.choice([-1.0, 1.0]))
            positive = sum(v > 0 for v in nearest)
            expected = math.log((positive + 1.0) / (len(nearest) - positive + 1.0))
            assert neighbours.learn(x, t, binary=True) == pytest.approx(min(max(expected, -clip), clip),
                                                                        rel=1e-12)
        else:
            t = float(rng.normal() * 2.0)
            expected = float(np.mean(nearest)) if nearest else 0.0
            assert neighbours.learn(x, t, binary=False) == pytest.approx(min(max(expected, -clip), clip),
                                                                         rel=1e-12)
        rows.append(x)
        targets.append(t)


def test_the_local_expert_state_round_trips_and_rejects_a_mismatch() -> None:
    rng = np.random.default_rng(4)
    neighbours = RecentNeighbours(5, 3, k=2, clip=3.0)
    for _ in range(8):
        neighbours.learn(rng.normal(size=3), float(rng.normal()), binary=False)
    restored = RecentNeighbours(5, 3, k=2, clip=3.0)
    restored.restore({name: a.copy() for name, a in neighbours.arrays().items()}, neighbours.scalars())
    x = rng.normal(size=3)
    assert restored.predict(x, binary=False) == neighbours.predict(x, binary=False)
    with pytest.raises(StateFormatError):
        RecentNeighbours(6, 3, k=2, clip=3.0).restore(neighbours.arrays(), neighbours.scalars())


def test_a_binary_local_expert_goes_on_with_a_third_class() -> None:
    neighbours = RecentNeighbours(4, 1, k=2, clip=3.0)
    for x, label in ((0.0, -1.0), (1.0, 1.0), (2.0, 1.0)):
        neighbours.learn(np.array([x]), label, binary=True)
    # the nearest of 1.9 are the rows 2 and 1, both +1: class 1 twice
    np.testing.assert_allclose(neighbours.learn_class(np.array([1.9]), 2, 3), [1 / 5, 3 / 5, 1 / 5])
