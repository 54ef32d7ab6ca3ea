r"""An aggregated Mondrian forest for classes: one more kind of expert for :class:`~kons.Auto`, strong where
the kernels on many classes are weak (class regions of irregular shapes, a label that steps along a few
features), in the spirit of AMF (Mourtada, Gaïffas and Scornet, "AMF: Aggregated Mondrian forests for
online learning", JRSS B 2021).

Each tree partitions the space by a Mondrian process restricted to the rows seen (Lakshminarayanan, Roy and
Teh, "Mondrian forests", NIPS 2014). A node keeps the box of its rows (the range of each feature), the time
:math:`\tau` at which it split (never, for a leaf), its class counts and two log-weights. A row :math:`x`
goes down its path; at each node with the box extended by :math:`e_j` along feature :math:`j` (0 inside
the box), a time :math:`T \sim \mathrm{Exp}(\sum_j e_j)` is drawn, and if the node's parent's split time
plus :math:`T` comes before the node's own split time, a new node is put above it: it splits on feature
:math:`j` with probability :math:`e_j / \sum e`, at a threshold uniform between the box and :math:`x_j`; the
old node (its subtree) goes to one side, a new leaf holding :math:`x` to the other. With an infinite
lifetime (AMF's), a leaf always splits when a row falls outside its box, except when the leaf's rows are
all of the row's class (AMF's ``split_pure=False``: a pure leaf stays whole).

Every node predicts its Krichevsky-Trofimov-smoothed class frequencies
:math:`(n_c + \alpha) / (n + C\alpha)` and carries :math:`w_v = \exp(-\eta L_v)`, :math:`L_v` the log loss
of its predictions on the rows that went through it, each taken before the row was counted, the node's
first row excepted (as AMF counts it: that row made the node, a new leaf or the root, and a leaf's
uniform prediction of it would shrink every new leaf towards its parent). The tree
plays the exponentially weighted average over every pruning of the tree, each pruning's prior
:math:`2^{-(\text{its nodes that could split})}`, computed along the path by Context Tree Weighting
(Willems, Shtarkov and Tjalkens 1995; Helmbold and Schapire 1997):

.. math:: \bar w_v = \tfrac12 w_v + \tfrac12 \bar w_{v_0} \bar w_{v_1} \text{ (a leaf: } \bar w_v = w_v),
   \qquad \hat p_v = \frac{w_v}{2 \bar w_v} p_v + \Big(1 - \frac{w_v}{2 \bar w_v}\Big) \hat p_{\text{child}},

:math:`\hat p` of the root the tree's play; with :math:`\eta = 1` it is the Bayes mixture over the prunings.
The forest plays its trees' mean.

Bounded: a tree holds at most ``max_nodes`` nodes; once full its structure stays and its nodes only count
(as they do while ``held``), so state and cost per round do not grow with the stream. Deterministic: the
randomness is one :class:`numpy.random.Generator` seeded from the learner's seed, whose state is saved.
Why these choices and what the forest gives ``auto``: ``docs/auto.md#the-mondrian-forest``.
"""

from __future__ import annotations

import math
from array import array
from itertools import chain
from typing import Any, cast

import numpy as np

from kons._state import integer_dtype
from kons.auto.config import (
    FOREST_DIRICHLET,
    FOREST_MAX_BYTES,
    FOREST_MAX_DIM,
    FOREST_MAX_NODES,
    FOREST_TREES,
    FOREST_WAKE_ROWS,
)
from kons.auto.experts.protocol import Expert, GridContext, ModelExpert, Row, ints_and_floats, restore_saved
from kons.errors import StateFormatError

__all__ = ["ForestExpert", "MondrianForest", "build_forest", "forest_class_column_nbytes", "nodes_within",
           "restore_forest"]

#: A leaf's split time: never (finite, as every number of a saved state).
_NEVER = float(np.finfo(float).max)
#: The box of a feature no row of the node has given (all missing): empty, lower above upper.
_NONE_LOW, _NONE_HIGH = _NEVER, -_NEVER
_LOG_HALF = math.log(0.5)
#: The state's formats, first of its integers: every field of every node (still read, and written for a
#: forest whose inner nodes are not what their leaves make them), or the leaves' fields and the splits only
#: (:meth:`MondrianForest.state`).
_FULL, _COMPACT = 1, 2
#: The last row routed: its bytes, its paths, the paths flattened (``MondrianForest._flat``), its play.
_Routed = tuple[bytes, list[list[int]], tuple[np.ndarray, list[int]], "np.ndarray | None"]


def nodes_within(nbytes: int, dim: int, trees: int, most: int) -> int:
    """The nodes a tree may hold, at most ``most`` (odd: a root and pairs of children), so that ``trees``
    trees over ``dim`` features save at most ``nbytes`` on two classes (:meth:`MondrianForest.state`, in
    either format)."""
    nodes = (nbytes - 8 * _head(trees)) // (trees * _node_nbytes(dim, 2))
    return max(1, min(most, nodes - (1 - nodes % 2)))


def _head(trees: int) -> int:
    """The integers of a saved forest before its nodes' (:meth:`MondrianForest.state`): the format, the
    classes, the rows learnt, the generator's six words and each tree's nodes."""
    return 3 + 6 + trees


def _node_nbytes(dim: int, classes: int) -> int:
    """A node's bytes in the full format: its feature and children, its threshold, split time, weights, box
    and counts (the most a node takes in either format)."""
    return 8 * (3 + 4 + 2 * dim + classes)


def _tree_log_weight(own: float, split: float) -> float:
    r""":math:`\log \bar w_v` of an inner node from its own :math:`\log w_v` and its children's
    :math:`\log \bar w` summed (``split``): :math:`\log(w_v / 2 + \bar w_{v_0} \bar w_{v_1} / 2)`, bit for
    bit as :meth:`MondrianForest._count` computes it inline (a call a node would cost every round)."""
    return (own + math.log1p(math.exp(split - own)) if own > split
            else split + math.log1p(math.exp(own - split))) + _LOG_HALF


def _second(first: np.ndarray) -> np.ndarray:
    """Each inner node's second child from its first: a split makes its two children at once, an odd index
    and the next (:meth:`MondrianForest._split`)."""
    result: np.ndarray = np.where(first % 2 == 1, first + 1, first - 1)
    return result


class MondrianForest:
    """``trees`` aggregated Mondrian trees over ``dim`` features and ``classes`` classes (labels
    ``0 .. classes - 1``), each of at most ``max_nodes`` nodes; ``step`` is :math:`\\eta`, ``dirichlet``
    :math:`\\alpha`."""

    def __init__(self, dim: int, classes: int, *, trees: int = 10, max_nodes: int = 255, step: float = 1.0,
                 dirichlet: float = 0.5, seed: int = 0) -> None:
        self.dim, self.classes, self.trees, self.max_nodes = dim, classes, trees, max_nodes
        self.step, self.dirichlet, self.seed = step, dirichlet, seed
        self.held = False  # no split while held (the owner's growth hold)
        self._rng = np.random.Generator(np.random.PCG64(seed))
        shape = (trees, max_nodes)
        self._feature = np.zeros(shape, dtype=np.int64)
        self._threshold = np.zeros(shape)
        self._children = np.full((*shape, 2), -1, dtype=np.int64)  # -1: a leaf
        self._time = np.full(shape, _NEVER)  # when the node split
        self._log_weight = np.zeros(shape)  # log w_v
        self._log_tree = np.zeros(shape)  # log w-bar_v
        self._lower = np.full((*shape, dim), _NONE_LOW)  # the box of the node's rows
        self._upper = np.full((*shape, dim), _NONE_HIGH)
        self._counts = np.zeros((*shape, classes))
        self._nodes = np.ones(trees, dtype=np.int64)  # node 0 is the root
        self._learnt = 0
        self._compact = True  # saved in the compact format (its inner nodes are what its leaves make them)
        # the last row routed (its bytes), its paths (as lists and flattened: _flat) and the play on it (None
        # until played), while nothing has been learnt since: a round's play and its learning, or a
        # prediction then the learning of the same row, route and play it once
        self._last: _Routed | None = None
        self._splits: tuple[array[int], array[float], array[int]] = (array("q"), array("d"), array("q"))
        self._listed()
        self._frequencies, self._share, self._log_left = self._plays_of_all()

    @property
    def rows_learnt(self) -> int:
        return self._learnt

    @property
    def nodes(self) -> np.ndarray:
        """Each tree's nodes."""
        return self._nodes.copy()

    def _route(self, x: np.ndarray) -> list[list[int]]:
        """Each tree's path (root to leaf) for ``x``, as indices of the node arrays' first two axes
        flattened (kept with the paths flattened, :meth:`_flat`, as the last row routed)."""
        key = x.tobytes()
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        paths = []
        values = x.tolist()
        feature, threshold, children = self._splits
        for root in range(0, self.trees * self.max_nodes, self.max_nodes):
            node, path = root, [root]
            while children[2 * node] >= 0:
                node = children[2 * node + (values[feature[node]] > threshold[node])]
                path.append(node)
            paths.append(path)
        flat = self._flat(paths)
        # a row is known by its bytes (a prediction and the learning round of one row are often two arrays):
        # the same values in other bytes (0 and -0, two NaNs) are routed again, to the same paths
        self._last = (key, paths, flat, None)
        return paths

    def _listed(self) -> None:
        """The splits as Python arrays, each node's two children one after the other, from the NumPy
        arrays: after a restore. :meth:`_route` walks them a node at a time, where a NumPy scalar costs more
        than the comparison; a Python array holds its numbers in one block, where lists of lists point to
        objects spread over the heap, which the rest of ``auto``'s round evicts from the cache. One array
        each for every tree, the nodes as indices of the node arrays' first two axes flattened (the
        children's too, -1 for none): the walk adds no tree's offset."""
        self._splits = (array("q", self._feature.tobytes()), array("d", self._threshold.tobytes()),
                        array("q", _flat_children(self._children).tobytes()))

    def _flat(self, paths: list[list[int]]) -> tuple[np.ndarray, list[int]]:
        """The paths' nodes one after another (one index array for every gather: cheaper than two), and the
        paths' lengths."""
        lengths = [len(path) for path in paths]
        return np.fromiter(chain.from_iterable(paths), np.int64, sum(lengths)), lengths

    def _smoothed(self, counts: np.ndarray) -> np.ndarray:
        """The nodes' smoothed class frequencies (rows of ``counts``)."""
        smoothed = counts + self.dirichlet
        result: np.ndarray = smoothed / smoothed.sum(axis=-1, keepdims=True)
        return result

    def _plays_of(self, counts: np.ndarray, log_weight: np.ndarray, log_tree: np.ndarray,
                  shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What the aggregation reads of the nodes whose ``counts`` and log-weights are given, as arrays of
        ``shape``: their smoothed class frequencies, their own shares ``w / (2 w-bar)`` (at most 1; a
        rounding above it would leave the nodes below a negative share) and the log of what each share
        leaves the nodes below (a share of 1 leaves 0, floored at the smallest double so that a log stays
        finite). The forest keeps them node by node, refreshed where it learns (:meth:`_refresh`): a
        prediction gathers them instead of computing them on every path again."""
        share = np.minimum(0.5 * np.exp(log_weight - log_tree), 1.0)
        return (self._smoothed(counts).reshape(*shape, self.classes), share.reshape(shape),
                np.log(np.maximum(1.0 - share, 1e-300)).reshape(shape))

    def _plays_of_all(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What the aggregation reads of every node (:meth:`_plays_of`)."""
        return self._plays_of(self._counts.reshape(-1, self.classes), self._log_weight.reshape(-1),
                              self._log_tree.reshape(-1), self._log_tree.shape)

    def _refresh(self, flat: np.ndarray) -> None:
        """Refresh what the aggregation reads of the nodes ``flat`` (:meth:`_plays_of`) from their counts and
        weights."""
        frequencies, share, log_left = self._plays_of(self._counts.reshape(-1, self.classes)[flat],
                                                      self._log_weight.reshape(-1)[flat],
                                                      self._log_tree.reshape(-1)[flat], flat.shape)
        self._frequencies.reshape(-1, self.classes)[flat] = frequencies
        self._share.reshape(-1)[flat] = share
        self._log_left.reshape(-1)[flat] = log_left

    def _aggregated(self, flat: np.ndarray, lengths: list[int]) -> np.ndarray:
        """The aggregated probabilities of paths given one after another (the nodes ``flat``, ``lengths``
        a path), one row a path: the recursion of the module's docstring unrolled (a node contributes its
        own prediction times its own share of what the nodes above it left)."""
        # (np.take: the gathers of fancy indexing, with less around them)
        own = np.take(self._share.reshape(-1), flat)
        ends = np.cumsum(lengths) - 1
        starts = ends - np.asarray(lengths) + 1
        # what the nodes above left each node, path by path: a sum of logs from the path's root
        logs = np.take(self._log_left.reshape(-1), flat)
        above = np.cumsum(logs) - logs
        left = np.exp(above - np.repeat(above[starts], lengths))
        own[ends] = 1.0  # a leaf's share: what the nodes above left
        weighted = (own * left)[:, None] * np.take(self._frequencies.reshape(-1, self.classes), flat, axis=0)
        result: np.ndarray = np.add.reduceat(weighted, starts, axis=0)
        return result

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """The classes' probabilities for the row ``x`` (``dim`` finite floats): the trees' mean."""
        if not self._learnt:
            return np.full(self.classes, 1.0 / self.classes)
        self._route(x)
        assert self._last is not None
        if self._last[3] is not None:
            return self._last[3].copy()
        # the mean as np.mean computes it (a sum over the first axis, then a division), without its checks
        result: np.ndarray = np.add.reduce(self._aggregated(*self._last[2]), axis=0) / self.trees
        self._last = (*self._last[:3], result.copy())
        return result

    def learn(self, x: np.ndarray, label: int) -> None:
        """Learn the row ``x`` of class ``label``: in each tree, a split on its path maybe, then the counts,
        boxes and weights of the path's nodes."""
        routed = self._route(x)
        assert self._last is not None
        flat = self._last[2]
        self._last = None  # the trees change now
        paths = routed
        if not self._learnt:
            self._lower[:, 0], self._upper[:, 0] = _box(x)
        elif not self.held and (self._nodes + 2 <= self.max_nodes).any():
            paths = self._extend(routed, flat, x, label)
        # a split on a path: the path gained a leaf
        if any(path is not before for path, before in zip(paths, routed, strict=True)):
            flat = self._flat(paths)
        self._count(paths, flat[0], x, label)
        self._learnt += 1

    def _extend(self, routed: list[list[int]], flat: tuple[np.ndarray, list[int]], x: np.ndarray,
                label: int) -> list[list[int]]:
        """The trees' paths for ``x`` (as :meth:`_route` gives them, ``flat`` flattened: :meth:`_flat`) after
        the Mondrian process's splits on them, if any come (a full tree's path stays). Each path's nodes are
        looked at for every tree at once: most rows of a grown tree extend no impure node's box, and a
        tree's draw is made only where one does."""
        nodes, lengths = flat
        lower, upper = self._lower.reshape(-1, self.dim)[nodes], self._upper.reshape(-1, self.dim)[nodes]
        # a missing value (NaN) extends nothing (fmax), nor does a feature no row of the node gave
        with np.errstate(over="ignore", invalid="ignore"):
            extension = np.where(lower <= upper, np.fmax(lower - x, 0.0) + np.fmax(x - upper, 0.0), 0.0)
        rates = extension.sum(axis=1)
        counts = self._counts.reshape(-1, self.classes)[nodes]
        pure = counts[:, label] == counts.sum(axis=1)  # every row of the node of the row's class
        candidates = (rates > 0.0) & ~pure
        times = self._time.reshape(-1)[nodes]
        ends = np.cumsum(lengths)
        begins = ends - np.asarray(lengths)
        born = np.concatenate([[0.0], times[:-1]])  # when each node's cell was made: its parent's split
        born[begins] = 0.0  # (a root's: the start)
        drawing = (np.logical_or.reduceat(candidates, begins) & (self._nodes + 2 <= self.max_nodes)).tolist()
        paths = list(routed)
        with np.errstate(divide="ignore", over="ignore"):
            for t, (begin, end) in enumerate(zip(begins.tolist(), ends.tolist(), strict=True)):
                if not drawing[t]:
                    continue
                waits = self._rng.standard_exponential(end - begin) / rates[begin:end]
                splits = candidates[begin:end] & (born[begin:end] + waits < times[begin:end])
                if splits.any():
                    k = int(np.argmax(splits))
                    i = begin + k
                    paths[t] = self._split(t, routed[t], k, x, extension[i], rates[i], lower[i], upper[i],
                                           born[i] + waits[k])
        return paths

    def _split(self, t: int, routed: list[int], k: int, x: np.ndarray, extension: np.ndarray, rate: float,
               lower: np.ndarray, upper: np.ndarray, time: float) -> list[int]:
        """Tree ``t``'s path ``routed`` after the Mondrian process's split above its ``k``-th node at
        ``time``, whose box (``lower``, ``upper``) the row ``x`` extends by ``extension`` (``rate`` in
        all)."""
        root = t * self.max_nodes
        feature = min(int(np.searchsorted(np.cumsum(extension), self._rng.random() * rate,
                                          side="right")), self.dim - 1)
        while extension[feature] <= 0.0:  # a rounding at the cumulative sum's end: the last extended
            feature -= 1
        node = routed[k] - root
        moved, leaf = int(self._nodes[t]), int(self._nodes[t]) + 1
        self._nodes[t] += 2
        for column in (self._feature, self._threshold, self._children, self._time, self._log_weight,
                      self._log_tree, self._lower, self._upper, self._counts, self._frequencies, self._share,
                      self._log_left):
            column[t, moved] = column[t, node]  # the node and its subtree, one level down
        above = x[feature] > upper[feature]
        low, high = (upper[feature], x[feature]) if above else (x[feature], lower[feature])
        # the new node keeps the old one's counts and weights: the same rows went through it
        self._feature[t, node] = feature
        self._threshold[t, node] = low + (high - low) * self._rng.random()
        self._children[t, node] = (moved, leaf) if above else (leaf, moved)
        self._time[t, node] = time
        self._children[t, leaf] = -1
        self._time[t, leaf] = _NEVER
        self._log_weight[t, leaf] = self._log_tree[t, leaf] = 0.0
        self._lower[t, leaf], self._upper[t, leaf] = _box(x)
        self._counts[t, leaf] = 0.0
        self._refresh(np.array([root + leaf]))
        features, thresholds, children = self._splits
        for changed in (node, moved, leaf):
            features[root + changed] = int(self._feature[t, changed])
            thresholds[root + changed] = float(self._threshold[t, changed])
            children[2 * (root + changed):2 * (root + changed) + 2] = array(
                "q", [child if child < 0 else root + child for child in self._children[t, changed].tolist()])
        return [*routed[:k + 1], root + leaf]

    def _count(self, paths: list[list[int]], flat: np.ndarray, x: np.ndarray, label: int) -> None:
        """The paths learn the row: each node's loss on it first (its prediction before the row), then its
        counts and box; the pruning weights from each leaf up (one pass over every path's nodes, in
        Python floats: each depends on the one below); ``flat``: the paths flattened (:meth:`_flat`)."""
        log_weight, log_tree = self._log_weight.reshape(-1), self._log_tree.reshape(-1)
        counts = self._counts.reshape(-1, self.classes)
        # a node's first row is the one that made it (a new leaf, the root): it pays no loss on it (its
        # uniform prediction of the row that drew it would only shrink every new leaf towards its parent)
        path_counts = counts[flat]
        logs = np.log(self._frequencies.reshape(-1, self.classes)[flat, label])
        log_weight[flat] += self.step * np.where(path_counts.sum(axis=1) > 0.0, logs, 0.0)
        counts[flat, label] += 1.0
        lower, upper = self._lower.reshape(-1, self.dim), self._upper.reshape(-1, self.dim)
        lower[flat] = np.fmin(lower[flat], x)  # (a missing value: none)
        upper[flat] = np.fmax(upper[flat], x)
        # each node's child off the path (a leaf's: itself, unused)
        children = self._children.reshape(-1, 2)[flat]
        tree_start = flat - flat % self.max_nodes
        siblings = np.where(children[:, 0] >= 0, tree_start + children.sum(axis=1) - np.append(flat[1:], 0)
                            + tree_start, flat)
        own = log_weight[flat].tolist()
        beside = log_tree[siblings].tolist()
        tree = own.copy()  # a leaf's weight is its own
        log1p, exp, end = math.log1p, math.exp, 0
        for path in paths:
            end += len(path)
            below = own[end - 1]
            for i in range(end - 2, end - len(path) - 1, -1):
                split, mine = beside[i] + below, own[i]
                below = tree[i] = (mine + log1p(exp(split - mine)) if mine > split
                                   else split + log1p(exp(mine - split))) + _LOG_HALF
        log_tree[flat] = tree
        self._refresh(flat)

    def growth_nbytes(self, rounds: int, counted: int | None = None) -> int:
        """The most its state can grow in ``rounds`` rounds of which it learns ``counted`` rows (all unless
        told): two nodes a tree a round, up to ``max_nodes`` (none while held), and in the compact format
        the leaves' counts, whose integers widen when a class's rows pass what they hold (held or not:
        the rows are counted either way)."""
        pairs = 0 if self.held else int(np.minimum(rounds, (self.max_nodes - self._nodes) // 2).sum())
        if not self._compact:
            return 2 * pairs * _node_nbytes(self.dim, self.classes)
        width = self._count_dtype().itemsize
        wider = integer_dtype(0, self._most_counted() + (rounds if counted is None else counted)).itemsize
        leaves = (int(self._nodes.sum()) + self.trees) // 2 + pairs
        return (pairs * (self._inner_nbytes() + self._leaf_nbytes(wider))
                + (wider - width) * leaves * self.classes)

    def widen(self, classes: int) -> None:
        """Make room for ``classes`` classes (more than now): the new ones counted nowhere yet."""
        extra = classes - self.classes
        if extra > 0:
            self._counts = np.pad(self._counts, [(0, 0), (0, 0), (0, extra)])
            self.classes = classes
            self._frequencies = self._plays_of_all()[0]
            self._last = None  # its play has fewer classes

    _NODE_FLOATS = ("_threshold", "_time", "_log_weight", "_log_tree", "_lower", "_upper", "_counts")
    #: An inner node's saved floats in the compact format (the others are its children's).
    _INNER_FLOATS = ("_threshold", "_time", "_log_weight")

    def _most_counted(self) -> int:
        """The largest count of a class in a node: a root's, which counts every row of its tree (cheaper
        to find than the leaves' largest, for every size asked)."""
        return int(self._counts[:, 0].max(initial=0.0))

    def _count_dtype(self) -> np.dtype:
        """The integers of the saved counts (compact format): the narrowest that hold a root's."""
        return integer_dtype(0, self._most_counted())

    def _link_dtype(self) -> np.dtype:
        """The integers of the saved first children (compact format)."""
        return integer_dtype(-1, self.max_nodes - 1)

    def _feature_dtype(self) -> np.dtype:
        """The integers of the saved features (compact format)."""
        return integer_dtype(0, self.dim - 1)

    def _inner_nbytes(self) -> int:
        """An inner node's bytes in the compact format: its first child, feature, and floats."""
        return self._link_dtype().itemsize + self._feature_dtype().itemsize + 8 * len(self._INNER_FLOATS)

    def _leaf_nbytes(self, count_width: int) -> int:
        """A leaf's bytes in the compact format, its counts ``count_width`` bytes each: its (no) first
        child, its weight, box and counts."""
        return self._link_dtype().itemsize + 8 * (1 + 2 * self.dim) + count_width * self.classes

    def nbytes(self) -> int:
        """The bytes of :meth:`state`'s arrays, from the nodes in use (without building them)."""
        nodes = int(self._nodes.sum())
        if not self._compact:
            return 8 * _head(self.trees) + nodes * _node_nbytes(self.dim, self.classes)
        inner = (nodes - self.trees) // 2  # each tree: a root, then pairs of children
        return (8 * _head(self.trees) + inner * self._inner_nbytes()
                + (nodes - inner) * self._leaf_nbytes(self._count_dtype().itemsize))

    def state(self, prefix: str = "forest") -> dict[str, np.ndarray]:
        """The forest as few arrays (each array costs a saved state a header). ``<prefix>_ints``: the
        format, the classes, the rows learnt, the generator's state (six words) and each tree's nodes. In the
        compact format, then, each tree's used nodes one after another: ``<prefix>_links``, each node's
        first child (-1: a leaf), ``<prefix>_features``, the inner nodes' features, ``<prefix>_floats``, the
        inner nodes' thresholds, split times and weights, then the leaves' weights and boxes, and
        ``<prefix>_counts``, the leaves' counts, each array in the narrowest integers that hold it: the
        rest is what the leaves make it (:func:`_derive`: an inner node's box and counts are its
        children's together, a leaf's tree weight its own). In the full format (of a forest whose inner
        nodes are not what their leaves make them: restored so), each tree's used nodes' features and
        children follow in ``<prefix>_ints``, and ``<prefix>_floats`` holds their every float."""
        rng = self._rng.bit_generator.state
        words = [rng["state"]["state"] >> 64, rng["state"]["state"] & (2**64 - 1), rng["state"]["inc"] >> 64,
                 rng["state"]["inc"] & (2**64 - 1), rng["has_uint32"], rng["uinteger"]]
        head = np.array([_COMPACT if self._compact else _FULL, self.classes, self._learnt], dtype=np.int64)
        ints = [head, np.array(words, dtype=np.uint64).view(np.int64), self._nodes]
        if not self._compact:
            floats = []
            for t, size in enumerate(self._nodes.tolist()):
                ints += [self._feature[t, :size], self._children[t, :size].ravel()]
                floats += [getattr(self, name)[t, :size].ravel() for name in self._NODE_FLOATS]
            return {f"{prefix}_ints": np.concatenate(ints).astype(np.int64),
                    f"{prefix}_floats": np.concatenate(floats)}
        used = np.arange(self.max_nodes) < self._nodes[:, None]
        first = self._children[..., 0]
        inner, leaf = used & (first >= 0), used & (first < 0)
        floats = [getattr(self, name)[inner] for name in self._INNER_FLOATS]
        floats += [self._log_weight[leaf], self._lower[leaf].ravel(), self._upper[leaf].ravel()]
        return {f"{prefix}_ints": np.concatenate(ints).astype(np.int64),
                f"{prefix}_links": first[used].astype(self._link_dtype()),
                f"{prefix}_features": self._feature[inner].astype(self._feature_dtype()),
                f"{prefix}_floats": np.concatenate(floats),
                f"{prefix}_counts": self._counts[leaf].astype(self._count_dtype())}

    def restore(self, arrays: dict[str, np.ndarray], prefix: str = "forest") -> None:
        """Load :meth:`state` (of a forest of as many classes or more: it was widened); a state of another
        shape, or one that is not a forest, is refused with :class:`~kons.errors.StateFormatError` and
        leaves the forest as it was."""
        ints, floats = ints_and_floats(arrays, prefix, "a forest state")
        head = _head(self.trees)
        if ints.ndim != 1 or floats.ndim != 1 or ints.dtype != np.int64 or len(ints) < head \
                or ints[0] not in (_FULL, _COMPACT):
            raise StateFormatError("a forest state has the wrong format.")
        classes, learnt = int(ints[1]), int(ints[2])
        nodes = ints[9:head]
        if classes < self.classes or learnt < 0 or (nodes < 1).any() or (nodes > self.max_nodes).any() \
                or (nodes % 2 != 1).any():
            raise StateFormatError("a forest state's sizes do not make a forest.")
        shape = (self.trees, self.max_nodes)
        feature = np.zeros(shape, dtype=np.int64)
        children = np.full((*shape, 2), -1, dtype=np.int64)
        fresh = {"_threshold": np.zeros(shape), "_time": np.full(shape, _NEVER),
                 "_log_weight": np.zeros(shape), "_log_tree": np.zeros(shape),
                 "_lower": np.full((*shape, self.dim), _NONE_LOW),
                 "_upper": np.full((*shape, self.dim), _NONE_HIGH), "_counts": np.zeros((*shape, classes))}
        if ints[0] == _FULL:
            self._read_full(ints[head:], floats, nodes, feature, children, fresh)
        else:
            self._read_compact(arrays, prefix, floats, nodes, feature, children, fresh)
        for t, used in enumerate(nodes.tolist()):
            inner = children[t, :used, 0] >= 0
            links = children[t, :used][inner]
            if (links < 1).any() or (links >= used).any() or (feature[t, :used][inner] < 0).any() \
                    or (feature[t, :used][inner] >= self.dim).any() \
                    or sorted(links.ravel().tolist()) != list(range(1, used)):
                raise StateFormatError("a forest state's splits do not make trees.")
        levels = _inner_levels(children)  # (each node one parent: the walk ends)
        if 2 * sum(len(level) for level in levels) + self.trees != int(nodes.sum()):
            raise StateFormatError("a forest state's splits do not make trees.")  # nodes not reached
        compact = ints[0] == _COMPACT
        if compact:
            _derive(children, fresh, levels)
        if not all(np.isfinite(column).all() for column in fresh.values()):
            raise StateFormatError("a forest state holds numbers that are not finite.")
        words = [int(w) for w in ints[3:9].view(np.uint64)]
        rng = np.random.Generator(np.random.PCG64())
        try:
            rng.bit_generator.state = {"bit_generator": "PCG64",
                                       "state": {"state": (words[0] << 64) | words[1],
                                                 "inc": (words[2] << 64) | words[3]},
                                       "has_uint32": words[4], "uinteger": words[5]}
        except (TypeError, ValueError) as exc:
            raise StateFormatError("a forest state's generator is not one.") from exc
        self._feature, self._children, self._nodes = feature, children, nodes.astype(np.int64)
        for name, column in fresh.items():
            setattr(self, name, column)
        self._rng, self._learnt, self.classes, self._last = rng, learnt, classes, None
        # a forest saved in the full format is saved compact from now on if its leaves make it
        self._compact = compact or self._derivable()
        self._listed()
        self._frequencies, self._share, self._log_left = self._plays_of_all()

    def _read_full(self, ints: np.ndarray, floats: np.ndarray, nodes: np.ndarray, feature: np.ndarray,
                   children: np.ndarray, fresh: dict[str, np.ndarray]) -> None:
        """Read the nodes of a state in the full format into the fresh arrays (``ints``: after the head)."""
        if len(ints) != 3 * int(nodes.sum()) or \
                len(floats) != int(nodes.sum()) * (4 + 2 * self.dim + fresh["_counts"].shape[-1]):
            raise StateFormatError("a forest state has the wrong size.")
        at, start = 0, 0
        for t, used in enumerate(nodes.tolist()):
            feature[t, :used] = ints[at:at + used]
            children[t, :used] = ints[at + used:at + 3 * used].reshape(used, 2)
            at += 3 * used
            for name in self._NODE_FLOATS:
                target = fresh[name][t, :used]
                target[...] = floats[start:start + target.size].reshape(target.shape)
                start += target.size

    def _read_compact(self, arrays: dict[str, np.ndarray], prefix: str, floats: np.ndarray,
                      nodes: np.ndarray, feature: np.ndarray, children: np.ndarray,
                      fresh: dict[str, np.ndarray]) -> None:
        """Read the leaves' fields and the splits of a state in the compact format into the fresh arrays
        (the inner nodes' boxes, counts and tree weights: :func:`_derive`, once the trees are checked)."""
        try:
            links, features, counts = (np.asarray(arrays[f"{prefix}_{name}"])
                                       for name in ("links", "features", "counts"))
        except KeyError as exc:
            raise StateFormatError(f"a forest state is incomplete: {exc}") from None
        total = int(nodes.sum())
        inner_nodes = (total - self.trees) // 2
        leaves, classes = total - inner_nodes, fresh["_counts"].shape[-1]
        if any(array.dtype.kind not in "iu" for array in (links, features, counts)) \
                or links.shape != (total,) or features.shape != (inner_nodes,) \
                or counts.shape != (leaves, classes) or (counts < 0).any() \
                or len(floats) != len(self._INNER_FLOATS) * inner_nodes + leaves * (1 + 2 * self.dim):
            raise StateFormatError("a forest state has the wrong size.")
        used = np.arange(self.max_nodes) < nodes[:, None]
        children[used, 0] = links
        first = children[..., 0]
        inner, leaf = used & (first >= 0), used & (first < 0)
        if int(inner.sum()) != inner_nodes:
            raise StateFormatError("a forest state's splits do not make trees.")
        children[inner, 1] = _second(first[inner])
        feature[inner] = features
        sizes = [inner_nodes] * len(self._INNER_FLOATS) + [leaves, leaves * self.dim]
        parts = np.split(floats, np.cumsum(sizes))
        for name, part in zip(self._INNER_FLOATS, parts, strict=False):
            fresh[name][inner] = part
        fresh["_log_weight"][leaf] = parts[-3]
        fresh["_lower"][leaf] = parts[-2].reshape(leaves, self.dim)
        fresh["_upper"][leaf] = parts[-1].reshape(leaves, self.dim)
        fresh["_counts"][leaf] = counts

    def _derivable(self) -> bool:
        """Whether the forest's inner nodes are what its leaves make them (:func:`_derive`), and its leaves
        hold what a leaf holds (no split, whole counts): always, for a forest that learnt them."""
        used = np.arange(self.max_nodes) < self._nodes[:, None]
        first = self._children[..., 0]
        inner, leaf = used & (first >= 0), used & (first < 0)
        if (self._children[inner, 1] != _second(first[inner])).any() \
                or (self._feature[leaf] != 0).any() or (self._threshold[leaf] != 0.0).any() \
                or (self._time[leaf] != _NEVER).any() or (self._counts != np.floor(self._counts)).any() \
                or (self._counts < 0.0).any() or self._counts.max(initial=0.0) >= 2.0**53:
            return False
        derived = {name: getattr(self, name).copy() for name in ("_log_weight", "_log_tree", "_lower",
                                                                 "_upper", "_counts")}
        _derive(self._children, derived, _inner_levels(self._children))
        return all(np.array_equal(column, getattr(self, name)) for name, column in derived.items())


def _derive(children: np.ndarray, columns: dict[str, np.ndarray], levels: list[np.ndarray]) -> None:
    """Set the inner nodes' ``_counts``, ``_lower``, ``_upper`` and ``_log_tree`` in ``columns`` from their
    leaves' (and ``_log_weight``), as learning makes them: a node's box and counts are its children's
    together, a leaf's tree weight is its own and an inner node's is :func:`_tree_log_weight` of its
    children's (``levels``: the inner nodes by depth, :func:`_inner_levels`)."""
    trees, most = children.shape[:2]
    flat = _flat_children(children)
    log_weight, log_tree = columns["_log_weight"].reshape(-1), columns["_log_tree"].reshape(-1)
    leaf = flat[:, 0] < 0
    log_tree[leaf] = log_weight[leaf]
    counts = columns["_counts"].reshape(trees * most, -1)
    lower, upper = (columns[name].reshape(trees * most, -1) for name in ("_lower", "_upper"))
    for level in reversed(levels):  # the deepest first: each node after its children
        left, right = flat[level, 0], flat[level, 1]
        counts[level] = counts[left] + counts[right]
        lower[level] = np.fmin(lower[left], lower[right])
        upper[level] = np.fmax(upper[left], upper[right])
        log_tree[level] = _tree_log_weights(log_weight[level], log_tree[left] + log_tree[right])


def _tree_log_weights(own: np.ndarray, split: np.ndarray) -> np.ndarray:
    """:func:`_tree_log_weight` of each node of a level, bit for bit: its sums and differences are IEEE
    operations, the same in numpy; its ``exp`` and ``log1p`` are ``math``'s, one node at a time (numpy's
    own may differ in the last bit)."""
    above = own > split
    top = np.where(above, own, split)
    gap = np.where(above, split - own, own - split)
    exp, log1p = math.exp, math.log1p
    tails = np.array([log1p(exp(g)) for g in gap.tolist()])
    weights: np.ndarray = top + tails + _LOG_HALF
    return weights


def _box(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The box of the one row ``x``: empty along its missing values."""
    return np.fmin(x, _NONE_LOW), np.fmax(x, _NONE_HIGH)


def _flat_children(children: np.ndarray) -> np.ndarray:
    """The children of every node of the trees ``children`` as indices of the node arrays' first two axes
    flattened (-1: none)."""
    trees, most = children.shape[:2]
    offsets = np.repeat(np.arange(trees) * most, most)[:, None]
    result: np.ndarray = np.where(children.reshape(-1, 2) >= 0, children.reshape(-1, 2) + offsets, -1)
    return result


def _inner_levels(children: np.ndarray) -> list[np.ndarray]:
    """The trees' inner nodes reached from their roots, by depth (indices as :func:`_flat_children`'s;
    ``children``: each node one parent, or the walk may not end)."""
    flat = _flat_children(children)
    levels: list[np.ndarray] = []
    reached = np.arange(children.shape[0]) * children.shape[1]  # the roots
    while True:
        inner = reached[flat[reached, 0] >= 0]
        if not len(inner):
            return levels
        levels.append(inner)
        reached = flat[inner].ravel()


class ForestExpert(ModelExpert[MondrianForest]):
    """A :class:`MondrianForest` as an expert for three classes or more, on the raw row (as AMF is used: on
    the tuning streams the raw row beat the standardised and the signed-log ones, whose running statistics
    move the boxes learnt early). Like the trees (:class:`~kons.auto.experts.tree.TreeExpert`) it learns
    every row after the mixture's update (:meth:`observe`), from the first round with three classes (a
    binary stream gains nothing from it that the trees do not give: it neither learns nor plays there),
    and is ready to enter once it has learnt ``wake_rows`` rows."""

    def predict(self, row: Row) -> float:
        """No binary score: it never plays on two classes (0, the mean, were it asked)."""
        return 0.0

    def learn(self, row: Row, target: float) -> float:
        return 0.0

    def observe(self, row: Row, target: float, classes: int, playing: bool) -> None:
        """Learn the row of class index ``target`` (with three classes or more)."""
        if classes > 2:
            super().observe(row, target, classes, playing)

    def growth_nbytes(self, rounds: int) -> int:
        """The forest's, which counts no row on two classes (it has counted none when a third comes)."""
        return self.model.growth_nbytes(rounds, rounds if self.model.classes > 2 else 0)


def build_forest(grid: GridContext) -> list[Expert] | None:
    """The forest, within :data:`~kons.auto.config.FOREST_MAX_BYTES` on two classes (classes, on rows of at
    most :data:`~kons.auto.config.FOREST_MAX_DIM` features)."""
    if not grid.mixture.binary or grid.dim > FOREST_MAX_DIM:
        return None
    nodes = nodes_within(FOREST_MAX_BYTES, grid.dim, FOREST_TREES, FOREST_MAX_NODES)
    forest = MondrianForest(grid.dim, 2, trees=FOREST_TREES, max_nodes=nodes, dirichlet=FOREST_DIRICHLET,
                            seed=grid.seed)
    return [ForestExpert(forest, wake_rows=FOREST_WAKE_ROWS)]


def restore_forest(grid: GridContext, built: list[Expert] | None, arrays: dict[str, np.ndarray],
                   scalars: dict[str, Any]) -> list[Expert] | None:
    """The forest."""
    return restore_saved(grid, built, arrays, "forest", "the forest's experts", lambda experts: cast(
        ForestExpert, experts[0]).model.restore(arrays, "forest"))


def forest_class_column_nbytes(dim: int) -> int:
    """The most bytes one more class adds to the forest on rows of ``dim`` features: a count in every node
    it may hold."""
    if dim > FOREST_MAX_DIM:
        return 0
    return 8 * FOREST_TREES * nodes_within(FOREST_MAX_BYTES, dim, FOREST_TREES, FOREST_MAX_NODES)
