"""Multi-class classification (issue 19): what a round of ``auto`` costs with 10 classes against a binary
round, and its error rate on multi-class streams against River's and Vowpal Wabbit's defaults.

**Cost.** The same rows (scikit-learn's digits, d = 64, and River's ``RandomRBF`` with 10 classes,
d = 10) fed to two
``kons.Auto(task="classification")`` learners, one with the 10 classes, one with a binary label of the
same rows; both warm up on the first rows, then the timed rounds alternate between the two learners in
blocks, so that the machine's load falls on both alike. Also the hand-written one-vs-rest of binary
``auto`` learners (K rounds a row) that the issue measured, on the same rows.

**Quality** (the raw regime of ``docs/bench-protocol.md``: rows as they come, progressive validation,
every method at its defaults): error rate of the class each method predicts before it learns the row.
``auto`` predicts the most probable class of the distribution it plays (``learn_proba_one``). Peers, as
their users write them: River 0.26 ``StandardScaler() | OneVsRestClassifier(LogisticRegression())``,
``StandardScaler() | SoftmaxRegression()``, ``StandardScaler() | KNNClassifier()``,
``HoeffdingAdaptiveTreeClassifier(seed=0)``, ``ARFClassifier(seed=0)``, and Vowpal Wabbit ``--oaa K``
(told the number of classes K in advance, which the others learn as they go; skipped if the
``vowpalwabbit`` package is missing). Streams available offline: scikit-learn's digits, wine and iris and
River's ``ImageSegments`` (each in the order ``default_rng(0).permutation(n)``), River's synthetic
``LED``, ``RandomRBF(n_classes=5)`` and ``Waveform`` (seed 0, the first ``--synthetic-rows`` rows).

Run (about 10 minutes of CPU)::

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.multiclass --out benchmarks/results
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

import kons
from benchmarks.common import command_line, git_commit, machine_summary, markdown_table, results_dir
from benchmarks.provenance import provenance, publish
from kons.losses import top_label

SOURCES = ("kons", "benchmarks/multiclass.py")
#: Rows of every synthetic stream.
SYNTHETIC_ROWS = 3000
#: Rounds timed per learner in the cost measurement, in blocks of BLOCK, after WARM rounds.
TIMED, BLOCK, WARM = 1200, 100, 300

Stream = tuple[np.ndarray, list[Any]]


# ------------------------------------------------------------------------------------------------ streams
def _permuted(X: np.ndarray, y: Any) -> Stream:
    order = np.random.default_rng(0).permutation(len(X))
    labels = [y[i].item() if hasattr(y[i], "item") else y[i] for i in order]  # numpy scalars as Python's
    return np.asarray(X, dtype=np.float64)[order], labels


def _sklearn(name: str) -> Callable[[int], Stream]:
    def load(rows: int) -> Stream:
        from sklearn import datasets

        X, y = getattr(datasets, f"load_{name}")(return_X_y=True)
        return _permuted(X, y)

    return load


def _river_rows(rows: Iterator[tuple[dict[Any, Any], Any]], limit: int | None) -> Stream:
    X, y = [], []
    for x, label in rows:
        X.append([float(v) for v in x.values()])
        y.append(label)
        if limit is not None and len(y) >= limit:
            break
    return np.array(X), y


def _image_segments(rows: int) -> Stream:
    from river import datasets

    X, y = _river_rows(iter(datasets.ImageSegments()), None)  # type: ignore[no-untyped-call]
    return _permuted(X, np.array(y, dtype=object))


def _synthetic(make: Callable[[Any], Any]) -> Callable[[int], Stream]:
    def load(rows: int) -> Stream:
        from river.datasets import synth

        return _river_rows(iter(make(synth)), rows)

    return load


STREAMS: dict[str, Callable[[int], Stream]] = {
    "digits": _sklearn("digits"),
    "wine": _sklearn("wine"),
    "iris": _sklearn("iris"),
    "image_segments": _image_segments,
    "led": _synthetic(lambda s: s.LED(seed=0, noise_percentage=0.1)),
    "random_rbf": _synthetic(lambda s: s.RandomRBF(seed_model=0, seed_sample=0, n_classes=5)),
    "waveform": _synthetic(lambda s: s.Waveform(seed=0)),
}

#: The 10-class streams of the cost measurement.
COST_STREAMS: dict[str, Callable[[int], Stream]] = {
    "digits (d = 64)": _sklearn("digits"),
    "RandomRBF, 10 classes (d = 10)": _synthetic(lambda s: s.RandomRBF(seed_model=0, seed_sample=0,
                                                                       n_classes=10)),
}


# ------------------------------------------------------------------------------------------------ methods
class _Auto:
    def __init__(self, classes: list[Any]) -> None:
        self.model = kons.Auto(task="classification")

    def step(self, x: np.ndarray, y: Any) -> Any:
        return top_label(self.model.learn_proba_one(x, y))  # the class played before learning the row


class _AutoOneVsRest:
    """One binary ``auto`` per class seen, each told whether the row is its class (K rounds a row)."""

    def __init__(self, classes: list[Any]) -> None:
        self.models: dict[Any, kons.Auto] = {}

    def step(self, x: np.ndarray, y: Any) -> Any:
        scores = {c: m.predict_one(x) for c, m in self.models.items()}
        if y not in self.models:
            self.models[y] = kons.Auto(task="classification")
        for c, m in self.models.items():
            m.learn_one(x, c == y)
        return max(scores, key=lambda c: scores[c], default=None)


class _River:
    def __init__(self, model: Any) -> None:
        self.model = model

    def step(self, x: np.ndarray, y: Any) -> Any:
        features = dict(enumerate(x.tolist()))
        predicted = self.model.predict_one(features)
        self.model.learn_one(features, y)
        return predicted


def _river(make: Callable[[Any], Any]) -> Callable[[list[Any]], _River]:
    def build(classes: list[Any]) -> _River:
        from river import forest, linear_model, multiclass, neighbors, preprocessing, tree

        modules = {"forest": forest, "linear_model": linear_model, "multiclass": multiclass,
                   "neighbors": neighbors, "preprocessing": preprocessing, "tree": tree}
        return _River(make(argparse.Namespace(**modules)))

    return build


class _VowpalWabbit:
    """``--oaa K``: labels 1..K in the order of the data set's sorted classes (K given in advance)."""

    def __init__(self, classes: list[Any]) -> None:
        import vowpalwabbit

        self.classes = classes
        self.index = {c: i + 1 for i, c in enumerate(classes)}
        self.vw = vowpalwabbit.Workspace(f"--quiet --oaa {len(classes)}")

    def step(self, x: np.ndarray, y: Any) -> Any:
        features = " ".join(f"f{j}:{v!r}" for j, v in enumerate(x.tolist()))
        example = self.vw.parse(f"{self.index[y]} |f {features}")
        predicted = self.vw.predict(example)
        self.vw.learn(example)
        self.vw.finish_example(example)
        return self.classes[int(predicted) - 1]


METHODS: dict[str, Callable[[list[Any]], Any]] = {
    "kons auto": _Auto,
    "kons auto, one-vs-rest": _AutoOneVsRest,
    "River OneVsRest(LogisticRegression)": _river(
        lambda r: r.preprocessing.StandardScaler() | r.multiclass.OneVsRestClassifier(
            r.linear_model.LogisticRegression())),
    "River SoftmaxRegression": _river(
        lambda r: r.preprocessing.StandardScaler() | r.linear_model.SoftmaxRegression()),
    "River KNNClassifier": _river(lambda r: r.preprocessing.StandardScaler()
                                   | r.neighbors.KNNClassifier(engine=r.neighbors.SWINN(seed=0))),
    "River HoeffdingAdaptiveTree": _river(lambda r: r.tree.HoeffdingAdaptiveTreeClassifier(seed=0)),
    "River ARF": _river(lambda r: r.forest.ARFClassifier(seed=0)),
    "VW --oaa K": _VowpalWabbit,
}
#: What auto is compared with (the one-vs-rest of auto is reported, not a peer).
PEERS = [m for m in METHODS if not m.startswith("kons")]


def _vw_available() -> bool:
    try:
        import vowpalwabbit  # noqa: F401
    except ImportError:
        return False
    return True


def run_quality(streams: dict[str, Stream], methods: list[str]) -> dict[str, dict[str, tuple[float, float]]]:
    """``{stream: {method: (error rate, microseconds per row)}}``."""
    results: dict[str, dict[str, tuple[float, float]]] = {}
    for name, (X, y) in streams.items():
        classes = sorted(set(y), key=str)
        results[name] = {}
        for method in methods:
            runner = METHODS[method](classes)
            start = time.process_time()
            errors = sum(runner.step(x, label) != label for x, label in zip(X, y, strict=True))
            seconds = time.process_time() - start
            results[name][method] = (errors / len(y), 1e6 * seconds / len(y))
            print(f"{name:15s} {method:40s} error {errors / len(y):.4f} "
                  f"{1e6 * seconds / len(y):8.0f} us/row", flush=True)
    return results


# ------------------------------------------------------------------------------------------------ cost
def run_cost(streams: dict[str, Stream]) -> list[tuple[str, float, float, float]]:
    """``(stream, binary ms, 10-class ms, one-vs-rest ms)`` per round, side by side on the same rows."""
    rows = []
    for name, (X, y) in streams.items():
        classes = sorted(set(y), key=str)
        labels = {"10 classes": y, "binary": [classes.index(c) < len(classes) // 2 for c in y]}
        learners: dict[str, Any] = {k: kons.Auto(task="classification") for k in labels}
        learners["one-vs-rest"] = _AutoOneVsRest(classes)
        for t in range(WARM):
            for kind, learner in learners.items():
                if kind == "one-vs-rest":
                    learner.step(X[t], y[t])
                else:
                    learner.learn_one(X[t], labels[kind][t])
        spent = dict.fromkeys(learners, 0.0)
        for block in range(WARM, WARM + TIMED, BLOCK):
            for kind, learner in learners.items():
                start = time.process_time()
                for t in range(block, block + BLOCK):
                    if kind == "one-vs-rest":
                        learner.step(X[t], y[t])
                    else:
                        learner.learn_one(X[t], labels[kind][t])
                spent[kind] += time.process_time() - start
        ms = {k: 1e3 * v / TIMED for k, v in spent.items()}
        rows.append((name, ms["binary"], ms["10 classes"], ms["one-vs-rest"]))
        print(f"cost {name}: binary {ms['binary']:.3f} ms, 10 classes {ms['10 classes']:.3f} ms, "
              f"one-vs-rest {ms['one-vs-rest']:.3f} ms", flush=True)
    return rows


# ------------------------------------------------------------------------------------------------ report
def report(quality: dict[str, dict[str, tuple[float, float]]], cost: list[tuple[str, float, float, float]],
           methods: list[str], command: str, commit: str, load_before: tuple[float, ...]) -> str:
    peers = [m for m in methods if m in PEERS]
    lines = ["# Multi-class classification: cost of a round and error against River and Vowpal Wabbit", "",
             f"`{command}` at {commit}; {machine_summary()}; load average before the run "
             f"{load_before[0]:.2f} (1 min), after {os.getloadavg()[0]:.2f}: the machine is shared, so "
             "read ratios measured side by side, not absolute times.", ""]
    lines += ["## Cost of a round (ms of CPU, the same rows side by side)", "",
              *markdown_table(["stream", "binary auto", "10-class auto", "ratio", "one-vs-rest of 10 auto",
                               "ratio"],
                              [(n, f"{b:.3f}", f"{m:.3f}", f"{m / b:.2f}x", f"{o:.3f}", f"{o / b:.2f}x")
                               for n, b, m, o in cost], "lrrrrr"), ""]
    lines += ["## Error rate (progressive validation, raw rows, defaults)", ""]
    header = ["stream", "rows", "classes", *methods]
    table = []
    wins, gaps = 0, []
    for name, by_method in quality.items():
        best_peer = min(by_method[m][0] for m in peers)
        auto = by_method["kons auto"][0]
        wins += auto < best_peer
        gaps.append((auto - best_peer) / best_peer if best_peer > 0 else 0.0)
        cells = [f"**{by_method[m][0]:.4f}**" if by_method[m][0] == min(v[0] for v in by_method.values())
                 else f"{by_method[m][0]:.4f}" for m in methods]
        table.append([name, STREAM_SIZES[name][0], STREAM_SIZES[name][1], *cells])
    lines += markdown_table(header, table, "lrr" + "r" * len(methods))
    lines += ["", f"`auto` has a lower error than every peer on **{wins} of {len(quality)}** streams; "
              f"median gap to the best peer {100 * statistics.median(gaps):+.1f}% "
              "(negative: auto ahead). Per stream: "
              + ", ".join(f"{n} {100 * g:+.1f}%" for n, g in zip(quality, gaps, strict=True)) + ".", ""]
    lines += ["## Cost per row (microseconds of CPU, learn and predict)", ""]
    lines += markdown_table(["stream", *methods],
                            [[n, *(f"{quality[n][m][1]:.0f}" for m in methods)] for n in quality],
                            "l" + "r" * len(methods))
    lines += ["", "River's `KNNClassifier` searches with SWINN, an approximate index built on a random graph "
              "whose generator is unseeded by default (digits 0.0801 and 0.0707 in two runs): it is seeded "
              "here (`SWINN(seed=0)`, otherwise the default), so that runs repeat."]
    if "VW --oaa K" not in methods:
        lines += ["", "Vowpal Wabbit: the `vowpalwabbit` package is not installed here; not run."]
    return "\n".join(lines) + "\n"


STREAM_SIZES: dict[str, tuple[int, int]] = {}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--synthetic-rows", type=int, default=SYNTHETIC_ROWS)
    parser.add_argument("--streams", nargs="*", default=list(STREAMS), choices=list(STREAMS))
    parser.add_argument("--no-cost", dest="cost", action="store_false", help="skip the cost measurement")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    command = command_line("benchmarks.multiclass", argv, outputs=["--out"])
    commit, stamp = git_commit(), provenance(SOURCES)
    streams = {name: STREAMS[name](args.synthetic_rows) for name in args.streams}
    for name, (_, y) in streams.items():
        STREAM_SIZES[name] = (len(y), len(set(y)))
    methods = [m for m in METHODS if m != "VW --oaa K" or _vw_available()]
    cost = run_cost({name: load(WARM + TIMED) for name, load in COST_STREAMS.items()}) if args.cost else []
    quality = run_quality(streams, methods)
    text = report(quality, cost, methods, command, commit, load_before)
    publish(results_dir(args.out, "multiclass"), "multiclass", stamp, text)
    print(text)


if __name__ == "__main__":
    main()
