"""Every round's linear algebra on one BLAS thread, whatever the embedding process set.

OpenBLAS splits some operations between its threads above a size threshold and adds the partial results
in another order: a dot product longer than 10,000 (exact KONS from its 10,001st stored point), ``gemm``
from about 400 x 400, ``gemv`` on wide matrices (FD-SON's sketch times a long ``x``), ONS's products at
``dim`` 1,000. With 2 threads the last bit of such a result differs from the one-thread result, so a
replay of the same rounds in a process with another thread count (another ``OPENBLAS_NUM_THREADS``, or a
``threadpoolctl`` limit of the embedding application) diverged. Rounds run inside
:func:`one_blas_thread`, so a learner's plays depend only on its state and its input.

The pin is OpenBLAS's ``openblas_set_num_threads_local`` (recent OpenBLAS, as in the NumPy and SciPy
wheels). In the pthreads builds it sets the process-wide thread count, the one ``OPENBLAS_NUM_THREADS``
and ``threadpoolctl`` set, so concurrent rounds share it: the first round to enter reads each library's
count and pins the libraries not already on one thread, the last to leave puts back the counts it read
(under a lock), and no round can lift the pin while another is inside. Meanwhile every BLAS call of the
process runs on one thread. A library already on one thread (the service's setting) is neither set nor
restored, so a round then makes no call into the library at all: the count is read in place where the
library exports it (``blas_cpu_number``, the count its calls use), else through its getter.
``threadpoolctl``'s own limits cannot serve: they ignore a change from any thread but the first one that
set a limit, and rounds run in worker threads too. OpenBLAS built with OpenMP, MKL, BLIS or Accelerate
are left alone: with them, replays need equal thread counts.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable
from typing import Any

from threadpoolctl import ThreadpoolController

__all__ = ["one_blas_thread", "pinned_libraries"]

_SETTER = "openblas_set_num_threads_local"
#: OpenBLAS's own variable for the thread count its calls use (what its getter returns).
_COUNT = "blas_cpu_number"
_PIN = 1

_lock = threading.Lock()
_rounds_inside = 0  # blocks inside one_blas_thread, in every thread (nested ones too: Auto's bases)
_to_restore: list[tuple[Callable[[int], int], int]] = []  # (setter, count it had) of the pinned libraries


def _count_reader(library: Any) -> Callable[[], int]:
    """The library's current thread count: read from its variable (no call into the library) where it
    exports it, else from its getter."""
    try:
        count = ctypes.c_int.in_dll(library.dynlib, _COUNT)
    except ValueError:
        return library.get_num_threads  # type: ignore[no-any-return]
    return lambda: count.value


@functools.cache
def _overrides() -> tuple[tuple[Callable[[int], int], Callable[[], int]], ...]:
    """The thread-count override and the count reader of every pthreads OpenBLAS loaded in the process.

    Found once: NumPy and SciPy (imported by kons) have loaded theirs before the first round.
    """
    overrides = []
    for library in ThreadpoolController().select(internal_api="openblas").lib_controllers:
        setter = getattr(library.dynlib, _SETTER, None)
        if setter is not None and library.threading_layer == "pthreads":
            setter.argtypes = [ctypes.c_int]
            setter.restype = ctypes.c_int
            overrides.append((setter, _count_reader(library)))
    return tuple(overrides)


def pinned_libraries() -> int:
    """How many of the process's BLAS libraries :func:`one_blas_thread` pins (the others are left alone)."""
    return len(_overrides())


class _OneBlasThread:
    """The pin as a reusable context manager (a class: a generator-based one costs a microsecond more)."""

    def __enter__(self) -> None:
        global _rounds_inside
        with _lock:
            if _rounds_inside == 0:
                for setter, count in _overrides():
                    threads = count()
                    if threads != _PIN:
                        setter(_PIN)
                        _to_restore.append((setter, threads))
            _rounds_inside += 1

    def __exit__(self, *exc_info: object) -> None:
        global _rounds_inside
        with _lock:
            _rounds_inside -= 1
            if _rounds_inside == 0:
                for setter, threads in _to_restore:
                    setter(threads)
                _to_restore.clear()


_ONE_BLAS_THREAD = _OneBlasThread()


def one_blas_thread() -> _OneBlasThread:
    """A context manager that runs its block with every OpenBLAS of the process on one thread (re-entrant,
    thread-safe)."""
    return _ONE_BLAS_THREAD
