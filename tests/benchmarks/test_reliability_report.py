"""``docs/reliability.md`` is the battery's own report: rendered again from the committed figures, it is
the same text, Summary table included (a hand edit, or a change of the script not re-rendered, fails)."""

from __future__ import annotations

from pathlib import Path

from benchmarks import reliability
from benchmarks.common import REPO

RESULTS = REPO / "benchmarks" / "results"


def test_docs_reliability_is_what_the_battery_renders_from_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "reliability.md"
    reliability.main(["--from-json", str(RESULTS / "reliability.json"),
                      "--cluster-json", str(RESULTS / "cluster_failover.json"), "--out", str(out)])
    assert out.read_text() == (REPO / "docs" / "reliability.md").read_text()
