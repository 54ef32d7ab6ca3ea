"""``benchmarks.ons_rounds`` times a round in a process that imports the checkout it is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.common import REPO
from benchmarks.ons_rounds import _median_round


def test_a_round_is_timed_in_the_checkout_given() -> None:
    assert 0.0 < _median_round(REPO, 50, True, 5, seed=0) < 1.0


def test_a_checkout_that_imports_another_kons_is_refused(tmp_path: Path) -> None:
    # tmp_path has no kons: the child imports the installed one, which is not under tmp_path
    with pytest.raises(RuntimeError, match="imported kons from"):
        _median_round(tmp_path, 50, True, 5, seed=0)
