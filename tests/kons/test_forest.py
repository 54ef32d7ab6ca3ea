"""The aggregated Mondrian forest (kons.auto.experts.forest): its weights and plays against slow references
(the Dirichlet marginal likelihood of a node's counts, the explicit sum over every pruning of a tiny tree),
the Mondrian invariants of its splits, its bound, its state; and the forest inside kons.Auto."""

from __future__ import annotations

import math
from itertools import product
from typing import cast

import numpy as np
import pytest
from scipy.special import gammaln

import kons
import kons.auto.experts.forest
from kons.auto.config import FOREST_PRIOR, FOREST_TREES, FOREST_WAKE_ROWS
from kons.auto.experts.forest import ForestExpert, MondrianForest, nodes_within
from kons.auto.experts.protocol import Row
from kons.auto.grid import EXPERTS, layout
from kons.errors import StateFormatError

FOREST_SLOT = layout(EXPERTS).index("forest")
FOREST_NAME = f"aggregated_mondrian_forest(raw, {FOREST_TREES} trees)"


def _steps(rows: int, classes: int, dim: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows whose class steps along two features (thresholds), 5% label noise."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, dim))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5).astype(int) * (classes - 2)
    y = np.where(rng.random(rows) < 0.05, rng.integers(0, classes, rows), y)
    return X, y


def _learnt(rows: int, classes: int, **params: float) -> MondrianForest:
    X, y = _steps(rows, classes)
    forest = MondrianForest(3, classes, **params)  # type: ignore[arg-type]
    for x, label in zip(X, y, strict=True):
        forest.learn(x, int(label))
    return forest


def _node(forest: MondrianForest, t: int, v: int) -> dict[str, np.ndarray]:
    return {name: getattr(forest, f"_{name}")[t, v]
            for name in ("children", "counts", "log_weight", "log_tree", "lower", "upper", "feature",
                         "threshold", "time")}


def _prunings(forest: MondrianForest, t: int, v: int) -> list[tuple[float, list[int]]]:
    """Every pruning of tree ``t``'s subtree at ``v``: (its prior's log, its leaves), by enumeration."""
    left, right = (int(c) for c in forest._children[t, v])
    if left < 0:
        return [(0.0, [v])]
    cut = (math.log(0.5), [v])
    return [cut, *((math.log(0.5) + a + b, la + lb) for (a, la), (b, lb)
                   in product(_prunings(forest, t, left), _prunings(forest, t, right)))]


def _dirichlet_marginal(counts: np.ndarray, alpha: float) -> float:
    """The log probability of a sequence of labels with these counts under the Krichevsky-Trofimov rule
    (the same in any order)."""
    n, k = counts.sum(), len(counts)
    return float(gammaln(k * alpha) - gammaln(n + k * alpha)
                 + (gammaln(counts + alpha) - gammaln(alpha)).sum())


@pytest.mark.parametrize("classes", [2, 4])
def test_the_weights_are_each_nodes_marginal_likelihood_and_the_tree_weight_the_sum_over_prunings(
        classes: int) -> None:
    forest = _learnt(60, classes, trees=2, max_nodes=15, step=1.0, dirichlet=0.5, seed=3)
    for t in range(forest.trees):
        used = int(forest.nodes[t])
        assert used > 3  # the tiny trees split
        for v in range(used):
            node = _node(forest, t, v)
            # with step 1, a node's weight is the probability its sequential predictions gave its labels
            # after its first (whose prediction, before any count, was 1 / classes)
            first = math.log(classes) if node["counts"].sum() > 0 else 0.0
            assert node["log_weight"] == pytest.approx(_dirichlet_marginal(node["counts"], 0.5) + first,
                                                       abs=1e-9)
            prunings = _prunings(forest, t, v)
            total = np.logaddexp.reduce([prior + sum(forest._log_weight[t, leaf] for leaf in leaves)
                                         for prior, leaves in prunings])
            assert node["log_tree"] == pytest.approx(total, abs=1e-9)


@pytest.mark.parametrize("classes", [2, 5])
def test_a_trees_play_is_the_average_over_its_prunings_weighted_by_their_losses(classes: int) -> None:
    forest = _learnt(80, classes, trees=1, max_nodes=15, step=0.7, dirichlet=0.5, seed=4)
    X, _ = _steps(20, classes, seed=9)
    for x in X:
        path = forest._route(x)[0]
        numerator, denominator = np.zeros(classes), 0.0
        for prior, leaves in _prunings(forest, 0, 0):
            weight = math.exp(prior + sum(forest._log_weight[0, leaf] for leaf in leaves))
            (leaf,) = set(leaves) & set(path)  # the pruning's leaf x falls in
            counts = forest._counts[0, leaf]
            numerator += weight * (counts + 0.5) / (counts.sum() + 0.5 * classes)
            denominator += weight
        np.testing.assert_allclose(forest.predict_proba(x), numerator / denominator, rtol=1e-10)


def test_a_node_far_ahead_of_its_subtree_leaves_the_play_a_distribution() -> None:
    # noise labels of 15 classes and a small prior: a node's weight ahead of its subtree's by more than
    # the doubles' precision, so that its own share rounds to 1 (once a NaN for every later path)
    rng = np.random.default_rng(14)
    X, y = rng.normal(size=(1500, 20)), rng.integers(0, 15, 1500)
    forest = MondrianForest(20, 15, trees=3, max_nodes=255, dirichlet=0.01, seed=14)
    for x, label in zip(X, y, strict=True):
        p = forest.predict_proba(x)
        assert np.isfinite(p).all() and p.min() >= 0.0 and p.sum() == pytest.approx(1.0)
        forest.learn(x, int(label))


def test_a_prediction_before_the_learning_of_the_same_row_changes_nothing() -> None:
    X, y = _steps(400, 3, seed=16)
    X[::5, 2] = np.nan
    asked, quiet = (MondrianForest(3, 3, trees=3, max_nodes=63, seed=16) for _ in range(2))
    for x, label in zip(X, y, strict=True):
        first = asked.predict_proba(x.copy())
        again = asked.predict_proba(x.copy())  # the play kept for the same values
        np.testing.assert_array_equal(first, again)
        first[:] = 0.0  # a caller's copy
        np.testing.assert_array_equal(asked.predict_proba(x), quiet.predict_proba(x.copy()))
        asked.learn(x.copy(), int(label))
        quiet.learn(x, int(label))
    for name, array in asked.state().items():
        np.testing.assert_array_equal(quiet.state()[name], array)


def test_the_splits_keep_the_mondrian_invariants() -> None:
    forest = _learnt(1500, 3, trees=4, max_nodes=101, seed=5)
    for t in range(forest.trees):
        for v in range(int(forest.nodes[t])):
            node = _node(forest, t, v)
            assert (node["lower"] <= node["upper"]).all()
            left, right = (int(c) for c in node["children"])
            if left < 0:
                continue
            lower, upper = _node(forest, t, left), _node(forest, t, right)
            j, threshold = int(node["feature"]), node["threshold"]
            assert lower["upper"][j] <= threshold < upper["lower"][j]  # the split separates the children
            for child in (lower, upper):  # a child's box and counts are within its parent's, split later
                assert (child["lower"] >= node["lower"]).all() and (child["upper"] <= node["upper"]).all()
                assert (child["counts"] <= node["counts"]).all()
                assert child["time"] > node["time"]
            np.testing.assert_array_equal(lower["counts"] + upper["counts"], node["counts"])


def test_the_nodes_stop_at_their_bound_and_a_held_forest_does_not_split() -> None:
    X, y = _steps(4000, 3, seed=6)
    forest = MondrianForest(3, 3, trees=3, max_nodes=31, seed=6)
    sizes = []
    for r, (x, label) in enumerate(zip(X, y, strict=True)):
        before = (forest.nodes, sum(a.nbytes for a in forest.state().values()), forest.growth_nbytes(1))
        forest.learn(x, int(label))
        grown = sum(a.nbytes for a in forest.state().values()) - before[1]
        assert grown <= before[2]
        assert (forest.nodes <= 31).all()
        if r % 500 == 499:
            sizes.append(before[1])
    assert (forest.nodes == 31).all()
    # full, only its counts grow: into wider integers (two more bytes each of its 3 x 16 leaves' 3 counts)
    # once a class's rows pass 65,535
    assert forest.growth_nbytes(10) == 0 < forest.growth_nbytes(10**6) == 2 * 3 * 16 * 3
    assert sizes[-1] == sizes[1]  # the state stopped growing
    assert forest.predict_proba(X[0]).sum() == pytest.approx(1.0)
    held = MondrianForest(3, 3, trees=2, max_nodes=31, seed=7)
    for x, label in zip(X[:50], y[:50], strict=True):
        held.learn(x, int(label))
    held.held = True
    nodes = held.nodes
    assert held.growth_nbytes(100) == 0
    for x, label in zip(X[50:500], y[50:500], strict=True):
        held.learn(x, int(label))
    np.testing.assert_array_equal(held.nodes, nodes)


def test_a_full_forest_within_its_byte_bound_saves_at_most_those_bytes() -> None:
    nodes = nodes_within(40_000, 3, 3, 511)
    assert nodes % 2 == 1 and nodes_within(40_000, 3, 3, 31) == 31
    X, y = _steps(3000, 2, seed=15)
    forest = MondrianForest(3, 2, trees=3, max_nodes=nodes, seed=15)
    for x, label in zip(X, y, strict=True):
        forest.learn(x, int(label))
    assert (forest.nodes == nodes).all()
    saved = sum(array.nbytes for array in forest.state().values())
    forest._compact = False  # the bound is the full format's (a forest restored from one that is not compact)
    full = sum(array.nbytes for array in forest.state().values())
    assert saved < 40_000 - 3 * 2 * 8 * (7 + 2 * 3 + 2) < full <= 40_000


def test_the_experts_bytes_are_its_saved_arrays_as_the_forest_grows_widens_and_is_restored() -> None:
    nodes = nodes_within(40_000, 3, 3, 511)
    X, y = _steps(3000, 4, seed=16)
    expert = ForestExpert(MondrianForest(3, 2, trees=3, max_nodes=nodes, seed=16), wake_rows=0)

    def saved(expert: ForestExpert) -> int:
        return sum(array.nbytes for array in expert.arrays("forest").values())

    assert expert.nbytes() == saved(expert)
    for r, (x, label) in enumerate(zip(X, y, strict=True)):
        expert.observe(Row({}, x), float(label), 4, playing=False)
        if r % 97 == 0:
            assert expert.nbytes() == saved(expert)
    assert (expert.model.nodes == nodes).all() and expert.nbytes() == saved(expert)
    expert.widen(7)
    assert expert.nbytes() == saved(expert)
    expert.model._compact = False  # (as a forest restored from a full state its leaves do not make)
    assert expert.nbytes() == saved(expert) > 40_000  # the full format's, of 7 classes
    expert.model._compact = True
    restored = ForestExpert(MondrianForest(3, 2, trees=3, max_nodes=nodes), wake_rows=0)
    restored.model.restore(expert.arrays("forest"), "forest")
    assert restored.nbytes() == saved(restored) == saved(expert)


def test_a_state_round_trip_plays_on_identically_and_a_broken_one_is_refused() -> None:
    X, y = _steps(900, 3, seed=8)
    forest = MondrianForest(3, 2, trees=3, max_nodes=63, seed=8)
    for x, label in zip(X[:400], y[:400], strict=True):
        forest.widen(int(label) + 1)
        forest.learn(x, int(label))
    state = forest.state()
    restored = MondrianForest(3, 2, trees=3, max_nodes=63, seed=0)  # the generator comes with the state
    restored.restore(state)
    _assert_plays_on_alike(forest, restored, X[400:], y[400:])
    broken = {**state, "forest_ints": state["forest_ints"][:-1]}
    cycle = {name: array.copy() for name, array in state.items()}
    cycle["forest_links"][2] = 1  # the first tree's node 1 or 2 (an inner node: it grew) under itself
    full = _full_state(forest)
    full_cycle = {name: array.copy() for name, array in full.items()}
    children = 9 + 3 + int(full["forest_ints"][9]) + 1  # the first tree's root's children
    full_cycle["forest_ints"][children:children + 2] = 0  # its root its own child
    wider = MondrianForest(3, 4, trees=3, max_nodes=63)
    for bad, target in ((broken, restored), ({"forest_ints": state["forest_ints"]}, restored),
                        ({**state, "forest_counts": state["forest_counts"][1:]}, restored),
                        ({**state, "forest_counts": state["forest_counts"].astype(float)}, restored),
                        (cycle, restored), (full_cycle, restored), (state, wider)):
        before = restored.state()
        with pytest.raises(StateFormatError):
            target.restore(bad)
        for name, array in restored.state().items():
            np.testing.assert_array_equal(before[name], array)


def _assert_plays_on_alike(forest: MondrianForest, restored: MondrianForest, X: np.ndarray,
                           y: np.ndarray) -> None:
    """``restored`` predicts and learns the rows as ``forest`` does, and ends in the same state."""
    for x, label in zip(X, y, strict=True):
        np.testing.assert_array_equal(restored.predict_proba(x), forest.predict_proba(x))
        forest.learn(x, int(label))
        restored.learn(x, int(label))
    for name, array in forest.state().items():
        np.testing.assert_array_equal(restored.state()[name], array)


def _full_state(forest: MondrianForest) -> dict[str, np.ndarray]:
    """The forest's state in the full format (every field of every node, as releases before saved it)."""
    compact, forest._compact = forest._compact, False
    try:
        return forest.state()
    finally:
        forest._compact = compact


def test_a_full_state_plays_on_identically_and_is_saved_compact_when_its_leaves_make_it() -> None:
    X, y = _steps(1200, 4, seed=17)
    X[::9, 0] = np.nan
    forest = MondrianForest(3, 2, trees=3, max_nodes=63, seed=17)
    for x, label in zip(X[:600], y[:600], strict=True):
        forest.widen(int(label) + 1)
        forest.learn(x, int(label))
    compact, full = forest.state(), _full_state(forest)
    assert sum(a.nbytes for a in compact.values()) < sum(a.nbytes for a in full.values()) / 2
    restored = MondrianForest(3, 4, trees=3, max_nodes=63)
    restored.restore(full)
    for name in MondrianForest._NODE_FLOATS:  # the inner nodes made again from the leaves: bit for bit
        np.testing.assert_array_equal(getattr(restored, name), getattr(forest, name))
    for name, array in compact.items():
        np.testing.assert_array_equal(restored.state()[name], array)
    assert restored.nbytes() == sum(a.nbytes for a in compact.values())
    _assert_plays_on_alike(forest, restored, X[600:], y[600:])


def test_a_full_state_its_leaves_do_not_make_is_saved_as_it_came() -> None:
    forest = _learnt(300, 3, trees=2, max_nodes=31, seed=18)
    full = _full_state(forest)
    used = int(forest.nodes[0])
    assert used > 1
    full["forest_floats"][3 * used] += 1.0  # the first tree's root's tree weight (after 3 fields a node)
    restored = MondrianForest(3, 3, trees=2, max_nodes=31)
    restored.restore(full)
    assert set(restored.state()) == {"forest_ints", "forest_floats"}
    for name, array in full.items():
        np.testing.assert_array_equal(restored.state()[name], array)
    assert restored.nbytes() == sum(a.nbytes for a in full.values())
    assert restored.growth_nbytes(1) == 0  # full: no node to grow, and whole floats hold every count


def test_the_expert_answers_the_protocol_on_three_classes_or_more_only() -> None:
    X, y = _steps(160, 3, seed=10)
    expert = ForestExpert(MondrianForest(3, 2, trees=2, seed=1), wake_rows=100)
    for r, (x, label) in enumerate(zip(X, y, strict=True)):
        row = Row({(False, False): x / 100.0}, x)  # it takes the raw row, not the standardised form
        if r < 40:  # two classes: it neither learns nor plays a score
            assert expert.learn(row, 1.0 if label else -1.0) == expert.predict(row) == 0.0
            expert.observe(row, float(label > 0), 2, playing=False)
            assert expert.model.rows_learnt == 0 and not expert.ready()
            continue
        assert expert.ready() == (r >= 140)
        played = expert.learn_class(row, int(label), 3)
        np.testing.assert_array_equal(played, expert.probabilities(row, 3))
        np.testing.assert_array_equal(played, expert.model.predict_proba(x))
        assert played.shape == (3,) and played.sum() == pytest.approx(1.0)
        expert.observe(row, float(label), 3, playing=True)
    assert expert.nbytes() == sum(a.nbytes for a in expert.arrays("forest").values())
    assert set(expert.arrays("forest")) == {"forest_ints", "forest_links", "forest_features", "forest_floats",
                                            "forest_counts"} and expert.scalars() is None
    expert.hold_growth(True)
    assert expert.growth_nbytes(10) == 0


def test_a_missing_value_extends_no_box_and_goes_to_the_lower_side() -> None:
    X, y = _steps(600, 3, seed=13)
    X[::7, 1] = np.nan
    forest = MondrianForest(3, 3, trees=3, max_nodes=63, seed=13)
    for x, label in zip(X, y, strict=True):
        forest.learn(x, int(label))
        assert np.isfinite(forest.predict_proba(x)).all()
    for t in range(forest.trees):
        for v in range(int(forest.nodes[t])):
            node = _node(forest, t, v)
            assert np.isfinite(node["lower"]).all() and (node["lower"] <= node["upper"]).all()
    restored = MondrianForest(3, 3, trees=3, max_nodes=63)
    restored.restore(forest.state())
    np.testing.assert_array_equal(restored.predict_proba(X[0]), forest.predict_proba(X[0]))


@pytest.mark.parametrize("wake_rows", [FOREST_WAKE_ROWS, 60])  # within the warm-up's rows; after them
def test_the_forest_enters_auto_after_its_wake_rows_at_its_prior(wake_rows: int,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kons.auto.experts.forest, "FOREST_WAKE_ROWS", wake_rows)
    X, y = _steps(100, 3, seed=11)
    learner = kons.Auto(task="classification")
    entered, at_prior = None, False
    for r, (x, label) in enumerate(zip(X, y, strict=True)):
        learner.learn_one(x, f"class {label}")
        grid = learner._grid
        if grid is None:
            continue
        forest = grid.experts_of("forest")
        assert forest is not None
        active = bool(grid.mixture.switching.active[FOREST_SLOT])
        assert active == forest[0].ready()
        if active and entered is None:
            entered = r
            if cast(ForestExpert, forest[0]).model.rows_learnt == wake_rows:  # entered after the update
                weights = np.exp(grid.mixture.switching.log_weights[:, FOREST_SLOT])
                np.testing.assert_allclose(weights, FOREST_PRIOR, rtol=1e-12)
                at_prior = True
    assert entered is not None and FOREST_NAME in learner.stats()["weights"]
    assert at_prior == (wake_rows == 60)  # (the warm-up's rows learnt when the grid starts: it plays them)
    binary = kons.Auto(task="classification")
    regression = kons.Auto(task="regression")
    for x, label in zip(X, y, strict=True):
        binary.learn_one(x, int(label > 0))
        regression.learn_one(x, float(label))
    assert regression._grid is not None and regression._grid.experts_of("forest") is None
    assert binary._grid is not None and FOREST_NAME not in binary.stats()["weights"]


@pytest.mark.parametrize("saved_at", [FOREST_WAKE_ROWS - 10, 400])
def test_a_saved_learner_with_the_forest_plays_on_bit_identically(saved_at: int) -> None:
    X, y = _steps(600, 4, seed=12)
    learner = kons.Auto(task="classification")
    for x, label in zip(X[:saved_at], y[:saved_at], strict=True):
        learner.learn_one(x, int(label))
    restored = kons.load(learner.to_bytes())
    assert restored.to_bytes() == learner.to_bytes()
    for x, label in zip(X[saved_at:], y[saved_at:], strict=True):
        assert restored.predict_proba_dict_one(x) == learner.predict_proba_dict_one(x)
        assert restored.learn_one(x, int(label)) == learner.learn_one(x, int(label))
    assert restored.to_bytes() == learner.to_bytes()
