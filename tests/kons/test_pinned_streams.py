"""``auto`` and preprocessed learners play exactly the recorded streams (``tests/data/pinned_streams.npz``).

The recordings were written by ``tests/data/make_pinned_streams.py`` at commit 9891fb8, before the
rounds of :class:`kons.Auto` and :class:`kons.preprocessing.Preprocessed` were made cheaper, and the
``auto`` cases re-recorded for issue 20 (switching weights, change detector, restarted bases: a deliberate
change of what ``auto`` computes); every play, prediction and the final state must be bit-identical
(``==``, not approximately equal).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from tests.data.make_pinned_streams import _BLOBS, CASES, play


def _saved() -> dict[str, np.ndarray]:
    with np.load(_BLOBS) as data:
        return {key: data[key] for key in data.files}


SAVED = _saved()


def test_every_case_is_recorded() -> None:
    assert {key.split("/")[0] for key in SAVED} == set(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_stream_is_played_bit_identically(case: str) -> None:
    played, predicted, blob = play(case, SAVED[f"{case}/X"], SAVED[f"{case}/y"])
    recorded = SAVED[f"{case}/played"]
    assert played.shape == recorded.shape
    assert (played == recorded).all(), np.flatnonzero(played != recorded)[:5]
    assert (predicted == SAVED[f"{case}/predicted"]).all()
    assert hashlib.sha256(blob).digest() == SAVED[f"{case}/sha256"].tobytes()
