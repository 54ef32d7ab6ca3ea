"""The hostile benchmark refuses to publish a page whose senders sent nothing (a vacuous fairness claim)."""

import pytest

from benchmarks.hostile import _Cell, _require_senders, _Tally


def _tally(*sent: int) -> _Tally:
    tally = _Tally()
    for hostile in sent:
        tally.cells.append(_Cell([1.0, 2.0], 0.0, 1.0, hostile=hostile))
    return tally


def test_a_silent_hostile_cell_stops_the_run() -> None:
    tallies = {("idle", "this checkout"): _tally(0, 0), ("2 senders", "this checkout"): _tally(40, 0)}
    with pytest.raises(SystemExit, match=r"1 cell\(s\) \(2 senders on this checkout, round 2\).*niceness 19"):
        _require_senders(tallies, 19)


def test_idle_cells_and_busy_senders_pass() -> None:
    _require_senders({("idle", "this checkout"): _tally(0), ("2 senders", "this checkout"): _tally(3, 7)}, 0)
