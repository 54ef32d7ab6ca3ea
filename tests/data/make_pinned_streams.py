"""Write ``pinned_streams.npz``: the exact plays of ``auto`` and of preprocessed learners on fixed streams.

The test ``tests/kons/test_pinned_streams.py`` replays these streams with the current code and compares every
play, every prediction and the final state's checksum with ``==``: a change meant to make a round faster
(validation once per round, the numerics contexts entered once, ...) must not change a single bit. Bits
are those of one machine's arithmetic: this file's were recorded on the project's first machines, and
another CPU compares with its own recording of the same code, ``machines/<fingerprint>.npz``, and with
this file to its rounding (:mod:`tests.recorded`).
The file was written at commit 9891fb8, before those changes, and rewritten once, deliberately, for issue 20
(``auto``'s switching weights, change detector and restarted bases change what it computes; the other
cases were unchanged) after ``benchmarks/results/drift_stationary.md`` showed no loss on stationary data;
the ``auto`` cases' final-state checksums once more when each restarted generation gained its linear model
(two more slots in the mixture's saved weights, two more values in the detector's state; every play and
prediction the same), and again when the classifier gained its error detector (its state saved for every
task; every play and prediction the same), and again when the grid began to keep its last rounds for a
restarted generation to learn (two more arrays in its state; every play and prediction the same), and
its ``auto`` cases once more, deliberately, when the grid gained the linear model on the quantile thresholds
of the raw features (``kons/_bins.py``: one more expert, so every play of the dense cases after the warm-up
changes, the sparse cases only their checksums, an empty slot more; the other
cases unchanged) after ``drift_stationary.md`` showed no loss on stationary data; and the ``auto`` cases'
final-state checksums once more when a generation began to copy two kernel members (one more slot per
generation in the mixture's saved weights; every play and prediction the same); and the ``auto`` cases
once more, deliberately, when the grid gained its local expert (``kons/_local.py``: asleep, its slot
empty, until it holds 200 rows; none on sparse rows): the dense cases' plays from round 200 on and their
predictions changed (before round 200 some moved in their last bits, at most 8e-15 of the play: the
mixture's sums run over one more slot, an empty one), the sparse cases only their checksums (one more
empty slot in the saved weights), after ``drift_stationary.md`` showed no loss on stationary data.
The dense ``auto`` cases once more, deliberately, when the local expert's votes began to weigh the inverse
of their distances: their plays from round 200 on (where it wakes), their predictions and checksums; every
play before round 200 and every other case bit-identical (no local expert on sparse rows), after the 26
stationary raw sets showed no real loss (13 of 14 classification sets the same error, german.numer lower;
the regression sets' MSE lower on 8 of 12, higher on 2 by 0.001%).
The ``auto`` cases once more, deliberately, when the classifier gained its Hoeffding trees (``kons/_tree.py``,
entering after 200 rows) and its error detector's threshold went from 7 to 6 with 192 rounds kept: the
classification cases' plays and predictions, every ``auto`` case's checksum (three more slots and the
kept rounds in the state; every regression play and prediction the same), after ``drift_stationary.md``
showed no loss on stationary data; only the ``auto`` cases' keys were taken from the rerun (this machine
computes some other cases' streams differently in their last bits, which the file keeps as recorded).
The final-state checksums of the ``auto`` cases and of ``nystrom_kons`` once more when a saved grid began
to hold each distinct Nystrom dictionary once and a full dictionary's state to leave out KORS's weights and
factor (every play and prediction of every case the same, bit for bit against main e12d011 on the machine
that re-recorded them; only those five keys changed): ``nystrom_kons``'s is the original machine's
arithmetic (that machine, fingerprint 74a754614c7087c4, computed the old checksum exactly), the ``auto``
cases' are that machine's (its plays of them are within the rounding of the recording's); that machine's
own recording is ``machines/74a754614c7087c4.npz`` (``tests/data/record_machine.py``).
The regression ``auto`` cases once more, deliberately, for heavy tails (issue 39: the linear model of every
row, the bound 20, predictions beyond the targets' range, the mixture's substitution centred on its weighted
mean): their plays from round 2 (dense) and 6 (sparse) on, predictions and checksums (relative MSE of the
plays 0.1139 -> 0.1072 and 0.2352 -> 0.2323); only their keys were taken from the rerun (the classification
cases play as recorded, within this machine's rounding; their checksums are stale: the saved grid has three
more slots and the last targets' arrays; this machine's recording in machines/ holds the current ones).
The regression ``auto`` cases' checksums once more when a generation started at a declared change began to
keep its own scale of the target (issue 39: the grid saves ``own_targets``; no change is declared on these
streams, so every play and prediction is the same, bit for bit on machine 74a754614c7087c4), taken from
that machine's recording.
The ``auto`` cases' final-state checksums once more (issue 39 and 36: the lag experts' local mean and the
mixture's units since a declared change saved, the forest's and the neighbours' naps; on these 240-round
streams no change is declared, no nap begins and no forest plays, so every play and prediction is the same,
bit for bit on machine 74a754614c7087c4), the regression cases' taken from that machine's recording.
The ``auto`` cases' final-state checksums once more (issues 36 and 39: the change detector saves the mean
of its recent losses, the forest and the trees save their nodes compactly; every play and prediction the
same, bit for bit on machine 74a754614c7087c4), taken from that machine's recording.
The final-state checksums of the ``auto`` cases, ``nystrom_kons`` and ``nystrom_kons_logistic`` once more
when a saved Nystrom dictionary left out its factor ``L`` (a load replays it from the points; issue 36):
every play and prediction the same, bit for bit on machine 74a754614c7087c4, whose recording they are.
The dense regression ``auto`` case once more, deliberately, when the linear models began to play on the row
standardised by the statistics before it (issue 39): its plays from round 32 on, predictions and checksum
(relative MSE of the plays 0.10723 -> 0.10722); and every case's checksum when a Nystrom base's
:math:`A^{-1}` went dense in memory (issue 36: products by ``dsymv``/``dsyr``, so the ``auto`` and Nystrom
cases' plays moved in their last bits, at most 3e-13 of a play, kept as recorded here; this machine's
recording in ``machines/`` holds them bit for bit).
The regression ``auto`` cases' final-state checksums once more when the lag experts began to keep their
lags' units (issue 39: two more floats saved; every play and prediction the same, bit for bit on machine
74a754614c7087c4), only those two keys taken from the rerun.
The regression ``auto`` cases once more, deliberately, when the grid's first 400 rounds began to play
the weights of the experts of the row sharpened among themselves (issue 39): their plays from round 32 on
(where the grid starts), predictions and checksums (relative MSE of the plays 0.1072 -> 0.0989 dense,
0.2323 -> 0.2184 sparse), recorded on machine 74a754614c7087c4; every other case as recorded.
The regression ``auto`` cases' final-state checksums once more when a generation started at a declared
change began to play its first rounds as a fresh learner's (issue 39: the grid saves ``young_early``; no
change is declared on these streams, so every play and prediction is the same, bit for bit on machine
74a754614c7087c4), only those two keys taken from the rerun.
The ``auto`` cases once more when a change declared on two classes began to start a fresh threshold model
in a slot of its own (issue 39: one more slot in every grid, so the mixture's sums run over one more, empty
here, and round differently): plays moved in their last bits only (at most 1.1e-13 of a play, predictions
8e-15; no change is declared on these streams), recorded on machine 74a754614c7087c4.
The regression ``auto`` cases once more, deliberately, when a light member (below ``LIGHT_WEIGHT`` for
``LIGHT_ROUNDS`` rounds) began to learn every ``LIGHT_EVERY``-th row (issue 39, session 21): their plays from
round 193 (dense) and 213 (sparse) on, by at most 5e-5, predictions and checksums (relative MSE of the plays
0.0989 and 0.2184 unchanged to four digits); only their keys taken from the rerun, on machine
74a754614c7087c4.
Rerunning this script rewrites it with the code of the checkout, which is only right after a deliberate
change of what the learners compute.
Run ``python tests/data/make_pinned_streams.py``.

Each case ``c`` stores the stream ``c/X``, ``c/y``, the plays ``c/played`` of ``learn_one`` (the learner
is saved and restored after :data:`RESTORE_AT` rounds), ``c/predicted`` (``predict_one`` on the first
:data:`PREDICTED` rows after the last round) and ``c/sha256`` (of the final ``to_bytes()``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

import kons
from kons import SparseVector
from kons.base import Learner

#: name -> (algorithm, parameters, binary labels, sparse input)
CASES: dict[str, tuple[str, dict[str, Any], bool, bool]] = {
    "auto_regression": ("auto", {}, False, False),
    "auto_classification": ("auto", {"task": "classification"}, True, False),
    "auto_regression_sparse": ("auto", {}, False, True),
    "auto_classification_sparse": ("auto", {"task": "classification", "seed": 3}, True, True),
    "nystrom_kons": ("nystrom_kons", {"max_dictionary": 40}, False, False),
    "nystrom_kons_logistic": ("nystrom_kons", {"loss": "logistic"}, True, False),
    "ons": ("ons", {}, False, False),
    "fd_son_sparse": ("fd_son", {"loss": "logistic", "sketch_size": 3}, True, True),
    "sketched_kons": ("sketched_kons", {}, False, False),
}
ROUNDS = 240
RESTORE_AT = 110  # after the warm-up (32 rows), in the middle of the stream
PREDICTED = 20
_BLOBS = Path(__file__).parent / "pinned_streams.npz"


def stream(seed: int, binary: bool) -> tuple[np.ndarray, np.ndarray]:
    """Raw rows (features on very different scales, some exact zeros, a heavy tail) and targets."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(ROUNDS, 6)) * [1.0, 50.0, 0.01, 3.0, 1.0, 7.0] + [0.0, 300.0, 2.0, 0.0, -4.0, 0.0]
    X[:, 4] = rng.lognormal(1.0, 1.5, size=ROUNDS)
    X[rng.random(X.shape) < 0.25] = 0.0
    y = 40.0 * np.sin(X[:, 0]) + 0.2 * (X[:, 1] - 300.0) + np.log1p(X[:, 4]) + rng.normal(size=ROUNDS)
    return X, (y > np.median(y)) if binary else y


def example(x: np.ndarray, sparse: bool) -> Any:
    return SparseVector.from_dense(x) if sparse else x


def play(case: str, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, bytes]:
    """The plays, the final predictions and the final state of ``case`` on ``(X, y)``."""
    algorithm, params, _, sparse = CASES[case]
    learner: Learner = kons.learner_from_params(algorithm, params)
    played = []
    for t, (x, label) in enumerate(zip(X, y, strict=True)):
        if t == RESTORE_AT:
            learner = kons.load(learner.to_bytes())
        played.append(learner.learn_one(example(x, sparse), label))
    predicted = [learner.predict_one(example(x, sparse)) for x in X[:PREDICTED]]
    return np.array(played), np.array(predicted), learner.to_bytes()


def main() -> None:
    saved: dict[str, np.ndarray] = {}
    for seed, (case, (_, _, binary, _)) in enumerate(CASES.items()):
        X, y = stream(seed, binary)
        played, predicted, blob = play(case, X, y)
        saved |= {f"{case}/X": X, f"{case}/y": np.asarray(y), f"{case}/played": played,
                  f"{case}/predicted": predicted,
                  f"{case}/sha256": np.frombuffer(hashlib.sha256(blob).digest(), dtype=np.uint8)}
    np.savez_compressed(_BLOBS, **saved)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
