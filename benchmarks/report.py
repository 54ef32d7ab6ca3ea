"""Build ``quality.md`` and the figures from the raw JSON files written by :mod:`benchmarks.quality`."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import markdown_table
from benchmarks.methods import GAMMA_ROWS, METHODS, RAW_DIR

__all__ = ["load_records", "write_report"]

REFERENCE = "krr"
REFERENCE_LABEL = "*KernelRidge (offline, in-sample)*"
METRIC = {"regression": "MSE (z-scored target)", "binary": "error rate"}


def _order() -> list[str]:
    from benchmarks.quality import CLASSIFICATION, REGRESSION

    return REGRESSION + CLASSIFICATION


def load_records(out: Path) -> list[dict[str, Any]]:
    """Every ``out/quality_raw/*.json`` in the benchmark's data-set order (unknown names last)."""
    records = [json.loads(p.read_text()) for p in sorted((out / RAW_DIR).glob("*.json"))]
    order = _order()
    return sorted(records, key=lambda r: (order.index(r["dataset"]) if r["dataset"] in order else 99,
                                          r["dataset"]))


def _label(key: str) -> str:
    return REFERENCE_LABEL if key == REFERENCE else METHODS[key].label if key in METHODS else key


def _runs(record: dict[str, Any], column: str) -> dict[str, dict[str, Any]]:
    return {r["method"]: r for r in record["runs"] if r["column"] == column}


def _is_online(key: str) -> bool:
    return key != REFERENCE


def _best(runs: dict[str, dict[str, Any]], keys: Sequence[str]) -> dict[str, Any] | None:
    finite = [runs[k] for k in keys if k in runs and math.isfinite(runs[k]["metric"])]
    return min(finite, key=lambda r: r["metric"]) if finite else None


def _fmt(value: float) -> str:
    return "diverged" if not math.isfinite(value) else f"{value:.4f}" if value < 10 else f"{value:.3g}"


def _secs(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.0f} s"


def _table(records: list[dict[str, Any]], column: str) -> list[str]:
    keys = list(dict.fromkeys(r["method"] for rec in records for r in rec["runs"]))
    keys = [k for k in keys if k != REFERENCE] + [k for k in keys if k == REFERENCE]
    best = {rec["dataset"]: _best(_runs(rec, column), [k for k in keys if _is_online(k)]) for rec in records}
    rows = []
    for key in keys:
        cells = []
        for rec in records:
            run = _runs(rec, column).get(key)
            if run is None:
                cells.append("-")
                continue
            text = f"{_fmt(run['metric'])} ({_secs(run['seconds'])})"
            top = best[rec["dataset"]]
            if _is_online(key) and top is not None and run["metric"] == top["metric"]:
                text = f"**{text}**"
            cells.append(text)
        rows.append([_label(key), *cells])
    return markdown_table(["method", *(r["dataset"] for r in records)], rows)


def _headline(records: list[dict[str, Any]], column: str) -> tuple[list[str], str]:
    rows = []
    wins, margins, total = 0, [], 0
    for rec in records:
        runs = _runs(rec, column)
        kons_best = _best(runs, [k for k in runs if k in METHODS and METHODS[k].group == "kons"])
        peer_best = _best(runs, [k for k in runs if k in METHODS and METHODS[k].online_peer])
        if kons_best is None or peer_best is None:
            continue
        total += 1
        win = kons_best["metric"] < peer_best["metric"]
        wins += win
        gap = peer_best["metric"] - kons_best["metric"]
        rel = gap / peer_best["metric"] if peer_best["metric"] else 0.0
        margins.append(rel)
        ratio = kons_best["seconds"] / max(peer_best["seconds"], 1e-9)
        beating = [r for k, r in runs.items() if k in METHODS and METHODS[k].group == "kons"
                   and r["metric"] < peer_best["metric"]]
        cheapest = min(beating, key=lambda r: r["seconds"], default=None)
        cheap = "-" if cheapest is None else (
            f"{_label(cheapest['method'])} {_fmt(cheapest['metric'])} ({_secs(cheapest['seconds'])})")
        rows.append([
            rec["dataset"], f"{_label(kons_best['method'])} {_fmt(kons_best['metric'])} "
            f"({_secs(kons_best['seconds'])})", f"{_label(peer_best['method'])} {_fmt(peer_best['metric'])} "
            f"({_secs(peer_best['seconds'])})", "yes" if win else "no",
            f"{100 * rel:+.1f}% {'lower' if rel >= 0 else 'higher'} metric", f"{ratio:.2g}x", cheap])
    lines = markdown_table(["data set", "best kons", "best online peer", "kons wins",
                            "kons vs peer (relative)", "time kons / peer",
                            "cheapest kons method that beats the peer"], rows)
    summary = (f"kons beats the best online peer on **{wins} of {total}** data sets ({column} column); "
               f"median relative difference {100 * _median(margins):+.1f}% (positive = kons lower metric).")
    return lines, summary


def _median(values: list[float]) -> float:
    values = sorted(values)
    if not values:
        return math.nan
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])


def _sizes(records: list[dict[str, Any]]) -> list[str]:
    kernel = [k for k, m in METHODS.items() if m.kernel]
    rows = []
    for key in kernel:
        for column in ("default", "tuned"):
            cells = []
            for rec in records:
                run = _runs(rec, column).get(key)
                if run is None or run["stored_points"] is None:
                    cells.append("-")
                elif key == "kernel_ogd":
                    cells.append(f"{run['stored_points']} / -")
                else:
                    cells.append(f"{run['stored_points']} / {run['dictionary_size']}")
            if any(c != "-" for c in cells):
                rows.append([f"{_label(key)} ({column})", *cells])
    return markdown_table(["method (column)", *(r["dataset"] for r in records)], rows)


def _chosen(records: list[dict[str, Any]]) -> list[str]:
    rows = []
    keys = list(dict.fromkeys(k for rec in records for k in rec["tuning"]))
    for key in keys:
        cells = []
        for rec in records:
            info = rec["tuning"].get(key)
            if info is None:
                cells.append("-")
            elif not info["tried"]:
                cells.append("not tuned")
            else:
                chosen = _params(info["chosen"]) or "default"
                cells.append(f"{chosen} ({info['seconds']:.0f} s)")
        rows.append([_label(key), *cells])
    return markdown_table(["method", *(r["dataset"] for r in records)], rows)


def _params(params: dict[str, Any]) -> str:
    """``k=v, ...`` with an empty string shown as ``none``."""
    return ", ".join(f"{k}={'none' if v == '' else v}" for k, v in params.items())


def _grids() -> list[str]:
    lines = []
    for m in METHODS.values():
        rest = "; ".join(_params(p) for p in m.grid[1:])
        lines.append(f"- **{m.label}** (`{m.key}`): default + {len(m.grid) - 1} more: {rest}")
    return lines


def _plots(records: list[dict[str, Any]], out: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    files = []
    for task in ("regression", "binary"):
        group = [r for r in records if r["task"] == task]
        if not group:
            continue
        fig, axes = _grid(plt, len(group))
        for ax, rec in zip(axes, group, strict=False):
            for run in _runs(rec, "tuned").values():
                if run["curve_t"]:
                    style = "-" if METHODS[run["method"]].group == "kons" else "--"
                    ax.plot(run["curve_t"], run["curve_loss"], style, label=_label(run["method"]), lw=1.2,
                            color=_color(plt, run["method"]))
            ax.set(title=rec["dataset"], xlabel="t", ylabel="cumulative " + ("sq. loss" if task ==
                                                                           "regression" else "mistakes"))
        _legend(fig, axes)
        name = f"quality_curves_{task}.png"
        fig.savefig(out / name, dpi=90, bbox_inches="tight")
        plt.close(fig)
        files.append(name)
    fig, axes = _grid(plt, len(records))
    for ax, rec in zip(axes, records, strict=False):
        for run in _runs(rec, "tuned").values():
            if run["curve_dict"]:
                ogd = run["method"] == "kernel_ogd"  # no dictionary: plot its stored points
                ax.plot(run["curve_t"], run["curve_stored"] if ogd else run["curve_dict"], lw=1.2,
                        color=_color(plt, run["method"]), ls=":" if run["method"] == "kons" else "-",
                        zorder=3 if run["method"] == "kons" else 2,
                        label=_label(run["method"]) + (" (stored points)" if ogd else ""))
        ax.set(title=rec["dataset"], xlabel="t", ylabel="dictionary size", yscale="log")
    _legend(fig, axes)
    fig.savefig(out / "quality_dictionary.png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return [*files, "quality_dictionary.png"]


def _color(plt: Any, key: str) -> Any:
    """One colour per method, the same in every figure."""
    return plt.get_cmap("tab20")(list(METHODS).index(key) % 20)


def _grid(plt: Any, n: int) -> tuple[Any, list[Any]]:
    cols = min(4, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _legend(fig: Any, axes: list[Any]) -> None:
    handles, labels = {}, []
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in handles:
                handles[label] = h
                labels.append(label)
    fig.legend([handles[k] for k in labels], labels, loc="lower center", ncol=4, fontsize=8,
               bbox_to_anchor=(0.5, -0.02 - 0.02 * (len(labels) // 4)))
    fig.tight_layout()


def write_report(out: Path, *, plots: bool = True) -> Path:
    """Write ``out/quality.md`` (and the PNGs) from the raw records; returns the path of the report."""
    records = load_records(out)
    figures = _plots(records, out) if plots and records else []
    commands = list(dict.fromkeys(r["command"] for r in records))
    machines = list(dict.fromkeys(
        f"kons {r['machine'].get('kons', '?')}; "
        f"{r['machine']['platform']}, Python {r['machine']['python']}, {r['machine']['cpus']} CPUs; "
        + ", ".join(f"{k} {v}" for k, v in r['machine']['versions'].items()) for r in records))
    lines = ["# Learning quality and cost: kons vs online peers (progressive validation)", "",
             "Generated by `benchmarks/quality.py` from `quality_raw/*.json`; do not edit by hand.", "",
             "## How to reproduce", "", *(f"    {c}" for c in commands), "",
             "Machine: " + " | ".join(machines), "",
             "**Caveat:** measured on 2 shared cores with other engineers' jobs (tests, benchmarks) running "
             "at the same time; seconds are wall time and can be inflated by up to ~2x and are noisy, "
             "ratios between methods of the same data set are more trustworthy than absolute values. "
             "Load averages at the end of each data set: "
             + ", ".join(f"{r['dataset']} {r['machine']['load_average'][0]:.1f}" for r in records) + ".",
             "", "## Protocol", "",
             "`docs/bench-protocol.md`: `kons.datasets.load_dataset` preprocessing for every method "
             "(z-scored features and regression targets, labels in {-1,+1}, order "
             "`default_rng(0).permutation(n)`), predict-then-learn on each row; regression metric = MSE "
             "in z-scored units (a constant predictor scores about 1.0), classification = error rate of "
             "sign(prediction). Seconds = wall time of the whole stream including the per-row input "
             "conversion each library needs (dicts for River, text for VW).", "",
             *markdown_table(
                 ["data set", "task", "rows n", "features", "scored rows", "tuning rows", "default RBF gamma",
                  "wall time (s)"],
                 [(r["dataset"], r["task"], r["n"], r["dim"], f"0..{r['scored_rows']}",
                   f"{r['scored_rows']}..{r['scored_rows'] + r['tuning_rows']}", f"{r['rbf_gamma']:.4g}",
                   f"{r['wall_seconds']:.0f}") for r in records]), ""]
    for column in ("tuned", "default"):
        head, summary = _headline(records, column)
        lines += [f"## Headline ({column} column)", "", summary, "", *head, ""]
    for task in ("regression", "binary"):
        group = [r for r in records if r["task"] == task]
        for column in ("default", "tuned") if group else ():
            lines += [f"## {'Regression' if task == 'regression' else 'Classification'}: "
                      f"{METRIC[task]} and seconds, {column} column", "",
                      "Best online method per data set in bold (the offline reference is not ranked).", "",
                      *_table(group, column), ""]
    lines += ["## Kernel learners: stored points / dictionary size at the end of the stream", "",
              *_sizes(records), "", "## Configuration chosen on the tuning rows (and tuning seconds)", "",
              *_chosen(records), ""]
    skipped = sorted({f"{k} (needs {p})" for r in records for k, p in r.get("skipped", {}).items()})
    not_tuned = sorted({k for r in records for k in r.get("no_tune", [])})
    grid_size = records[0]["grid_size"] if records else 9
    lines += ["## Hyper-parameters", "",
              f"**Default rule (kons):** RBF kernel, gamma = 1 / median squared distance between the first "
              f"{GAMMA_ROWS} rows of the stream (features only); C = 3 for regression (z-scored targets), "
              "C = 1 for classification; squared loss (regression) / logistic loss (classification); eta = "
              "the loss's curvature constant sigma(C) (1/(8C^2) for squared, min(1/(8C), e^-C)/2 for "
              "logistic); alpha = 1; SketchedKONS beta = 1, epsilon = 0.5, seed 0 and the dictionary floor "
              "gamma in {0, 0.1, 0.3} as three methods; KernelOGD eta = 0.5 with 1/sqrt(t) steps. "
              "**Peers at default** = the library's defaults (River `seed=0`; VW `--quiet`, plus "
              "`--loss_function logistic` for classification). KernelRidge: default-rule gamma, alpha = 1.",
              "",
              f"**Tuning:** every method with hyper-parameters tries {grid_size} "
              "configurations (the default included) by progressive validation on the tuning rows, "
              "which follow the scored rows and are never scored; the lowest metric wins (ties keep the "
              "earlier configuration). The grids (multipliers apply to the default-rule value):", "",
              *_grids(), ""]
    ran = list(dict.fromkeys(r["method"] for rec in records for r in rec["runs"]))
    absent = [m.label for k, m in METHODS.items() if k not in ran]
    if absent:
        lines += [f"Methods not in this run (left out by `--methods`, a row limit or a missing extra): "
                  f"{', '.join(absent)}.", ""]
    if not_tuned:
        lines += [f"Kept at defaults in the tuned column to fit the time budget: {', '.join(not_tuned)}.", ""]
    if skipped:
        lines += [f"Not run (optional extra missing): {', '.join(skipped)}.", ""]
    if figures:
        lines += ["## Figures (tuned column)", "", *(f"![{f}]({f})" for f in figures), ""]
    path = out / "quality.md"
    path.write_text("\n".join(lines))
    return path


if __name__ == "__main__":  # rebuild the report from existing raw files: python -m benchmarks.report DIR
    import sys

    print(write_report(Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results")))
