"""A small Hoeffding tree (VFDT, Domingos and Hulten 2000) for classification on dense numeric rows, in
NumPy: per leaf, per class and per feature the Gaussian statistics (count, mean, M2; Welford), candidate
thresholds evenly spaced over the classes' observed ranges, information gain from the Gaussian CDFs, the
Hoeffding bound to decide, and at most ``max_leaves`` leaves (then it only updates its leaves), so memory
and cost per round are bounded. Leaves predict naive Bayes or the Laplace-smoothed class frequencies,
whichever has made fewer errors at that leaf (River's "nba")."""
from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtr


class VFDT:
    def __init__(self, dim: int, classes: int, *, grace: int = 200, delta: float = 1e-7, tie: float = 0.05,
                 splits: int = 10, max_leaves: int = 64) -> None:
        self.dim, self.classes, self.grace, self.delta, self.tie = dim, classes, grace, delta, tie
        self.splits, self.max_leaves = splits, max_leaves
        nodes = 2 * max_leaves - 1
        self.feature = np.full(nodes, -1)
        self.threshold = np.zeros(nodes)
        self.child = np.full((nodes, 2), -1)
        self.leaf_of = np.full(nodes, -1)  # node -> its leaf slot (-1: an inner node)
        self.nodes, self.leaves = 1, 1
        self.leaf_of[0] = 0
        shape = (max_leaves, classes, dim)
        self.n = np.zeros(shape); self.mean = np.zeros(shape); self.m2 = np.zeros(shape)
        self.lo = np.full(shape, np.inf); self.hi = np.full(shape, -np.inf)
        self.counts = np.zeros((max_leaves, classes))
        self.since = np.zeros(max_leaves)  # rows since the last split attempt
        self.errors = np.zeros((max_leaves, 2))  # [majority, naive Bayes]

    def _leaf(self, x: np.ndarray) -> int:
        node = 0
        while self.leaf_of[node] < 0:
            node = self.child[node, int(x[self.feature[node]] > self.threshold[node])]
        return node

    def _majority(self, leaf: int) -> np.ndarray:
        c = self.counts[leaf] + 1.0
        return c / c.sum()

    def _bayes(self, leaf: int, x: np.ndarray) -> np.ndarray:
        n = self.n[leaf]
        var = np.where(n > 1, self.m2[leaf] / np.maximum(n - 1, 1), 1.0) + 1e-9
        logp = np.log(self.counts[leaf] + 1.0) - 0.5 * np.sum(
            np.log(2 * math.pi * var) + (x - self.mean[leaf]) ** 2 / var, axis=1)
        p = np.exp(logp - logp.max())
        return p / p.sum()

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        leaf = self.leaf_of[self._leaf(x)]
        if self.counts[leaf].sum() == 0:
            return np.full(self.classes, 1.0 / self.classes)
        use_bayes = self.errors[leaf, 1] < self.errors[leaf, 0]
        return self._bayes(leaf, x) if use_bayes else self._majority(leaf)

    def learn(self, x: np.ndarray, label: int) -> None:
        node = self._leaf(x)
        leaf = self.leaf_of[node]
        if self.counts[leaf].sum() > 0:
            self.errors[leaf, 0] += int(np.argmax(self._majority(leaf)) != label)
            self.errors[leaf, 1] += int(np.argmax(self._bayes(leaf, x)) != label)
        n, mean, m2 = self.n[leaf, label], self.mean[leaf, label], self.m2[leaf, label]
        n += 1.0
        step = x - mean
        mean += step / n
        m2 += step * (x - mean)
        np.minimum(self.lo[leaf, label], x, out=self.lo[leaf, label])
        np.maximum(self.hi[leaf, label], x, out=self.hi[leaf, label])
        self.counts[leaf, label] += 1.0
        self.since[leaf] += 1.0
        if self.since[leaf] >= self.grace and self.leaves < self.max_leaves:
            self.since[leaf] = 0.0
            self._attempt(node, leaf)

    @staticmethod
    def _entropy(counts: np.ndarray) -> np.ndarray:
        total = counts.sum(axis=-1, keepdims=True)
        p = np.divide(counts, total, out=np.zeros_like(counts), where=total > 0)
        logs = np.log2(p, out=np.zeros_like(p), where=p > 0)
        return -(p * logs).sum(axis=-1)

    def _attempt(self, node: int, leaf: int) -> None:
        counts = self.counts[leaf]
        total = counts.sum()
        if np.count_nonzero(counts) < 2:
            return
        seen = self.n[leaf] > 0  # (classes, dim)
        lo = np.where(seen, self.lo[leaf], np.inf).min(axis=0)
        hi = np.where(seen, self.hi[leaf], -np.inf).max(axis=0)
        frac = np.arange(1, self.splits + 1) / (self.splits + 1)
        cuts = lo[:, None] + (hi - lo)[:, None] * frac[None, :]  # (dim, splits)
        std = np.sqrt(np.where(self.n[leaf] > 1, self.m2[leaf] / np.maximum(self.n[leaf] - 1, 1), 0.0))
        z = (cuts[None, :, :] - self.mean[leaf][:, :, None]) / np.maximum(std[:, :, None], 1e-12)
        below = np.where(std[:, :, None] > 0, ndtr(z), (cuts[None] >= self.mean[leaf][:, :, None]).astype(float))
        # outside a class's observed range, all of its rows are on one side (as River's GaussianSplitter)
        below = np.where(cuts[None] < self.lo[leaf][:, :, None], 0.0, below)
        below = np.where(cuts[None] >= self.hi[leaf][:, :, None], 1.0, below)
        left = counts[:, None, None] * below  # (classes, dim, splits)
        right = counts[:, None, None] - left
        left_n, right_n = left.sum(axis=0), right.sum(axis=0)
        children = (left_n * self._entropy(np.moveaxis(left, 0, -1))
                    + right_n * self._entropy(np.moveaxis(right, 0, -1))) / total
        gain = self._entropy(counts) - children
        gain = np.where((hi > lo)[:, None], gain, -np.inf)
        best = np.max(gain, axis=1)  # per feature
        order = np.argsort(best)[::-1]
        first, second = best[order[0]], (best[order[1]] if len(order) > 1 else 0.0)
        bound = math.sqrt(math.log2(self.classes) ** 2 * math.log(1 / self.delta) / (2 * total))
        if first <= 0 or not (first - second > bound or bound < self.tie):
            return
        f = int(order[0])
        self._split(node, leaf, f, float(cuts[f, int(np.argmax(gain[f]))]))

    def _split(self, node: int, leaf: int, feature: int, threshold: float) -> None:
        self.feature[node], self.threshold[node] = feature, threshold
        kids = (self.nodes, self.nodes + 1)
        self.nodes += 2
        self.child[node] = kids
        self.leaf_of[node] = -1
        for k, slot in zip(kids, (leaf, self.leaves), strict=True):
            self.leaf_of[k] = slot
            for arr, value in ((self.n, 0.0), (self.mean, 0.0), (self.m2, 0.0), (self.lo, np.inf),
                               (self.hi, -np.inf), (self.counts, 0.0), (self.since, 0.0), (self.errors, 0.0)):
                arr[slot] = value
        self.leaves += 1
