"""The storm audit's own logic (:mod:`testkit.scenarios`), on hand-made ledgers: what it replays after a
rollback decides whether a failover test can pass at all."""

from __future__ import annotations

from testkit.processes import SPEC
from testkit.scenarios import Ledger, local_replay, round_body, surviving


def _acked(*rounds: tuple[str, int, int]) -> Ledger:
    """A ledger with rounds (request id, version, seq of client 0) acknowledged in this order."""
    ledger = Ledger()
    for request_id, version, seq in rounds:
        ledger.acked[request_id] = (version, round_body(0, seq))
    return ledger


def test_a_round_acknowledged_again_at_its_version_after_a_rollback_replaces_the_lost_one() -> None:
    ledger = _acked(("a", 1, 0), ("lost", 2, 1), ("after", 2, 2))
    assert surviving(ledger, 2) == {1: round_body(0, 0), 2: round_body(0, 2)}


def test_rounds_lost_above_the_learners_version_are_not_replayed() -> None:
    # the rounds after the rollback did not reach version 3 again before the storm ended
    ledger = _acked(("a", 1, 0), ("b", 2, 1), ("lost-2", 3, 2), ("lost-3", 4, 3), ("after", 3, 4))
    assert surviving(ledger, 3) == {1: round_body(0, 0), 2: round_body(0, 1), 3: round_body(0, 4)}
    only_kept = _acked(("a", 1, 0), ("b", 2, 1), ("after", 3, 4))
    assert local_replay(SPEC, ledger, 3).to_bytes() == local_replay(SPEC, only_kept, 3).to_bytes()
