"""The acknowledged versions kept outside Redis (:mod:`kons_service.core.marks`): what a process that
starts finds of its predecessors' marks, and a file that stays small however many rounds are marked.
(Their use after a host reboot: ``tests/reliability/test_rollback_restart.py``.)"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from kons_service.core.marks import AckMarks
from kons_service.store import Head, LearnerRef

A, B = LearnerRef("t", "a"), LearnerRef("t", "b")


def _head(incarnation: str, version: int) -> Head:
    return Head(incarnation, version, 0, f"p/{version}")


def test_a_process_finds_the_newest_marks_of_each_incarnation_and_folds_in_dead_files(
    tmp_path: Path,
) -> None:
    dead = AckMarks(tmp_path, "dead", 0.1)
    dead.open()
    for version in (1, 2, 3):
        dead.acknowledged(A, _head("i1", version))
    dead.acknowledged(B, _head("j", 7))
    dead.close()
    live = AckMarks(tmp_path, "live", 0.1)
    live.open()
    live.acknowledged(A, _head("i2", 5))  # A re-created: another incarnation
    with (tmp_path / "dead.marks").open("ab") as torn:
        torn.write(b'["t","b","j",9')  # a crash mid-line

    new = AckMarks(tmp_path, "new", 0.1)
    new.open()
    assert sorted(new.unchecked(A), key=lambda h: h.incarnation) == [_head("i1", 3), _head("i2", 5)]
    assert new.unchecked(A) == []  # handed out once
    assert new.unchecked(B) == [_head("j", 7)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["live.marks", "new.marks"]  # the dead one folded

    newer = AckMarks(tmp_path, "newer", 0.1)  # a later restart still finds what "new" did not check
    newer.open()
    assert newer.unchecked(B) == [_head("j", 7)]
    for marks in (live, new, newer):
        marks.close()


def test_the_file_keeps_the_newest_mark_of_each_learner_only(tmp_path: Path) -> None:
    marks = AckMarks(tmp_path, "p", 0.1)
    marks.open()
    for version in range(1, 20_001):
        marks.acknowledged(A if version % 2 else B, _head("i", version))
    marks.forget(B)
    marks.close()
    assert len((tmp_path / "p.marks").read_bytes().splitlines()) <= 4097  # rewritten as it grew
    later = AckMarks(tmp_path, "q", 0.1)
    later.open()
    assert later.unchecked(A) == [_head("i", 19_999)]
    later.close()


def test_a_mark_that_cannot_be_written_is_logged_once_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The rounds are logged in Redis already: a full disk must not turn their answer into an error."""
    (tmp_path / "old.marks").write_bytes(b'5\n["t","a"]\n{"x":1}\n["t","a","i",2,"p/2"]\n')
    marks = AckMarks(tmp_path, "p", 0.1)
    marks.open()
    assert marks.unchecked(A) == [_head("i", 2)]  # the lines that are not marks are skipped
    os.close(marks._fd)  # every write now fails, as on a full disk
    with caplog.at_level(logging.ERROR, logger="kons_service.marks"):
        for version in (3, 4):
            marks.acknowledged(A, _head("i", version))
    assert len([r for r in caplog.records if "could not write" in r.getMessage()]) == 1
    marks._fd = -1
