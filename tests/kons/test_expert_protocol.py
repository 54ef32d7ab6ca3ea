"""A kind of expert is one adapter (its build and restore beside it) and one line of
:data:`kons.auto.grid.EXPERTS`: an expert defined here plugs into ``auto``'s grid, plays in its mixture, and
is saved and restored with it; a state saved without it loads and goes on as before, its slot empty (the
mixture's product with one more weight, 0, may round the last bit otherwise)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kons
import kons.auto.grid
from kons.auto.experts.protocol import PlayTogether, Row
from kons.auto.grid import EXPERTS, Grid, Kind
from kons.errors import StateFormatError


class LastTarget:
    """Plays the last target it learnt (a class's probabilities: the last label's, smoothed)."""

    sleeps = False
    plays_together: PlayTogether | None = None

    def __init__(self) -> None:
        self.last = np.zeros(1)

    def predict(self, row: Row) -> float:
        return float(self.last[0])

    def learn(self, row: Row, target: float) -> float:
        played = self.predict(row)
        self.last = np.array([target])
        return played

    def probabilities(self, row: Row, classes: int) -> np.ndarray:
        p = np.ones(classes)
        p[int(self.last[0]) % classes] += classes
        probabilities: np.ndarray = p / p.sum()
        return probabilities

    def learn_class(self, row: Row, label: int, classes: int) -> np.ndarray:
        played = self.probabilities(row, classes)
        self.last = np.array([float(label)])
        return played

    def widen(self, classes: int) -> None:
        pass

    def observe(self, row: Row, target: float, classes: int, playing: bool) -> None:
        pass

    def ready(self) -> bool:
        return True

    def forget(self, rounds: int) -> None:
        pass

    def hold_growth(self, held: bool) -> None:
        pass

    def nbytes(self) -> int:
        return self.last.nbytes

    def growth_nbytes(self, rounds: int) -> int:
        return 0

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        return {f"{name}_last": self.last}

    def scalars(self) -> Any:
        return None


def _restore(grid: Grid, built: list[Any] | None, arrays: dict[str, np.ndarray],
             scalars: dict[str, Any]) -> list[Any] | None:
    if "last_last" in arrays:
        if arrays["last_last"].shape != (1,):
            raise StateFormatError("not the last target")
        assert built is not None
        built[0].last = arrays["last_last"].copy()
    return built


#: The one line.
LAST = Kind(("last",), ("last target",), lambda grid: [LastTarget()], _restore, start_prior=0.05)


def _stream(task: str, rows: int, seed: int) -> list[tuple[np.ndarray, Any]]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, 3))
    if task == "regression":
        return [(x, float(x[0] - 2 * x[1])) for x in X]
    return [(x, "abc"[int(x[0] > 0) + int(x[1] > 0.5)]) for x in X]


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_an_expert_defined_here_plays_and_is_saved_and_restored(task: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _stream(task, 500, 7)
    monkeypatch.setattr(kons.auto.grid, "EXPERTS", (*EXPERTS, LAST))
    learner = kons.Auto(task=task)
    for x, y in stream[:400]:
        learner.learn_one(x, y)
    weights = learner.stats()["weights"]
    assert "last target" in weights and 0.0 < weights["last target"] < 1.0  # in play in the mixture
    restored = kons.load(learner.to_bytes())
    assert restored.to_bytes() == learner.to_bytes()
    for x, y in stream[400:]:
        assert restored.learn_one(x, y) == learner.learn_one(x, y)
    assert restored.to_bytes() == learner.to_bytes()


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_a_state_saved_without_it_loads_and_goes_on_as_before(task: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _stream(task, 500, 8)
    before = kons.Auto(task=task)
    for x, y in stream[:400]:
        before.learn_one(x, y)
    blob = before.to_bytes()
    monkeypatch.setattr(kons.auto.grid, "EXPERTS", (*EXPERTS, LAST))
    extended = kons.load(blob)
    assert "last target" not in extended.stats()["weights"]  # its slot empty: saved before it existed
    plays = np.array([[extended.learn_one(x, y), before.learn_one(x, y)] for x, y in stream[400:]])
    assert "last target" not in extended.stats()["weights"]
    # the mixture is a product with the weights, one longer: its sum may be rounded otherwise, by an ulp
    # (whether it is depends on the length, as the product's blocks fall)
    np.testing.assert_allclose(plays[:, 0], plays[:, 1], rtol=1e-13, atol=0)


calls: list[list[int]] = []


def _play_last_targets(experts: list[tuple[int, Any]], row: Row, probabilities: np.ndarray) -> None:
    """The last-target experts' class probabilities all at once, as each plays its own."""
    calls.append([slot for slot, _ in experts])
    for slot, expert in experts:
        probabilities[slot] = expert.probabilities(row, probabilities.shape[1])


class LastTargetTogether(LastTarget):
    """:class:`LastTarget`, whose experts play their class probabilities together."""

    plays_together = staticmethod(_play_last_targets)


def _pair(expert: type[LastTarget]) -> Kind:
    return Kind(("last_a", "last_b"), ("last target a", "last target b"),
                lambda grid: [expert(), expert()], lambda grid, built, arrays, scalars: built,
                start_prior=0.05)


def test_experts_that_play_together_are_played_once_a_round_and_as_each_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _stream("classification", 300, 9)
    plays, slots = {}, set()
    for expert in (LastTarget, LastTargetTogether):
        monkeypatch.setattr(kons.auto.grid, "EXPERTS", (*EXPERTS, _pair(expert)))
        calls.clear()
        learner = kons.Auto(task="classification")
        plays[expert] = [(learner.predict_proba_by_class_one(x).tolist(),
                          learner.learn_proba_by_class_one(x, y).tolist()) for x, y in stream]
        assert learner._grid is not None
        slots = {learner._grid.slot["last_a"], learner._grid.slot["last_b"]}
    assert plays[LastTarget] == plays[LastTargetTogether]
    assert calls and all(sorted(call) == sorted(slots) for call in calls)  # both in one call, nothing else
