"""The benchmarks' provenance records, the staleness check and the registry table of their README."""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path

import pytest

from benchmarks import common, registry
from benchmarks import provenance as provenance_module
from benchmarks.common import REPO
from benchmarks.provenance import (
    changed_sources,
    provenance,
    publish,
    read_markdown_stamp,
    same_code,
    stamp_markdown,
)


def test_a_record_names_the_files_measured_and_finds_what_changed_since() -> None:
    record = provenance(["benchmarks/provenance.py", "benchmarks/echo_app.py"])
    assert len(record["commit"]) == 40 and set(record["blobs"]) == {"benchmarks/provenance.py",
                                                                    "benchmarks/echo_app.py"}
    assert changed_sources(record) == []
    edited = {**record["blobs"], "benchmarks/echo_app.py": "0" * 40}
    assert changed_sources({**record, "blobs": edited}) == ["benchmarks/echo_app.py"]
    gone = {**record["blobs"], "benchmarks/removed.py": "0" * 40}
    assert changed_sources({**record, "blobs": gone}) == ["-benchmarks/removed.py"]


CODE = '''"""A module."""


def area(r: float) -> float:
    """The area of a disc."""
    return 3.14159 * r * r  # pi, near enough
'''


def test_reworded_docstrings_and_comments_are_the_same_code_and_anything_else_is_not() -> None:
    reworded = CODE.replace("A module.", "A module of discs.").replace("near enough", "to 5 digits")
    assert reworded != CODE and same_code(CODE, reworded)
    assert same_code(CODE, CODE.replace('    """The area of a disc."""\n', ""))
    assert not same_code(CODE, CODE.replace("3.14159", "3.1416"))
    assert not same_code(CODE, CODE.replace("r * r", "r ** 2"))
    assert not same_code(CODE, CODE.replace('A module."""', 'A module."""\nimport os'))  # a statement more
    assert not same_code(CODE, CODE.replace("def area", "def area(("))  # no longer parses


def _committed(repo: Path, files: dict[str, str]) -> None:
    """A new git repository at ``repo`` whose one commit holds ``files`` (path: text)."""
    git = functools.partial(subprocess.run, cwd=repo, check=True, capture_output=True)
    git(["git", "init", "-q"])
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(["git", "add", *files])
    git(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "files"])


def test_a_result_stays_current_through_a_reworded_docstring_but_not_a_code_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(provenance_module, "REPO", tmp_path)
    _committed(tmp_path, {"disc.py": CODE})
    record = provenance(["disc.py"])
    (tmp_path / "disc.py").write_text(CODE.replace("The area", "The surface"))
    assert changed_sources(record) == []
    (tmp_path / "disc.py").write_text(CODE.replace("3.14159", "3.1416"))
    assert changed_sources(record) == ["disc.py"]


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


def test_run_and_publish_runs_once_then_writes_and_prints_the_stamped_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    measured: list[dict[str, object]] = []

    def run() -> dict[str, object]:
        measured.append({"rounds": 3})
        return measured[-1]

    status = common.run_and_publish(
        "benchmarks.example", ["--rounds", "3", "--out", str(tmp_path)], name="example", out=tmp_path,
        sources=["benchmarks/common.py"], run=run, indent=2,
        page=lambda record, command: f"# {record}\n\n`{command}`\n")
    assert status == 0 and len(measured) == 1
    page = (tmp_path / "example.md").read_text()
    assert page.startswith("# {'rounds': 3}\n\n`python -m benchmarks.example --rounds 3`\n")  # no --out
    stamp = read_markdown_stamp(page)
    assert stamp is not None and list(stamp["blobs"]) == ["benchmarks/common.py"]
    figures = (tmp_path / "example.json").read_text()
    assert json.loads(figures) == {"rounds": 3, "provenance": stamp} and figures.startswith('{\n  "rounds"')
    assert capsys.readouterr().out.startswith("# {'rounds': 3}")


def test_the_readme_shows_the_registry_and_every_registered_source_exists() -> None:
    readme = (REPO / "benchmarks" / "README.md").read_text()
    assert "\n".join(registry.markdown()) in readme
    for benchmark in registry.BENCHMARKS:
        assert all((REPO / source).exists() for source in benchmark.sources), benchmark.claim


def test_the_registry_knows_what_the_paired_hot_path_measures() -> None:
    from benchmarks import hotpath_paired

    for name in ("paired", "paired_main_071a3fa"):
        for suffix in (".md", ".json"):
            benchmark = registry.benchmark_of(f"hotpath_single/{name}{suffix}")
            assert benchmark is not None and "benchmarks.hotpath_paired" in benchmark.command
            assert benchmark.sources == hotpath_paired.SOURCES
    single = registry.benchmark_of("hotpath_single/hotpath.json")
    assert single is not None and "--parts single" in single.command


def test_the_commands_to_rerun_are_those_of_the_benchmarks_behind_once_each() -> None:
    from benchmarks.stale import Verdict, rerun_commands

    verdicts = [Verdict("scaling.md", "stale", ""), Verdict("scaling.json", "unknown", ""),
                Verdict("blas_pin.md", "current", ""), Verdict("quality_raw_holdout/heart.json", "stale", "")]
    scaling, holdout = registry.benchmark_of("scaling.md"), registry.benchmark_of("quality_raw_holdout.md")
    assert scaling is not None and holdout is not None
    assert registry.benchmark_of("quality_raw_holdout/heart.json") is holdout
    assert rerun_commands(verdicts) == [scaling.command, holdout.command]


def test_a_result_not_yet_committed_does_not_make_the_code_dirty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "REPO", tmp_path)
    _committed(tmp_path, {"benchmarks/run.py": CODE, "benchmarks/results/run.md": "# A run\n"})
    clean = common.git_commit()
    (tmp_path / "benchmarks" / "results" / "run.md").write_text("# A run, again\n")
    assert common.git_commit() == clean and not clean.endswith("+dirty")
    (tmp_path / "benchmarks" / "run.py").write_text(CODE.replace("3.14159", "3.1416"))
    assert common.git_commit() == clean + "+dirty"
