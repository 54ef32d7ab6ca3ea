"""Where a result came from: the commit and the git blob hashes of the source files it measures.

A benchmark calls :func:`provenance` when its run starts (the code that runs is the code imported then)
with the files and folders it measures, and writes its results with :func:`publish`, which puts the record
into each file: :func:`stamp_json` (a ``"provenance"`` key) and :func:`stamp_markdown` (an HTML comment on
the file's last line, invisible when rendered). :func:`changed_sources` compares a record with the checkout
as it is now; it is what ``python -m benchmarks.stale`` reports. A Python file whose docstrings or comments
alone were reworded since is not a change (:func:`same_code`): what runs is the same.

The hashes are ``git hash-object`` of the files in the working tree, so a run from a checkout with local
changes records what actually ran; folders are expanded to the files git sees in them (tracked, or
untracked but not ignored). A run that measures another library (a River or Vowpal Wabbit peer) also
records that library's installed version (``libraries``): its code is not in this repository, so a new
version, not a commit, is what makes such a result stale.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.common import REPO

__all__ = ["PROVENANCE_COMMENT", "changed_sources", "installed_version", "provenance", "publish",
           "read_markdown_stamp", "same_code", "stamp_json", "stamp_markdown"]

#: The comment that carries a Markdown result's provenance: ``<!-- provenance {...} -->``.
PROVENANCE_COMMENT = re.compile(r"^<!-- provenance (\{.*\}) -->$", re.MULTILINE)


def _git(*args: str, stdin: str | None = None) -> str:
    return subprocess.run(["git", *args], cwd=REPO, input=stdin, capture_output=True, text=True, check=True,
                          timeout=60).stdout


def _files(sources: Sequence[str]) -> list[str]:
    """The files of ``sources`` (paths relative to the repository; a folder stands for its files)."""
    listed = _git("ls-files", "--cached", "--others", "--exclude-standard", "--", *sources).split("\n")
    return sorted({path for path in listed if path and (REPO / path).is_file()})


def blob_hashes(sources: Sequence[str]) -> dict[str, str]:
    """``{path: git blob hash}`` of the files of ``sources`` as they are in the working tree now."""
    files = _files(sources)
    if not files:
        return {}
    hashes = _git("hash-object", "--stdin-paths", stdin="\n".join(files) + "\n").split()
    return dict(zip(files, hashes, strict=True))


def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution (``river``, ``vowpalwabbit``), None if it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def provenance(sources: Sequence[str], libraries: Sequence[str] = ()) -> dict[str, Any]:
    """The record of a run measuring ``sources``: the commit (full hash), whether they had local changes,
    the blob hash of each of their files and, when it measures other libraries (distribution names), their
    installed versions."""
    commit = _git("rev-parse", "HEAD").strip()
    dirty = bool(_git("status", "--porcelain", "--", *sources).strip())
    record = {"commit": commit, "dirty": dirty, "sources": list(sources), "blobs": blob_hashes(sources)}
    if libraries:
        record["libraries"] = {name: installed_version(name) for name in libraries}
    return record


def changed_sources(record: dict[str, Any]) -> list[str]:
    """What a provenance record measured that differs now: files changed, deleted (``-path``) or new in
    one of its folders (``+path``), and libraries at another version (``river 0.26.1 -> 0.27.0``); empty
    when the measured code is the one that produced the result. A library not installed here cannot be
    compared and is not reported."""
    before: dict[str, str] = record["blobs"]
    now = blob_hashes(record["sources"])
    changed = [path for path in sorted(before)
               if path in now and now[path] != before[path] and not _reworded(path, before[path], now[path])]
    libraries = [f"{name} {version} -> {installed}"
                 for name, version in sorted(record.get("libraries", {}).items())
                 if (installed := installed_version(name)) is not None and installed != version]
    return changed + [f"-{p}" for p in sorted(set(before) - set(now))] + \
        [f"+{p}" for p in sorted(set(now) - set(before))] + libraries


@functools.cache  # a function of the two versions (their blob hashes): many records name the same pair
def _reworded(path: str, recorded_blob: str, current_blob: str) -> bool:
    """Whether the Python file ``path`` (now the blob ``current_blob``) differs from its recorded version in
    docstrings and comments only. False when that version is not in the repository (a run of changes
    never committed)."""
    if not path.endswith(".py"):
        return False
    try:
        recorded = _git("cat-file", "blob", recorded_blob)
    except subprocess.CalledProcessError:
        return False
    return same_code(recorded, (REPO / path).read_text())


def same_code(before: str, after: str) -> bool:
    """Whether two Python sources run the same: the same syntax tree once every statement that is only a
    string (a docstring) is dropped; comments and layout are not in the tree. False if either does not
    parse."""
    try:
        return _without_docstrings(before) == _without_docstrings(after)
    except SyntaxError:
        return False


class _DropDocstrings(ast.NodeTransformer):
    def visit_Expr(self, node: ast.Expr) -> ast.Expr | None:
        is_text = isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        return None if is_text else node


def _without_docstrings(source: str) -> str:
    return ast.dump(_DropDocstrings().visit(ast.parse(source)))


def stamp_json(record: dict[str, Any], stamp: dict[str, Any]) -> dict[str, Any]:
    """``record`` with its provenance under the key ``"provenance"``."""
    return {**record, "provenance": stamp}


def stamp_markdown(text: str, stamp: dict[str, Any]) -> str:
    """A Markdown report with its provenance as an HTML comment on its last line."""
    return text.rstrip("\n") + "\n\n<!-- provenance " + json.dumps(stamp, separators=(",", ":")) + " -->\n"


def publish(out: Path, name: str, stamp: dict[str, Any], markdown: str, record: dict[str, Any] | None = None,
            *, indent: int = 1) -> Path:
    """Write a run's results into ``out`` (made if missing), each carrying its provenance ``stamp``:
    ``name.md``, the report ``markdown`` (:func:`stamp_markdown`), and with ``record``, ``name.json``, the raw
    figures (:func:`stamp_json`, indented by ``indent``). Returns the report's path."""
    out.mkdir(parents=True, exist_ok=True)
    if record is not None:
        (out / f"{name}.json").write_text(json.dumps(stamp_json(record, stamp), indent=indent) + "\n")
    report = out / f"{name}.md"
    report.write_text(stamp_markdown(markdown, stamp))
    return report


def read_markdown_stamp(text: str) -> dict[str, Any] | None:
    """The provenance comment of a Markdown report (None without one)."""
    found = PROVENANCE_COMMENT.findall(text)
    return json.loads(found[-1]) if found else None
