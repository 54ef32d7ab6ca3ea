"""Child processes that die with the service.

A SIGKILLed service (the OOM killer, a supervisor's hard stop) runs no shutdown code, so its parser
processes (:mod:`kons_service.http.parsers`) used to live on for ever, waiting for work, and with them
multiprocessing's resource tracker, which exits only once every process holding its pipe is gone: about
100 MB per crash under a supervisor that restarts only the main process; an embedded Redis server
(:mod:`kons_service.store.embedded`) would likewise outlive it. A child calls :func:`die_with_parent` first
thing: on Linux the kernel then signals it when its parent dies (``prctl(PR_SET_PDEATHSIG)``); elsewhere a
thread can check the parent's pid every half second.

The kernel's signal follows the parent *thread* that started the child: the parser pool starts its
processes from the thread that submits work, the event loop's, which lives as long as the process.

This module belongs to neither the HTTP layer nor the store, both of which start children.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time

__all__ = ["die_with_parent"]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_POLL_SECONDS = 0.5


def die_with_parent(parent_pid: int, sig: signal.Signals = signal.SIGKILL, *, watch: bool = True) -> None:
    """Make this process get ``sig`` when ``parent_pid``, its parent, dies (see the module's docstring).

    ``watch``: where the kernel cannot send the signal, a thread exits the process once orphaned; off
    between ``fork`` and ``exec`` (a ``preexec_fn``), where no thread would survive the ``exec``.
    """
    if not _ask_the_kernel(sig) and watch:
        threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), name="kons-parent-watch",
                         daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died before the signal was asked for: it never comes
        os._exit(1)


def _ask_the_kernel(sig: signal.Signals) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    with contextlib.suppress(OSError, AttributeError):
        return bool(ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0)
    return False


def _exit_when_orphaned(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(_POLL_SECONDS)
    os._exit(1)
