"""Recorded plays checked on any machine: exactly where this machine's arithmetic was recorded, else to
the rounding of another CPU.

The pinned streams and the old state blobs (``tests/data/*.npz``) record plays bit for bit as the code
that wrote them computed them, on the machine it ran on. The same code on another CPU rounds differently
in the last bits: OpenBLAS and NumPy pick their kernels by the CPU's vector instructions (AVX-512 or
AVX2, say), and a dot product summed in another order rounds otherwise. Measured on an AVX2 machine
without AVX-512 against recordings made on an earlier machine (its vector extensions are not on record):
every case differs from its first rounds on, by at most
1.9e-11 of a play (most by about 1e-15), with no decision of a learner changed.

So each check has two parts:

* against the original recording, always, to :data:`RTOL` (a change of what a learner computes moves
  plays by far more, while the rounding of another machine stays well under it);
* bit for bit against this machine's own recording, ``tests/data/machines/<fingerprint>.npz``, when there
  is one for the :func:`fingerprint` of its arithmetic (written by ``tests/data/record_machine.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.linalg

import kons
from kons import SparseVector
from tests.data import make_pinned_streams

__all__ = ["REPLAYS", "RTOL", "assert_as_recorded", "fingerprint", "machine_recording", "saved"]

DATA = Path(__file__).parent / "data"
#: Relative tolerance to the original recordings on another machine's arithmetic (50 times the largest
#: difference measured, module docstring).
RTOL = 1e-9


def saved(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {key: data[key] for key in data.files}


def fingerprint() -> str:
    """A digest of how this machine rounds the operations the learners use: BLAS products and a
    Cholesky factor, NumPy's vectorised reductions and transcendental functions. Two machines with the
    same digest round the recorded streams alike."""
    rng = np.random.default_rng(20261125)
    a = rng.normal(size=(67, 67))
    v = rng.normal(size=67)
    spd = a @ a.T + 67.0 * np.eye(67)
    parts = [a @ v, a @ a, np.array(v @ v), scipy.linalg.cholesky(spd, lower=True), a.sum(axis=0),
             np.exp(v), np.log(np.abs(v)), np.log1p(np.abs(v)), np.expm1(v), np.tanh(v), np.sqrt(np.abs(v)),
             np.logaddexp.reduce(a, axis=1)]
    digest = hashlib.sha256()
    for part in parts:
        digest.update(np.ascontiguousarray(part).tobytes())
    return digest.hexdigest()[:16]


def machine_recording() -> dict[str, np.ndarray] | None:
    """This machine's own recording of every replay (:data:`REPLAYS`), if one was made on its arithmetic."""
    path = DATA / "machines" / f"{fingerprint()}.npz"
    return saved(path) if path.exists() else None


def assert_as_recorded(key: str, actual: np.ndarray, original: np.ndarray,
                       machine: dict[str, np.ndarray] | None, *, rtol: float = RTOL) -> None:
    """``actual`` (the replay ``key``'s plays or predictions) is ``original`` to ``rtol``, and bit for bit
    this machine's recording of it when there is one."""
    actual = np.asarray(actual)
    assert actual.shape == original.shape, key
    np.testing.assert_allclose(actual, original, rtol=rtol, atol=0, err_msg=key)
    if machine is not None:
        differing = np.flatnonzero(actual != machine[key])
        assert not differing.size, (key, differing[:5])


# ---------------------------------------------------------------- the replays
# Each returns the arrays it checks: plays, predictions and, for the pinned streams, the final state's
# sha256 (exact on the recording machine only).

_PINNED = saved(DATA / "pinned_streams.npz")
_STATE = saved(DATA / "state_blobs.npz")
_PREPROCESSING = saved(DATA / "preprocessing_blobs.npz")
_TRACKING = saved(DATA / "tracking_blobs.npz")
# The state blobs' cases with sparse input (see CASES in tests/data/make_state_blobs.py).
_SPARSE_STATE = {"fd_son", "oja_son", "adagrad"}


def _case(recorded: dict[str, np.ndarray], case: str) -> dict[str, np.ndarray]:
    return {key.split("/", 1)[1]: value for key, value in recorded.items() if key.startswith(f"{case}/")}


def _cases(recorded: dict[str, np.ndarray]) -> list[str]:
    return sorted({key.split("/")[0] for key in recorded})


def pinned(case: str) -> dict[str, np.ndarray]:
    played, predicted, blob = make_pinned_streams.play(case, _PINNED[f"{case}/X"], _PINNED[f"{case}/y"])
    return {"played": played, "predicted": predicted,
            "sha256": np.frombuffer(hashlib.sha256(blob).digest(), dtype=np.uint8)}


def state_blob(case: str) -> dict[str, np.ndarray]:
    learner = kons.load(_STATE[f"{case}/blob"].tobytes())

    def example(x: np.ndarray) -> Any:
        return SparseVector.from_dense(x) if case in _SPARSE_STATE else x

    X, y = _STATE[f"{case}/X"], _STATE[f"{case}/y"]
    played = [learner.learn_one(example(x), float(label)) for x, label in zip(X, y, strict=True)]
    return {"played": np.array(played), "predicted": np.array([learner.predict_one(example(x)) for x in X])}


def preprocessing_labels(learner: kons.Learner, y: np.ndarray) -> list[Any]:
    # Labels of a classifier as booleans: a blob saved before classes were kept restores its classes as
    # False and True (the recorded plays are the same for 0/1 and booleans in the code that wrote them).
    return [bool(t) if learner.loss == "logistic" else float(t) for t in y]


def preprocessing_blob(case: str) -> dict[str, np.ndarray]:
    recorded = _case(_PREPROCESSING, case)
    learner = kons.load(recorded["blob"].tobytes())
    labels = preprocessing_labels(learner, recorded["y"])
    played = [learner.learn_one(x, label) for x, label in zip(recorded["X"], labels, strict=True)]
    return {"played": np.array(played),
            "predicted": np.array([learner.predict_one(x) for x in recorded["X"]])}


def tracking_blob(case: str) -> dict[str, np.ndarray]:
    recorded = _case(_TRACKING, case)
    learner = kons.load(recorded["blob"].tobytes())
    played = [learner.learn_one(x, float(t)) for x, t in zip(recorded["X"], recorded["y"], strict=True)]
    return {"played": np.array(played),
            "predicted": np.array([learner.predict_one(x) for x in recorded["X"]])}


#: Every replay checked against the recordings: kind -> (its recordings, the replay of one case).
REPLAYS: dict[str, tuple[dict[str, np.ndarray], Callable[[str], dict[str, np.ndarray]]]] = {
    "pinned": (_PINNED, pinned),
    "state": (_STATE, state_blob),
    "preprocessing": (_PREPROCESSING, preprocessing_blob),
    "tracking": (_TRACKING, tracking_blob),
}


def cases(kind: str) -> list[str]:
    return _cases(REPLAYS[kind][0])
