"""Smoke test of the label diagnosis (benchmarks/label_diagnosis.py): a short stream recorded, the rule
replayed on its records."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from benchmarks import label_diagnosis
from benchmarks.multiclass import STREAMS


@pytest.mark.timeout(120)
def test_the_records_replay_the_label_played_and_the_rule_follows_a_better_expert(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rows = 60

    def first_rows(n: int) -> tuple[np.ndarray, list[Any]]:
        X, y = STREAMS["iris"](n)
        return X[:rows], y[:rows]

    monkeypatch.setattr(label_diagnosis, "STREAMS", {"iris": first_rows})
    recorded = label_diagnosis.record("iris")
    assert len(recorded.wrong) == rows and recorded.errors == sum(recorded.wrong)
    assert recorded.labels.shape == (len(recorded.y), len(recorded.names))
    # no label leads the vote's by an infinite margin: the vote's errors on the rounds the grid played
    vote = int(np.sum((recorded.voted != recorded.y) & recorded.played)) + recorded.offset
    assert label_diagnosis.follow_experts(recorded, 1.0, np.inf) == vote
    # an expert always right is followed once the label played trails it by the margin
    recorded.labels[:, 0] = recorded.y
    assert label_diagnosis.follow_experts(recorded, 1.0, 0.5) - recorded.offset <= 1


@pytest.mark.timeout(120)
def test_the_warmup_labels_count_the_label_played_on_the_warmups_multinomial_rounds() -> None:
    import kons
    from kons.preprocessing import WARMUP_ROWS

    errors = label_diagnosis.warmup_labels("iris")
    assert list(errors) == list(label_diagnosis.WARMUP_RULES)
    # the label played, counted apart: the rounds of three classes or more before the grid plays
    X, y = STREAMS["iris"](WARMUP_ROWS)
    model, played, rounds = kons.Auto(task="classification"), 0, 0
    for x, t in list(zip(X, y, strict=True))[:WARMUP_ROWS]:
        wrong = model.learn_round(x, t).predicted != t
        if len(model.classes) >= 3:
            played, rounds = played + wrong, rounds + 1
    assert errors["played"] == played and rounds > 0
    assert all(0 <= count <= rounds for count in errors.values())


@pytest.mark.timeout(120)
def test_the_warmup_labels_of_a_shuffled_stream_and_of_unequal_class_rates() -> None:
    """A shuffle reorders the stream's rows (the same rows, so the same classes); the imbalanced streams
    are counted as the benchmark's are."""
    X, y = label_diagnosis._shuffled("iris", 0)
    shuffled_X, shuffled_y = label_diagnosis._shuffled("iris", 1)
    assert sorted(map(str, y)) == sorted(map(str, shuffled_y)) and not np.array_equal(X, shuffled_X)
    assert np.array_equal(np.sort(X, axis=0), np.sort(shuffled_X, axis=0))
    for name in label_diagnosis.IMBALANCED:
        errors = label_diagnosis.warmup_labels(name, 1)
        assert list(errors) == list(label_diagnosis.WARMUP_RULES)


@pytest.mark.timeout(120)
def test_a_patched_constant_is_restored(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    def first_rows(n: int) -> tuple[np.ndarray, list[Any]]:
        X, y = STREAMS["iris"](n)
        return X[:40], y[:40]

    monkeypatch.setattr(label_diagnosis, "STREAMS", {"iris": first_rows})
    import kons.auto.experts.neighbours as module

    kept = vars(module)["NEIGHBOURS_WAKE_ROWS"]  # (the name the builder reads, not exported)
    label_diagnosis.patched("iris", module, "NEIGHBOURS_WAKE_ROWS", 32)
    assert kept == vars(module)["NEIGHBOURS_WAKE_ROWS"]
    assert "NEIGHBOURS_WAKE_ROWS = 32: errors at seeds 0..0 [" in capsys.readouterr().out


@pytest.mark.timeout(120)
def test_the_two_class_warmup_counts_the_label_played_on_its_rounds() -> None:
    import kons
    from kons.preprocessing import WARMUP_ROWS

    errors, loss, averaged_errors, averaged_loss = label_diagnosis.two_class_warmup("iris")
    # the label played, counted apart: the rounds of the binary model with both classes buffered
    X, y = STREAMS["iris"](WARMUP_ROWS)
    model, played, rounds = kons.Auto(task="classification"), 0, 0
    for x, t in list(zip(X, y, strict=True))[:WARMUP_ROWS]:
        both = len(model.classes) == 2 and t in model.classes
        wrong = model.learn_round(x, t).predicted != t
        if both:
            played, rounds = played + wrong, rounds + 1
    assert errors == played and rounds > 0
    assert 0 <= averaged_errors <= rounds and loss > 0.0 and averaged_loss > 0.0


def test_the_additive_model_of_one_feature_is_the_radial_one() -> None:
    """On one feature the mean of a kernel a feature is the radial kernel at the buffer's median width, so
    the third model plays as the second, its rows left out too; on two, its left-out log loss is a loss."""
    rng = np.random.default_rng(0)
    Z, z = rng.normal(size=(12, 1)), rng.normal(size=1)
    labels = np.arange(12) % 3
    _, _, deviations, left_out = label_diagnosis._warmup_models(Z, labels, z, 3)
    additive, additive_left_out = label_diagnosis._additive_model(Z, labels, z, 3)
    assert np.allclose(additive, deviations[1]) and np.allclose(additive_left_out, left_out[1])
    Z2 = np.column_stack([Z[:, 0], rng.normal(size=12)])
    _, additive_left_out = label_diagnosis._additive_model(Z2, labels, z.repeat(2), 3)
    loss = label_diagnosis._left_out_log_loss(np.zeros(3), additive_left_out, labels)
    assert np.isfinite(loss) and loss > 0.0


@pytest.mark.timeout(120)
def test_the_orders_count_auto_and_amf_on_each_order(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    shuffled = label_diagnosis._shuffled

    def first_rows(name: str, shuffle: int) -> tuple[np.ndarray, list[Any]]:
        X, y = shuffled(name, shuffle)
        return X[:40], y[:40]

    monkeypatch.setattr(label_diagnosis, "_shuffled", first_rows)
    label_diagnosis.orders("iris", 1)
    printed = capsys.readouterr().out
    assert printed.startswith("iris over 2 orders")
    # each order is ahead, tied or behind
    assert sum(int(n) for n in re.findall(r"'(?:ahead|tied|behind)': (\d+)", printed)) == 2


@pytest.mark.timeout(120)
def test_the_split_vote_replayed_at_its_share_is_the_label_played() -> None:
    from kons.auto.config import LABEL_VOTE_SHARE

    recorded = label_diagnosis.record("wine", shuffle=1)  # (an order where the split vote plays a row)
    never, kept = label_diagnosis._split_vote_errors(recorded, (0.0, LABEL_VOTE_SHARE))
    assert kept == recorded.errors < never
