"""``auto`` and preprocessed learners play exactly the recorded streams (``tests/data/pinned_streams.npz``).

The recordings were written by ``tests/data/make_pinned_streams.py`` at commit 9891fb8, before the
rounds of :class:`kons.Auto` and :class:`kons.preprocessing.Preprocessed` were made cheaper, and the
``auto`` cases re-recorded for issue 20 (switching weights, change detector, restarted bases: a deliberate
change of what ``auto`` computes); every play, prediction and the final state must be bit-identical
(``==``, not approximately equal) on the machine's own recording, and within the rounding of another CPU
of the original recording (:mod:`tests.recorded`).
"""

from __future__ import annotations

import pytest

from tests.data.make_pinned_streams import CASES
from tests.recorded import REPLAYS, assert_as_recorded, cases, machine_recording, pinned

SAVED = REPLAYS["pinned"][0]
MACHINE = machine_recording()


def test_every_case_is_recorded() -> None:
    assert set(cases("pinned")) == set(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_stream_is_played_bit_identically(case: str) -> None:
    replayed = pinned(case)
    for name in ("played", "predicted"):
        assert_as_recorded(f"pinned/{case}/{name}", replayed[name], SAVED[f"{case}/{name}"], MACHINE)
    if MACHINE is not None:
        assert replayed["sha256"].tobytes() == MACHINE[f"pinned/{case}/sha256"].tobytes()

