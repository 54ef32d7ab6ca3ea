"""The data streams of the tests, read from ``tests/data`` (written by ``tests/data/make_streams.py``).

They are prefixes of the benchmark protocol's streams, committed so that the suite needs no ``../shared``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kons.datasets import Dataset, data_dir

_DIR = Path(__file__).parent / "data"


def load_stream(name: str, n: int | None = None) -> Dataset:
    """The first ``n`` rows (all if None) of the committed stream ``name``."""
    with np.load(_DIR / f"{name}.npz") as saved:
        X, y, task = saved["X"], saved["y"], str(saved["task"])
    if n is not None and n > len(y):
        raise ValueError(f"tests/data/{name}.npz holds {len(y)} rows, {n} asked for")
    return Dataset(name, np.ascontiguousarray(X[:n]), y[:n].copy(), task)


def benchmark_data(name: str) -> bool:
    """Whether the benchmark data set ``name`` (``../shared/data``) is here, for the benchmark smoke tests."""
    try:
        root = data_dir()
    except FileNotFoundError:
        return False
    return any((root / f"{name}.{ext}").exists() for ext in ("csv.gz", "libsvm.gz"))
