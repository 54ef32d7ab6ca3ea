"""A saved ``auto`` holds each distinct Nystrom dictionary once, and a full one without KORS's weights and
factor (which only its proposals use), and any without ``L``, which a load replays from the points: a
restored learner plays bit for bit as the one that never saved, and states saved before (each member's
copy, KORS's factor and ``L`` kept) load and continue identically."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import numpy as np
import pytest

import kons
import kons._state
import kons.auto.grid
from kons import NystromKONS
from kons.errors import StateFormatError
from kons.kernel.kors import KORS

#: A dictionary bound small enough for the members' dictionaries to fill within the test's rows.
BOUND = 40
ROWS, CHANGE, CONTINUATION = 360, 200, 60


def _stream(task: str) -> tuple[np.ndarray, list[Any]]:
    """Rows of 5 features whose target changes at row :data:`CHANGE` (a generation of restarted copies
    starts, with dictionaries of their own)."""
    rng = np.random.default_rng(11)
    n = ROWS + CONTINUATION
    X = rng.normal(size=(n, 5)) * [1.0, 20.0, 0.5, 1.0, 3.0]
    y = np.sin(X[:, 0]) + 0.05 * X[:, 1] + X[:, 2] * X[:, 3] + 0.1 * rng.normal(size=n)
    y[CHANGE:] *= -1.0
    if task == "regression":
        return X, list(y)
    return X, [f"class {i}" for i in np.digitize(y, [-0.5, 0.5])]


def _mature(task: str, monkeypatch: pytest.MonkeyPatch, *, factors_kept: bool = False
            ) -> tuple[kons.Auto, np.ndarray, list[Any]]:
    """A learner whose dictionaries are full; ``factors_kept``: its full dictionaries' KORS keeps its
    weights and factor in memory, as every learner did before they were let go (main at 96b1514)."""
    monkeypatch.setattr(kons.auto.grid, "MAX_DICTIONARY", BOUND)
    X, y = _stream(task)
    learner = kons.Auto(task=task, seed=0)
    with pytest.MonkeyPatch.context() as patch:
        if factors_kept:
            patch.setattr(KORS, "retire", lambda self: None)
        learner.learn_many(X[:ROWS], y[:ROWS])
    grid = learner._grid
    assert grid is not None and learner.stats()["changes"] >= 1
    assert all(base.stats()["dictionary_full"] for base in grid.bases if isinstance(base, NystromKONS))
    assert any(generation is not None for generation in grid.young)
    return learner, X[ROWS:], y[ROWS:]


def _continued(learner: kons.Auto, X: np.ndarray, y: list[Any]) -> tuple[list[Any], bytes]:
    """The plays (a prediction, then the round's play) of ``learner`` on the rows, and its final state."""
    plays: list[Any] = []
    for x, target in zip(X, y, strict=True):
        plays += [learner.predict_one(x), learner.learn_one(x, target)]
    return plays, learner.to_bytes()


def _nested(arrays: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """The nested learners' arrays in a grid's arrays, by name."""
    return {name: kons._state.decode(array.tobytes())[1] for name, array in arrays.items()
            if array.dtype == np.uint8 and name.startswith(("base", "young"))}


@contextmanager
def _saving_as_before() -> Iterator[None]:
    """``to_bytes`` as before dictionaries were saved once: each Nystrom learner's blob holds its own copy,
    KORS's weights and factor included once full, and ``L`` (main at e12d011 and every release before it)."""
    def each_own_copy(self: NystromKONS) -> dict[str, np.ndarray]:
        size = self._size
        triangle = size * (size + 1) // 2
        arrays = {**self._kors.arrays(), "factor": self._factor.packed}
        return {name: array[:triangle] if name in ("kors_chol", "factor") else array[:size]
                for name, array in arrays.items()}

    @contextmanager
    def nothing_apart(learners: Any, prefix: str) -> Iterator[dict[str, np.ndarray]]:
        yield {}

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(NystromKONS, "_dictionary_arrays", each_own_copy)
        patch.setattr(NystromKONS, "_saved_dictionary_arrays", each_own_copy)  # ``L`` saved as well
        patch.setattr(kons.auto.grid, "dictionaries_saved_apart", nothing_apart)
        yield


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_a_restored_mature_auto_continues_as_the_one_that_never_saved(
        task: str, monkeypatch: pytest.MonkeyPatch) -> None:
    learner, X, y = _mature(task, monkeypatch)
    live = [base for base in learner._grid.bases if isinstance(base, NystromKONS)] if learner._grid else []
    assert live and all(base._kors.retired for base in live)  # in memory too, not only in the saved state
    blob = learner.to_bytes()
    _, arrays = kons._state.decode(blob)
    # the members' three dictionaries (one per view and width) and each restarted kernel copy's, once each,
    # full: without KORS's weights and factor
    dictionaries = sorted({name.removeprefix("dictionary_").split("_kors")[0].removesuffix("_factor")
                           for name in arrays if name.startswith("dictionary_")})
    assert dictionaries[:3] == ["base0", "base3", "base6"] and len(dictionaries) > 3
    assert not [name for name in arrays if name.endswith(("kors_chol", "kors_weights"))
                and name.startswith(tuple(f"dictionary_{d}_" for d in dictionaries[:3]))]
    for name, nested in _nested(arrays).items():
        assert not {"kors_points", "factor", "kors_chol"} & nested.keys(), name
    restored = cast(kons.Auto, kons.load(blob))
    assert restored._grid is not None
    kernels = [base for base in restored._grid.bases if isinstance(base, NystromKONS)]
    assert len({id(base._kors) for base in kernels}) == 3 and all(base._kors.retired for base in kernels)
    assert restored.to_bytes() == blob
    plays, final = _continued(learner, X, y)
    assert _continued(restored, X, y) == (plays, final)


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_a_state_saved_with_each_member_s_dictionary_loads_and_continues_identically(
        task: str, monkeypatch: pytest.MonkeyPatch) -> None:
    learner, X, y = _mature(task, monkeypatch, factors_kept=True)
    with _saving_as_before():
        old = learner.to_bytes()
    _, old_arrays = kons._state.decode(old)
    assert not [name for name in old_arrays if name.startswith("dictionary_")]
    assert all("kors_chol" in nested for nested in _nested(old_arrays).values() if "factor" in nested)
    new = learner.to_bytes()
    # with these small dictionaries; auto's own: benchmarks.state_bytes (the forest of a learner of three
    # classes or more, the same in both, left out of the comparison)
    forest = sum(array.nbytes for name, array in old_arrays.items() if "forest" in name)
    assert len(new) - forest < 0.7 * (len(old) - forest)
    restored = cast(kons.Auto, kons.load(old))
    assert restored.to_bytes() == new  # saved again: each dictionary once, the full ones retired
    plays, final = _continued(learner, X, y)
    assert _continued(restored, X, y) == (plays, final)


def test_a_full_nystrom_kons_saves_its_dictionary_without_kors_proposal_state() -> None:
    rng = np.random.default_rng(2)
    X = rng.normal(size=(260, 3))
    y = np.sin(X[:, 0])
    learner = NystromKONS(kernel={"name": "rbf", "gamma": 0.5}, max_dictionary=20, seed=1, dim=3)
    learner.learn_many(X[:200], y[:200])
    assert learner.stats()["dictionary_full"] and learner._kors.retired  # let go in memory once full
    blob = learner.to_bytes()
    _, arrays = kons._state.decode(blob)
    assert {"kors_points", "kors_sq_norms"} <= arrays.keys()
    assert not {"kors_chol", "kors_weights", "factor"} & arrays.keys()  # ``L`` replayed from the points
    restored = cast(NystromKONS, kons.load(blob))
    assert restored._kors.retired and restored.stats() == learner.stats()
    np.testing.assert_array_equal(restored.learn_many(X[200:], y[200:]), learner.learn_many(X[200:], y[200:]))
    assert restored.to_bytes() == learner.to_bytes()


def test_a_growing_dictionary_saved_without_kors_factor_is_refused() -> None:
    rng = np.random.default_rng(2)
    X = rng.normal(size=(30, 3))
    learner = NystromKONS(kernel={"name": "rbf", "gamma": 0.5}, max_dictionary=100, seed=1, dim=3)
    learner.learn_many(X, np.sin(X[:, 0]))
    header, arrays = kons._state.decode(learner.to_bytes())
    del arrays["kors_chol"], arrays["kors_weights"]
    with pytest.raises(StateFormatError):
        kons.load(kons._state.encode(header, arrays))


def test_a_member_blob_that_names_its_grid_s_dictionary_does_not_load_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    learner, _, _ = _mature("regression", monkeypatch)
    _, arrays = kons._state.decode(learner.to_bytes())
    with pytest.raises(StateFormatError, match="dictionary"):
        kons.load(arrays["base1"].tobytes())


def test_a_member_behind_its_shared_dictionary_is_saved_with_the_members_it_has() -> None:
    """A member whose coin kept out a row the others took uses the first members of the shared dictionary
    until its next round: saved then, it gets its own, and the restored learner plays on exactly."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(340, 8))
    y = np.sin(X[:, 0]) + X[:, 1] * X[:, 2]
    learner = kons.Auto(seed=0)
    learner.learn_many(X[:300], y[:300])
    grid = learner._grid
    assert grid is not None
    behind = cast(NystromKONS, grid.bases[1])
    before, bound = learner.state_nbytes(), learner.max_growth_nbytes(40)  # the rows to the end
    behind._uniform = lambda: 1.0  # type: ignore[method-assign]  # its coins say no
    t = 300
    while behind._size == behind._factor.size:  # until a row joins without it
        learner.learn_one(X[t], y[t])
        t += 1
    del behind._uniform
    _, arrays = kons._state.decode(learner.to_bytes())
    assert "dictionary_base1_kors_points" in arrays and "dictionary_base2_kors_points" not in arrays
    restored = cast(kons.Auto, kons.load(learner.to_bytes()))
    assert _continued(restored, X[t:], list(y[t:])) == _continued(learner, X[t:], list(y[t:]))
    assert behind._kors is not cast(NystromKONS, grid.bases[0])._kors  # it left with a private copy
    assert learner.state_nbytes() <= before + bound


def _factors(learner: kons.base.Learner) -> list[bytes]:
    """The ``L`` of each Nystrom learner in ``learner`` (itself, or an ``auto``'s members and copies)."""
    if isinstance(learner, NystromKONS):
        return [learner._factor.packed.tobytes()]
    grid = cast(kons.Auto, learner)._grid
    assert grid is not None
    return [nested._factor.packed[:nested._size * (nested._size + 1) // 2].tobytes()
            for nested in grid._nested_learners().values() if isinstance(nested, NystromKONS)]


@pytest.mark.parametrize("task", ["regression", "classification"])
@pytest.mark.parametrize("bound", [BOUND, 400])  # full, growing
def test_l_replayed_from_the_points_is_the_live_one_bit_for_bit(
        task: str, bound: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state leaves ``L`` out and a restore replays it: the very factor the learner grew, also from rows
    that came strided (a Fortran-ordered matrix); a standalone learner's and an ``auto``'s of three classes
    (the multinomial round)."""
    monkeypatch.setattr(kons.auto.grid, "MAX_DICTIONARY", bound)
    X, y = _stream(task)
    X = np.asfortranarray(X)
    rows = 250
    learner: kons.base.Learner = (
        NystromKONS(kernel={"name": "rbf", "gamma": 0.2}, max_dictionary=bound, seed=1, dim=5)
        if task == "regression" else kons.Auto(task=task, seed=0))
    learner.learn_many(X[:rows], y[:rows])
    live = _factors(learner)
    assert len(live) >= 1 and all(live)
    blob = learner.to_bytes()
    assert not [name for name in kons._state.decode(blob)[1] if name.endswith("factor")]
    for nested in _nested(kons._state.decode(blob)[1]).values():
        assert "factor" not in nested
    restored = kons.load(blob)
    assert _factors(restored) == live
    if isinstance(learner, NystromKONS):
        assert learner.stats()["dictionary_full"] == (bound == BOUND)
        np.testing.assert_array_equal(restored.learn_many(X[rows:], y[rows:]),
                                      learner.learn_many(X[rows:], y[rows:]))
        assert restored.to_bytes() == learner.to_bytes()
    else:
        assert _continued(cast(kons.Auto, restored), X[rows:], y[rows:]) == _continued(
            cast(kons.Auto, learner), X[rows:], y[rows:])


def test_a_saved_l_that_the_points_do_not_replay_is_kept_and_saved_again() -> None:
    """An ``L`` the replay does not give bit for bit (saved by another build of the arithmetic: here its last
    bit moved) is restored as saved and saved again, so that the restored learner continues on it."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(260, 3))
    y = np.sin(X[:, 0])
    learner = NystromKONS(kernel={"name": "rbf", "gamma": 0.5}, max_dictionary=20, seed=1, dim=3)
    learner.learn_many(X[:200], y[:200])
    header, arrays = kons._state.decode(learner.to_bytes())
    factor = learner._factor.packed.copy()
    factor[-1] = np.nextafter(factor[-1], np.inf)
    restored = cast(NystromKONS, kons.load(kons._state.encode(header, {**arrays, "factor": factor})))
    assert restored._factor.packed.tobytes() == factor.tobytes()
    restored.learn_many(X[200:], y[200:])
    saved = kons._state.decode(restored.to_bytes())[1]["factor"]
    assert saved.tobytes() == restored._factor.packed.tobytes() == factor.tobytes()
    # and a state that saved a reproducible L (before it was left out) no longer saves it
    kept = {**arrays, "factor": learner._factor.packed}
    again = cast(NystromKONS, kons.load(kons._state.encode(header, kept)))
    assert again.to_bytes() == learner.to_bytes()


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_a_generation_s_kernel_copies_share_one_dictionary_saved_once(
        task: str, monkeypatch: pytest.MonkeyPatch) -> None:
    learner, X, y = _mature(task, monkeypatch)
    grid = learner._grid
    assert grid is not None
    generations = [generation for generation in grid.young if generation is not None]
    copies = [[base for base in generation.bases if isinstance(base, NystromKONS)]
              for generation in generations]
    assert any(len(kernels) > 1 for kernels in copies)
    for kernels in copies:  # one geometry at several steps: one dictionary, one kernel row a round
        assert len({id(base._kors) for base in kernels}) == 1
    _, arrays = kons._state.decode(learner.to_bytes())
    young = {name.split("_kors")[0] for name in arrays if name.startswith("dictionary_young")}
    assert len(young) == len(generations)
    # a state saved while each copy held its own dictionary (as before they shared one) shares it again
    for kernels in copies:
        for base in kernels[1:]:
            base._detach()
    old = learner.to_bytes()
    restored = cast(kons.Auto, kons.load(old))
    assert restored._grid is not None
    for generation in restored._grid.young:
        kernels = [base for base in generation.bases if isinstance(base, NystromKONS)] if generation else []
        assert len({id(base._kors) for base in kernels}) <= 1
    assert len(restored.to_bytes()) < len(old)
    assert _continued(restored, X, y)[0] == _continued(learner, X, y)[0]
