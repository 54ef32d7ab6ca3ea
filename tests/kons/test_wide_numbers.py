"""The kernel member on a record's numbers at their width x NUMBERS_WIDTH (``wide_numbers`` of
:data:`kons.auto.grid.EXPERTS`): where the warm-up hears a categorical name, the wide raw members take the
numbers at the narrow width, and this member keeps the wide geometry the same records without the names
have (docs/auto-log.md, "A systematic tuning set for item 5 (session 22)"). Arrays and records whose names
all say nothing have none, and save the state they saved before it existed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kons
import kons.auto.grid
from kons.auto.config import GRID, NUMBERS_WIDTH, WIDE_NUMBERS_NAP_WEIGHT, WIDE_NUMBERS_STEP
from kons.auto.grid import Grid, layout
from kons.auto.slots import EARLIER_LAYOUTS
from kons.kernel import NystromKONS
from kons.preprocessing import STEP
from tests.kons.auto_internals import grid_of, walk_naps
from tests.kons.streams import goes_on_identically

SLOT = layout(kons.auto.grid.EXPERTS).index("wide_numbers")
START_PRIOR = 1.0 / (len(GRID) + 2)  # (the grid members' prior: Kind.start_prior of wide_numbers)
LABEL = f"nystrom_kons(numbers, width x{NUMBERS_WIDTH:g}, eta x{WIDE_NUMBERS_STEP:g})"


def _records(rows: int, *, heard: bool, flip: int | None = None) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Records of five numbers and a name of three categories that moves the target (``heard``) or says
    nothing of it (each row's numbers and target come three times in a row, once with each category: the
    same targets in each); the target's sign flipped from row ``flip`` (a change the detectors declare)."""
    rng = np.random.default_rng(5)
    X = np.column_stack([rng.normal(size=(rows, 5)), 0.1 * rng.normal(size=rows)])
    kind = rng.integers(0, 3, rows)
    if not heard:
        X, kind = np.repeat(X[::3], 3, axis=0)[:rows], np.arange(rows) % 3
    y = np.sin(2.0 * X[:, 0]) + X[:, 1] - 0.5 * X[:, 2] + X[:, 5]  # (the last column: the noise)
    if heard:
        y += 2.0 * (kind == 1)
    if flip is not None:
        y[flip:] = -3.0 * y[flip:] + 4.0
    records = [{**{f"x{j}": float(X[i, j]) for j in range(5)}, "kind": f"k{kind[i]}"} for i in range(rows)]
    return records, y


def _learnt(records: list[dict[str, Any]], y: np.ndarray) -> kons.Auto:
    learner = kons.Auto()
    for record, target in zip(records, y, strict=True):
        learner.learn_one(record, float(target))
    return learner


def _wide(grid: Grid) -> Any:
    experts = grid.experts_of("wide_numbers")
    assert experts is not None and len(experts) == 1
    return experts[0]


def test_a_heard_name_gives_the_grid_the_kernel_member_on_the_wide_numbers() -> None:
    records, y = _records(300, heard=True)
    learner = kons.Auto()
    for record, target in zip(records, y, strict=True):
        learner.learn_one(record, float(target))
        if learner._grid is not None:
            break
    grid = grid_of(learner)
    assert grid.hears_names and grid.silent == () and grid.numbers_width is not None
    expert = _wide(grid)
    assert isinstance(expert.base, NystromKONS) and expert.form == (2, False)  # the numbers, no name
    assert expert.base.kernel.gamma == grid.numbers_width * NUMBERS_WIDTH  # type: ignore[attr-defined]
    assert expert.base.eta == STEP["squared"] * WIDE_NUMBERS_STEP
    # in play from the grid's start (one round of the mixture since it entered at its prior)
    assert grid.mixture.switching.active[SLOT]
    assert learner.stats()["weights"][LABEL] == pytest.approx(START_PRIOR, rel=0.5)


@pytest.mark.parametrize("case", ["arrays", "silent name"])
def test_arrays_and_names_that_say_nothing_have_none_and_save_the_layout_before_it(case: str) -> None:
    records, y = _records(400, heard=False)
    rows: Any = ([np.array([r[f"x{j}"] for j in range(5)]) for r in records] if case == "arrays"
                 else records)
    learner = kons.Auto()
    for row, target in zip(rows, y, strict=True):
        learner.learn_one(row, float(target))
    grid = grid_of(learner)
    assert not grid.hears_names and grid.experts_of("wide_numbers") is None
    assert not grid.mixture.switching.active[SLOT] and LABEL not in learner.stats()["weights"]
    assert "wide_numbers" not in grid.naps
    arrays = kons._state.decode(learner.to_bytes())[1]
    assert not any(name.startswith(("wide_numbers", "dictionary_wide_numbers")) for name in arrays)
    # the layout before it (and before the second autoregression too while that is out of play)
    long_lags = bool(grid.mixture.switching.active[grid.slot["target_long_lags"]])
    assert arrays["mix_active"].shape == (len(EARLIER_LAYOUTS[-2 if long_lags else -3]),)


def test_it_naps_while_negligible_and_enters_again_at_a_declared_change() -> None:
    records, y = _records(2400, heard=True, flip=1500)
    walk = walk_naps(kons.Auto(), zip(records, y.tolist(), strict=True), "wide_numbers", SLOT,
                     lambda grid: _wide(grid).base, lambda weights: LABEL in weights, WIDE_NUMBERS_NAP_WEIGHT,
                     START_PRIOR)
    assert walk.napped is not None and walk.napped < 1500 and walk.woke is not None and walk.woke >= 1500


@pytest.mark.parametrize("saved_at", [200, 1200, 1520])  # in play; napping; woken by the change
def test_saved_mid_stream_it_plays_on_bit_identically(saved_at: int) -> None:
    records, y = _records(1800, heard=True, flip=1500)
    learner = _learnt(records[:saved_at], y[:saved_at])
    grid = grid_of(learner)
    blob = learner.to_bytes()
    arrays = kons._state.decode(blob)[1]
    assert "wide_numbers" in arrays and grid.naps["wide_numbers"][1] == (saved_at == 1200)
    copy = kons.load(blob)
    assert isinstance(copy, kons.Auto) and grid_of(copy).naps == grid.naps
    goes_on_identically(learner, records, y, saved_at)


def test_a_state_saved_before_it_existed_loads_and_plays_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    records, y = _records(1000, heard=True)
    with monkeypatch.context() as before:  # auto as before the kind: none of its slot
        before.setattr(kons.auto.grid, "EXPERTS", tuple(kind for kind in kons.auto.grid.EXPERTS
                                                        if kind.slots[0] != "wide_numbers"))
        old = _learnt(records[:600], y[:600])
    blob = old.to_bytes()
    assert kons._state.decode(blob)[1]["mix_active"].shape[0] < len(layout(kons.auto.grid.EXPERTS))
    loaded = kons.load(blob)
    assert isinstance(loaded, kons.Auto)
    grid = grid_of(loaded)
    assert grid.hears_names and grid.experts_of("wide_numbers") is None  # (the names heard at the save)
    assert not grid.mixture.switching.active[SLOT]
    for record, target in zip(records[600:], y[600:], strict=True):  # the old learner goes on as it was
        assert loaded.predict_one(record) == old.predict_one(record)
        assert loaded.learn_one(record, float(target)) == old.learn_one(record, float(target))
    assert grid_of(loaded).experts_of("wide_numbers") is None


def test_the_growth_bound_counts_it_from_before_the_warm_up_and_its_slot_while_it_naps() -> None:
    records, y = _records(1500, heard=True)
    learner = kons.Auto()
    learner.learn_one(records[0], float(y[0]))
    before, bound = learner.state_nbytes(), learner.max_growth_nbytes(1000)
    counted = learner._new_grid(1.0, 1.0, sparse=False).wide_numbers_nbytes(1000)
    assert counted > 0 and bound >= counted
    for record, target in zip(records[1:1001], y[1:1001], strict=True):
        learner.learn_one(record, float(target))
    assert 0 < learner.state_nbytes() - before <= bound
    grid = grid_of(learner)
    assert grid.naps["wide_numbers"][1]  # napping: saved without its slot, which waking takes again
    assert grid.growth_nbytes(1) >= grid._slot_nbytes() > 0
