"""Load the project's benchmark data sets with the preprocessing of ``docs/bench-protocol.md``.

Features are z-scored with whole-data mean and standard deviation (a zero deviation becomes 1),
regression targets likewise, binary labels map to {-1, +1} (the larger value is +1), and rows are put in
the order ``numpy.random.default_rng(0).permutation(n)``.

The data directory is ``$KONS_BENCH_DATA_DIR`` if set, else the first ``shared/data`` found beside the
working directory or any of its parents (the layout of the repository's checkout). (``KONS_DATA_DIR`` is
the service's: the directory of its embedded Redis.)
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["Dataset", "data_dir", "load_dataset", "read_libsvm"]


@dataclass(frozen=True)
class Dataset:
    """A preprocessed stream: ``X`` (n, d), ``y`` (n,), ``task`` is ``"regression"`` or ``"binary"``."""

    name: str
    X: np.ndarray
    y: np.ndarray
    task: str


def data_dir() -> Path:
    """Where the data files are; raises FileNotFoundError naming the places looked at."""
    if "KONS_BENCH_DATA_DIR" in os.environ:
        return Path(os.environ["KONS_BENCH_DATA_DIR"])
    here = Path.cwd().resolve()
    places = [here, *here.parents]
    for base in places:
        for candidate in (base / "shared" / "data", base / "data"):
            if (candidate / "README.md").exists() and any(candidate.glob("*.gz")):
                return candidate
    raise FileNotFoundError("no data directory: set KONS_BENCH_DATA_DIR or run beside ../shared/data")


def read_libsvm(path: Path, n_features: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Dense ``(X, labels)`` from a (gzipped) LIBSVM file with 1-based indices."""
    rows, labels, width = [], [], 0
    with gzip.open(path, "rt") if str(path).endswith(".gz") else open(path) as lines:
        for line in lines:
            parts = line.split()
            if not parts:
                continue
            labels.append(float(parts[0]))
            entries = [(int(i) - 1, float(v)) for i, v in (p.split(":") for p in parts[1:])]
            rows.append(entries)
            width = max(width, 1 + max((i for i, _ in entries), default=-1))
    X = np.zeros((len(rows), n_features or width))
    for r, entries in enumerate(rows):
        for i, v in entries:
            X[r, i] = v
    return X, np.array(labels)


def _read_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    table = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2)
    return table[:, :-1], table[:, -1]


def load_dataset(
    name: str, n: int | None = None, *, standardize: bool = True, root: Path | None = None
) -> Dataset:
    """The data set ``name`` (file stem, e.g. ``"cadata"``, ``"a9a"``) in protocol order.

    Parameters
    ----------
    name : str
    n : int, optional
        Keep the first ``n`` rows of the permuted stream (all rows if None).
    standardize : bool, default True
        z-score the features (and regression targets) as the protocol requires.
    root : Path, optional
        The data directory (default :func:`data_dir`).
    """
    root = root or data_dir()
    csv, libsvm = root / f"{name}.csv.gz", root / f"{name}.libsvm.gz"
    if csv.exists():
        X, y = _read_csv(csv)
    elif libsvm.exists():
        X, y = read_libsvm(libsvm)
    else:
        raise FileNotFoundError(f"no data set {name!r} in {root}")
    classes = np.unique(y)
    task = "binary" if len(classes) == 2 else "regression"
    if standardize:
        std = X.std(axis=0)
        X = (X - X.mean(axis=0)) / np.where(std == 0, 1.0, std)
    if task == "binary":
        y = np.where(y == classes[1], 1.0, -1.0)
    elif standardize:
        y = (y - y.mean()) / (y.std() or 1.0)
    order = np.random.default_rng(0).permutation(len(y))[:n]
    return Dataset(name, np.ascontiguousarray(X[order]), y[order], task)
