"""A learner's plays do not depend on the BLAS thread count of the process that embeds it.

OpenBLAS splits some operations between its threads above a size and sums the parts in another order
(see kons/_blas.py): ONS at dim 1,200 and FD-SON on inputs of 20,000 features reach those sizes within
a few rounds. Each case plays the same stream on one and on two BLAS threads and compares every play bit
for bit (with the threads left to the process, both cases diverged within 20 rounds).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from kons._blas import _count_reader, one_blas_thread, pinned_libraries
from kons.base import Learner, learner_from_params

ROUNDS = 30
#: (algorithm, parameters, input dimension) that reach OpenBLAS's threading thresholds.
CASES: list[tuple[str, dict[str, object], int]] = [
    ("ons", {}, 1200),  # (d, d) products
    ("fd_son", {"preprocess": False, "sketch_size": 100}, 20_000),  # the (m, d) sketch times x
    ("fd_son", {"sketch_size": 100}, 20_000),  # behind the online preprocessing
]


def _stream(dim: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((ROUNDS, dim))
    return X, np.sin(X[:, 0]) + 0.1 * rng.standard_normal(ROUNDS)


def _plays(algorithm: str, params: dict[str, object], dim: int) -> np.ndarray:
    """Every play of a fresh learner on the stream, then its predictions on the same rows."""
    X, Y = _stream(dim)
    learner = learner_from_params(algorithm, dict(params))
    return np.concatenate([learner.learn_many(X, Y), learner.predict_many(X)])


def _blas_threads() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


@pytest.mark.parametrize(("algorithm", "params", "dim"), CASES)
def test_plays_are_bit_identical_on_one_and_two_blas_threads(
    algorithm: str, params: dict[str, object], dim: int
) -> None:
    with threadpool_limits(1):
        one = _plays(algorithm, params, dim)
    with threadpool_limits(2):
        two = _plays(algorithm, params, dim)
        assert _blas_threads() == [2] * len(_blas_threads())  # the caller's setting is put back
    assert one.tobytes() == two.tobytes()


def test_every_blas_library_of_numpy_and_scipy_is_pinned() -> None:
    assert pinned_libraries() == len(_blas_threads()) >= 1


def test_after_a_round_the_thread_follows_the_process_thread_count_again() -> None:
    rng = np.random.default_rng(0)
    A, x = rng.standard_normal((100, 20_000)), rng.standard_normal(20_000)
    with threadpool_limits(1):
        one_thread = A @ x
    with threadpool_limits(2):
        if (A @ x).tobytes() == one_thread.tobytes():  # a product whose last bits show the threads
            pytest.skip("this machine's BLAS does not split the product between 2 threads")
        learner_from_params("ons", {"dim": 3}).learn_one([1.0, 2.0, 3.0], 1.0)
        assert (A @ x).tobytes() != one_thread.tobytes()  # still two threads outside the round


def test_a_dot_product_past_10000_terms_is_the_one_thread_one_inside_the_pin() -> None:
    """The audit's divergence at round 10,002: exact KONS's products with 10,001 stored points are dot
    products that OpenBLAS splits between threads from 10,001 terms on (too slow to replay here)."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(20_001), rng.standard_normal(20_001)
    with threadpool_limits(1):
        one_thread = float(a @ b)
    with threadpool_limits(2):
        if float(a @ b) == one_thread:
            pytest.skip("this machine's BLAS does not split the product between 2 threads")
        with one_blas_thread():
            assert float(a @ b) == one_thread


def test_a_restored_learner_continues_identically_on_another_thread_count() -> None:
    X, Y = _stream(1200)
    with threadpool_limits(1):
        learner = learner_from_params("ons", {})
        learner.learn_many(X[:10], Y[:10])
        blob = learner.to_bytes()
        expected = learner.learn_many(X[10:], Y[10:])
    with threadpool_limits(2):
        assert Learner.from_bytes(blob).learn_many(X[10:], Y[10:]).tobytes() == expected.tobytes()


def test_rounds_in_concurrent_threads_stay_on_one_blas_thread() -> None:
    """Threads playing rounds at the same time share the process-wide limit: none of them may lift it
    while another is inside a round."""
    with threadpool_limits(1):
        expected = {str(case): _plays(*case) for case in CASES[1:]}
    results: dict[str, list[np.ndarray]] = {key: [] for key in expected}

    def play(algorithm: str, params: dict[str, object], dim: int) -> None:
        for _ in range(2):
            results[str((algorithm, params, dim))].append(_plays(algorithm, params, dim))

    with threadpool_limits(2):
        workers = [threading.Thread(target=play, args=case) for case in CASES[1:] for _ in range(2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert _blas_threads() == [2] * len(_blas_threads())
    for key, plays in results.items():
        assert len(plays) == 4
        assert all(p.tobytes() == expected[key].tobytes() for p in plays), key


_REPLAY = """
import sys
from tests.kons.test_blas_threads import _plays
sys.stdout.write(_plays("fd_son", {"sketch_size": 100}, 20_000).tobytes().hex())
"""


def test_replays_agree_across_processes_with_different_openblas_num_threads() -> None:
    """The audit's setting: the same rounds replayed by processes started with 1 and 2 BLAS threads."""
    outputs = []
    for threads in ("1", "2"):
        env = {**os.environ, "OPENBLAS_NUM_THREADS": threads}
        done = subprocess.run([sys.executable, "-c", _REPLAY], env=env, capture_output=True, text=True,
                              check=True, timeout=300, cwd=Path(__file__).parents[2])
        assert done.stderr == ""
        outputs.append(done.stdout)
    assert outputs[0] and outputs[0] == outputs[1]


def test_a_round_keeps_the_callers_one_thread_limit_in_a_process_with_more_threads() -> None:
    """In the pthreads builds the pin sets the process-wide count: a round must put back the count the
    caller chose (lifting the pin once reset it to the count the process started its threads for)."""
    with threadpool_limits(2), threadpool_limits(1):
        learner_from_params("ons", {"dim": 3}).learn_one([1.0, 2.0, 3.0], 1.0)
        assert _blas_threads() == [1] * len(_blas_threads())


def test_a_library_that_does_not_export_its_count_is_read_through_its_getter() -> None:
    class Library:
        dynlib = ctypes.CDLL(None)  # the process's own symbols: no OpenBLAS variable among them

        def get_num_threads(self) -> int:
            return 3

    assert _count_reader(Library())() == 3
