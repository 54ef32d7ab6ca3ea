"""High-water marks of acknowledged versions, kept outside Redis (``KONS_ACK_MARKS_DIR``).

A Redis that lost acknowledged rounds is seen by a process that held them in memory
(:mod:`.cache`), or by a client that sends back its newest version (:mod:`.rollbacks`). A host reboot
takes the process's memory with it, and a client may not send its version. These marks are what a
reboot of Redis cannot roll back: each process appends one line per acknowledged group of rounds to a
file of its own in a local directory, ``[tenant, name, incarnation, version, tip]``, written before the
answer (into the operating system's cache: it survives a crash of the service or of Redis) and made
durable by an ``fsync`` every ``KONS_ACK_MARKS_FSYNC_SECONDS`` (a host crash loses at most that much of
the marks, against about a second of rounds under Redis's ``appendfsync everysec``). The feedback path
keeps its one Redis call: a mark costs a ``write`` to the file.

A process that starts reads every file of the directory: its own predecessors' (a file whose lock no
live process holds is folded into the new process's file and removed) and those of the live processes
that share the directory. The first time it loads a learner it compares the newest mark of the learner's
incarnation with the store's head (see :meth:`LearnerCache.check_held`): a head below it, or another
round at that version, is reported as a rollback. A file stays small: it is rewritten with only the
newest mark of each learner once it holds many more lines than learners.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
from pathlib import Path

from kons_service.store import Head, LearnerRef

__all__ = ["AckMarks"]

log = logging.getLogger("kons_service.marks")

_SUFFIX = ".marks"
#: A file is rewritten once it holds this many times more lines than learners (and at least the minimum).
_REWRITE_FACTOR, _REWRITE_MIN_LINES = 4, 4096

_Marks = dict[LearnerRef, dict[str, Head]]  # learner -> incarnation -> its newest mark


def _line(ref: LearnerRef, head: Head) -> bytes:
    return (json.dumps([ref.tenant, ref.name, head.incarnation, head.version, head.tip],
                       separators=(",", ":")) + "\n").encode()


def _read(path: Path, into: _Marks) -> None:
    """Add the marks of the file at ``path`` (a line that is not a mark, e.g. the torn last line of a
    crash mid-write, is skipped)."""
    with contextlib.suppress(FileNotFoundError), path.open("rb") as lines:
        for raw in lines:
            try:
                tenant, name, incarnation, version, tip = json.loads(raw)
                version = int(version)
            except (ValueError, TypeError):
                continue
            marks = into.setdefault(LearnerRef(tenant, name), {})
            known = marks.get(incarnation)
            if known is None or version >= known.version:
                marks[incarnation] = Head(str(incarnation), version, 0, str(tip))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _locked(fd: int) -> bool:
    """Take the file's lock if nobody holds it (False: a live process owns the file)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class AckMarks:
    """This process's file of marks, and the marks it found when it started (to check once each)."""

    def __init__(self, directory: Path, name: str, fsync_seconds: float) -> None:
        self.directory = directory
        self.path = directory / f"{name}{_SUFFIX}"
        self.fsync_seconds = fsync_seconds
        self._newest: _Marks = {}  # what the file must keep when it is rewritten
        self._unchecked: _Marks = {}  # marks found at start whose learner was not loaded since
        self._fd = -1
        self._lines = 0
        self._dirty = False
        self._failing = False  # the last write or fsync failed (logged once until one succeeds)

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> None:
        """Read the directory's marks, fold in the files no live process owns, and start this file."""
        self.directory.mkdir(parents=True, exist_ok=True)
        orphans = []
        for path in sorted([*self.directory.glob(f"*{_SUFFIX}"), *self.directory.glob("*.tmp")]):
            fd = os.open(path, os.O_RDONLY)
            try:
                owned = not _locked(fd)
                if path.suffix == _SUFFIX:  # (a .tmp file is a rewrite that did not finish)
                    _read(path, self._unchecked)
                if not owned:
                    orphans.append(path)
            finally:
                os.close(fd)  # (which drops the lock just taken: the file is removed below)
        for ref, marks in self._unchecked.items():
            self._newest[ref] = dict(marks)
        self._rewrite()
        for path in orphans:
            path.unlink(missing_ok=True)
        if self._unchecked:
            log.info("read the acknowledged versions of %d learners from %s", len(self._unchecked),
                     self.directory)

    async def run(self) -> None:
        """Make the marks written durable every ``fsync_seconds`` (a background task)."""
        while True:
            await asyncio.sleep(self.fsync_seconds)
            await self.flush()

    async def flush(self) -> None:
        if self._dirty and self._fd >= 0:
            self._dirty = False
            try:
                await asyncio.to_thread(os.fsync, self._fd)
            except OSError as exc:
                self._failed(exc)

    def close(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1

    # ------------------------------------------------------------------ marks
    def acknowledged(self, ref: LearnerRef, head: Head) -> None:
        """Rounds of ``ref`` up to ``head`` were acknowledged (before the answer goes out). A failure to
        write (a full disk) is logged, not raised: the rounds are logged in Redis, only this witness of
        their loss is weaker."""
        self._newest[ref] = {head.incarnation: head}
        try:
            _write_all(self._fd, _line(ref, head))
            self._lines += 1
            if self._lines > max(_REWRITE_MIN_LINES, _REWRITE_FACTOR * len(self._newest)):
                self._rewrite()
        except OSError as exc:
            self._failed(exc)
            return
        self._dirty = True
        if self._failing:
            self._failing = False
            log.warning("the acknowledged versions are written to %s again", self.path)

    def _failed(self, exc: OSError) -> None:
        if not self._failing:
            self._failing = True
            log.error("could not write the acknowledged versions to %s (%s): a rollback of Redis may go "
                      "unseen after a restart until this is fixed", self.path, exc)

    def forget(self, ref: LearnerRef) -> None:
        """``ref`` was deleted by this process: its marks are of no incarnation any more."""
        self._newest.pop(ref, None)
        self._unchecked.pop(ref, None)

    def unchecked(self, ref: LearnerRef) -> list[Head]:
        """The marks of ``ref`` found at start, each handed out once (when the learner is first loaded)."""
        return list(self._unchecked.pop(ref, {}).values())

    def _rewrite(self) -> None:
        """Replace this process's file by one holding the newest mark of each learner (durably: written,
        fsynced and renamed into place, locked before anyone can open it under its name)."""
        fresh = self.path.with_suffix(".tmp")
        fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        lines = [_line(ref, head) for ref, marks in self._newest.items() for head in marks.values()]
        try:
            _write_all(fd, b"".join(lines))
            os.fsync(fd)
        except OSError:
            os.close(fd)
            raise
        os.replace(fresh, self.path)
        with contextlib.suppress(OSError):  # the directory entry: best effort (not every filesystem)
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._lines, self._dirty = fd, len(lines), False
