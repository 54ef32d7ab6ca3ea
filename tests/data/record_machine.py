"""Write ``machines/<fingerprint>.npz``: every recorded replay (:data:`tests.recorded.REPLAYS`) as this
machine's arithmetic computes it, for the tests to check bit for bit here (see :mod:`tests.recorded`).

Only right with code that computes what the recordings' code did: run it at a commit whose replays were
bit-identical to the original recordings on the machine that made them, or that is itself bit-identical
(here) to such a commit. ``machines/`` holds one file per machine arithmetic, and how each was made:

* ``e208e84f8d4fc53f.npz`` was written on an AVX2 machine (AMD EPYC, OpenBLAS's Haswell kernels) by
  commit ddc75b8, whose replays are bit-identical there to those of b100929 (checked over every pinned
  case's plays, predictions and final state), and b100929 replayed every original recording bit for bit on
  the machine that made them (its CI).

Run ``python tests/data/record_machine.py``.
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
