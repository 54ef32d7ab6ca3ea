"""Write the protocol-order data streams the tests replay, so the suite runs without ``../shared``.

Each ``<name>.npz`` holds the first rows of :func:`kons.datasets.load_dataset` (whole-data z-scoring,
protocol permutation) as float64, exactly the rows the tests used to read from ``../shared/data``.
Run once beside ``../shared`` (``python tests/data/make_streams.py``); the files are committed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kons.datasets import load_dataset

#: name -> rows kept: the most any test reads (``None``: the whole set, all of them small).
STREAMS: dict[str, int | None] = {
    "housing": None,
    "australian": None,
    "diabetes": None,
    "breast-cancer": None,
    "cadata": 20_000,  # tests/kons/kernel/test_drift.py replays 20,000 rounds
}


def main() -> None:
    here = Path(__file__).parent
    for name, rows in STREAMS.items():
        data = load_dataset(name, rows)
        np.savez_compressed(here / f"{name}.npz", X=data.X, y=data.y, task=np.array(data.task))


if __name__ == "__main__":
    main()
