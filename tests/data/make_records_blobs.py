"""Write ``records_blobs.npz``: ``auto`` learners of records saved by the code before a categorical name's
coordinates shared one scale (main at 96b1514), and what follows.

``tests/kons/test_records.py`` loads them with the current code and checks that each restored learner
saves the same bytes and plays exactly the recorded continuation: a state of records saved before goes
on with every coordinate standardised on its own and the log view seeing the categorical names
(``docs/auto.md``). Run ``python tests/data/make_records_blobs.py`` on that code.

Each case ``c`` stores ``c/blob`` (uint8), ``c/played`` (the plays of ``learn_one`` over the continuation
:func:`stream` gives, after restoring) and ``c/predicted`` (``predict_one`` on it after that).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import kons

#: name -> (task, rounds learnt before saving)
CASES: dict[str, tuple[str, int]] = {
    "regression": ("regression", 50),
    "classification": ("classification", 50),
}
CONTINUATION = 40


def stream(seed: int, n: int, task: str) -> tuple[list[dict[str, Any]], list[Any]]:
    """Records of two numbers (one sometimes missing) and a city among six, one of them rare, and their
    targets (a price, or whether it is dear)."""
    rng = np.random.default_rng(seed)
    cities = ("Paris", "Lyon", "Lille", "Nice", "Brest", "Rodez")
    records, targets = [], []
    for _ in range(n):
        city = int(rng.choice(6, p=[0.3, 0.25, 0.2, 0.15, 0.08, 0.02]))
        rooms, floor = float(rng.integers(1, 6)), float(rng.integers(0, 8))
        records.append({"city": None if rng.random() < 0.1 else cities[city], "rooms": rooms,
                        "floor": None if rng.random() < 0.1 else floor})
        price = 100.0 * (6 - city) + 30.0 * rooms + 5.0 * floor + rng.normal(0.0, 10.0)
        targets.append(price if task == "regression" else bool(price > 450.0))
    return records, targets


def main() -> None:
    saved: dict[str, np.ndarray] = {}
    for seed, (case, (task, rounds)) in enumerate(CASES.items()):
        records, targets = stream(seed, rounds + CONTINUATION, task)
        learner = kons.Auto(task=task)
        for x, y in zip(records[:rounds], targets[:rounds], strict=True):
            learner.learn_one(x, y)
        saved[f"{case}/blob"] = np.frombuffer(learner.to_bytes(), dtype=np.uint8)
        continuation = list(zip(records[rounds:], targets[rounds:], strict=True))
        saved[f"{case}/played"] = np.array([learner.learn_one(x, y) for x, y in continuation])
        saved[f"{case}/predicted"] = np.array([learner.predict_one(x) for x, _ in continuation])
    # numpy's stub types every keyword of savez_compressed as its allow_pickle flag
    np.savez_compressed(Path(__file__).parent / "records_blobs.npz", **saved)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
