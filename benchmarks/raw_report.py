"""The pages of the quality benchmark's raw regime, written from its records and nothing else.

    python -m benchmarks.raw_report --out benchmarks/results      # rewrite both pages from the records

A suite is a set of data sets with its records' folder and its page: ``headline`` (the 12 sets of
``quality_raw_regime.md``) and ``holdout`` (14 other sets, ``quality_raw_holdout.md``). The records are
written by ``python -m benchmarks.quality --regime raw --suite NAME`` (:mod:`benchmarks.raw_regime`);
each run in them carries its own command, machine and provenance, and the page lists them per method.

A page's last line names its folder and this module instead of a provenance of its own:
``python -m benchmarks.stale`` judges the page by its records, and reports it if its text is not what
:func:`render` writes from them (a page edited by hand, or not rewritten after a run).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import raw_regime
from benchmarks.common import markdown_table
from benchmarks.provenance import stamp_markdown
from benchmarks.quality import CLASSIFICATION, REGRESSION
from benchmarks.raw_regime import RAW_METHODS

__all__ = ["SUITES", "Suite", "main", "regenerate", "render", "write_page"]


@dataclass(frozen=True)
class Suite:
    """A set of data sets of the raw regime: its records' folder and its page (under ``--out``)."""

    name: str
    datasets: tuple[str, ...]
    folder: str
    page: str
    title: str
    preface: str


SUITES = {suite.name: suite for suite in (
    Suite("headline", (*REGRESSION, *CLASSIFICATION), "quality_raw_regime", "quality_raw_regime.md",
          "Learning quality in the raw regime: defaults for everyone (progressive validation)",
          "The 12 headline data sets, T = 5000 rows each."),
    Suite("holdout", ("bodyfat", "housing", "triazines", "ionosphere", "heart", "australian", "breast-cancer",
                      "diabetes", "german.numer", "splice", "mg", "svmguide1", "cpu_act", "spambase"),
          "quality_raw_holdout", "quality_raw_holdout.md",
          "Holdout for the raw regime: 14 other raw data sets, defaults for everyone "
          "(progressive validation)",
          "Not among the 12 headline sets of `quality_raw_regime.md`; same harness and protocol, "
          "T = min(5000, n). `auto` and the River/VW peers are run on them, not the other kons learners "
          "(hence the empty 'best kons learner' column)."),
)}
#: What a page's stamp says instead of a provenance: where its records are and what writes it.
GENERATOR = "benchmarks.raw_report"


def _cell_label(key: str) -> str:
    return RAW_METHODS[key].label.replace("|", "\\|")  # River's pipe operator inside a table cell


def _lowest(runs: dict[str, dict[str, Any]], keys: Sequence[str]) -> dict[str, Any] | None:
    return min((runs[k] for k in keys if k in runs), key=lambda r: r["metric"], default=None)


def _median(values: list[float]) -> float:
    return float(np.median(values)) if values else math.nan


def _fmt(value: float) -> str:
    return "failed" if not math.isfinite(value) else f"{value:.4f}" if value < 10 else f"{value:.3g}"


def _records(out: Path, suite: Suite) -> list[dict[str, Any]]:
    records = [json.loads(p.read_text()) for p in sorted((out / suite.folder).glob("*.json"))]
    order = suite.datasets
    return sorted(records, key=lambda r: order.index(r["dataset"]) if r["dataset"] in order else len(order))


def _about(run: dict[str, Any]) -> tuple[str, str, str]:
    """A run's command, machine and code (empty, and "no provenance", for a run made before runs carried
    their own: its record names only the last invocation, which may not be the run's)."""
    stamp = run.get("provenance")
    if stamp is None:
        code = "no provenance"
    else:
        libraries = ", ".join(f"{k} {v}" for k, v in sorted(stamp.get("libraries", {}).items()))
        code = f"`{stamp['commit'][:9]}`" + (" with local changes" if stamp["dirty"] else "") + \
            (f"; {libraries}" if libraries else "")
    return run.get("command", ""), run.get("machine", ""), code


def _headline(records: list[dict[str, Any]], keys: list[str]) -> list[str]:
    peers = [k for k in keys if RAW_METHODS[k].group in ("river", "vw")]
    kons_keys = [k for k in keys if RAW_METHODS[k].group == "kons"]
    rows, gaps, wins, kons_wins = [], [], 0, 0
    for rec in records:
        runs = {r["method"]: r for r in rec["runs"]}
        finite = {k: r for k, r in runs.items() if math.isfinite(r["metric"])}
        peer, best_kons, auto = _lowest(finite, peers), _lowest(finite, kons_keys), runs.get("auto")
        if peer is None or auto is None:
            continue
        win = auto["metric"] < peer["metric"]
        wins += win
        kons_wins += best_kons is not None and best_kons["metric"] < peer["metric"]
        gap = (peer["metric"] - auto["metric"]) / peer["metric"] if peer["metric"] else 0.0
        gaps.append(gap)
        total = sum(r["seconds"] for r in rec["runs"])
        rows.append((rec["dataset"], rec["task"], _fmt(auto["metric"]),
                     "-" if best_kons is None else f"{best_kons['method']} {_fmt(best_kons['metric'])}",
                     f"{_cell_label(peer['method'])} {_fmt(peer['metric'])}", "yes" if win else "no",
                     f"{100 * gap:+.1f}%", auto.get("leader"), f"{auto['seconds']:.1f} / {total:.0f}"))
    summary = (f"`auto` at defaults beats the best River/VW default on **{wins} of {len(gaps)}** raw data "
               f"sets; median relative gap {100 * _median(gaps):+.1f}% (positive: auto has the lower error). "
               f"The best kons learner at `{{}}` (preprocessed) beats it on {kons_wins} of {len(gaps)}.")
    return [summary, "", *markdown_table(
        ["data set", "task", "auto", "best kons learner at `{}`", "best peer at defaults", "auto wins",
         "auto vs best peer", "auto leader", "seconds (auto / all methods)"], rows)]


def _provenance(records: list[dict[str, Any]], keys: list[str]) -> list[str]:
    """Per method, the commands, machines and code its runs name, each with the data sets it covers."""
    commands: dict[str, int] = {}
    rows = []
    for key in keys:
        seen: dict[tuple[str, str, str], list[str]] = {}
        for rec in records:
            for run in rec["runs"]:
                if run["method"] == key:
                    seen.setdefault(_about(run), []).append(rec["dataset"])
        for (command, machine, code), datasets in seen.items():
            number = commands.setdefault(command, len(commands) + 1) if command else "not recorded"
            covered = "all" if len(datasets) == len(records) else ", ".join(datasets)
            rows.append((_cell_label(key), covered, code, number, machine or "not recorded"))
    return [*markdown_table(["method", "data sets", "code measured", "command", "machine"], rows), "",
            *(["Commands:", "", *(f"{n}. `{c}`" for c, n in commands.items())] if commands else [])]


def render(out: Path, suite: Suite) -> str:
    """The page of ``suite`` from the records in ``out/<suite.folder>/``."""
    records = _records(out, suite)
    keys = [k for k in RAW_METHODS if any(run["method"] == k for r in records for run in r["runs"])]
    table = markdown_table(
        ["method", *(r["dataset"] for r in records)],
        [(_cell_label(key), *("-" if run is None else f"{_fmt(run['metric'])} ({run['seconds']:.1f} s)"
                              for run in (next((x for x in r["runs"] if x["method"] == key), None)
                                          for r in records)))
         for key in keys])
    protocol = (raw_regime.__doc__ or "").split("\n\n", 1)[1].split("Every run carries")[0].strip()
    lines = [f"# {suite.title}", "",
             f"Generated by `python -m {GENERATOR}` from `{suite.folder}/*.json`; do not edit by hand. "
             f"{suite.preface}", "",
             "**Caveat:** 2 shared cores with other jobs running; seconds are wall time and noisy.", "",
             protocol, "", "## Headline", "", *_headline(records, keys), "",
             "## Every method: metric (seconds for the stream)", "",
             "Regression: MSE / variance of the scored targets; classification: error rate.", "", *table, "",
             "## Where each method's runs come from", "",
             "The code measured is the commit of the run (a kons method measures `kons` and the harness "
             "files, a peer the harness files, the data loader and its library's version). Re-run what "
             "changed since with `--methods stale` (`benchmarks/README.md`).", "",
             *_provenance(records, keys)]
    return stamp_markdown("\n".join(lines), {"generated_from": f"{suite.folder}/", "by": GENERATOR})


def write_page(out: Path, suite: Suite) -> Path:
    """Write the page of ``suite`` into ``out``; returns its path."""
    path = out / suite.page
    path.write_text(render(out, suite))
    return path


def regenerate(page: Path) -> str | None:
    """What :func:`render` writes for the page at ``page`` from the records beside it (None if ``page``
    is not a suite's page)."""
    suite = next((s for s in SUITES.values() if s.page == page.name), None)
    return None if suite is None else render(page.parent, suite)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {GENERATOR}", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where the records are: benchmarks/results")
    parser.add_argument("--suite", default=",".join(SUITES), help=f"comma list of {', '.join(SUITES)}")
    args = parser.parse_args(argv)
    for name in (s.strip() for s in args.suite.split(",") if s.strip()):
        if name not in SUITES:
            parser.error(f"unknown suite {name!r}; choose from {', '.join(SUITES)}")
        print(write_page(args.out, SUITES[name]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
