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
``HoeffdingAdaptiveTreeClassifier(seed=0)``, ``ARFClassifier(seed=0)``, ``AMFClassifier(seed=0)`` (each
River classifier told the classes as their ranks, ints, so that runs repeat: :class:`_River`), and Vowpal
Wabbit ``--oaa K`` (told the number of classes K in advance, which the others learn as they go; skipped if
the ``vowpalwabbit`` package is missing). Streams available offline: scikit-learn's digits, wine and iris and
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


def _many_classes(classes: int) -> Callable[[int], Stream]:
    """scikit-learn's ``make_classification`` with ``classes`` classes (20 features, 10 informative, one
    cluster a class, seed 0)."""
    def load(rows: int) -> Stream:
        from sklearn.datasets import make_classification

        X, y = make_classification(n_samples=rows, n_features=20, n_informative=10, n_classes=classes,
                                   n_clusters_per_class=1, random_state=0)
        return np.asarray(X, dtype=np.float64), [int(label) for label in y]

    return load


STREAMS: dict[str, Callable[[int], Stream]] = {
    "digits": _sklearn("digits"),
    "wine": _sklearn("wine"),
    "iris": _sklearn("iris"),
    "image_segments": _image_segments,
    "led": _synthetic(lambda s: s.LED(seed=0, noise_percentage=0.1)),
    "random_rbf": _synthetic(lambda s: s.RandomRBF(seed_model=0, seed_sample=0, n_classes=5)),
    "waveform": _synthetic(lambda s: s.Waveform(seed=0)),
    "random_rbf10": _synthetic(lambda s: s.RandomRBF(seed_model=0, seed_sample=0, n_classes=10)),
    "random_rbf32": _synthetic(lambda s: s.RandomRBF(seed_model=0, seed_sample=0, n_classes=32)),
    "classification15": _many_classes(15),
}
#: The streams ``auto``'s rules are tuned on (the project's seven, benchmarks/label_vote.py); the others,
#: 10 classes or more, are held out: they played no part in choosing any constant.
TUNING_STREAMS = ("digits", "wine", "iris", "image_segments", "led", "random_rbf", "waveform")

#: The 10-class streams of the cost measurement.
COST_STREAMS: dict[str, Callable[[int], Stream]] = {
    "digits (d = 64)": _sklearn("digits"),
    "RandomRBF, 10 classes (d = 10)": _synthetic(lambda s: s.RandomRBF(seed_model=0, seed_sample=0,
                                                                       n_classes=10)),
}


# ------------------------------------------------------------------------------------------------ methods
#: A round's answer: the class predicted before learning the row, and the probabilities played (None for
#: a method that gives none).
Answer = tuple[Any, dict[Any, float] | None]


class _Auto:
    """``auto``'s round (``learn_round``): the class it predicts (its label vote) and its distribution; the
    distribution's most probable class, the label before the vote, is reported beside it (:data:`TOP`)."""

    def __init__(self, classes: list[Any]) -> None:
        self.model = kons.Auto(task="classification")
        self.top: Any = None

    def step(self, x: np.ndarray, y: Any) -> Answer:
        known = y in self.model.classes
        played = self.model.learn_round(x, y)
        distribution = dict(played.distribution or [])
        # The played distribution names the label of its round even when that label is new (the mass the
        # model gives a class it has not seen); a class nobody had seen cannot be the label predicted.
        self.top = top_label(played.distribution or []) if known else None
        return played.predicted, distribution


class _AutoOneVsRest:
    """One binary ``auto`` per class seen, each told whether the row is its class (K rounds a row)."""

    def __init__(self, classes: list[Any]) -> None:
        self.models: dict[Any, kons.Auto] = {}

    def step(self, x: np.ndarray, y: Any) -> Answer:
        scores = {c: m.predict_one(x) for c, m in self.models.items()}
        if y not in self.models:
            self.models[y] = kons.Auto(task="classification")
        for c, m in self.models.items():
            m.learn_one(x, c == y)
        return max(scores, key=lambda c: scores[c], default=None), None


class _River:
    """A River classifier told each class as its rank among the stream's classes (an int), so that its runs
    repeat: River's ``HoeffdingAdaptiveTreeClassifier`` and ``KNNClassifier`` keep the classes they have seen
    in a set and build their probabilities in its order, which for strings follows the process's hash seed
    (``PYTHONHASHSEED``), so their ties and sums moved between runs (image_segments' tree: 0.2143 or
    0.2147). A small int hashes to itself, and a stream labelled 0..K-1 is given its own labels."""

    def __init__(self, model: Any, classes: list[Any]) -> None:
        self.model = model
        self.classes = sorted(classes)
        self.rank = {c: k for k, c in enumerate(self.classes)}

    def step(self, x: np.ndarray, y: Any) -> Answer:
        features = dict(enumerate(x.tolist()))
        # River's classifiers predict the most probable class of predict_proba_one (the first on a tie)
        proba = {self.classes[k]: p for k, p in self.model.predict_proba_one(features).items()}
        self.model.learn_one(features, self.rank[y])
        return max(proba, key=proba.__getitem__) if proba else None, proba


def _river(make: Callable[[Any], Any]) -> Callable[[list[Any]], _River]:
    def build(classes: list[Any]) -> _River:
        from river import forest, linear_model, multiclass, neighbors, preprocessing, tree

        modules = {"forest": forest, "linear_model": linear_model, "multiclass": multiclass,
                   "neighbors": neighbors, "preprocessing": preprocessing, "tree": tree}
        return _River(make(argparse.Namespace(**modules)), classes)

    return build


class _VowpalWabbit:
    """``--oaa K``: labels 1..K in the order of the data set's sorted classes (K given in advance)."""

    def __init__(self, classes: list[Any]) -> None:
        import vowpalwabbit

        self.classes = classes
        self.index = {c: i + 1 for i, c in enumerate(classes)}
        self.vw = vowpalwabbit.Workspace(f"--quiet --oaa {len(classes)}")

    def step(self, x: np.ndarray, y: Any) -> Answer:
        features = " ".join(f"f{j}:{v!r}" for j, v in enumerate(x.tolist()))
        example = self.vw.parse(f"{self.index[y]} |f {features}")
        predicted = self.vw.predict(example)
        self.vw.learn(example)
        self.vw.finish_example(example)
        return self.classes[int(predicted) - 1], None


AUTO, ONE_VS_REST = "kons auto", "kons auto, one-vs-rest"
TOP = "kons auto, most probable class (before the vote)"
METHODS: dict[str, Callable[[list[Any]], Any]] = {
    AUTO: _Auto,
    ONE_VS_REST: _AutoOneVsRest,
    "River OneVsRest(LogisticRegression)": _river(
        lambda r: r.preprocessing.StandardScaler() | r.multiclass.OneVsRestClassifier(
            r.linear_model.LogisticRegression())),
    "River SoftmaxRegression": _river(
        lambda r: r.preprocessing.StandardScaler() | r.linear_model.SoftmaxRegression()),
    "River KNNClassifier": _river(lambda r: r.preprocessing.StandardScaler()
                                   | r.neighbors.KNNClassifier(engine=r.neighbors.SWINN(seed=0))),
    "River HoeffdingAdaptiveTree": _river(lambda r: r.tree.HoeffdingAdaptiveTreeClassifier(seed=0)),
    "River ARF": _river(lambda r: r.forest.ARFClassifier(seed=0)),
    "River AMF": _river(lambda r: r.forest.AMFClassifier(seed=0)),
    "VW --oaa K": _VowpalWabbit,
}
#: What auto is compared with (the one-vs-rest of auto is reported, not a peer).
PEERS = [m for m in METHODS if not m.startswith("kons")]
#: The floor of a probability whose log is taken (a class a method gives no probability).
FLOOR = 1e-15


def _vw_available() -> bool:
    try:
        import vowpalwabbit  # noqa: F401
    except ImportError:
        return False
    return True


#: ``(error rate, log loss or None, microseconds per row)`` of a method on a stream.
Score = tuple[float, float | None, float]


def _log_loss(proba: dict[Any, float] | None, label: Any) -> float:
    return -float(np.log(max(float((proba or {}).get(label, 0.0)), FLOOR)))


def run_quality(streams: dict[str, Stream], methods: list[str]) -> dict[str, dict[str, Score]]:
    """``{stream: {method: score}}``; ``auto``'s run also gives :data:`TOP`'s errors."""
    results: dict[str, dict[str, Score]] = {}
    for name, (X, y) in streams.items():
        classes = sorted(set(y), key=str)
        results[name] = {}
        for method in methods:
            runner = METHODS[method](classes)
            errors = top_errors = 0
            losses: list[float] = []
            start = time.process_time()
            for x, label in zip(X, y, strict=True):
                predicted, proba = runner.step(x, label)
                errors += predicted != label
                if proba is not None:
                    losses.append(_log_loss(proba, label))
                if method == AUTO:
                    top_errors += runner.top != label
            seconds = time.process_time() - start
            loss = float(np.mean(losses)) if losses else None
            results[name][method] = (errors / len(y), loss, 1e6 * seconds / len(y))
            if method == AUTO:
                results[name][TOP] = (top_errors / len(y), loss, 1e6 * seconds / len(y))
            print(f"{name:15s} {method:40s} error {errors / len(y):.4f} log loss "
                  f"{'-' if loss is None else f'{loss:.4f}'} {1e6 * seconds / len(y):8.0f} us/row"
                  + (f" (most probable class {top_errors / len(y):.4f})" if method == AUTO else ""),
                  flush=True)
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
def _cell(value: float | None, best: float | None) -> str:
    if value is None:
        return "-"
    return f"**{value:.4f}**" if best is not None and value == best else f"{value:.4f}"


def _wins(quality: dict[str, dict[str, Score]], peers: list[str], method: str, names: list[str],
          metric: int) -> tuple[int, list[float]]:
    """On how many of ``names`` ``method`` has a lower ``metric`` (0 error, 1 log loss) than every peer
    that gives it, and its gap to the best such peer per stream."""
    wins, gaps = 0, []
    for name in names:
        by_method = quality[name]
        values = [v for m in peers if (v := by_method[m][metric]) is not None]
        own = by_method[method][metric]
        if own is None or not values:
            continue
        best = min(values)
        wins += own < best
        gaps.append((own - best) / best if best > 0 else 0.0)
    return wins, gaps


def _table(quality: dict[str, dict[str, Score]], methods: list[str], metric: int) -> list[str]:
    table = []
    for name, by_method in quality.items():
        values = [v for m in methods if (v := by_method[m][metric]) is not None]
        best = min(values) if values else None
        split = "tuning" if name in TUNING_STREAMS else "held out"
        table.append([name, split, STREAM_SIZES[name][0], STREAM_SIZES[name][1],
                      *(_cell(by_method[m][metric], best) for m in methods)])
    return markdown_table(["stream", "split", "rows", "classes", *methods], table,
                          "llrr" + "r" * len(methods))


def _summary(quality: dict[str, dict[str, Score]], peers: list[str], metric: int) -> list[str]:
    lines = []
    for split, names in (("held out", [n for n in quality if n not in TUNING_STREAMS]),
                         ("tuning", [n for n in quality if n in TUNING_STREAMS])):
        if not names:
            continue
        for method in (AUTO, TOP):
            if metric == 1 and method == TOP:
                continue  # the same distribution: the same log loss
            wins, gaps = _wins(quality, peers, method, names, metric)
            lines.append(f"* {split} streams, `{method}`: lower than every peer on **{wins} of "
                         f"{len(names)}**; median gap to the best peer "
                         f"{100 * statistics.median(gaps):+.1f}% (negative: ahead)."
                         if gaps else f"* {split} streams, `{method}`: no peer to compare.")
    return lines


def report(quality: dict[str, dict[str, Score]], cost: list[tuple[str, float, float, float]],
           methods: list[str], command: str, commit: str, load_before: tuple[float, ...]) -> str:
    peers = [m for m in methods if m in PEERS]
    shown = [AUTO, TOP, *(m for m in methods if m != AUTO)]
    lines = ["# Multi-class classification: cost of a round, error and log loss against River and Vowpal "
             "Wabbit",
             "", f"`{command}` at {commit}; {machine_summary()}; load average before the run "
             f"{load_before[0]:.2f} (1 min), after {os.getloadavg()[0]:.2f}: the machine is shared, so "
             "read ratios measured side by side, not absolute times.", "",
             "Streams: tuning (the label vote's constants were chosen on them, `benchmarks/label_vote.py`, "
             "the pick of the label's, docs/auto-log.md \"Picking the label by its errors\", and the "
             "warm-up's, \"The warm-up's label\" and \"The warm-up's label in units within the classes\"): "
             f"{', '.join(n for n in quality if n in TUNING_STREAMS)}; held out (no part in choosing any "
             f"constant): {', '.join(n for n in quality if n not in TUNING_STREAMS)}. `{AUTO}` is the class "
             "`auto` predicts (`Round.predicted`: its label vote's, or the class of its flatter mixture "
             "while that has made fewer errors of late; in the warm-up the class of its play's models "
             "refitted on the features in units within the classes, with the classes' base rates weighed); "
             f"`{TOP}` the most probable class of the "
             "same rounds' distribution, the label `auto` gave before the vote and the warm-up's (the "
             "distributions, so the log loss, are the same).", ""]
    if cost:
        lines += ["## Cost of a round (ms of CPU, the same rows side by side)", "",
                  *markdown_table(["stream", "binary auto", "10-class auto", "ratio",
                                   "one-vs-rest of 10 auto", "ratio"],
                                  [(n, f"{b:.3f}", f"{m:.3f}", f"{m / b:.2f}x", f"{o:.3f}", f"{o / b:.2f}x")
                                   for n, b, m, o in cost], "lrrrrr"), ""]
    lines += ["## Error rate (progressive validation, raw rows, defaults)", ""]
    lines += _table(quality, shown, 0)
    lines += ["", *_summary(quality, peers, 0), ""]
    lines += ["## Log loss (natural log; a class given no probability counts as 1e-15)", "",
              "Vowpal Wabbit's `--oaa` gives no probabilities (-).", ""]
    lines += _table(quality, [m for m in shown if m != TOP], 1)
    lines += ["", *_summary(quality, peers, 1), ""]
    lines += ["## Cost per row (microseconds of CPU, learn and predict)", ""]
    lines += markdown_table(["stream", *methods],
                            [[n, *(f"{quality[n][m][2]:.0f}" for m in methods)] for n in quality],
                            "l" + "r" * len(methods))
    lines += ["", "River's `KNNClassifier` searches with SWINN, an approximate index built on a random graph "
              "whose generator is unseeded by default (digits 0.0801 and 0.0707 in two runs): it is seeded "
              "here (`SWINN(seed=0)`, otherwise the default), so that runs repeat. River's classifiers are "
              "told each class as its rank among the stream's sorted classes (an int: a stream's own labels "
              "where they are 0..K-1): its `HoeffdingAdaptiveTreeClassifier` and `KNNClassifier` build their "
              "probabilities in the order of a set of the classes seen, which for image_segments' names "
              "follows each process's hash seed (`PYTHONHASHSEED`), so ties went another way from run to run "
              "(the tree's error 0.2143 or 0.2147). River's classifiers are "
              "scored on the most probable class of `predict_proba_one` (what their `predict_one` returns)."]
    if "VW --oaa K" not in methods:
        lines += ["", "Vowpal Wabbit: the `vowpalwabbit` package is not installed here; not run."]
    return "\n".join(lines) + "\n"


STREAM_SIZES: dict[str, tuple[int, int]] = {}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--synthetic-rows", type=int, default=SYNTHETIC_ROWS)
    parser.add_argument("--streams", nargs="*", default=list(STREAMS), choices=list(STREAMS))
    parser.add_argument("--methods", nargs="*", default=None, choices=list(METHODS),
                        help="the methods run (default: all but the one-vs-rest of auto, K rounds a row)")
    parser.add_argument("--no-cost", dest="cost", action="store_false", help="skip the cost measurement")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    command = command_line("benchmarks.multiclass", argv, outputs=["--out"])
    commit, stamp = git_commit(), provenance(SOURCES)
    streams = {name: STREAMS[name](args.synthetic_rows) for name in args.streams}
    for name, (_, y) in streams.items():
        STREAM_SIZES[name] = (len(y), len(set(y)))
    chosen = args.methods or [m for m in METHODS if m != ONE_VS_REST]
    methods = [m for m in chosen if m != "VW --oaa K" or _vw_available()]
    if AUTO not in methods:
        methods.insert(0, AUTO)
    cost = run_cost({name: load(WARM + TIMED) for name, load in COST_STREAMS.items()}) if args.cost else []
    quality = run_quality(streams, methods)
    text = report(quality, cost, methods, command, commit, load_before)
    publish(results_dir(args.out, "multiclass"), "multiclass", stamp, text)
    print(text)


if __name__ == "__main__":
    main()
