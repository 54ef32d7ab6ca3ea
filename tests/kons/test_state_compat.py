"""States saved by an earlier kons still load and continue exactly (``tests/data/state_blobs.npz``).

The blobs were written by ``tests/data/make_state_blobs.py`` with the flat ``kons/`` layout of commit
8496649; the recorded plays and predictions are what that code produced after restoring them. The
preprocessing learners' blobs (``tests/data/preprocessing_blobs.npz``) were written before records existed
(5e630af) by ``tests/data/make_preprocessing_blobs.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kons
import kons._state
from kons import SparseVector
from kons._grid import _EARLIER_LAYOUTS, _EXPERTS, YOUNG_LINEAR, _in_current_layout, _young_slots

_BLOBS = Path(__file__).parents[1] / "data" / "state_blobs.npz"
# The cases with sparse input (see CASES in tests/data/make_state_blobs.py).
_SPARSE = {"fd_son", "oja_son", "adagrad"}


def _saved(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {key: data[key] for key in data.files}


SAVED = _saved(_BLOBS)
CASES = sorted({key.split("/")[0] for key in SAVED})


def _example(case: str, x: np.ndarray) -> Any:
    return SparseVector.from_dense(x) if case in _SPARSE else x


def test_every_learner_has_an_old_blob() -> None:
    algorithms = {type(kons.load(SAVED[f"{case}/blob"].tobytes())).name for case in CASES}
    # Every learner of commit 8496649 (learners added later have no old blob to load).
    assert algorithms == {"kons", "sketched_kons", "kernel_ogd", "ons", "fd_son", "rp_son", "oja_son",
                          "adagrad", "ogd"}


@pytest.mark.parametrize("case", CASES)
def test_an_old_blob_loads_and_continues_identically(case: str) -> None:
    blob = SAVED[f"{case}/blob"].tobytes()
    learner = kons.load(blob)
    # Saving again gives the same header and the same arrays (their order in the blob may differ).
    old_header, old_arrays = kons._state.decode(blob)
    header, arrays = kons._state.decode(learner.to_bytes())
    assert header == old_header
    assert arrays.keys() == old_arrays.keys()
    for name, array in arrays.items():
        assert array.dtype == old_arrays[name].dtype
        np.testing.assert_array_equal(array, old_arrays[name])
    X, y = SAVED[f"{case}/X"], SAVED[f"{case}/y"]
    played = [learner.learn_one(_example(case, x), float(label)) for x, label in zip(X, y, strict=True)]
    np.testing.assert_array_equal(played, SAVED[f"{case}/played"])
    predicted = [learner.predict_one(_example(case, x)) for x in X]
    np.testing.assert_array_equal(predicted, SAVED[f"{case}/predicted"])


_PREPROCESSING_BLOBS = Path(__file__).parents[1] / "data" / "preprocessing_blobs.npz"


PREPROCESSING_SAVED = _saved(_PREPROCESSING_BLOBS)


@pytest.mark.parametrize("case", sorted({key.split("/")[0] for key in PREPROCESSING_SAVED}))
def test_a_preprocessing_blob_from_before_records_loads_and_continues_identically(case: str) -> None:
    # tests/data/make_preprocessing_blobs.py, run on the code before records (5e630af)
    saved = {key.split("/")[1]: value for key, value in PREPROCESSING_SAVED.items()
             if key.startswith(f"{case}/")}
    blob = saved["blob"].tobytes()
    learner = kons.load(blob)
    _, old_arrays = kons._state.decode(blob)
    # Labels of a classifier as booleans: a blob saved before classes were kept restores its classes as
    # False and True (the recorded plays are the same for 0/1 and booleans in the code that wrote them).
    labels = [bool(t) if learner.loss == "logistic" else float(t) for t in saved["y"]]
    if "log_weights" in old_arrays:
        # An auto whose mixture was built before the switching weights (issue 20, a deliberate change of
        # what it computes): its bases load as they were, its weights become the weights under every
        # switching rate, so its first play is the recorded one and the next stay within 1%.
        _, arrays = kons._state.decode(learner.to_bytes())
        for name in (name for name in old_arrays if name.startswith("base")):
            np.testing.assert_array_equal(arrays[name], old_arrays[name])
        played = [learner.learn_one(x, label) for x, label in zip(saved["X"], labels, strict=True)]
        assert played[0] == saved["played"][0]
        np.testing.assert_allclose(played, saved["played"], rtol=0.01)
        assert learner.encoding() is None
        return
    assert learner.to_bytes() == blob  # no gap mask, no per-coordinate counts, no encoder for arrays
    played = [learner.learn_one(x, label) for x, label in zip(saved["X"], labels, strict=True)]
    np.testing.assert_array_equal(played, saved["played"])
    np.testing.assert_array_equal([learner.predict_one(x) for x in saved["X"]], saved["predicted"])
    assert learner.encoding() is None


_TRACKING_BLOBS = Path(__file__).parents[1] / "data" / "tracking_blobs.npz"


TRACKING_SAVED = _saved(_TRACKING_BLOBS)


@pytest.mark.parametrize("case", sorted({key.split("/")[0] for key in TRACKING_SAVED}))
def test_an_auto_blob_with_generations_older_than_their_linear_model_continues_identically(case: str) -> None:
    # tests/data/make_tracking_blobs.py, run on 1b768d2: its generation has no linear model of the rows
    # since its start; the slot stays empty (weight 0) until a generation replaces it, so the plays are
    # the recorded ones
    saved = {key.split("/")[1]: value for key, value in TRACKING_SAVED.items() if key.startswith(f"{case}/")}
    learner = kons.load(saved["blob"].tobytes())
    _, old_arrays = kons._state.decode(saved["blob"].tobytes())
    _, arrays = kons._state.decode(learner.to_bytes())
    for name in (name for name in old_arrays if name.startswith(("base", "young"))):
        np.testing.assert_array_equal(arrays[name], old_arrays[name])
    assert isinstance(learner, kons.Auto) and learner._grid is not None
    # its second kernel copy's slot (a generation copies two kernel members since) is empty too
    empty = [name for name in learner._grid.names() if "none: saved before it existed" in name]
    assert len(empty) == 2 and not set(empty) & learner.stats()["weights"].keys()  # slots not in play
    assert any("restarted at round" in name for name in learner.stats()["weights"])
    played = [learner.learn_one(x, float(t)) for x, t in zip(saved["X"], saved["y"], strict=True)]
    np.testing.assert_array_equal(played, saved["played"])
    np.testing.assert_array_equal([learner.predict_one(x) for x in saved["X"]], saved["predicted"])
    restored = kons.load(learner.to_bytes())  # saved in the new layout, it loads again
    assert restored.to_bytes() == learner.to_bytes()


@pytest.mark.parametrize("case", sorted({key.split("/")[0] for key in TRACKING_SAVED}))
def test_a_held_auto_restarting_over_a_generation_saved_with_one_kernel_copy_keeps_one(case: str) -> None:
    # held, a restart replaces a generation copy for copy, so that the learner keeps its size: the one
    # saved with one kernel copy gets one kernel copy again, its second kernel slot stays empty
    learner = kons.load(TRACKING_SAVED[f"{case}/blob"].tobytes())
    assert isinstance(learner, kons.Auto) and learner._grid is not None
    learner.hold_growth(True)
    grid = learner._grid
    g = next(k for k, generation in enumerate(grid.young) if generation is not None)
    grid._restart(1)
    generation = grid.young[g]
    assert generation is not None and generation.start == grid.rounds
    assert len(generation.members) == len(YOUNG_LINEAR) + 1
    assert not grid.mixture.switching.active[_young_slots(g)[len(generation.members)]]


def test_each_earlier_layout_of_the_mixture_s_slots_leads_to_the_next_and_the_last_to_today_s() -> None:
    # A saved mixture is brought forward one layout at a time; a gap or overlap in the chain would leave
    # a state of some release unreadable, or read into the wrong slots.
    widths = [width for width, _ in _EARLIER_LAYOUTS]
    added = [len(insert_at) for _, insert_at in _EARLIER_LAYOUTS]
    assert [w + a for w, a in zip(widths, added, strict=True)] == [*widths[1:], _EXPERTS]
    old = {"mix_log_weights": np.arange(1.0, 1 + 2 * widths[0]).reshape(2, -1),
           "mix_active": np.ones(widths[0], bool)}
    brought = _in_current_layout(old)
    assert brought["mix_log_weights"].shape == (2, _EXPERTS)
    assert brought["mix_active"].sum() == widths[0]  # every added slot inactive...
    kept = brought["mix_log_weights"][:, brought["mix_active"]]
    np.testing.assert_array_equal(kept, old["mix_log_weights"])  # ...and the old ones in their order
    assert not brought["mix_log_weights"][:, ~brought["mix_active"]].any()
