"""What a benchmark's smoke test checks of its results' provenance."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import registry
from benchmarks.provenance import changed_sources, read_markdown_stamp


def assert_stamped(markdown: Path, raw: Path | None, output: str) -> None:
    """The report ``markdown`` (and its raw JSON ``raw``) carry one provenance record: that of the sources
    the registry lists for ``output``, unchanged since the run."""
    stamp = read_markdown_stamp(markdown.read_text())
    assert stamp is not None, f"{markdown.name} has no provenance"
    assert stamp["sources"] == list(registry.sources_of(output) or ()) and stamp["blobs"]
    assert changed_sources(stamp) == []
    if raw is not None:
        assert json.loads(raw.read_text())["provenance"] == stamp
