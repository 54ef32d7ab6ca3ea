"""Write ``state_blobs.npz``: learner states saved by an earlier version of :mod:`kons`, and what follows.

The test ``tests/kons/test_state_compat.py`` loads these blobs with the current code and checks that the
restored learners play exactly the recorded predictions on the recorded continuation, so a change of the
package layout or of the learner template that alters the byte format (or what a state means) fails.
The file was written at commit 8496649 (before ``kons/`` was split into ``kons.kernel``/``kons.linear``);
rerunning this script rewrites it with the code of the checkout, which is only right after a deliberate
change of the format (bump ``state_version`` then). Run ``python tests/data/make_state_blobs.py``.

Each case ``c`` stores ``c/blob`` (uint8), the continuation ``c/X``, ``c/y`` and ``c/played`` (the plays
of ``learn_one`` over it after restoring) and ``c/predicted`` (``predict_one`` on ``c/X`` after that).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import kons
from kons import SparseVector

#: name -> (algorithm, parameters, rounds learnt before saving, binary labels, sparse input)
CASES: dict[str, tuple[str, dict[str, Any], int, bool, bool]] = {
    "kons": ("kons", {"kernel": {"name": "rbf", "gamma": 0.3}, "alpha": 1.0, "C": 2.0}, 30, False, False),
    "kons_unfitted": ("kons", {"kernel": {"name": "polynomial", "degree": 2}}, 0, False, False),
    "sketched_kons": ("sketched_kons", {"kernel": {"name": "rbf", "gamma": 0.5}, "eta": 0.2, "C": 2.0,
                                        "beta": 0.5, "seed": 3}, 40, False, False),
    "kernel_ogd": ("kernel_ogd", {"kernel": {"name": "laplacian", "gamma": 0.2}, "loss": "hinge",
                                  "schedule": "constant"}, 30, True, False),
    "ons": ("ons", {"alpha": 2.0, "C": 2.0, "diagonal": True}, 30, False, False),
    "ons_dim_given": ("ons", {"dim": 5}, 0, False, False),
    "fd_son": ("fd_son", {"alpha": 4.0, "sketch_size": 3, "loss": "logistic"}, 40, True, True),
    "rp_son": ("rp_son", {"alpha": 4.0, "sketch_size": 3, "seed": 1}, 30, False, False),
    "oja_son": ("oja_son", {"alpha": 4.0, "sketch_size": 3, "diagonal": True, "seed": 2}, 30, True, True),
    "adagrad": ("adagrad", {"loss": "logistic", "C": 3.0}, 30, True, True),
    "ogd": ("ogd", {"loss": "squared_hinge", "schedule": "inverse_sqrt"}, 30, True, False),
}
CONTINUATION = 12


def _stream(seed: int, n: int, binary: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    X[rng.random(X.shape) < 0.4] = 0.0  # some exact zeros, so the sparse cases are sparse
    y = X @ np.array([0.8, -0.5, 0.3, 0.0, 0.6]) + 0.1 * rng.normal(size=n)
    return X, (np.where(y >= 0.0, 1.0, -1.0) if binary else y)


def _example(x: np.ndarray, sparse: bool) -> Any:
    return SparseVector.from_dense(x) if sparse else x


def main() -> None:
    saved: dict[str, np.ndarray] = {}
    for seed, (case, (algorithm, params, rounds, binary, sparse)) in enumerate(CASES.items()):
        X, y = _stream(seed, rounds + CONTINUATION, binary)
        learner = kons.learner_from_params(algorithm, params)
        for x, label in zip(X[:rounds], y[:rounds], strict=True):
            learner.learn_one(_example(x, sparse), float(label))
        saved[f"{case}/blob"] = np.frombuffer(learner.to_bytes(), dtype=np.uint8)
        Xc, yc = X[rounds:], y[rounds:]
        saved[f"{case}/X"], saved[f"{case}/y"] = Xc, yc
        saved[f"{case}/played"] = np.array(
            [learner.learn_one(_example(x, sparse), float(label)) for x, label in zip(Xc, yc, strict=True)]
        )
        saved[f"{case}/predicted"] = np.array([learner.predict_one(_example(x, sparse)) for x in Xc])
    # numpy's stub types every keyword of savez_compressed as its allow_pickle flag
    np.savez_compressed(Path(__file__).parent / "state_blobs.npz", **saved)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
