"""Issue 39's recovery goal restated: ``auto`` within 10% of the restart at each true change, or of the floor
that the change's own first row sets (docs/drift.md, "Known limits").

The change's first row is played before its target arrives, by a learner that has seen only the old
concept; the best it can play there, told nothing, is the old concept's own value without its noise. Per
window of :mod:`benchmarks.drift` (its streams, windows, ``auto`` and oracle, played here by its own
classes), with ``e1`` that row's unavoidable squared error (the old concept's noiseless value against the
new row's target) and ``o1`` the oracle's error on the same row:

* floor = ``e1`` + the oracle's errors on the window's other rows; bar A = 1.10 x max(oracle, floor);
* bar B = 1.10 x (oracle + ``e1``): the first row's unavoidable error added to the oracle's whole window
  (never below bar A, since ``o1`` is not negative).

All are sums over the window's rows, so they share the window metric's denominator. The old concept's
noiseless value comes from the streams' own generators, built with their noise left out (every Gaussian
noise draw returns its mean, the draws themselves still taken so the rows are the same), on the stream
with the change and those after it removed where the generator takes its change points, else through the
target maps the stream declares, else (a linear concept) by its exact fit on the old piece. A NumPy
generator's noise is taken to be its last ``normal`` draw, as in every generator of ``benchmarks/drift.py``
(docs/drift-log.md, session 23, checked its spread on every piece). For the binary streams the first
row can cost at most one error; ``e1`` is taken as that bound (the loosest bar), which their noise-free
labels could only lower.

    python -m benchmarks.drift_floor [--streams a,b]
"""

from __future__ import annotations

import argparse
import inspect
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from unittest import mock

import numpy as np

from benchmarks import drift
from benchmarks.common import markdown_table

__all__ = ["Window", "floor_windows", "main", "noiseless", "old_concept"]

#: The target maps (scale, shift of the base target) of each piece, for the streams that apply their
#: changes to a base target in their own bodies (``benchmarks/drift.py``'s docstrings state them).
TARGET_MAPS: dict[str, tuple[tuple[float, float], ...]] = {
    "friedman_scaled": ((1.0, 0.0), (4.0, 30.0), (0.5, -10.0)),
    "piecewise_scaled": ((1.0, 0.0), (5.0, -100.0), (0.2, 40.0)),
    "planes_flip": ((1.0, 0.0), (-1.0, 0.0), (1.0, 0.0)),
}


class _LastNormalAtItsMean:
    """A NumPy generator whose ``normal`` draw number ``quiet`` (counted from 0) returns its mean, the
    draw still taken; it counts its ``normal`` draws in ``drawn``."""

    def __init__(self, seed: Any, quiet: int | None, make: Callable[[Any], np.random.Generator]) -> None:
        self._rng, self._quiet, self.drawn = make(seed), quiet, 0

    def normal(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
        draw = self._rng.normal(loc, scale, size)
        self.drawn += 1
        return np.broadcast_to(loc, np.shape(draw)).astype(float) if self.drawn - 1 == self._quiet else draw

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rng, name)


def noiseless(build: Callable[[], tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """``build()`` with its noise left out: River's generators draw their noise with ``random.Random.gauss``
    (each such draw returns its mean here), this module's NumPy generators as their last ``normal`` draw
    (the build runs once to count them, then again with the last at its mean)."""
    make, gauss = np.random.default_rng, random.Random.gauss
    made: list[_LastNormalAtItsMean] = []

    def quiet_gauss(self: random.Random, mu: float = 0.0, sigma: float = 1.0) -> float:
        gauss(self, mu, sigma)
        return mu

    def run(quiet: int | None) -> tuple[np.ndarray, np.ndarray]:
        made.clear()

        def rng(seed: Any = None) -> Any:
            made.append(_LastNormalAtItsMean(seed, quiet, make))
            return made[-1]

        with mock.patch.object(np.random, "default_rng", rng), \
                mock.patch.object(random.Random, "gauss", quiet_gauss):
            return build()

    out = run(None)
    if not made:
        return out
    if len(made) != 1:
        raise ValueError("a build with more than one NumPy generator has no single last noise draw")
    return run(made[0].drawn - 1)


def _without_changes(stream: drift.Stream, k: int) -> Callable[[], tuple[np.ndarray, np.ndarray]] | None:
    """The stream's generator with its change ``k`` and those after removed, where it takes its change
    points as arguments (read from its closure); else None."""
    kept = inspect.getclosurevars(stream.build).nonlocals
    name = stream.build.__qualname__.split(".")[0]
    if name == "_piecewise":
        return drift._piecewise(kept["seed"], kept["dim"], kept["changes"][:k], kept["n"], kept["flip_every"])
    if name == "_friedman":
        # River's FriedmanDrift takes all its points; those removed move past the stream's end, as far
        # apart as its gradual drifts' window needs.
        position = kept["position"]
        step, end = max(kept["window"], 1), 10 * max(position)
        moved = (*position[:k], *(end + step * (j + 1) for j in range(len(position) - k)))
        return drift._friedman(kept["drift_type"], moved, kept["window"])
    return None


def old_concept(stream: drift.Stream) -> list[float]:
    """The old concept's noiseless value on each change's first row (regression streams)."""
    X, _ = stream.build()
    clean_X, clean = noiseless(stream.build)
    if not np.array_equal(X, clean_X):
        raise AssertionError(f"{stream.name}: leaving the noise out moved the rows")
    values = []
    for k, c in enumerate(stream.changes):
        without = _without_changes(stream, k)
        if without is not None:
            other_X, other = noiseless(without)
            if not np.array_equal(X[:len(other_X)], other_X[:len(X)]):
                raise AssertionError(f"{stream.name}: removing change {c} moved the rows")
            values.append(float(other[c]))
        elif stream.name in TARGET_MAPS:
            (old_scale, old_shift), (scale, shift) = TARGET_MAPS[stream.name][k:k + 2]
            values.append(float(old_scale * (clean[c] - shift) / scale + old_shift))
        else:  # a linear concept: its exact fit on the old piece's noiseless rows
            start = stream.changes[k - 1] if k else 0
            design = np.c_[np.ones(c - start), X[start:c]]
            weights, *_ = np.linalg.lstsq(design, clean[start:c], rcond=None)
            if np.max(np.abs(design @ weights - clean[start:c])) > 1e-6 * np.max(np.abs(clean[start:c])):
                raise AssertionError(f"{stream.name}: the concept before {c} is not linear")
            values.append(float(np.r_[1.0, X[c]] @ weights))
    return values


@dataclass(frozen=True)
class Window:
    """One window's sums of errors (squared, or counts for classes) over its rows."""

    stream: str
    split: str
    task: str
    span: tuple[int, int]
    auto: float
    oracle: float
    oracle_first: float  # the oracle's error on the change's first row
    first: float  # e1, the first row's unavoidable error (for classes: its bound, one error)
    published: float  # auto / oracle as drift.py's metric gives it

    @property
    def floor(self) -> float:
        return self.first + self.oracle - self.oracle_first

    @property
    def bar_a(self) -> float:
        return drift.ORACLE_FACTOR * max(self.oracle, self.floor)

    @property
    def bar_b(self) -> float:
        return drift.ORACLE_FACTOR * (self.oracle + self.first)


def _plays(stream: drift.Stream, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``auto``'s and the oracle's plays, by :mod:`benchmarks.drift`'s own runners."""
    auto, oracle = drift._Auto(stream.task), drift._Oracle(stream.task, stream.changes)
    plays = np.zeros((2, len(y)))
    for i in range(len(y)):
        plays[0, i] = auto.step(X[i], float(y[i]))
        plays[1, i] = oracle.step(X[i], float(y[i]))
    return plays[0], plays[1]


def _errors(played: np.ndarray, y: np.ndarray, regression: bool) -> np.ndarray:
    """Each row's error as the window metric sums it: squared, or 1 for a wrong class."""
    errors: np.ndarray = (played - y) ** 2 if regression else (np.sign(played) != y).astype(float)
    return errors


def floor_windows(stream: drift.Stream) -> list[Window]:
    """Every window after a change of ``stream``: the sums the restated goal compares."""
    X, y = stream.build()
    regression = stream.task == "regression"
    auto, oracle = _plays(stream, X, y)
    auto_errors, oracle_errors = _errors(auto, y, regression), _errors(oracle, y, regression)
    firsts = old_concept(stream) if regression else [1.0] * len(stream.changes)
    windows = []
    for (a, b), old in zip(drift.windows(stream, len(y)), firsts, strict=True):
        first = (old - y[a]) ** 2 if regression else old
        published = drift._metric(auto[a:b], y[a:b], regression) / drift._metric(oracle[a:b], y[a:b],
                                                                                   regression)
        windows.append(Window(stream.name, stream.split, stream.task, (a, b), float(auto_errors[a:b].sum()),
                              float(oracle_errors[a:b].sum()), float(oracle_errors[a]), float(first),
                              published))
    return windows


def _within(ratio: float, bar: float = 1.0) -> str:
    return f"{ratio:.2f}" + ("" if ratio <= bar else "!")


#: The three goals a window is counted against: the published one and the two restated bars.
GOALS: tuple[tuple[str, Callable[[Window], bool]], ...] = (
    ("within 10% of the restart", lambda w: w.published <= drift.ORACLE_FACTOR),
    ("within bar A", lambda w: w.auto <= w.bar_a),
    ("within bar B", lambda w: w.auto <= w.bar_b),
)


def render(windows: Sequence[Window]) -> list[str]:
    """The table (ratios in units of the oracle's window, '!' beyond a bar) and the counts by split."""
    head = ["stream", "split", "window", "auto / oracle", "e1 / oracle", "floor / oracle", "auto / bar A",
            "auto / bar B"]
    rows = [[w.stream + ("" if w.task == "regression" else " (binary)"), w.split, f"{w.span[0]}-{w.span[1]}",
             _within(w.published, drift.ORACLE_FACTOR),
             f"{w.first / w.oracle:.3f}", f"{w.floor / w.oracle:.3f}", _within(w.auto / w.bar_a),
             _within(w.auto / w.bar_b)] for w in sorted(windows, key=lambda w: drift.SPLITS.index(w.split))]
    lines = [*markdown_table(head, rows, "lllrrrrr"), ""]
    for split in drift.SPLITS:
        group = [w for w in windows if w.split == split]
        streams = {w.stream for w in group}
        if group:
            counts = [f"{name}: {sum(map(met, group))} of {len(group)} windows, "
                      f"{len(streams - {w.stream for w in group if not met(w)})} of {len(streams)} streams"
                      for name, met in GOALS]
            lines.append(f"{split.capitalize()}: " + "; ".join(counts) + ".")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    changed = [name for name, s in drift.STREAMS.items() if s.changes]
    parser.add_argument("--streams", default=",".join(changed), help="comma list of streams with changes")
    args = parser.parse_args(argv)
    names = args.streams.split(",")
    unknown = [n for n in names if n not in changed]
    if unknown:
        parser.error(f"unknown stream or one without known changes: {', '.join(unknown)}")
    windows = []
    for name in names:
        windows += floor_windows(drift.STREAMS[name])
        print(f"[{name}] done", file=sys.stderr, flush=True)
    print("\n".join(render(windows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
