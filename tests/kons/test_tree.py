"""kons.auto.experts.tree.HoeffdingTree against a slow reference that keeps every row of each leaf and
recomputes the statistics, the candidate splits and the Hoeffding test from them at each decision."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy.stats import norm

from kons.auto.experts.tree import HoeffdingTree
from kons.errors import StateFormatError


class SlowTree:
    """The same algorithm written out from the rows: no running statistics, no array tricks."""

    def __init__(self, dim: int, classes: int, grace: int, delta: float, tie: float, cuts: int,
                 max_leaves: int) -> None:
        self.dim, self.classes, self.grace, self.delta, self.tie = dim, classes, grace, delta, tie
        self.cuts, self.max_leaves = cuts, max_leaves
        self.root: dict[str, Any] = self._leaf()
        self.leaves = 1

    @staticmethod
    def _leaf() -> dict[str, Any]:
        return {"rows": [], "labels": [], "since": 0, "errors": [0, 0]}

    def _find(self, x: np.ndarray) -> dict[str, Any]:
        node = self.root
        while "feature" in node:
            node = node["upper"] if x[node["feature"]] > node["threshold"] else node["lower"]
        return node

    def _class_values(self, leaf: dict[str, Any], c: int, j: int) -> list[float]:
        return [row[j] for row, label in zip(leaf["rows"], leaf["labels"], strict=True) if label == c
                and not math.isnan(row[j])]

    def _frequencies(self, leaf: dict[str, Any]) -> np.ndarray:
        counts = np.array([leaf["labels"].count(c) + 1.0 for c in range(self.classes)])
        result: np.ndarray = counts / counts.sum()
        return result

    def _bayes(self, leaf: dict[str, Any], x: np.ndarray) -> np.ndarray:
        log_p = []
        for c in range(self.classes):
            total = math.log(leaf["labels"].count(c) + 1.0)
            for j in range(self.dim):
                if math.isnan(x[j]):
                    continue
                values = self._class_values(leaf, c, j)
                variance = (np.var(values, ddof=1) if len(values) > 1 else 1.0) + 1e-9
                mean = float(np.mean(values)) if values else 0.0
                total += norm.logpdf(x[j], mean, math.sqrt(variance))
            log_p.append(total)
        p = np.exp(np.array(log_p) - max(log_p))
        result: np.ndarray = p / p.sum()
        return result

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        leaf = self._find(x)
        if not leaf["labels"]:
            return np.full(self.classes, 1.0 / self.classes)
        errors = leaf["errors"]
        return self._bayes(leaf, x) if errors[1] < errors[0] else self._frequencies(leaf)

    def learn(self, x: np.ndarray, label: int) -> None:
        leaf = self._find(x)
        if leaf["labels"]:
            leaf["errors"][0] += int(np.argmax(self._frequencies(leaf)) != label)
            leaf["errors"][1] += int(np.argmax(self._bayes(leaf, x)) != label)
        leaf["rows"].append(x)
        leaf["labels"].append(label)
        leaf["since"] += 1
        if leaf["since"] >= self.grace and self.leaves < self.max_leaves:
            leaf["since"] = 0
            self._attempt(leaf)

    @staticmethod
    def _entropy(counts: list[float]) -> float:
        total = sum(counts)
        return -sum(n / total * math.log2(n / total) for n in counts if n > 0) if total > 0 else 0.0

    def _attempt(self, leaf: dict[str, Any]) -> None:
        counts = [float(leaf["labels"].count(c)) for c in range(self.classes)]
        total = sum(counts)
        if sum(1 for n in counts if n > 0) < 2:
            return
        best: list[tuple[float, float]] = []  # per feature: (gain, threshold)
        for j in range(self.dim):
            per_class = [self._class_values(leaf, c, j) for c in range(self.classes)]
            seen = [v for values in per_class for v in values]
            if not seen or max(seen) == min(seen):
                best.append((-math.inf, 0.0))
                continue
            low, high = min(seen), max(seen)
            candidates = []
            for k in range(1, self.cuts + 1):
                t = low + (high - low) * (k / (self.cuts + 1))
                left, right = [], []
                for values in per_class:
                    n = len(values)
                    if not values or t < min(values):
                        below = 0.0
                    elif t >= max(values):
                        below = 1.0
                    else:
                        sd = float(np.std(values, ddof=1)) if n > 1 else 0.0
                        below = norm.cdf(t, np.mean(values), sd) if sd > 0 else float(t >= np.mean(values))
                    left.append(n * below)
                    right.append(n - n * below)
                children = (sum(left) * self._entropy(left) + sum(right) * self._entropy(right)) / total
                candidates.append((self._entropy(counts) - children, t))
            best.append(max(candidates, key=lambda g: g[0]))  # the first of equal gains
        order = sorted(range(self.dim), key=lambda j: -best[j][0])
        first = best[order[0]][0]
        second = max(best[order[1]][0], 0.0) if self.dim > 1 else 0.0
        bound = math.sqrt(math.log2(max(self.classes, 2)) ** 2 * math.log(1 / self.delta) / (2 * total))
        if first > 0 and (first - second > bound or bound < self.tie):
            leaf.clear()
            leaf.update({"feature": order[0], "threshold": best[order[0]][1], "lower": self._leaf(),
                         "upper": self._leaf()})
            self.leaves += 1


def _stream(rows: int, dim: int, classes: int, seed: int,
            missing: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Rows whose class is set by thresholds on two features (an interaction), with label noise."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, dim)) * np.arange(1, dim + 1)
    y = ((X[:, 0] > 0.3).astype(int) + (X[:, 1 % dim] > -0.5 * (1 % dim + 1))) % classes
    flip = rng.random(rows) < 0.1
    y = np.where(flip, rng.integers(0, classes, rows), y)
    X[rng.random(X.shape) < missing] = np.nan
    return X, y


@pytest.mark.parametrize(("classes", "missing"), [(2, 0.0), (3, 0.0), (2, 0.05)])
def test_the_tree_grows_and_predicts_as_the_slow_reference(classes: int, missing: float) -> None:
    X, y = _stream(900, 3, classes, seed=classes, missing=missing)
    tree = HoeffdingTree(3, classes, grace=50, delta=0.01, tie=0.2, cuts=6, max_leaves=6)
    slow = SlowTree(3, classes, grace=50, delta=0.01, tie=0.2, cuts=6, max_leaves=6)
    for x, label in zip(X, y, strict=True):
        np.testing.assert_allclose(tree.predict_proba(x), slow.predict_proba(x), rtol=1e-9, atol=1e-12)
        tree.learn(x, int(label))
        slow.learn(x, int(label))
        assert tree.leaves == slow.leaves
    assert tree.leaves >= 3  # the test saw splits, not only leaves learning


def test_the_leaves_stop_at_their_bound_and_keep_learning() -> None:
    X, y = _stream(3000, 4, 2, seed=7)
    tree = HoeffdingTree(4, 2, grace=30, delta=0.1, max_leaves=4)
    for x, label in zip(X, y, strict=True):
        tree.learn(x, int(label))
    assert tree.leaves == 4
    before = tree.state()
    # the saved statistics are the leaves' in use: 4 leaves x (2 classes x 4 features x 5 + 2 counts + 3),
    # after the used nodes' thresholds (7; the root alone, before a split)
    assert len(before["tree_floats"]) == 7 + 4 * (2 * 4 * 5 + 2 + 3)
    assert len(HoeffdingTree(4, 2, max_leaves=4).state()["tree_floats"]) == 1 + 1 * (2 * 4 * 5 + 2 + 3)
    tree.learn(X[0], int(y[0]))
    assert tree.leaves == 4 and tree.rows_learnt == 3001 and not np.array_equal(tree.state()["tree_floats"],
                                                                                 before["tree_floats"])


def test_a_state_round_trip_plays_on_identically_and_a_broken_one_is_refused() -> None:
    X, y = _stream(1200, 3, 3, seed=3)
    tree = HoeffdingTree(3, 3, grace=50, delta=0.01, tie=0.2)
    for x, label in zip(X[:600], y[:600], strict=True):
        tree.learn(x, int(label))
    assert tree.leaves > 1  # the state has splits to check
    copy = HoeffdingTree(3, 3, grace=50, delta=0.01, tie=0.2)
    copy.restore(tree.state())
    for x, label in zip(X[600:], y[600:], strict=True):
        assert np.array_equal(tree.predict_proba(x), copy.predict_proba(x))
        tree.learn(x, int(label))
        copy.learn(x, int(label))
    ours, theirs = tree.state(), copy.state()
    assert all(np.array_equal(ours[k], theirs[k]) for k in ours)
    state = tree.state()
    ints, floats = state["tree_ints"], state["tree_floats"]
    not_a_tree = ints.copy()
    not_a_tree[:2] = (4, 2)
    outside = ints.copy()
    outside[3:3 + tree._nodes] = np.where(tree._feature[:tree._nodes] >= 0, 9, -1)
    for broken in ({"tree_ints": ints},
                   {"tree_ints": ints, "tree_floats": floats[:-1]},
                   {"tree_ints": not_a_tree, "tree_floats": floats},
                   {"tree_ints": outside, "tree_floats": floats}):
        fresh = HoeffdingTree(3, 3, grace=50, delta=0.01, tie=0.2)
        with pytest.raises(StateFormatError):
            fresh.restore(broken)
        assert fresh.leaves == 1 and fresh.rows_learnt == 0


def test_a_state_of_every_node_the_tree_may_hold_as_releases_before_saved_plays_on_identically() -> None:
    X, y = _stream(1200, 3, 3, seed=4)
    tree = HoeffdingTree(3, 3, grace=50, delta=0.01, tie=0.2)
    for x, label in zip(X[:600], y[:600], strict=True):
        tree.learn(x, int(label))
    assert 1 < tree.leaves < tree.max_leaves  # nodes unused, saved before as they were made
    statistics = tree.state()["tree_floats"][tree._nodes:]
    every_node = {"tree_ints": np.concatenate([[tree._nodes, tree.leaves, tree.rows_learnt], tree._feature,
                                               tree._children.ravel(), tree._slot]),
                  "tree_floats": np.concatenate([tree._threshold, statistics])}
    copy = HoeffdingTree(3, 3, grace=50, delta=0.01, tie=0.2)
    copy.restore(every_node)
    ours, theirs = tree.state(), copy.state()
    assert all(np.array_equal(ours[k], theirs[k]) for k in ours)
    for x, label in zip(X[600:], y[600:], strict=True):
        assert np.array_equal(tree.predict_proba(x), copy.predict_proba(x))
        tree.learn(x, int(label))
        copy.learn(x, int(label))
    assert tree.leaves > 3 and all(np.array_equal(tree.state()[k], copy.state()[k]) for k in ours)


def _nbytes(tree: HoeffdingTree) -> int:
    return sum(array.nbytes for array in tree.state().values())


def test_the_trees_bytes_are_its_saved_arrays_as_it_grows_widens_and_is_restored() -> None:
    X, y = _stream(2000, 4, 3, seed=9)
    tree = HoeffdingTree(4, 2, grace=30, delta=0.1, max_leaves=8)
    assert tree.nbytes() == _nbytes(tree)
    for r, (x, label) in enumerate(zip(X, y, strict=True)):
        tree.widen(int(label) + 1)
        tree.learn(x, int(label))
        if r % 97 == 0:
            assert tree.nbytes() == _nbytes(tree)
    assert tree.leaves > 1 and tree.nbytes() == _nbytes(tree)
    tree.widen(5)
    assert tree.nbytes() == _nbytes(tree)
    restored = HoeffdingTree(4, 2, grace=30, delta=0.1, max_leaves=8)
    restored.restore(tree.state())
    assert restored.nbytes() == _nbytes(restored) == _nbytes(tree)


def test_the_growth_bound_holds_and_a_held_tree_does_not_split() -> None:
    X, y = _stream(3000, 4, 3, seed=8)
    tree = HoeffdingTree(4, 3, grace=30, delta=0.1, max_leaves=8)
    for start in range(0, 3000, 100):
        before, bound = _nbytes(tree), tree.growth_nbytes(100)
        for x, label in zip(X[start:start + 100], y[start:start + 100], strict=True):
            tree.learn(x, int(label))
        assert _nbytes(tree) - before <= bound
        if tree.leaves == 3:
            break
    assert tree.leaves == 3  # it grew under the bound
    tree.held = True
    assert tree.growth_nbytes(10**6) == 0
    size = _nbytes(tree)
    for x, label in zip(X, y, strict=True):
        tree.learn(x, int(label))
    assert tree.leaves == 3 and _nbytes(tree) == size
    tree.held = False
    for x, label in zip(X, y, strict=True):
        tree.learn(x, int(label))
    assert 3 < tree.leaves <= 8
