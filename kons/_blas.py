"""Every round's linear algebra on one BLAS thread, whatever the embedding process set.

OpenBLAS splits some operations between its threads above a size threshold and adds the partial results
in another order: a dot product longer than 10,000 (exact KONS from its 10,001st stored point), ``gemm``
from about 400 x 400, ``gemv`` on wide matrices (FD-SON's sketch times a long ``x``), ONS's products at
``dim`` 1,000. With 2 threads the last bit of such a result differs from the one-thread result, so a
replay of the same rounds in a process with another thread count (another ``OPENBLAS_NUM_THREADS``, or a
``threadpoolctl`` limit of the embedding application) diverged. Rounds run inside
:func:`one_blas_thread`, so a learner's plays depend only on its state and its input.

The limit is OpenBLAS's override of its thread count, ``openblas_set_num_threads_local`` (recent
OpenBLAS, as in the NumPy and SciPy wheels): 1 pins every call to one thread, 0 lifts the pin and the
process's own count (``OPENBLAS_NUM_THREADS``, ``threadpoolctl``) applies again, so a round never
changes, nor has to restore, the count the embedding application chose. ``threadpoolctl``'s own limits
cannot serve: they ignore a change from any thread but the first one that set a limit, and rounds run in
worker threads too. In the pthreads builds measured here the override is process-wide, not per thread,
so concurrent rounds share it: the first round to enter pins, the last to leave lifts the pin (under a
lock), and no round can lift it while another is inside. Meanwhile every BLAS call of the process runs on
one thread. OpenBLAS built with OpenMP, MKL, BLIS or Accelerate are left alone: with them, replays need
equal thread counts.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable

from threadpoolctl import ThreadpoolController

__all__ = ["one_blas_thread", "pinned_libraries"]

_SETTER = "openblas_set_num_threads_local"
_PIN, _UNPIN = 1, 0

_lock = threading.Lock()
_rounds_inside = 0  # blocks inside one_blas_thread, in every thread (nested ones too: Auto's bases)


@functools.cache
def _overrides() -> tuple[Callable[[int], int], ...]:
    """The thread-count override of every pthreads OpenBLAS loaded in the process.

    Found once: NumPy and SciPy (imported by kons) have loaded theirs before the first round.
    """
    setters = []
    for library in ThreadpoolController().select(internal_api="openblas").lib_controllers:
        setter = getattr(library.dynlib, _SETTER, None)
        if setter is not None and library.threading_layer == "pthreads":
            setter.argtypes = [ctypes.c_int]
            setter.restype = ctypes.c_int
            setters.append(setter)
    return tuple(setters)


def pinned_libraries() -> int:
    """How many of the process's BLAS libraries :func:`one_blas_thread` pins (the others are left alone)."""
    return len(_overrides())


class _OneBlasThread:
    """The pin as a reusable context manager (a class: a generator-based one costs a microsecond more)."""

    def __enter__(self) -> None:
        global _rounds_inside
        with _lock:
            if _rounds_inside == 0:
                for setter in _overrides():
                    setter(_PIN)
            _rounds_inside += 1

    def __exit__(self, *exc_info: object) -> None:
        global _rounds_inside
        with _lock:
            _rounds_inside -= 1
            if _rounds_inside == 0:
                for setter in _overrides():
                    setter(_UNPIN)


_ONE_BLAS_THREAD = _OneBlasThread()


def one_blas_thread() -> _OneBlasThread:
    """A context manager that runs its block with every OpenBLAS of the process on one thread (re-entrant,
    thread-safe)."""
    return _ONE_BLAS_THREAD
