"""Resource limits in kons: a learner's state size known from its parameters (before anything is
built), degenerate regularisers refused at construction, and state blobs checked before they allocate."""

from __future__ import annotations

import hashlib
import json
import tracemalloc
from typing import Any

import numpy as np
import pytest

import kons
from kons import _state

#: The paper learners (the pipelines' bounds are those of their full grid or base, see kons.preprocessing).
NAMES = sorted(name for name, cls in kons.LEARNERS.items() if not cls.preprocesses)
SKETCHES = {"fd_son", "oja_son", "rp_son"}


def _params(name: str, dim: int) -> dict[str, Any]:
    if name == "nystrom_kons":
        return {"dim": dim, "max_dictionary": 2}
    return {"dim": dim, **({"sketch_size": 7} if name in SKETCHES else {})}


def _array_bytes(obj: object, seen: set[int] | None = None) -> int:
    """Bytes of every NumPy array a learner holds, found by walking its attributes (the independent
    count the estimate is compared with); a growable buffer counts its whole capacity."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if type(obj).__module__.startswith("kons."):  # a learner and its parts (buffers, sketches, KORS, ...)
        return sum(_array_bytes(v, seen) for v in getattr(obj, "__dict__", {}).values())
    return 0


@pytest.mark.parametrize("name", NAMES)
def test_state_bytes_bounds_what_a_learner_holds_after_its_first_round(name: str) -> None:
    dim = 60
    learner = kons.learner_class(name).from_params(_params(name, dim))
    learner.learn_one(np.linspace(-1.0, 1.0, dim), 0.5)
    if name == "nystrom_kons":  # its bound is that of a full dictionary: fill it
        for i in range(1, 40):
            learner.learn_one(np.linspace(-1.0, 1.0, dim) * np.cos(i), np.sin(i))
        assert learner.stats()["dictionary_size"] == 2
    held = _array_bytes(learner)
    estimate = kons.learner_class(name).state_bytes(_params(name, dim))
    # An upper bound, and a tight one (Oja-SON counts the Gaussian its random start draws).
    assert held <= estimate <= 2 * held + 1024, (held, estimate)


def test_the_state_of_an_exact_kons_grows_with_its_rounds_past_its_initial_bound() -> None:
    learner = kons.KONS(dim=4)
    rng = np.random.default_rng(2)
    sizes = []
    for _ in range(4):
        for _ in range(100):
            learner.learn_one(rng.normal(size=4), float(rng.normal()))
        sizes.append(learner.state_nbytes())
    assert sizes == sorted(sizes) and sizes[-1] > 8 * 400 * 400 // 2  # the packed factor of 400 rounds
    assert sizes[-1] > 100 * kons.KONS.state_bytes({"dim": 4})


@pytest.mark.parametrize("name", NAMES)
def test_state_bytes_of_an_absurd_dimension_is_a_number_not_an_allocation(name: str) -> None:
    tracemalloc.start()
    try:
        estimate = kons.learner_class(name).state_bytes(_params(name, 10**30))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert estimate >= 8 * 10**30
    assert peak < 2**20


def test_state_bytes_grows_with_the_square_of_the_dimension_for_ons_only() -> None:
    assert kons.ONS.state_bytes({"dim": 10_000}) == 8 * (10_000**2 + 10_000)
    assert kons.RPSON.state_bytes({"dim": 10, "sketch_size": 10**9}) > 8 * 10**18  # m^2 for H
    assert kons.OGD.state_bytes({"dim": 10_000}) == 8 * 10_000


def test_state_bytes_checks_parameters_like_the_constructor() -> None:
    with pytest.raises(kons.InvalidParameterError, match="sketch_size"):
        kons.FDSON.state_bytes({"dim": 3, "sketch_size": -1})
    with pytest.raises(kons.InvalidParameterError, match="Unknown parameter"):
        kons.ONS.state_bytes({"dim": 3, "bogus": 1})
    assert kons.ONS.state_bytes({}) == 0  # no dimension yet: nothing allocated before the first round


@pytest.mark.parametrize("name", sorted(n for n in NAMES if "alpha" in kons.LEARNERS[n]._param_names()))
@pytest.mark.parametrize("alpha", [1e-320, 1e-300, 1e-8])
def test_a_regulariser_that_makes_rounds_fail_is_refused_at_construction(name: str, alpha: float) -> None:
    with pytest.raises(kons.InvalidParameterError, match="alpha"):
        kons.learner_class(name).from_params({**_params(name, 3), "alpha": alpha})


@pytest.mark.parametrize("name", sorted(n for n in NAMES if "alpha" in kons.LEARNERS[n]._param_names()))
def test_the_smallest_accepted_regulariser_still_learns(name: str) -> None:
    learner = kons.learner_class(name).from_params({**_params(name, 5), "alpha": 1e-6})
    rng = np.random.default_rng(0)
    for _ in range(50):
        learner.learn_one(rng.normal(size=5), float(rng.normal()))
    assert learner.stats()["rounds"] == 50


def _crafted_ons_blob(dim: int) -> bytes:
    """A well-formed, checksummed blob that claims an ONS of dimension ``dim`` but holds no arrays."""
    header = _state.decode_header(kons.ONS(dim=2).to_bytes())
    header.pop("arrays")
    header["params"]["dim"] = dim
    header["dim"] = dim
    return _state.encode(header, {})


def test_a_crafted_state_is_refused_before_its_learner_is_built() -> None:
    blob = _crafted_ons_blob(10_000)  # would allocate 800 MB
    assert len(blob) < 1000
    tracemalloc.start()
    try:
        with pytest.raises(kons.StateFormatError, match="would allocate 800080000 bytes"):
            kons.load(blob, max_bytes=2**20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20


def test_max_bytes_accepts_a_state_within_it() -> None:
    learner = kons.ONS(dim=20)
    learner.learn_one(np.ones(20), 1.0)
    restored = kons.load(learner.to_bytes(), max_bytes=kons.ONS.state_bytes({"dim": 20}))
    assert restored.to_bytes() == learner.to_bytes()


def test_peek_reads_the_algorithm_and_parameters_without_building() -> None:
    tracemalloc.start()
    try:
        algorithm, params = kons.peek(_crafted_ons_blob(10_000))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert algorithm == "ons"
    assert params["dim"] == 10_000
    assert peak < 2**20


def test_a_negative_array_shape_is_refused() -> None:
    learner = kons.OGD(dim=4)
    learner.learn_one(np.ones(4), 1.0)
    header = _state.decode_header(learner.to_bytes())
    for spec in header["arrays"]:
        spec["shape"] = [-spec["shape"][0]]
    head = json.dumps(header).encode()
    body = _state._PREFIX.pack(_state.MAGIC, _state.FORMAT_VERSION, len(head)) + head + bytes(64)
    with pytest.raises(kons.StateFormatError, match="runs past the end"):
        kons.load(body + hashlib.sha256(body).digest())
