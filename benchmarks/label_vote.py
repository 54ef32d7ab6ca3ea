"""The constants of ``auto``'s label vote (:class:`kons.auto.mixture.LabelVote`), chosen on tuning streams.

One run of ``kons.Auto(task="classification")`` per stream; beside its own vote, shadow votes with every
configuration of the grid below see the same rounds (the experts' labels, the mixture's own label, the
entries of experts), so each configuration's errors are counted on exactly the rounds the learner
played. Only the multinomial rounds the grid plays are counted (the warm-up's label is the same for
all). The streams are the tuning half (docs/bench-protocol.md): the project's 7 multi-class streams of
``benchmarks/multiclass.py``; the held-out ones (the streams of 10 classes or more added to it) are only
reported by that suite. A first run of a wider grid (learning rates 0.25 to 2, three switching grids,
three priors of the mixture's label), binary rounds voting too, on these and the 5 binary sets of the
raw regime's headline table found no setting with fewer errors than the sign of the score on the binary
sets: two classes have no vote (docs/auto-log.md#the-label-of-fewest-errors-when-it-landed-issue-39).

Run::

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.label_vote --out benchmarks/results
"""

from __future__ import annotations

import argparse
import itertools
import os
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

import kons
import kons.auto.mixture as mixture_module
from benchmarks.common import command_line, git_commit, machine_summary, markdown_table, results_dir
from benchmarks.multiclass import STREAMS, TUNING_STREAMS
from benchmarks.provenance import provenance, publish

SOURCES = ("kons", "benchmarks/label_vote.py")
#: The grid of configurations: learning rate, switching rates, prior of the mixture's own label, and the
#: lead in log weight another class needs over the mixture's label to overrule it.
GRID = list(itertools.product((1.0, 2.0, 4.0), ((0.0,), (0.0, 1e-2)), (0.1, 0.5), (0.0, 1.0, 2.0, 4.0)))


def _name(config: tuple[float, tuple[float, ...], float, float]) -> str:
    rate, rates, own, margin = config
    return f"rate {rate:g}, rates {'/'.join(f'{r:g}' for r in rates)}, own {own:g}, margin {margin:g}"


_LabelVote = mixture_module.LabelVote


class _Margined(_LabelVote):
    """A vote that keeps the mixture's own label unless another class leads it by ``exp(margin)`` in
    weight (a candidate rule, measured here only: docs/auto-log.md, "A margin for the mixture's own
    label")."""

    def __init__(self, active: np.ndarray, *, margin: float, **kwargs: Any) -> None:
        super().__init__(active, **kwargs)
        self.lead = float(np.exp(margin))

    def margined(self, labels: np.ndarray, own: int) -> int:
        """The label of this rule (not the learner's pick, :meth:`LabelVote.label`)."""
        voters = self._voters(labels, own)
        voting = voters >= 0
        votes = np.bincount(voters[voting], weights=self.weights.weights()[voting])
        if 0 <= own < len(votes) and votes[own] * self.lead >= votes.max():
            return own
        return int(np.argmax(votes)) if len(votes) else own


class _Shadowed(_LabelVote):
    """The learner's vote, with shadow votes of every configuration beside it counting their errors."""

    errors: ClassVar[dict[str, int]] = {}
    own_errors: ClassVar[list[int]] = [0, 0]  # the mixture's own label's errors, the rounds counted

    def __init__(self, active: np.ndarray, **kwargs: Any) -> None:
        super().__init__(active, **kwargs)
        self.shadows = {_name(c): _Margined(active, rate=c[0], rates=c[1], own_prior=c[2],
                                           margin=c[3])
                        for c in GRID}

    def update(self, labels: np.ndarray, own: int, y: int) -> None:
        for name, shadow in self.shadows.items():
            _Shadowed.errors[name] = _Shadowed.errors.get(name, 0) + (shadow.margined(labels, own) != y)
            shadow.update(labels, own, y)
        _Shadowed.own_errors[0] += own != y
        _Shadowed.own_errors[1] += 1
        super().update(labels, own, y)

    def enter(self, slots: list[int]) -> None:
        super().enter(slots)
        for shadow in getattr(self, "shadows", {}).values():
            shadow.enter(slots)


def run(streams: dict[str, tuple[np.ndarray, list[Any]]]) -> dict[str, tuple[dict[str, float], float]]:
    """``{stream: ({configuration: error rate}, the mixture's own label's error rate)}`` over the rounds
    the grid played."""
    mixture_module.LabelVote = _Shadowed  # type: ignore[misc]
    results = {}
    for name, (X, y) in streams.items():
        _Shadowed.errors, _Shadowed.own_errors = {}, [0, 0]
        model = kons.Auto(task="classification")
        for x, label in zip(X, y, strict=True):
            model.learn_one(x, label)
        rounds = max(_Shadowed.own_errors[1], 1)
        results[name] = ({k: v / rounds for k, v in _Shadowed.errors.items()},
                         _Shadowed.own_errors[0] / rounds)
        best = min(results[name][0], key=results[name][0].__getitem__)
        print(f"{name}: own {results[name][1]:.4f}, best {best} {results[name][0][best]:.4f}", flush=True)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    command = command_line("benchmarks.label_vote", argv, outputs=["--out"])
    commit, stamp = git_commit(), provenance(SOURCES)
    streams = {name: STREAMS[name](3000) for name in TUNING_STREAMS}
    results = run(streams)
    configs = [_name(c) for c in GRID]
    relative = {c: float(np.mean([errors[c] / max(own, 1e-9) for errors, own in results.values()]))
                for c in configs}
    ranked = sorted(configs, key=relative.__getitem__)
    lines = ["# The label vote's constants, on the tuning streams", "",
             f"`{command}` at {commit}; {machine_summary()}; load {load_before[0]:.2f}.", "",
             "Error rate over the rounds the grid played: the mixture's own top label, then each "
             "configuration of the vote; ranked by the mean over the streams of its error relative to the "
             "mixture's own label's (below 1: fewer errors).", ""]
    header = ["configuration", "mean ratio", *results]
    rows = [["mixture's own label", "1.000", *(f"{own:.4f}" for _, own in results.values())]]
    rows += [[c, f"{relative[c]:.3f}", *(f"{errors[c]:.4f}" for errors, _ in results.values())]
             for c in ranked]
    lines += markdown_table(header, rows, "lr" + "r" * len(results))
    publish(results_dir(args.out, "label_vote"), "label_vote", stamp, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
