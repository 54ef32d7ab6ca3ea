"""Write ``preprocessing_blobs.npz``: states of the preprocessing learners (``auto``, ``Preprocessed``)
saved by the code before records existed, and what follows.

``tests/kons/test_state_compat.py`` loads them with the current code and checks that the restored
learners save the same bytes and play exactly the recorded continuation: records changed the feature
scaler (per-coordinate counts once a row has a gap) and the preprocessing's saved state (an encoder, a
mask of the warm-up buffer's gaps), and a learner of arrays must not see any of it. The file was written
at commit 5e630af (main before records). Run ``python tests/data/make_preprocessing_blobs.py``.

Each case ``c`` stores ``c/blob`` (uint8), the continuation ``c/X``, ``c/y`` and ``c/played`` (the plays
of ``learn_one`` over it after restoring) and ``c/predicted`` (``predict_one`` on ``c/X`` after that).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import kons

#: name -> (algorithm, parameters, rounds learnt before saving, binary labels)
CASES: dict[str, tuple[str, dict[str, Any], int, bool]] = {
    "auto_warming_up": ("auto", {}, 10, False),
    "auto": ("auto", {}, 45, False),
    "auto_classification": ("auto", {"task": "classification"}, 40, True),
    "ons": ("ons", {}, 30, False),
    "nystrom_kons_warming_up": ("nystrom_kons", {"loss": "logistic"}, 12, True),
}
CONTINUATION = 12


def _stream(seed: int, n: int, binary: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4)) * [1.0, 100.0, 0.01, 5.0] + [0.0, 500.0, 3.0, -20.0]
    y = 50.0 + 10.0 * np.sin(X[:, 0]) + 0.1 * (X[:, 1] - 500.0) + rng.normal(size=n)
    return X, ((y > 50.0).astype(float) if binary else y)


def main() -> None:
    saved: dict[str, np.ndarray] = {}
    for seed, (case, (algorithm, params, rounds, binary)) in enumerate(CASES.items()):
        X, y = _stream(seed, rounds + CONTINUATION, binary)
        learner = kons.learner_from_params(algorithm, params)
        for x, label in zip(X[:rounds], y[:rounds], strict=True):
            learner.learn_one(x, float(label))
        saved[f"{case}/blob"] = np.frombuffer(learner.to_bytes(), dtype=np.uint8)
        Xc, yc = X[rounds:], y[rounds:]
        saved[f"{case}/X"], saved[f"{case}/y"] = Xc, yc
        saved[f"{case}/played"] = np.array(
            [learner.learn_one(x, float(label)) for x, label in zip(Xc, yc, strict=True)])
        saved[f"{case}/predicted"] = np.array([learner.predict_one(x) for x in Xc])
    # numpy's stub types every keyword of savez_compressed as its allow_pickle flag
    np.savez_compressed(Path(__file__).parent / "preprocessing_blobs.npz", **saved)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
