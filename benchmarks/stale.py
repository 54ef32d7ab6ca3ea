"""List the result files whose measured code changed after they were produced, or that cannot tell.

    python -m benchmarks.stale              # every file under benchmarks/results; exit 1 if any is stale
    python -m benchmarks.stale --registry   # the registry table of benchmarks/README.md
    python -m benchmarks.stale --commands   # the registered commands that re-run every stale result

A result written by a harness that records its provenance (:mod:`benchmarks.provenance`) is checked file
by file against the blob hashes it records. A record whose ``runs`` each carry their own provenance (the
quality benchmark's raw regime merges runs of several methods made at different times) is stale as soon
as one run is, and each run only by what it measures. A page generated from such records (its stamp
names the folder and the module that writes it) is as current as its records, and stale if its text is
not what that module writes from them. An older result is checked through the registry
(:mod:`benchmarks.registry`): if it names the commit it was produced at, the registered sources are
compared between that commit and the working tree; otherwise it has no provenance.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import json
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import registry
from benchmarks.common import REPO
from benchmarks.provenance import changed_sources, read_markdown_stamp

__all__ = ["Verdict", "check", "main", "rerun_commands"]

RESULTS = REPO / "benchmarks" / "results"
#: How an older harness (benchmarks.load) wrote its run's commit into its report.
_OWN_COMMIT = re.compile(r"\bcommit `([0-9a-f]{7,40})(?:\+dirty)?`")


@dataclass(frozen=True)
class Verdict:
    """``status`` is ``current``, ``stale`` (``detail`` lists what changed) or ``unknown``."""

    path: str
    status: str
    detail: str


def _load(path: Path) -> Any:
    with contextlib.suppress(ValueError):
        return json.loads(path.read_text(errors="replace"))
    return None


def _stamp(path: Path) -> dict[str, Any] | None:
    if path.suffix == ".json":
        record = _load(path)
        stamp = record.get("provenance") if isinstance(record, dict) else None
        return stamp if isinstance(stamp, dict) and "blobs" in stamp else None
    return read_markdown_stamp(path.read_text(errors="replace"))


def _runs(path: Path) -> list[dict[str, Any]] | None:
    """The runs of a record whose runs carry their own provenance (``{"runs": [{"method": ...}]}``)."""
    record = _load(path) if path.suffix == ".json" else None
    runs = record.get("runs") if isinstance(record, dict) else None
    if isinstance(runs, list) and runs and all(isinstance(r, dict) and "method" in r for r in runs):
        return runs
    return None


def _produced_at(path: Path) -> tuple[str, str] | None:
    """For an older result: the commit it names as its own (a harness-written ``commit `X` `` or a JSON
    ``"commit"``), else the commit that last changed it in git (results are committed after their run,
    so the run was at or before it); with how it was found. None if neither is known."""
    text = path.read_text(errors="replace")
    named = None
    if path.suffix == ".json":
        with contextlib.suppress(ValueError):
            record = json.loads(text)
            named = str(record.get("commit", "")) if isinstance(record, dict) else None
    else:
        found = _OWN_COMMIT.search(text)
        named = found[1] if found else None
    if named and _git("cat-file", "-e", f"{named.split('+')[0]}^{{commit}}", check=False) is not None:
        return named.split("+")[0], "named in the file"
    if not path.is_relative_to(REPO):
        return None
    last = _git("log", "-1", "--format=%H", "--", str(path.relative_to(REPO)), check=False)
    return (last.strip(), "the commit that last changed the file") if last and last.strip() else None


def _git(*args: str, check: bool = True) -> str | None:
    done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        if check:
            raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
        return None
    return done.stdout


def _summary(paths: Sequence[str], limit: int = 6) -> str:
    shown = ", ".join(paths[:limit])
    return f"{len(paths)} file(s) changed: {shown}" + (", ..." if len(paths) > limit else "")


@functools.cache
def _changed(stamp: str) -> list[str]:
    """:func:`changed_sources` of a stamp (as JSON): the runs of one invocation share theirs, and the
    checkout does not change while this command runs."""
    return changed_sources(json.loads(stamp))


def _check_stamp(name: str, stamp: dict[str, Any]) -> Verdict:
    changed = _changed(json.dumps(stamp, sort_keys=True))
    if changed:
        return Verdict(name, "stale", f"since {stamp['commit'][:9]}: {_summary(changed)}")
    return Verdict(name, "current", f"at {stamp['commit'][:9]}" + (" (+local changes)" * stamp["dirty"]))


def _check_runs(path: Path, runs: list[dict[str, Any]]) -> Verdict:
    """Stale if one run is (by its own provenance), else unknown if one has none, else current."""
    name = str(path.relative_to(RESULTS))
    verdicts = [_check_stamp(run["method"], run["provenance"]) for run in runs if "provenance" in run]
    stale = [f"{v.path} {v.detail}" for v in verdicts if v.status == "stale"]
    if stale:
        return Verdict(name, "stale", "; ".join(stale))
    unstamped = [run["method"] for run in runs if "provenance" not in run]
    if unstamped:
        older = _check_registered(path)
        return Verdict(name, older.status, f"{len(unstamped)} of {len(runs)} runs without provenance "
                       f"({', '.join(unstamped)}): {older.detail}")
    commits = sorted({run["provenance"]["commit"][:9] for run in runs})
    return Verdict(name, "current", f"{len(runs)} runs at {', '.join(commits)}")


def _check_generated(path: Path, stamp: dict[str, Any]) -> Verdict:
    """A page written from the records of a folder by a module: as current as they are, and stale if its
    text is not what the module writes from them."""
    name = str(path.relative_to(RESULTS))
    records = [check(p) for p in sorted((path.parent / stamp["generated_from"]).glob("*.json"))]
    writer = importlib.import_module(stamp["by"])
    if writer.regenerate(path) != path.read_text():
        return Verdict(name, "stale",
                       f"not what `python -m {stamp['by']}` writes from {stamp['generated_from']}")
    for status in ("stale", "unknown"):
        bad = [v.path for v in records if v.status == status]
        if bad:
            shown = ", ".join(bad[:3]) + (", ..." if len(bad) > 3 else "")
            return Verdict(name, status, f"{len(bad)} of its {len(records)} records {status}: {shown}")
    return Verdict(name, "current", f"generated from {len(records)} current records")


def check(path: Path) -> Verdict:
    """Whether the result ``path`` still describes the code it measures."""
    name = str(path.relative_to(RESULTS))
    stamp = _stamp(path)
    if stamp is not None and "generated_from" in stamp:
        return _check_generated(path, stamp)
    if stamp is not None:
        return _check_stamp(name, stamp)
    runs = _runs(path)
    if runs is not None:
        return _check_runs(path, runs)
    return _check_registered(path)


def _check_registered(path: Path) -> Verdict:
    """An older result without provenance, judged by the registry's sources since the commit it names or,
    failing that, the commit that last changed it."""
    name = str(path.relative_to(RESULTS))
    sources = registry.sources_of(name)
    if sources is None:
        return Verdict(name, "unknown", "no provenance, not in the registry")
    produced = _produced_at(path)
    if produced is None:
        return Verdict(name, "unknown", "no provenance, not committed")
    commit, how = produced
    changed = (_git("diff", "--name-only", commit, "--", *sources) or "").split()
    if changed:
        return Verdict(name, "stale", f"predates the code it measures; since {commit[:9]} ({how}): "
                       f"{_summary(changed)}")
    return Verdict(name, "unknown", f"no provenance; its sources are unchanged since {commit[:9]} ({how})")


def rerun_commands(verdicts: Sequence[Verdict]) -> list[str]:
    """The registered commands, in registry order, of the benchmarks with a result that is not current."""
    behind = {registry.benchmark_of(v.path) for v in verdicts if v.status != "current"}
    return [b.command for b in registry.BENCHMARKS if b in behind]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--registry", action="store_true", help="print the registry table and exit")
    parser.add_argument("--all", action="store_true", help="also list the current results")
    parser.add_argument("--commands", action="store_true",
                        help="print the registered command of each benchmark with a result not current")
    args = parser.parse_args(argv)
    if args.registry:
        print("\n".join(registry.markdown()))
        return 0
    verdicts = [check(p) for p in sorted(RESULTS.rglob("*")) if p.is_file() and p.suffix in (".md", ".json")]
    if args.commands:
        print("\n".join(rerun_commands(verdicts)))
        return 0
    for v in verdicts:
        if args.all or v.status != "current":
            print(f"{v.status:8s} {v.path}: {v.detail}")
    counts = {s: sum(v.status == s for v in verdicts) for s in ("current", "stale", "unknown")}
    print(", ".join(f"{n} {s}" for s, n in counts.items()))
    return 1 if counts["stale"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
