"""Write ``tracking_blobs.npz``: states of ``auto`` with restarted generations, saved by the code before
each generation had its Bayesian linear model of the rows since the change (``kons.auto.experts.recent``), and
what follows.

``tests/kons/test_state_compat.py`` loads them with the current code and checks that the restored
learners play exactly the recorded continuation (no change is declared in it, so the generations saved
go on as they were, with no linear model of their own). The file was written at commit 1b768d2 (main
before that change). Run ``python tests/data/make_tracking_blobs.py``.

Each case ``c`` stores ``c/blob`` (uint8), the continuation ``c/X``, ``c/y`` and ``c/played`` (the plays
of ``learn_one`` over it after restoring) and ``c/predicted`` (``predict_one`` on ``c/X`` after that).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import kons

#: name -> (task, classes: 0 for regression, the round at which the concept changes); the state is saved
#: at SAVED, after the restart that follows the declared change (at round 148), with the next one due 128
#: rounds after it. A classifier's flip of this stream is declared only after hundreds of rounds (a 2 MB
#: state): the regression case alone covers the saved generations' format, the same for both tasks.
CASES = {"auto_restarted": ("regression", 0, 140)}
SAVED = 160
CONTINUATION = 12


def _stream(seed: int, n: int, classes: int, flip: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4)) * [1.0, 10.0, 0.1, 5.0] + [0.0, 50.0, 3.0, -20.0]
    z = (X - [0.0, 50.0, 3.0, -20.0]) / [1.0, 10.0, 0.1, 5.0]
    score = z @ [1.0, -0.5, 0.8, 0.3]
    if not classes:
        score[flip:] *= -1.0
        return X, 30.0 * score + 100.0 + rng.normal(size=n)
    edges = np.quantile(score[:flip], np.linspace(0, 1, classes + 1)[1:-1])
    labels = np.searchsorted(edges, score)
    labels[flip:] = (labels[flip:] + 1) % classes  # each class's rows become the next class's
    return X, labels.astype(float)


def main() -> None:
    saved: dict[str, np.ndarray] = {}
    for seed, (case, (task, classes, flip)) in enumerate(CASES.items()):
        X, y = _stream(seed, SAVED + CONTINUATION, classes, flip)
        learner = kons.Auto(task=task)
        labels = [int(t) if classes else float(t) for t in y]
        for x, label in zip(X[:SAVED], labels[:SAVED], strict=True):
            learner.learn_one(x, label)
        stats = learner.stats()
        assert stats["changes"] == 1 and any("restarted at" in name for name in stats["weights"]), case
        saved[f"{case}/blob"] = np.frombuffer(learner.to_bytes(), dtype=np.uint8)
        saved[f"{case}/X"], saved[f"{case}/y"] = X[SAVED:], y[SAVED:]
        saved[f"{case}/played"] = np.array(
            [learner.learn_one(x, label) for x, label in zip(X[SAVED:], labels[SAVED:], strict=True)])
        assert learner.stats()["changes"] == stats["changes"], case  # none declared in the continuation
        saved[f"{case}/predicted"] = np.array([learner.predict_one(x) for x in X[SAVED:]])
    # numpy's stub types every keyword of savez_compressed as its allow_pickle flag
    np.savez_compressed(Path(__file__).parent / "tracking_blobs.npz", **saved)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
