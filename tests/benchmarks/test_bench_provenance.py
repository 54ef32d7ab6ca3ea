"""The benchmarks' provenance records, the staleness check and the registry table of their README."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import registry
from benchmarks.common import REPO
from benchmarks.provenance import changed_sources, provenance, publish, read_markdown_stamp, stamp_markdown


def test_a_record_names_the_files_measured_and_finds_what_changed_since() -> None:
    record = provenance(["benchmarks/provenance.py", "benchmarks/echo_app.py"])
    assert len(record["commit"]) == 40 and set(record["blobs"]) == {"benchmarks/provenance.py",
                                                                    "benchmarks/echo_app.py"}
    assert changed_sources(record) == []
    edited = {**record["blobs"], "benchmarks/echo_app.py": "0" * 40}
    assert changed_sources({**record, "blobs": edited}) == ["benchmarks/echo_app.py"]
    gone = {**record["blobs"], "benchmarks/removed.py": "0" * 40}
    assert changed_sources({**record, "blobs": gone}) == ["-benchmarks/removed.py"]


def test_a_folder_stands_for_its_files_and_a_new_one_is_a_change() -> None:
    record = provenance(["testkit"])
    assert "testkit/processes.py" in record["blobs"]
    fewer = {k: v for k, v in record["blobs"].items() if k != "testkit/processes.py"}
    assert changed_sources({**record, "blobs": fewer}) == ["+testkit/processes.py"]


def test_a_markdown_report_carries_its_record_invisibly() -> None:
    record = provenance(["benchmarks/provenance.py"])
    text = stamp_markdown("# Report\n\n| a |\n", record)
    assert text.startswith("# Report\n\n| a |\n\n<!-- provenance {")
    assert read_markdown_stamp(text) == record
    assert read_markdown_stamp("# no record\n") is None


def test_publish_writes_the_report_and_the_figures_each_with_the_record(tmp_path: Path) -> None:
    stamp = provenance(["benchmarks/provenance.py"])
    report = publish(tmp_path / "new", "run", stamp, "# A run\n\n| a |", {"rounds": 3}, indent=2)
    assert report == tmp_path / "new" / "run.md"
    assert report.read_text().startswith("# A run\n\n| a |\n\n<!-- provenance ")
    assert read_markdown_stamp(report.read_text()) == stamp
    figures = (tmp_path / "new" / "run.json").read_text()
    assert json.loads(figures) == {"rounds": 3, "provenance": stamp} and figures.startswith('{\n  "rounds"')
    publish(tmp_path, "alone", stamp, "text")  # no figures: the report alone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alone.md", "new"]


def test_the_readme_shows_the_registry_and_every_registered_source_exists() -> None:
    readme = (REPO / "benchmarks" / "README.md").read_text()
    assert "\n".join(registry.markdown()) in readme
    for benchmark in registry.BENCHMARKS:
        assert all((REPO / source).exists() for source in benchmark.sources), benchmark.claim


def test_the_commands_to_rerun_are_those_of_the_benchmarks_behind_once_each() -> None:
    from benchmarks.stale import Verdict, rerun_commands

    verdicts = [Verdict("scaling.md", "stale", ""), Verdict("scaling.json", "unknown", ""),
                Verdict("blas_pin.md", "current", ""), Verdict("quality_raw_holdout/heart.json", "stale", "")]
    scaling, holdout = registry.benchmark_of("scaling.md"), registry.benchmark_of("quality_raw_holdout.md")
    assert scaling is not None and holdout is not None
    assert registry.benchmark_of("quality_raw_holdout/heart.json") is holdout
    assert rerun_commands(verdicts) == [scaling.command, holdout.command]
