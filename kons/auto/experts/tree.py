r"""A Hoeffding tree for classification (VFDT: Domingos and Hulten, "Mining high-speed data streams", 2000):
one more kind of expert for :class:`~kons.Auto`, the one that represents interactions of thresholds (a
target that depends on age *and* salary through steps), which neither the kernels nor the additive
quantile-threshold view (:mod:`kons.auto.experts.bins`) do well.

Each leaf keeps, per class and per feature, the Gaussian statistics of the values it has seen (count,
mean and sum of squared deviations, updated by Welford's rule) and their range. Every ``grace`` rows a
leaf weighs, per feature, ``cuts`` thresholds evenly spaced over the feature's observed range: the rows of
class :math:`c` below a threshold :math:`t` are estimated as :math:`n_c \Phi((t - \mu_c) / \sigma_c)`,
all or none of them when :math:`t` is outside the class's range. With :math:`G` the information gain
(bits) of the best threshold of each feature, the leaf splits on the best feature when its gain exceeds
the runner-up's by more than the Hoeffding bound

.. math:: \epsilon = \sqrt{\frac{R^2 \ln(1/\delta)}{2 n}}, \qquad R = \log_2 C,

or when :math:`\epsilon` < ``tie`` (the two are too close to matter). With probability :math:`1 - \delta`
the split is the one the leaf's whole (infinite) stream would choose (Hoeffding's inequality on the
gain's estimate). A leaf predicts naive Bayes from its statistics, or its Laplace-smoothed class
frequencies, whichever has made fewer errors on the rows it has seen (Gama et al.'s adaptive leaves).

Bounded: at most ``max_leaves`` leaves (then the leaves only learn, as they do while ``held``), so state
and cost per round do not grow with the stream: the arrays are ``leaves x classes x features``, a row per
leaf in use. A missing value (NaN) goes to the lower side of a split and adds nothing to its feature's
statistics.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
from scipy.special import ndtr

from kons.auto.config import MAX_TREE_LEAVES, TREE_GRACES, TREE_MAX_DIM, TREE_WAKE_ROWS
from kons.auto.experts.protocol import Expert, GridContext, ModelExpert, Row, in_play, ints_and_floats
from kons.errors import StateFormatError
from kons.preprocessing import TARGET_BOUND

__all__ = ["HoeffdingTree", "TreeExpert", "build_trees", "restore_trees", "trees_class_column_nbytes"]

#: The numbers a node saves: its feature, two children, leaf slot and threshold.
_NODE_NUMBERS = 5
#: The range of a feature no row has shown yet (finite: a saved state holds finite numbers only).
_NONE_LOW, _NONE_HIGH = float(np.finfo(float).max), float(-np.finfo(float).max)
#: What a leaf plays: the uniform probabilities (no row yet), naive Bayes or its class frequencies.
_UNIFORM, _BAYES, _FREQUENCIES = 0, 1, 2


def _complete(values: list[float]) -> bool:
    """Whether the row ``values`` (finite values, NaN for a missing one) misses no value: a NaN makes the
    sum NaN; a sum that overflows to NaN (never, for rows of finite values, unless inf - inf) only sends
    the row the masked way, which gives the same numbers."""
    return not math.isnan(sum(values))


class HoeffdingTree:
    """A Hoeffding tree over ``dim`` features and ``classes`` classes (labels ``0 .. classes - 1``)."""

    def __init__(self, dim: int, classes: int, *, grace: int = 200, delta: float = 1e-7, tie: float = 0.05,
                 cuts: int = 10, max_leaves: int = 64) -> None:
        self.dim = dim
        self.classes = classes
        self.grace = grace
        self.delta = delta
        self.tie = tie
        self.cuts = cuts
        self.max_leaves = max_leaves
        self.held = False  # no split while held (the owner's growth hold; see :meth:`growth_nbytes`)
        nodes = 2 * max_leaves - 1
        self._feature = np.full(nodes, -1, dtype=np.int64)  # an inner node's feature, else -1
        self._threshold = np.zeros(nodes)
        self._children = np.full((nodes, 2), -1, dtype=np.int64)
        self._slot = np.full(nodes, -1, dtype=np.int64)  # a leaf's statistics slot, else -1
        self._slot[0] = 0
        self._nodes = 1
        self._leaves = 1
        self._learnt = 0
        # the leaves' statistics, a row per leaf in use: a split appends one (splits are at least ``grace``
        # rows apart, so the copy is rare), and a tree that stays small holds and saves little
        shape = (1, classes, dim)
        self._n = np.zeros(shape)
        self._mean = np.zeros(shape)
        self._m2 = np.zeros(shape)
        self._low = np.full(shape, _NONE_LOW)
        self._high = np.full(shape, _NONE_HIGH)
        self._counts = np.zeros((1, classes))
        self._since = np.zeros(1)  # rows since the leaf last weighed a split
        self._errors = np.zeros((1, 2))  # errors of [class frequencies, naive Bayes]
        self._bayes = np.zeros(0)
        # the row's values and the leaf _bayes is for (by value: a caller may write a new row into the array
        # it predicted, then learn it)
        self._bayes_of: tuple[bytes, int] | None = None
        # per leaf slot, its naive Bayes terms that do not depend on the row (variances, their log
        # normalisers, the log class counts) while nothing is learnt: predictions repeat them
        self._leaf_terms: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        # per leaf slot, what it plays (:meth:`predict_proba`) while nothing is learnt
        self._leaf_plays: dict[int, int] = {}
        self._splits: tuple[list[int], list[float], list[int], list[int]] = ([], [], [], [])
        self._listed()

    @property
    def leaves(self) -> int:
        return self._leaves

    @property
    def rows_learnt(self) -> int:
        """The rows the tree has learnt."""
        return self._learnt

    def _listed(self) -> None:
        """The nodes' features, thresholds, children (two a node) and leaf slots as Python lists, from the
        NumPy arrays (after a split or a restore): :meth:`_leaf_node` walks them a node at a time, where a
        NumPy scalar costs more than the comparison."""
        self._splits = (self._feature.tolist(), self._threshold.tolist(), self._children.ravel().tolist(),
                        self._slot.tolist())

    def _leaf_node(self, x: np.ndarray) -> tuple[int, bool]:
        """The leaf ``x`` falls in, and whether ``x`` misses no value (:func:`_complete`: the walk has
        the row as Python floats, on which the test is cheaper than on the array)."""
        feature, threshold, children, slot = self._splits
        values = x.tolist()
        node = 0
        while slot[node] < 0:
            # NaN > t is False: a missing value goes to the lower side
            node = children[2 * node + (values[feature[node]] > threshold[node])]
        return node, _complete(values)

    def _frequencies(self, slot: int) -> np.ndarray:
        smoothed = self._counts[slot] + 1.0
        result: np.ndarray = smoothed / np.add.reduce(smoothed)
        return result

    def _naive_bayes(self, slot: int, x: np.ndarray, complete: bool) -> np.ndarray:
        """The naive Bayes probabilities at the leaf ``slot`` for ``x`` (``complete``: missing no value,
        :func:`_complete`): the last ones computed while nothing has been learnt since, for the same row
        (a round's play, then its learning, weighs the same leaf's)."""
        values = x.tobytes()
        if self._bayes_of is not None and self._bayes_of[0] == values and self._bayes_of[1] == slot:
            return self._bayes
        variance, normaliser, log_counts = self._leaf_terms.get(slot) or self._leaf_terms_of(slot)
        if complete:  # the same terms without the masks that leave out missing values
            deviation = x - self._mean[slot]
            terms = normaliser + deviation**2 / variance
        else:
            known = ~np.isnan(x)
            deviation = np.where(known, x - self._mean[slot], 0.0)  # x: finite, or NaN (missing)
            terms = np.where(known, normaliser + deviation**2 / variance, 0.0)
        log_p = log_counts - 0.5 * np.add.reduce(terms, axis=1)
        p = np.exp(log_p - np.maximum.reduce(log_p))
        result: np.ndarray = p / np.add.reduce(p)
        self._bayes, self._bayes_of = result, (values, slot)
        return result

    def _leaf_terms_of(self, slot: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = self._n[slot]
        variance = np.where(n > 1.0, self._m2[slot] / np.maximum(n - 1.0, 1.0), 1.0) + 1e-9
        terms = variance, np.log(2.0 * math.pi * variance), np.log(self._counts[slot] + 1.0)
        self._leaf_terms[slot] = terms
        return terms

    def _forget_plays(self, slot: int | None = None) -> None:
        """Drop what predictions cached: the statistics of the leaf ``slot`` change now (of every leaf if
        None)."""
        self._bayes_of = None
        if slot is None:
            self._leaf_terms.clear()
            self._leaf_plays.clear()
        else:
            self._leaf_terms.pop(slot, None)
            self._leaf_plays.pop(slot, None)

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """The classes' probabilities for the row ``x`` (``dim`` floats, NaN for a missing value)."""
        node, complete = self._leaf_node(x)
        slot = self._splits[3][node]
        play = self._leaf_plays.get(slot)
        if play is None:
            play = self._leaf_plays[slot] = (_UNIFORM if np.add.reduce(self._counts[slot]) == 0.0
                                             else _BAYES if self._errors[slot, 1] < self._errors[slot, 0]
                                             else _FREQUENCIES)
        if play == _BAYES:
            return self._naive_bayes(slot, x, complete)
        if play == _UNIFORM:
            return np.full(self.classes, 1.0 / self.classes)
        return self._frequencies(slot)

    def learn(self, x: np.ndarray, label: int) -> None:
        """Learn the row ``x`` of class ``label``; may split its leaf."""
        node, complete = self._leaf_node(x)
        slot = self._splits[3][node]
        self._learnt += 1
        counts = self._counts[slot]
        if np.add.reduce(counts) > 0.0:
            # the class frequencies' most probable class is the most counted one (counts are whole numbers:
            # adding 1 and dividing by their sum keeps their order and their ties)
            errors = self._errors[slot]
            errors[0] += int(counts.argmax() != label)
            errors[1] += int(self._naive_bayes(slot, x, complete).argmax() != label)
        self._forget_plays(slot)
        if complete:
            self._learn_complete(x, slot, label)
        else:
            self._learn_known(x, slot, label)
        counts[label] += 1.0
        since = self._since[slot] + 1.0
        self._since[slot] = since
        if since >= self.grace and self._leaves < self.max_leaves and not self.held:
            self._since[slot] = 0.0
            split = self.best_split(slot)
            if split is not None:
                self._split(node, slot, *split)

    def _learn_complete(self, x: np.ndarray, slot: int, label: int) -> None:
        """:meth:`_learn_known`'s statistics for a row without a missing value, bit for bit, without the
        masks (a tree learns every row of a round)."""
        n = self._n[slot, label]
        mean = self._mean[slot, label]
        n += 1.0
        step = x - mean
        mean += step / n
        self._m2[slot, label] += step * (x - mean)
        low, high = self._low[slot, label], self._high[slot, label]
        np.minimum(low, x, out=low)
        np.maximum(high, x, out=high)

    def _learn_known(self, x: np.ndarray, slot: int, label: int) -> None:
        """The leaf's statistics of the class ``label`` with the row ``x``'s known values."""
        known = ~np.isnan(x)
        value = x  # finite where known (a missing value is NaN, and every use below is where known)
        n = self._n[slot, label]
        mean = self._mean[slot, label]
        n += known
        step = np.where(known, value - mean, 0.0)
        mean += np.divide(step, n, out=np.zeros_like(step), where=known)
        self._m2[slot, label] += step * np.where(known, value - mean, 0.0)
        self._low[slot, label] = np.where(known, np.minimum(self._low[slot, label], value),
                                          self._low[slot, label])
        self._high[slot, label] = np.where(known, np.maximum(self._high[slot, label], value),
                                           self._high[slot, label])

    def best_split(self, slot: int) -> tuple[int, float] | None:
        """The feature and threshold the leaf ``slot`` should split on now, None if none is sure enough."""
        counts = self._counts[slot]
        total = counts.sum()
        if np.count_nonzero(counts) < 2:
            return None
        seen = self._n[slot] > 0.0  # (classes, dim)
        low = np.where(seen, self._low[slot], np.inf).min(axis=0)
        high = np.where(seen, self._high[slot], -np.inf).max(axis=0)
        spread = np.where(high > low, high - low, 0.0)
        fractions = np.arange(1, self.cuts + 1) / (self.cuts + 1)
        thresholds = np.where(high > low, low, 0.0)[:, None] + spread[:, None] * fractions  # (dim, cuts)
        n = self._n[slot][:, :, None]
        mean = self._mean[slot][:, :, None]
        sd = np.sqrt(np.where(n > 1.0, self._m2[slot][:, :, None] / np.maximum(n - 1.0, 1.0), 0.0))
        cut = thresholds[None]
        with np.errstate(divide="ignore", invalid="ignore"):
            below = np.where(sd > 0.0, ndtr((cut - mean) / sd), (cut >= mean).astype(float))
        below = np.where(cut < self._low[slot][:, :, None], 0.0, below)
        below = np.where(cut >= self._high[slot][:, :, None], 1.0, below)
        left = n * below  # (classes, dim, cuts): the rows with the feature known
        right = n - left
        children = (_weighted_entropy(left) + _weighted_entropy(right)) / total
        gain = np.where((high > low)[:, None], _entropy(counts) - children, -np.inf)
        best_cut = np.argmax(gain, axis=1)
        best = gain[np.arange(self.dim), best_cut]
        order = np.argsort(-best, kind="stable")
        first = best[order[0]]
        second = max(best[order[1]], 0.0) if self.dim > 1 else 0.0  # not splitting gains 0
        bound = math.sqrt(math.log2(max(self.classes, 2)) ** 2 * math.log(1.0 / self.delta) / (2.0 * total))
        if not first > 0.0 or not (first - second > bound or bound < self.tie):
            return None
        feature = int(order[0])
        return feature, float(thresholds[feature, best_cut[feature]])

    def _split(self, node: int, slot: int, feature: int, threshold: float) -> None:
        self._feature[node] = feature
        self._threshold[node] = threshold
        lower, upper = self._nodes, self._nodes + 1
        self._nodes += 2
        self._children[node] = (lower, upper)
        self._slot[node] = -1
        for name in self._LEAF_FLOATS:
            array = getattr(self, name)
            setattr(self, name, np.concatenate([array, array[:1]]))
        for child, child_slot in ((lower, slot), (upper, self._leaves)):
            self._slot[child] = child_slot
            self._n[child_slot] = self._mean[child_slot] = self._m2[child_slot] = 0.0
            self._low[child_slot], self._high[child_slot] = _NONE_LOW, _NONE_HIGH
            self._counts[child_slot] = self._since[child_slot] = self._errors[child_slot] = 0.0
        self._leaves += 1
        self._listed()

    def growth_nbytes(self, rounds: int) -> int:
        """The most its state can grow in ``rounds`` rounds: a leaf a round at most (a round splits at
        most one leaf: its statistics and two nodes), up to ``max_leaves``; nothing while held."""
        leaves = 0 if self.held else min(rounds, self.max_leaves - self._leaves)
        return 8 * leaves * (self.classes * (5 * self.dim + 1) + 3 + 2 * _NODE_NUMBERS)

    def widen(self, classes: int) -> None:
        """Make room for ``classes`` classes (more than now): the new ones seen nowhere yet."""
        extra = classes - self.classes
        if extra <= 0:
            return
        self._forget_plays()
        def padded(array: np.ndarray, fill: float) -> np.ndarray:
            widths = [(0, 0)] * array.ndim
            widths[1] = (0, extra)
            return np.pad(array, widths, constant_values=fill)
        self._n, self._mean, self._m2 = padded(self._n, 0.0), padded(self._mean, 0.0), padded(self._m2, 0.0)
        self._low, self._high = padded(self._low, _NONE_LOW), padded(self._high, _NONE_HIGH)
        self._counts = padded(self._counts, 0.0)
        self.classes = classes

    _LEAF_FLOATS = ("_n", "_mean", "_m2", "_low", "_high", "_counts", "_since", "_errors")

    def nbytes(self) -> int:
        """The bytes of :meth:`state`'s arrays, from the sizes of the tree's (without building them)."""
        leaves: int = sum(getattr(self, name).size for name in self._LEAF_FLOATS)
        return 8 * (3 + _NODE_NUMBERS * self._nodes + leaves)

    def state(self, prefix: str = "tree") -> dict[str, np.ndarray]:
        """The tree as two arrays (few arrays: each costs a saved state a header): ``<prefix>_ints``, the
        sizes (nodes, leaves, rows learnt) then the used nodes' features, children and leaf slots, and
        ``<prefix>_floats``, the used nodes' thresholds then the statistics of the leaves in use,
        flattened. (Releases before saved every node the tree may hold: :meth:`restore` reads both.)"""
        used = self._nodes
        ints = [np.array([self._nodes, self._leaves, self._learnt]), self._feature[:used],
                self._children[:used].ravel(), self._slot[:used]]
        floats = [self._threshold[:used], *(getattr(self, name).ravel() for name in self._LEAF_FLOATS)]
        return {f"{prefix}_ints": np.concatenate(ints).astype(np.int64),
                f"{prefix}_floats": np.concatenate(floats)}

    def restore(self, arrays: dict[str, np.ndarray], prefix: str = "tree") -> None:
        """Load :meth:`state` (of a tree with as many classes or more: it was widened); a state of another
        shape, or one that is not a tree, is refused with :class:`~kons.errors.StateFormatError` and
        leaves the tree as it was."""
        ints, floats = ints_and_floats(arrays, prefix, "a tree state")
        nodes_max = len(self._feature)
        if ints.ndim != 1 or floats.ndim != 1 or len(ints) < 3:
            raise StateFormatError("a tree state has the wrong size.")
        nodes, leaves, learnt = (int(v) for v in ints[:3])
        saved, extra = divmod(len(ints) - 3, _NODE_NUMBERS - 1)  # the used nodes, or (before) every one
        if extra or saved not in (nodes, nodes_max) or not 1 <= nodes <= nodes_max:
            raise StateFormatError("a tree state has the wrong size.")
        if not 1 <= leaves <= self.max_leaves:
            raise StateFormatError("a tree state's nodes and leaves do not make a tree.")
        classes, extra = divmod(len(floats) - saved - 3 * leaves, leaves * (5 * self.dim + 1))
        if extra or classes < self.classes:
            raise StateFormatError("a tree state has the wrong size.")
        feature = np.full(nodes_max, -1, dtype=np.int64)
        children = np.full((nodes_max, 2), -1, dtype=np.int64)
        slot = np.full(nodes_max, -1, dtype=np.int64)
        feature[:saved] = ints[3:3 + saved]
        children[:saved] = ints[3 + saved:3 + 3 * saved].reshape(saved, 2)
        slot[:saved] = ints[3 + 3 * saved:]
        used = slot[:nodes]
        if not (nodes == 2 * leaves - 1 and learnt >= 0
                and sorted(used[used >= 0].tolist()) == list(range(leaves))):
            raise StateFormatError("a tree state's nodes and leaves do not make a tree.")
        inner = used < 0
        if (children[:nodes][inner] < 1).any() or (children[:nodes][inner] >= nodes).any() or \
                (feature[:nodes][inner] < 0).any() or (feature[:nodes][inner] >= self.dim).any():
            raise StateFormatError("a tree state's splits point outside the tree.")
        statistics = (leaves, classes, self.dim)
        shapes = {"_n": statistics, "_mean": statistics, "_m2": statistics, "_low": statistics,
                  "_high": statistics, "_counts": (leaves, classes), "_since": (leaves,),
                  "_errors": (leaves, 2)}
        self._threshold = np.zeros(nodes_max)
        self._threshold[:saved] = floats[:saved]
        start = saved
        for name in self._LEAF_FLOATS:
            size = math.prod(shapes[name])
            setattr(self, name, floats[start:start + size].reshape(shapes[name]).astype(np.float64))
            start += size
        self._feature, self._children, self._slot = feature, children, slot
        self._forget_plays()
        self._listed()
        self._nodes, self._leaves, self._learnt, self.classes = nodes, leaves, learnt, classes


def _entropy(counts: np.ndarray) -> np.ndarray:
    """The entropy (bits) of class counts along the first axis."""
    total = counts.sum(axis=0)
    p = np.divide(counts, total, out=np.zeros_like(counts), where=total > 0.0)
    logs = np.log2(p, out=np.zeros_like(p), where=p > 0.0)
    result: np.ndarray = -(p * logs).sum(axis=0)
    return result


def _weighted_entropy(counts: np.ndarray) -> np.ndarray:
    """The entropy of class counts (along the first axis) times their total."""
    result: np.ndarray = counts.sum(axis=0) * _entropy(counts)
    return result


class TreeExpert(ModelExpert[HoeffdingTree]):
    """A :class:`HoeffdingTree` as an expert (classes only) on the raw row (:class:`ModelExpert`: it learns
    every row after the mixture's update and is ready to enter once it has learnt ``wake_rows`` rows); its
    binary score is the log-odds of its probabilities, clipped at ``clip``."""

    def __init__(self, tree: HoeffdingTree, *, wake_rows: int, clip: float) -> None:
        super().__init__(tree, wake_rows=wake_rows)
        self.clip = clip

    def predict(self, row: Row) -> float:
        p = self.model.predict_proba(row.raw())
        score = math.log(max(p[1], 1e-300) / max(p[0], 1e-300))
        return min(max(score, -self.clip), self.clip)

    def learn(self, row: Row, target: float) -> float:
        """Its score: it learns the row in :meth:`observe`."""
        return self.predict(row)


def build_trees(grid: GridContext) -> list[Expert] | None:
    """A tree of each of :data:`~kons.auto.config.TREE_GRACES` (classes, on rows of at most
    :data:`~kons.auto.config.TREE_MAX_DIM` features)."""
    if not grid.mixture.binary or grid.dim > TREE_MAX_DIM:
        return None
    return [TreeExpert(HoeffdingTree(grid.dim, 2, grace=grace, max_leaves=MAX_TREE_LEAVES),
                       wake_rows=TREE_WAKE_ROWS, clip=TARGET_BOUND) for grace in TREE_GRACES]


def restore_trees(grid: GridContext, built: list[Expert] | None, arrays: dict[str, np.ndarray],
                  scalars: dict[str, Any]) -> list[Expert] | None:
    """The trees (none learnt yet in a state saved before they existed); they play only if they exist."""
    if built is not None and "tree0_ints" in arrays:
        for i, expert in enumerate(built):
            cast(TreeExpert, expert).model.restore(arrays, f"tree{i}")
    elif "tree0_ints" in arrays:
        raise StateFormatError("the trees do not match the grid.")
    if in_play(grid, "tree0") and built is None:
        raise StateFormatError("the trees play where there are none.")
    return built


def trees_class_column_nbytes(dim: int) -> int:
    """The most bytes one more class adds to the trees on rows of ``dim`` features: its statistics in
    every leaf of every tree."""
    return 8 * len(TREE_GRACES) * MAX_TREE_LEAVES * (5 * dim + 1) if dim <= TREE_MAX_DIM else 0
