"""Write ``machines/<fingerprint>.npz``: every recorded replay (:data:`tests.recorded.REPLAYS`) as this
machine's arithmetic computes it, for the tests to check bit for bit here (see :mod:`tests.recorded`).

Only right with code that computes what the recordings' code did: run it at a commit whose replays were
bit-identical to the original recordings on the machine that made them, or that is itself bit-identical
(here) to such a commit. ``machines/`` holds one file per machine arithmetic, and how each was made:

* ``74a754614c7087c4.npz`` was written on an AMD EPYC machine (AVX2) by commit 96b1514, whose plays of
  every recording are those of the recordings within :data:`~tests.recorded.RTOL` (the regression ``auto``
  cases of ``pinned_streams.npz`` were re-recorded on this machine): from then on this machine checks every
  replay and final state bit for bit, so a change meant to keep plays cannot move them even by rounding.
  A deliberate change of plays or of saved bytes re-records it with the other recordings. Re-recorded when
  the Mondrian forest's slot joined the saved grid: the four ``auto`` checksums changed, every play and
  prediction as before; and when the threshold model since a declared change stopped saving a learner before
  its first start (``auto_classification``'s checksum only); and when the grid began saving the two-class
  labels' change detector (the four ``auto`` checksums, every play and prediction as before), and when
  only a two-class grid kept it (the regression cases' checksums back to those before it); and when the
  local expert began to nap below its own entry prior (the saved nap counter of two ``auto`` cases; every
  play and prediction as before).

An earlier file, written on another AVX2 machine, was removed when the saved grid's layout changed: its
checksums could only be re-recorded on that machine.

Run ``python -m tests.data.record_machine``.
"""

from __future__ import annotations

import numpy as np

from tests.recorded import DATA, REPLAYS, cases, fingerprint


def main() -> None:
    recorded: dict[str, np.ndarray] = {}
    for kind, (_, replay) in REPLAYS.items():
        for case in cases(kind):
            recorded |= {f"{kind}/{case}/{name}": value for name, value in replay(case).items()}
    path = DATA / "machines" / f"{fingerprint()}.npz"
    np.savez_compressed(path, **recorded)  # type: ignore[arg-type]
    print(path)


if __name__ == "__main__":
    main()
