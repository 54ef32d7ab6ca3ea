"""Saving and restoring every registered learner: bit-identical continuation, and rejection of bad blobs."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import kons
from kons import KONS, SketchedKONS
from kons.base import Learner
from tests.reference import make_learner, stream_for
from tests.streams import load_stream

NAMES = sorted(kons.LEARNERS)
PREFIX = struct.Struct("<8sHI")  # magic, format version, header length (documented in kons._state)
DIGEST = 32


@functools.cache
def _data() -> tuple[np.ndarray, np.ndarray]:
    data = load_stream("housing", 160)
    return data.X, data.y


def _learned(name: str, rounds: int = 80) -> Learner:
    learner = make_learner(name)
    X, y = stream_for(learner, *_data())
    learner.learn_many(X[:rounds], y[:rounds])
    return learner


@functools.cache
def _blob(name: str) -> bytes:
    return _learned(name).to_bytes()


def _resign(body: bytes) -> bytes:
    """``body`` with a fresh checksum, to get past the integrity check and test what lies behind it."""
    return body + hashlib.sha256(body).digest()


def _split(blob: bytes) -> tuple[dict[str, Any], bytes]:
    """The JSON header and the array bytes of a blob."""
    _, _, head_len = PREFIX.unpack_from(blob)
    head = json.loads(blob[PREFIX.size : PREFIX.size + head_len])
    return head, blob[PREFIX.size + head_len : -DIGEST]


def _join(head: dict[str, Any], data: bytes, version: int = 1) -> bytes:
    text = json.dumps(head, separators=(",", ":")).encode()
    return _resign(PREFIX.pack(b"KONSSTAT", version, len(text)) + text + data)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("cut", [0, 1, 57])
def test_restore_mid_stream_continues_bit_identically(name: str, cut: int) -> None:
    learner = _learned(name, rounds=cut)
    blob = learner.to_bytes()
    restored = type(learner).from_bytes(blob)
    loaded = kons.load(blob)
    assert type(restored) is type(learner) and type(loaded) is type(learner)
    assert restored.to_bytes() == blob and loaded.to_bytes() == blob
    assert restored.get_params() == learner.get_params()
    assert restored.stats() == learner.stats()
    X, y = stream_for(learner, *_data())
    rest_X, rest_y = X[cut:], y[cut:]
    assert np.array_equal(learner.predict_many(rest_X[:10]), restored.predict_many(rest_X[:10]))
    played = learner.learn_many(rest_X, rest_y)
    replayed = restored.learn_many(rest_X, rest_y)
    assert np.array_equal(played, replayed)
    assert learner.to_bytes() == restored.to_bytes()
    assert learner.stats() == restored.stats()


@pytest.mark.parametrize("name", [n for n in NAMES if not kons.LEARNERS[n].preprocesses])
def test_state_nbytes_is_the_array_part_of_the_blob(name: str) -> None:
    """The service budgets its cache with ``state_nbytes``: it must be the blob's array bytes (the
    composites, whose parts are nested blobs with headers of their own: ``tests/kons/test_growth.py``)."""
    assert make_learner(name).state_nbytes() == 0
    learner = _learned(name)
    _, data = _split(learner.to_bytes())
    assert learner.state_nbytes() == len(data) > 0


@pytest.mark.parametrize("name", NAMES)
def test_restore_is_not_an_alias(name: str) -> None:
    learner = _learned(name)
    restored = kons.load(learner.to_bytes())
    X, y = stream_for(learner, *_data())
    before = learner.to_bytes()
    restored.learn_many(X[80:100], y[80:100])
    assert learner.to_bytes() == before
    assert restored.to_bytes() != before


@pytest.mark.parametrize("name", NAMES)
def test_damaged_blobs_are_rejected(name: str) -> None:
    blob = _blob(name)
    head, _ = _split(blob)
    damaged = [
        b"",
        blob[:10],
        blob[: PREFIX.size + DIGEST - 1],
        blob[:-1],
        blob[: len(blob) // 2],
        blob + b"\x00",
        b"NOTKONS!" + blob[8:],  # wrong magic (checksum left as it was)
        _resign(b"NOTKONS!" + blob[8:-DIGEST]),  # wrong magic, valid checksum
        _resign(blob[:8] + struct.pack("<H", 2) + blob[10:-DIGEST]),  # unknown format version
        _join({**head, "state_version": head["state_version"] + 1}, _split(blob)[1]),
        _join({**head, "class": "NoSuchLearner"}, _split(blob)[1]),
        _resign(blob[: PREFIX.size] + b"{" * 10 + blob[PREFIX.size + 10 : -DIGEST]),  # broken JSON
    ]
    for position in (0, 9, PREFIX.size + 3, len(blob) // 2, len(blob) - DIGEST - 1, len(blob) - 1):
        flipped = bytearray(blob)
        flipped[position] ^= 0x01
        damaged.append(bytes(flipped))
    for bad in damaged:
        with pytest.raises(kons.StateFormatError):
            kons.load(bad)
        with pytest.raises(kons.StateFormatError):
            type(_learned(name, 0)).from_bytes(bad)


@pytest.mark.parametrize("bad", ["text", None, 3, [1, 2]])
def test_non_bytes_are_rejected(bad: object) -> None:
    with pytest.raises(kons.StateFormatError):
        kons.load(bad)  # type: ignore[arg-type]  # not bytes, on purpose


def test_wrong_class_is_rejected() -> None:
    exact, sketched = _blob("kons"), _blob("sketched_kons")
    with pytest.raises(kons.StateFormatError):
        SketchedKONS.from_bytes(exact)
    with pytest.raises(kons.StateFormatError):
        KONS.from_bytes(sketched)
    assert isinstance(Learner.from_bytes(exact), KONS)
    for name in NAMES:  # every other registered class refuses a KONS blob
        if kons.LEARNERS[name] is not KONS:
            with pytest.raises(kons.StateFormatError):
                kons.LEARNERS[name].from_bytes(exact)


def test_arrays_past_the_end_are_rejected() -> None:
    head, data = _split(_blob("sketched_kons"))
    for spec in head["arrays"]:
        if spec["shape"] and spec["shape"][0] > 0:
            spec["shape"][0] += 1000
            break
    with pytest.raises(kons.StateFormatError):
        kons.load(_join(head, data))


def test_inconsistent_dictionary_is_rejected() -> None:
    blob = _blob("kons")
    head, data = _split(blob)
    for spec in head["arrays"]:
        if spec["name"] == "dict_index":  # claim one member fewer than the factor has
            spec["shape"][0] -= 1
    with pytest.raises(kons.StateFormatError):
        kons.load(_join(head, data))


def _edit_header_text(blob: bytes, old: str, new: str) -> bytes:
    _, _, head_len = PREFIX.unpack_from(blob)
    text = blob[PREFIX.size : PREFIX.size + head_len].decode()
    assert old in text
    edited = text.replace(old, new, 1).encode()
    return _resign(PREFIX.pack(b"KONSSTAT", 1, len(edited)) + edited + blob[PREFIX.size + head_len : -DIGEST])


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('"counters":[80', '"counters":[1e400'),  # JSON reads 1e400 as inf: int(inf) overflows
        ('"dim":13', '"dim":1e400'),
        ('"dim":13', '"dim":NaN'),
        ('"shape":[80,13]', '"shape":[1e400,13]'),
        ('"offset":0', '"offset":1e400'),
        ('"shape":[80,13]', '"shape":[-80,-13]'),
        ('"C":2.0', '"C":Infinity'),
        ('"class":"SketchedKONS"', '"class":["SketchedKONS"]'),
    ],
)
def test_crafted_headers_are_rejected(old: str, new: str) -> None:
    with pytest.raises(kons.StateFormatError):
        kons.load(_edit_header_text(_blob("sketched_kons"), old, new))


def test_deeply_nested_header_is_rejected() -> None:
    text = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(kons.StateFormatError):
        kons.load(_resign(PREFIX.pack(b"KONSSTAT", 1, len(text)) + text))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(NAMES),
    edits=st.lists(st.tuples(st.floats(0.0, 1.0, exclude_max=True), st.integers(1, 255)), min_size=1,
                   max_size=4),
    cut=st.one_of(st.none(), st.floats(0.0, 1.0, exclude_max=True)),
)
def test_random_corruption_is_always_a_state_format_error(
    name: str, edits: list[tuple[float, int]], cut: float | None
) -> None:
    blob = bytearray(_blob(name))
    for where, mask in edits:
        blob[int(where * len(blob))] ^= mask  # a non-zero xor: the byte really changes
    if cut is not None:
        blob = blob[: int(cut * len(blob))]
    assume(bytes(blob) != _blob(name))  # two edits of one byte can cancel
    with pytest.raises(kons.StateFormatError):
        kons.load(bytes(blob))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(NAMES),
    edits=st.lists(st.tuples(st.floats(0.0, 1.0, exclude_max=True), st.integers(1, 255)), min_size=1,
                   max_size=3),
    in_header=st.booleans(),
)
def test_resigned_corruption_never_escapes_as_another_error(
    name: str, edits: list[tuple[float, int]], in_header: bool
) -> None:
    """Behind a valid checksum, a corrupted body gives a StateFormatError or a learner that still works."""
    blob = _blob(name)
    _, _, head_len = PREFIX.unpack_from(blob)
    body = bytearray(blob[:-DIGEST])
    start = PREFIX.size if in_header else PREFIX.size + head_len
    span = (PREFIX.size + head_len if in_header else len(body)) - start
    for where, mask in edits:
        body[start + int(where * span)] ^= mask
    try:
        learner = kons.load(_resign(bytes(body)))
    except kons.StateFormatError:
        return
    # Accepted (e.g. a changed float): the learner must be consistent enough to keep playing rounds.
    X, y = stream_for(learner, *_data())
    for x, label in zip(X[80:83], y[80:83], strict=True):
        with contextlib.suppress(kons.KonsError):
            assert np.isfinite(learner.learn_one(x, label))
    kons.load(learner.to_bytes())


def test_seeded_learner_state_without_generator_is_rejected() -> None:
    """A (re-signed) state of a seeded learner whose generator state is missing must not silently re-seed."""
    learner = SketchedKONS(seed=3)
    learner.learn_one([1.0, 2.0], 0.5)
    header, arrays = kons._state.decode(learner.to_bytes())
    header["rng"] = None
    with pytest.raises(kons.StateFormatError, match="generator"):
        kons.load(kons._state.encode(header, arrays))
