"""States saved by an earlier kons still load and continue exactly (``tests/data/state_blobs.npz``): bit
for bit on this machine's own recording, within another CPU's rounding of the original one
(:mod:`tests.recorded`).

The blobs were written by ``tests/data/make_state_blobs.py`` with the flat ``kons/`` layout of commit
8496649; the recorded plays and predictions are what that code produced after restoring them. The
preprocessing learners' blobs (``tests/data/preprocessing_blobs.npz``) were written before records existed
(5e630af) by ``tests/data/make_preprocessing_blobs.py``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import kons
import kons._state
from kons.auto.experts.newton import LearnerExpert
from kons.auto.grid import EXPERTS, YOUNG_LINEAR, layout
from kons.auto.restarts import restart, young_slots
from kons.auto.slots import EARLIER_LAYOUTS, in_layout
from tests.recorded import (
    REPLAYS,
    RTOL,
    assert_as_recorded,
    cases,
    machine_recording,
    preprocessing_blob,
    state_blob,
    tracking_blob,
)

SAVED = REPLAYS["state"][0]
CASES = cases("state")
PREPROCESSING_SAVED = REPLAYS["preprocessing"][0]
TRACKING_SAVED = REPLAYS["tracking"][0]
MACHINE = machine_recording()


def _nested_alone(learner: kons.base.Learner) -> dict[str, np.ndarray]:
    """The nested learners of an ``auto``'s grid (its members and restarted copies) each saved alone, with
    its own dictionary, by their names in the grid's state (which saves each distinct dictionary once)."""
    assert isinstance(learner, kons.Auto) and learner._grid is not None
    grid = learner._grid
    return {grid.layout[slot]: np.frombuffer(expert.base.to_bytes(), dtype=np.uint8)
            for slot, expert in grid.alive() if type(expert) is LearnerExpert}


def _assert_loaded_as_saved(blob: np.ndarray, old: np.ndarray) -> None:
    """The nested learner's ``blob`` saved again holds the ``old`` one's arrays, but ``L`` of a Nystrom
    learner's dictionary where replaying its points gives the very ``L`` saved (then left out)."""
    header, arrays = kons._state.decode(blob.tobytes())
    old_header, old_arrays = kons._state.decode(old.tobytes())
    assert header == old_header
    if "factor" in old_arrays and "factor" not in arrays:
        learner = kons.load(blob.tobytes())
        assert isinstance(learner, kons.NystromKONS)
        assert learner._factor.packed.tobytes() == old_arrays.pop("factor").tobytes()
    assert arrays.keys() == old_arrays.keys()
    for name, array in arrays.items():
        assert array.dtype == old_arrays[name].dtype
        np.testing.assert_array_equal(array, old_arrays[name])


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
    replayed = state_blob(case)
    for name in ("played", "predicted"):
        assert_as_recorded(f"state/{case}/{name}", replayed[name], SAVED[f"{case}/{name}"], MACHINE)


@pytest.mark.parametrize("case", sorted({key.split("/")[0] for key in PREPROCESSING_SAVED}))
def test_a_preprocessing_blob_from_before_records_loads_and_continues_identically(case: str) -> None:
    # tests/data/make_preprocessing_blobs.py, run on the code before records (5e630af)
    saved = {key.split("/")[1]: value for key, value in PREPROCESSING_SAVED.items()
             if key.startswith(f"{case}/")}
    blob = saved["blob"].tobytes()
    learner = kons.load(blob)
    _, old_arrays = kons._state.decode(blob)
    if "log_weights" in old_arrays:
        # An auto whose mixture was built before the switching weights (issue 20, a deliberate change of
        # what it computes): its bases load as they were, its weights become the weights under every
        # switching rate, so its first play is the recorded one and the next stay within 1%.
        alone = _nested_alone(learner)
        for name in (name for name in old_arrays if name.startswith("base")):
            _assert_loaded_as_saved(alone[name], old_arrays[name])
        played = preprocessing_blob(case)["played"]
        np.testing.assert_allclose(played[0], saved["played"][0], rtol=RTOL)
        assert_as_recorded(f"preprocessing/{case}/played", played, saved["played"], MACHINE, rtol=0.01)
        assert learner.encoding() is None
        return
    assert learner.to_bytes() == blob  # no gap mask, no per-coordinate counts, no encoder for arrays
    replayed = preprocessing_blob(case)
    for name in ("played", "predicted"):
        assert_as_recorded(f"preprocessing/{case}/{name}", replayed[name], saved[name], MACHINE)
    assert learner.encoding() is None


@pytest.mark.parametrize("case", sorted({key.split("/")[0] for key in TRACKING_SAVED}))
def test_an_auto_blob_with_generations_older_than_their_linear_model_continues_identically(case: str) -> None:
    # tests/data/make_tracking_blobs.py, run on 1b768d2: its generation has no linear model of the rows
    # since its start; the slot stays empty (weight 0) until a generation replaces it, so the plays are
    # the recorded ones
    saved = {key.split("/")[1]: value for key, value in TRACKING_SAVED.items() if key.startswith(f"{case}/")}
    learner = kons.load(saved["blob"].tobytes())
    _, old_arrays = kons._state.decode(saved["blob"].tobytes())
    _, arrays = kons._state.decode(learner.to_bytes())
    nested = _nested_alone(learner)
    arrays |= nested
    for name in (name for name in old_arrays if name.startswith(("base", "young"))):
        if name in nested:
            _assert_loaded_as_saved(arrays[name], old_arrays[name])
        else:
            np.testing.assert_array_equal(arrays[name], old_arrays[name])
    assert isinstance(learner, kons.Auto) and learner._grid is not None
    # its second kernel copy's slot (a generation copies two kernel members since) is empty too
    empty = [name for name in learner._grid.names() if "saved before it existed" in name]
    assert len(empty) == 2 and not set(empty) & learner.stats()["weights"].keys()  # slots not in play
    assert any("restarted at round" in name for name in learner.stats()["weights"])
    replayed = tracking_blob(case)
    for name in ("played", "predicted"):
        assert_as_recorded(f"tracking/{case}/{name}", replayed[name], saved[name], MACHINE)
    for x, t in zip(saved["X"], saved["y"], strict=True):
        learner.learn_one(x, float(t))
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
    restart(grid, 1)
    generation = grid.young[g]
    assert generation is not None and generation.start == grid.rounds
    assert len(generation.members) == len(YOUNG_LINEAR) + 1
    assert not grid.mixture.switching.active[young_slots(g)[len(generation.members)]]


def test_each_earlier_layout_of_the_mixture_s_slots_is_read_by_name_into_today_s() -> None:
    # Each layout keeps the slots of the one before in their order (a slot moved or dropped would read a
    # state of some release into the wrong slots), the widths tell them apart, and today's is the last.
    today = layout(EXPERTS)
    assert EARLIER_LAYOUTS[-1] == today
    for earlier, later in itertools.pairwise(EARLIER_LAYOUTS):
        assert [name for name in later if name in earlier] == list(earlier) and len(later) > len(earlier)
    for earlier in EARLIER_LAYOUTS[:-1]:
        width = len(earlier)
        old = {"mix_log_weights": np.arange(1.0, 1 + 2 * width).reshape(2, -1),
               "mix_active": np.ones(width, bool)}
        brought = in_layout(old, today)
        assert brought["mix_log_weights"].shape == (2, len(today))
        assert brought["mix_active"].sum() == width  # every added slot inactive...
        kept = brought["mix_log_weights"][:, brought["mix_active"]]
        np.testing.assert_array_equal(kept, old["mix_log_weights"])  # ...and the old ones in their order
        assert not brought["mix_log_weights"][:, ~brought["mix_active"]].any()
