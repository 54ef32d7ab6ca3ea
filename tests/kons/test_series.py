"""The experts on the target's last values (:mod:`kons.auto.experts.lags`): their plays against a slow
reference, that they wake on a series read in time order and follow it, that on the same rows in no order
they never wake (``auto`` then plays bit for bit as without them), and that a learner saved after they woke
goes on identically."""

from __future__ import annotations

import dataclasses
import gc
import math
import weakref
from typing import Any, cast

import numpy as np
import pytest

import kons
import kons.auto.grid
from kons.auto.config import (
    LAGS_LONG,
    LAGS_LONG_PRIOR,
    LAGS_PRIOR,
    LAGS_WARMUP_LINEAR_ROWS,
    LAGS_WARMUP_ROWS,
    LAGS_WARMUP_SHARE,
    LAGS_WEIGHT_VARIANCE,
    MIX_EARLY_ROUNDS,
)
from kons.auto.experts.lags import LastTarget, LongLags, TargetLags, lag_experts, last_leads
from kons.auto.experts.protocol import Row
from kons.auto.experts.recent import RecentExpert
from kons.auto.slots import EARLIER_LAYOUTS
from kons.preprocessing import TARGET_BOUND, with_intercept
from tests.kons.streams import goes_on_identically

LAST, LAGGED = "the last target", "the last target + bayesian_linear(its 8 last)"
LONG = f"the last target + bayesian_linear(its {LAGS_LONG} last)"


def _series(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A random walk with a slow cycle, in raw units, and two features that say nothing of it."""
    rng = np.random.default_rng(seed)
    y = 500.0 + np.cumsum(rng.normal(size=rows) * 3.0) + 40.0 * np.sin(np.arange(rows) / 20.0)
    return rng.normal(size=(rows, 2)) * [10.0, 1.0] + [50.0, 0.0], y


def _reference_plays(targets: np.ndarray, lags: int, bound: float) -> np.ndarray:
    """TargetLags' plays from scratch: the ridge of the changes on the lags and 1, solved in batch."""
    # the prior's precision: the lags' weights of variance LAGS_WEIGHT_VARIANCE together
    prior = np.diag(np.append(np.full(lags, lags / LAGS_WEIGHT_VARIANCE), 1.0 / TARGET_BOUND**2))
    history = np.zeros(lags)
    rows: list[np.ndarray] = []
    changes: list[float] = []
    plays = []
    for t in targets:
        u = np.append(history, 1.0)
        if rows:
            U = np.array(rows)
            w = np.linalg.solve(prior + U.T @ U, U.T @ np.array(changes))
        else:
            w = np.zeros(lags + 1)
        change = min(max(float(u @ w), -2.0 * bound), 2.0 * bound)
        plays.append(min(max(history[0] + change, -bound), bound))
        rows.append(u)
        changes.append(t - history[0])
        history = np.append(t, history[:-1])
    return np.array(plays)



def _learnt(X: np.ndarray, y: np.ndarray, rows: int) -> kons.Auto:
    """A default ``auto`` that learnt the first ``rows`` rows of ``(X, y)``."""
    model = kons.Auto()
    for x, t in zip(X[:rows], y[:rows], strict=True):
        model.learn_one(x, t)
    return model


def test_the_lags_play_the_last_target_and_its_ridge_autoregression() -> None:
    rng = np.random.default_rng(1)
    targets = np.clip(np.cumsum(rng.normal(size=300) * 0.3), -4.0, 4.0)
    last, lagged = lag_experts(8, 5.0, TARGET_BOUND, wake_rows=4)
    assert isinstance(last, LastTarget) and isinstance(lagged, TargetLags)
    row = Row({}, np.zeros(2))
    plays = []
    for t in targets:
        assert last.predict(row) == last.learn(row, t)
        plays.append((last.predict(row), lagged.learn(row, t)))
        last.observe(row, t, 2, True)
        lagged.observe(row, t, 2, True)
    plays_array = np.array(plays)
    np.testing.assert_array_equal(plays_array[1:, 0], targets[:-1])
    np.testing.assert_allclose(plays_array[:, 1], _reference_plays(targets, 8, 5.0), rtol=1e-9, atol=1e-9)
    assert last.ready()


def test_asleep_the_autoregression_learns_in_its_observations() -> None:
    targets = np.sin(np.arange(60) / 3.0)
    _, awake = lag_experts(4, 5.0, TARGET_BOUND, wake_rows=4)
    _, asleep = lag_experts(4, 5.0, TARGET_BOUND, wake_rows=4)
    row = Row({}, np.zeros(1))
    for t in targets:
        awake.learn(row, t)
        awake.observe(row, t, 2, True)
        asleep.observe(row, t, 2, False)
    assert isinstance(awake, TargetLags) and isinstance(asleep, TargetLags)
    np.testing.assert_array_equal(awake.model.P, asleep.model.P)
    assert awake.predict(row) == asleep.predict(row)


def test_auto_follows_a_series_in_time_order() -> None:
    X, y = _series(1500, 3)
    model = kons.Auto()
    played = np.array([model.learn_one(x, t) for x, t in zip(X, y, strict=True)])
    weights = model.stats()["weights"]
    assert weights[LAST] + weights[LAGGED] > 0.5
    last_error = np.mean((y[999:-1] - y[1000:]) ** 2)
    assert np.mean((played[1000:] - y[1000:]) ** 2) < 1.1 * last_error


def _leads_by_loop(targets: np.ndarray, share: float) -> bool:
    last = mean = 0.0
    for i in range(1, len(targets)):
        last += (targets[i] - targets[i - 1]) ** 2
        mean += (targets[i] - sum(targets[:i]) / i) ** 2
    return last < share * mean


def test_the_warm_up_plays_the_last_target_once_it_clearly_beats_the_running_mean() -> None:
    X, y = _series(32, 5)
    rng = np.random.default_rng(1)
    for targets in (y, rng.permutation(y), rng.normal(size=20), np.cumsum(rng.normal(size=20))):
        for share in (0.5, 1.0):
            assert last_leads(targets, share) == _leads_by_loop(targets, share)
    model = kons.Auto()
    played = np.array([model.learn_one(x, t) for x, t in zip(X, y, strict=True)])
    leads = [i for i in range(LAGS_WARMUP_ROWS, 32) if last_leads(y[:i], LAGS_WARMUP_SHARE)]
    assert len(leads) > 20  # the walk: the last target leads almost from the first buffered rows
    np.testing.assert_array_equal(played[leads], y[np.array(leads) - 1])
    order = rng.permutation(32)
    shuffled = kons.Auto()
    plays = np.array([shuffled.learn_one(x, t) for x, t in zip(X[order], y[order], strict=True)])
    # in no order it plays the linear model of the buffer
    assert not np.isin(plays[LAGS_WARMUP_ROWS:], y[order][LAGS_WARMUP_ROWS - 1:-1]).any()


def test_the_warm_up_plays_the_last_target_where_it_beats_the_mean_and_the_linear_model() -> None:
    # a short seasonal series with a trend: the linear model of features that say nothing errs more than
    # the running mean, and the last target less than both though not half the mean's
    rng = np.random.default_rng(0)
    rows = np.arange(32)
    y = 100 + 20 * np.sin(2 * np.pi * rows / 12) + 2 * rows + 8 * rng.normal(size=32)
    X = rng.normal(size=(32, 2))
    model = kons.Auto()
    played = np.array([model.learn_one(x, t) for x, t in zip(X, y, strict=True)])
    by_mean = {k for k in range(LAGS_WARMUP_ROWS, 32) if last_leads(y[:k], LAGS_WARMUP_SHARE)}
    lasts = {k for k in range(LAGS_WARMUP_ROWS, 32) if played[k] == y[k - 1]}
    assert by_mean < lasts and min(lasts - by_mean) >= LAGS_WARMUP_LINEAR_ROWS
    order = rng.permutation(32)
    shuffled = kons.Auto()
    plays = np.array([shuffled.learn_one(x, t) for x, t in zip(X[order], y[order], strict=True)])
    assert not (plays[LAGS_WARMUP_ROWS:] == y[order][LAGS_WARMUP_ROWS - 1:-1]).any()


def test_the_warm_up_follows_the_turn_of_a_short_cycle_with_the_last_target() -> None:
    # a yearly series of skewed cycles (the tuning streams' cycles_s*): a fast rise, then a fall from the
    # seventh row; the linear model of the buffered years follows the fall late (before the rule it played
    # 57.6, 51.7, 42.3 for 31, 19, 11), the last target beats it and the running mean from there, though not
    # by half the mean's errors
    y = np.array([4.0, 10, 17, 25, 38, 60, 31, 19, 11, 7, 4, 1, 0, 3, 12, 28, 47, 62, 58, 40])
    X = np.arange(1800.0, 1800.0 + len(y))[:, None]
    model = kons.Auto()
    played = np.array([model.learn_one(x, t) for x, t in zip(X, y, strict=True)])
    turn = np.arange(7, 12)
    assert not any(last_leads(y[:k], LAGS_WARMUP_SHARE) for k in turn)  # the rule of the linear model's
    np.testing.assert_array_equal(played[turn], y[turn - 1])


def _in_no_order(rows: int, seed: int, order_seed: int
                 ) -> tuple[np.ndarray, np.ndarray, kons.Auto, list[float]]:
    """A series' rows shuffled, and a learner that learnt them (its plays)."""
    X, y = _series(rows, seed)
    order = np.random.default_rng(order_seed).permutation(len(y))
    X, y = X[order], y[order]
    model = kons.Auto()
    return X, y, model, [model.learn_one(x, t) for x, t in zip(X, y, strict=True)]


def test_on_rows_in_no_order_they_never_play(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y, model, played = _in_no_order(800, 4, 0)
    assert LAST not in model.stats()["weights"] and LAGGED not in model.stats()["weights"]
    # a learner without them (their slots kept empty: the mixture's sums run over the same slots)
    without = tuple(dataclasses.replace(kind, build=lambda grid: None) if kind.slots[0] == "target_last"
                    else kind for kind in kons.auto.grid.EXPERTS)
    monkeypatch.setattr(kons.auto.grid, "EXPERTS", without)
    before = kons.Auto()
    assert [before.learn_one(x, t) for x, t in zip(X, y, strict=True)] == played


def test_saved_after_they_woke_it_goes_on_identically() -> None:
    X, y = _series(600, 5)
    model = _learnt(X, y, 400)
    assert LAST in model.stats()["weights"]
    goes_on_identically(model, X, y, 400)


def test_the_first_rounds_play_sharpened_weights_a_view_saved_mid_way_goes_on_identically() -> None:
    X, y = _delays(MIX_EARLY_ROUNDS + 100, 3)
    model = _learnt(X, y, 100)
    grid = cast(kons.auto.grid.Grid, model._grid)
    weights, power = grid._weights(), MIX_EARLY_ROUNDS / (grid.rounds + 1)
    assert np.allclose(grid._played_weights(), weights**power / np.sum(weights**power))  # (the lags asleep)
    goes_on_identically(model, X, y, 100)  # (the view is not state: the same bytes, the same plays)
    grid = cast(kons.auto.grid.Grid, model._grid)
    assert grid._played_weights() is grid._weights()  # past the first rounds: the mixture's own


def test_the_first_rounds_view_leaves_the_state_past_them_it_plays_as_without_it() -> None:
    X, y = _delays(3 * MIX_EARLY_ROUNDS, 0)
    y[150:] = 60.0 - y[150:]  # a change in the first rounds: the detectors declare it
    viewed, plain = kons.Auto(), kons.Auto()
    plain._early = False  # (as a state saved before the view)
    plays = [(viewed.learn_one(x, t), plain.learn_one(x, t)) for x, t in zip(X, y, strict=True)]
    assert plays[100][0] != plays[100][1]  # the view moved the first rounds' plays
    # and nothing after them and the first rounds of the generations the change started: the detectors as well
    grid = cast(kons.auto.grid.Grid, viewed._grid)
    past = max(generation.start for generation in grid.young if generation is not None) + MIX_EARLY_ROUNDS
    assert past < len(plays) and all(a == b for a, b in plays[past:])


def test_the_first_rounds_sharpen_the_experts_of_the_row_among_themselves_the_lags_as_mixed() -> None:
    X, y = _series(MIX_EARLY_ROUNDS + 50, 0)
    model = _learnt(X, y, 100)
    grid = cast(kons.auto.grid.Grid, model._grid)
    weights, played = grid._weights(), grid._played_weights()
    lags = [grid.slot[name] for name in ("target_last", "target_lags", "target_long_lags")]
    assert weights[lags].sum() > 0.0 and np.array_equal(played[lags], weights[lags])  # awake: as mixed
    of_the_row = np.ones(len(weights), dtype=bool)
    of_the_row[lags] = False
    power = MIX_EARLY_ROUNDS / (grid.rounds + 1)
    raised = weights[of_the_row] ** power
    assert np.allclose(played[of_the_row], raised / raised.sum() * weights[of_the_row].sum())
    goes_on_identically(model, X, y, 100)


def _delays(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Arrival delays: the departure delay (a lognormal tail) plus a lognormal, and two features that say
    nothing."""
    rng = np.random.default_rng(seed)
    departure = rng.lognormal(mean=2.0, sigma=1.2, size=rows) - 5.0
    X = np.column_stack([departure, rng.normal(size=rows) * 10 + 100, rng.integers(0, 24, rows)])
    return X, 0.95 * departure + rng.lognormal(mean=1.0, sigma=1.0, size=rows) - 8.0


def test_a_heavy_tailed_linear_target_is_fitted_as_rivers_linear_model_fits_it() -> None:
    from river import linear_model, preprocessing

    X, y = _delays(2000, 2)
    model = kons.Auto()
    played = np.array([model.learn_one(x, t) for x, t in zip(X, y, strict=True)])
    river: Any = preprocessing.TargetStandardScaler(
        regressor=preprocessing.StandardScaler() | linear_model.LinearRegression())  # type: ignore[arg-type]
    peer = []
    for x, t in zip(X, y, strict=True):
        features = dict(enumerate(x.tolist()))
        peer.append(river.predict_one(features))
        river.learn_one(features, t)
    # the next record of the tail is predicted beyond the targets seen (before: clipped at their maximum)
    records = np.flatnonzero(y[1:] > np.maximum.accumulate(y)[:-1] * 1.5) + 1
    assert len(records) and all(played[r] > np.max(y[:r]) for r in records if r > 200)
    assert np.mean((played - y) ** 2) < 1.25 * np.mean((np.array(peer) - y) ** 2)


def test_the_linear_model_plays_a_record_on_the_row_standardised_by_the_rows_before_it() -> None:
    X, y = _delays(300, 0)
    model = kons.Auto()
    for x, t in zip(X, y, strict=True):
        model.learn_one(x, t)
    grid = cast(kons.auto.grid.Grid, model._grid)
    scaler = model._prep.x_scaler
    linear = cast(RecentExpert, cast(list[Any], grid.experts_of("linear"))[0])
    record = X[0].copy()
    record[0] = scaler.mean[0] + 17.0 * math.sqrt(scaler.m2[0] / scaler.count)  # 17 deviations out
    row, _ = grid.inputs(model._prep.scaled(record), record)
    before = cast(np.ndarray, with_intercept(scaler.standardise(record)))
    assert row.before is not None and np.allclose(row.before, before, rtol=0.0, atol=1e-12)
    # standardised by the statistics that include it, the record would stand nearer the mean
    assert cast(np.ndarray, row.forms[RecentExpert.form])[0] < 0.8 * before[0]
    assert linear.predict(row) == linear.model.predict(row.before)
    assert linear.predict(row) > linear.model.predict(row.forms[RecentExpert.form]) + 1.0


def test_a_regression_state_says_it_follows_the_rules_for_tails_and_loads_under_them() -> None:
    X, y = _delays(300, 3)
    model = _learnt(X, y, 200)
    header, arrays = kons._state.decode(model.to_bytes())
    assert header["scalars"]["tails"] is True and header["scalars"]["plays_before"] is True
    restored = kons.load(model.to_bytes())
    assert isinstance(restored, kons.Auto)
    assert model._model_bound == 20.0 and restored._model_bound == 20.0
    assert cast(kons.auto.grid.Grid, restored._grid).features is restored._prep.x_scaler
    # a state saved before the linear models played on the row standardised by the rows before it goes on
    # playing them on the row as the other experts take it
    scalars = {key: value for key, value in header["scalars"].items() if key != "plays_before"}
    older = kons.load(kons._state.encode({**header, "scalars": scalars}, arrays))
    assert isinstance(older, kons.Auto) and cast(kons.auto.grid.Grid, older._grid).features is None
    assert "plays_before" not in kons._state.decode(older.to_bytes())[0]["scalars"]


def _wakes(targets: np.ndarray, local: bool) -> int | None:
    """The round at which the last target would enter on these standardised targets (None: never)."""
    last, lagged = lag_experts(8, 20.0, TARGET_BOUND, 32)
    assert isinstance(last, LastTarget)
    if not local:
        last.local = None  # a state saved before the kept targets' mean was evidence
    for i, t in enumerate(targets):
        for expert in (last, lagged):
            expert.observe(cast(Row, None), float(t), 0, False)
        if last.ready():
            return i
    return None


def test_a_change_of_level_in_no_order_does_not_wake_them() -> None:
    rng = np.random.default_rng(2)
    shifted = np.concatenate([rng.normal(size=400), 4.0 + rng.normal(size=600)])
    assert _wakes(shifted, local=False) is not None  # the standing mean errs after the change
    assert _wakes(shifted, local=True) is None
    walk = np.cumsum(rng.normal(size=200)) / 5.0
    assert _wakes(walk, local=True) == _wakes(walk, local=False) == 31


def _lags(model: kons.Auto) -> tuple[LastTarget, TargetLags]:
    last, lagged = cast(list[Any], cast(kons.auto.grid.Grid, model._grid).experts_of("target_last"))
    assert isinstance(last, LastTarget) and isinstance(lagged, TargetLags)
    return last, lagged


def test_the_kept_targets_are_the_last_ones_in_the_scale_of_the_round_that_plays_on_them() -> None:
    # a burst moves the target's scale much in a few rounds: the lags, standardised each by its own round,
    # would read as a trend; kept moved to the scale of the round that plays on them, they are the targets
    X, y = _series(120, 6)
    y[80:84] -= 400.0
    model = kons.Auto()
    for k, (x, t) in enumerate(zip(X, y, strict=True)):
        model.learn_one(x, t)
        if model._grid is None or k < 40:  # (the warm-up's rows are replayed in the scale that includes
            continue                       # the round's target, one row ahead of the scaler's then)
        _, lagged = _lags(model)
        scaler = model._prep.y
        kept = lagged._inputs()[:-1]  # as the next round plays them
        np.testing.assert_allclose(scaler.mean + scaler.std * kept, y[k:k - 8:-1], rtol=1e-9)


def test_a_state_saved_before_the_lags_kept_their_scale_goes_on_as_it_was() -> None:
    X, y = _series(200, 7)
    model = _learnt(X, y, 150)
    header, arrays = kons._state.decode(model.to_bytes())
    assert "target_last_units" in arrays
    saved_before = {key: array for key, array in arrays.items() if key != "target_last_units"}
    older = kons.load(kons._state.encode(header, saved_before))
    assert isinstance(older, kons.Auto)
    last, lagged = _lags(older)
    assert last.targets is None and lagged.targets is None
    assert "target_last_units" not in kons._state.decode(older.to_bytes())[1]
    for x, t in zip(X[150:], y[150:], strict=True):
        assert math.isfinite(older.learn_one(x, t))


def test_saved_in_a_burst_it_goes_on_identically() -> None:
    # saved while the scale moves much a round: the kept targets' units are state
    X, y = _series(200, 6)
    y[80:84] -= 400.0
    model = _learnt(X, y, 82)
    goes_on_identically(model, X, y, 82)


def test_in_a_burst_the_last_target_plays_alone_a_view_that_leaves_the_state_as_it_was(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a burst many deviations beyond the rows seen: the experts of the row forecast the level they learnt,
    # the autoregressions a rebound; the last target alone follows it
    X, y = _series(400, 6)
    y[300:306] -= 400.0

    def played(in_burst: list[bool]) -> np.ndarray:
        model = kons.Auto()
        plays = []
        for x, t in zip(X, y, strict=True):
            grid = model._grid
            in_burst.append(grid is not None and grid._in_burst())
            plays.append(model.learn_one(x, t))
        return np.array(plays)

    burst: list[bool] = []
    viewed = played(burst)
    monkeypatch.setattr(kons.auto.grid, "LAGS_BURST", math.inf)
    plain = played([])
    rounds = np.flatnonzero(burst)
    assert rounds.size and set(rounds) <= set(range(301, 308))  # the burst's rounds after its first
    np.testing.assert_allclose(viewed[rounds], y[rounds - 1], rtol=1e-9)
    assert not np.allclose(plain[rounds], y[rounds - 1], rtol=1e-3)
    # not state: every other round is played as without the view, the rounds after the burst too
    assert np.array_equal(np.delete(viewed, rounds), np.delete(plain, rounds))


def _long(model: kons.Auto) -> LongLags:
    (long,) = cast(list[Any], cast(kons.auto.grid.Grid, model._grid).experts_of("target_long_lags"))
    assert isinstance(long, LongLags)
    return long


def _without_the_long_lags(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` as before the second autoregression: its kind gone, the lags' priors as they were."""
    before = tuple(dataclasses.replace(kind, wake_prior=LAGS_PRIOR) if kind.slots[0] == "target_last"
                   else kind for kind in kons.auto.grid.EXPERTS if kind.slots[0] != "target_long_lags")
    monkeypatch.setattr(kons.auto.grid, "EXPERTS", before)


def test_the_second_autoregression_enters_with_the_lags_having_kept_nothing_before() -> None:
    X, y = _series(400, 8)
    model, k = kons.Auto(), 0
    while model._grid is None or LAST not in model.stats()["weights"]:
        if model._grid is not None:  # asleep: nothing kept, the mixture saved in the layout before it
            # (arrays: the kernel member on a record's wide numbers, added after it, is not there either)
            assert _long(model).started is None and _long(model).nbytes() == 0
            arrays = kons._state.decode(model.to_bytes())[1]
            assert not any(name.startswith("target_long_lags") for name in arrays)
            assert EARLIER_LAYOUTS[-3][-1] == "fresh_bins"
            assert arrays["mix_active"].shape == (len(EARLIER_LAYOUTS[-3]),)
        model.learn_one(X[k], y[k])
        k += 1
    weights = model.stats()["weights"]
    assert weights[LONG] == pytest.approx(LAGS_LONG_PRIOR, rel=0.2)  # (one round of the mixture since)
    assert weights[LAGGED] == pytest.approx(LAGS_PRIOR - LAGS_LONG_PRIOR, rel=0.2)
    assert _long(model).started is None  # it starts at its first play
    saved = model.to_bytes()
    goes_on_identically(model, X, y, k)  # saved before it started: it starts as it would have
    restored = kons.load(saved)
    assert isinstance(restored, kons.Auto)
    restored.learn_one(X[k], y[k])
    started = _long(restored).started
    assert started is not None and started.lags.shape == (LAGS_LONG,)
    # it entered having learnt the kept rounds (the 32 since the grid's start: its covariance below
    # the prior's, as one round's learning would not leave it)
    unlearnt = LongLags(_long(restored).leader, LAGS_LONG, 1.0, lambda: np.zeros(0))._start()
    unlearnt.learn(cast(Row, None), float(started.lags[0]))
    assert np.trace(started.model.P) < 0.8 * np.trace(unlearnt.model.P)
    goes_on_identically(restored, X, y, k + 1)


def test_on_rows_in_no_order_the_second_autoregression_costs_no_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y, model, played = _in_no_order(600, 9, 1)
    _without_the_long_lags(monkeypatch)
    before = kons.Auto()
    assert [before.learn_one(x, t) for x, t in zip(X, y, strict=True)] == played
    assert before.to_bytes() == model.to_bytes()


def test_a_state_saved_before_the_second_autoregression_with_the_lags_awake_goes_on_as_it_was(
        monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _series(500, 10)
    _without_the_long_lags(monkeypatch)
    before = _learnt(X, y, 300)
    assert LAST in before.stats()["weights"]
    saved = before.to_bytes()
    monkeypatch.undo()
    restored = kons.load(saved)
    assert isinstance(restored, kons.Auto) and restored.to_bytes() == saved
    for x, t in zip(X[300:], y[300:], strict=True):
        assert restored.predict_one(x) == before.predict_one(x)
        assert restored.learn_one(x, t) == before.learn_one(x, t)
    assert LONG not in restored.stats()["weights"] and _long(restored).started is None


def test_a_learner_with_the_second_autoregression_is_freed_without_the_cyclic_collector() -> None:
    # (it reads the grid's kept rounds: through a reference back to the grid, every learner dropped would
    # wait for the cyclic collector, whose passes then slow the rounds and saves that follow)
    X, y = _series(300, 11)
    model = _learnt(X, y, 300)
    assert LONG in model.stats()["weights"]
    collecting = gc.isenabled()
    gc.disable()
    try:
        restored = kons.load(model.to_bytes())
        grid = weakref.ref(cast(kons.Auto, restored)._grid)
        del restored
        assert grid() is None
    finally:
        if collecting:
            gc.enable()
