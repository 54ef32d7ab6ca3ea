"""The versioned, pickle-free, checksummed byte format of a learner's state.

Layout (all integers little-endian)::

    b"KONSSTAT" | u16 format version | u32 header length | header (UTF-8 JSON) | array bytes | sha256

The header names the learner class, its parameters, scalar state (floats round-trip exactly through
JSON's shortest repr), the random generator's state and, for each array, its dtype, shape and byte
offset. Arrays are raw little-endian buffers read with ``np.frombuffer``: nothing is ever unpickled. An
array of integers may be saved in any of the integer dtypes of :data:`_INTEGERS` (:func:`integer_dtype`: the
narrowest that holds its values).
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from kons.errors import StateFormatError

__all__ = ["FORMAT_VERSION", "decode", "decode_header", "encode", "integer_dtype", "saved_counts"]

MAGIC = b"KONSSTAT"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<8sHI")
_DIGEST = 32
#: The integer dtypes of a state, narrowest first, with their ranges (|u1 also holds the nested state blobs
#: of wrapped learners).
_INTEGERS = tuple((dtype, int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
                  for dtype in map(np.dtype, ("|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8")))
_DTYPES = {"<f8", "|b1", *(dtype.str for dtype, _, _ in _INTEGERS)}


def integer_dtype(low: int, high: int) -> np.dtype:
    """The narrowest integer dtype of a state that holds every integer from ``low`` to ``high``."""
    for dtype, least, most in _INTEGERS:
        if least <= low and high <= most:
            return dtype
    raise OverflowError(f"no integer dtype of a state holds {low} to {high}.")


def saved_counts(values: Any, length: int, what: str) -> list[int]:
    """``values``, a list of ``length`` counts read from a state's header, else :class:`StateFormatError`
    (``what`` names them): a count is a non-negative int, never a float (which ``int`` would round down
    and load), a bool or a string, none of which a learner saves as one."""
    if (not isinstance(values, list) or len(values) != length
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)):
        raise StateFormatError(f"{what} are not {length} counts.")
    return list(values)


def _finite_float(text: str) -> float:
    # A learner never commits a non-finite number, so a state that holds one is corrupted.
    value = float(text)
    if not math.isfinite(value):
        raise StateFormatError(f"state header holds a non-finite number ({text}).")
    return value


def _reject_constant(token: str) -> float:
    raise StateFormatError(f"state header holds the non-finite token {token}.")


def encode(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
    """Serialise ``header`` (JSON-able) and named arrays into one self-checking blob."""
    specs, chunks, offset = [], [], 0
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr)
        if arr.dtype.str not in _DTYPES:  # pragma: no cover - a programming error, not input
            raise TypeError(f"array {name!r} has unsupported dtype {arr.dtype}")
        specs.append({"name": name, "dtype": arr.dtype.str, "shape": list(arr.shape), "offset": offset})
        chunks.append(arr.tobytes())
        offset += arr.nbytes
    head = json.dumps({**header, "arrays": specs}, allow_nan=False, separators=(",", ":")).encode()
    body = b"".join([_PREFIX.pack(MAGIC, FORMAT_VERSION, len(head)), head, *chunks])
    return body + hashlib.sha256(body).digest()


def decode_header(blob: bytes) -> dict[str, Any]:
    """The header of a blob (checksum verified), without building any of its arrays."""
    return _checked_header(blob)[0]


def decode(
    blob: bytes, check_header: Callable[[dict[str, Any]], None] | None = None, *, nested: bool = False
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Inverse of :func:`encode`; raises :class:`StateFormatError` on any inconsistency.

    ``check_header`` sees the header before any array is built (and may raise to refuse the blob).
    ``nested``: ``blob`` is an array of a state decoded here (a wrapped learner's), whose checksum covers
    its bytes: its own is not computed again (the rest is checked as for any state).
    """
    header, data = _checked_header(blob, nested=nested)
    if check_header is not None:
        check_header(header)
    try:
        arrays = {}
        for spec in header.pop("arrays"):
            if spec["dtype"] not in _DTYPES:
                raise StateFormatError(f"array {spec['name']!r} has a forbidden dtype.")
            dtype = np.dtype(spec["dtype"])
            shape = tuple(int(s) for s in spec["shape"])
            count = math.prod(shape)  # Python ints: a crafted shape cannot wrap around
            start = int(spec["offset"])
            if min(shape, default=0) < 0 or start < 0 or start + count * dtype.itemsize > len(data):
                raise StateFormatError(f"array {spec['name']!r} runs past the end of the state.")
            array = np.frombuffer(data, dtype=dtype, count=count, offset=start).reshape(shape).copy()
            if dtype.kind == "f" and not np.isfinite(array).all():
                raise StateFormatError(f"array {spec['name']!r} holds a non-finite number.")
            arrays[spec["name"]] = array
    except StateFormatError:
        raise
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
        raise StateFormatError(f"state header is malformed: {exc}") from None
    return header, arrays


def _checked_header(blob: bytes, *, nested: bool = False) -> tuple[dict[str, Any], memoryview]:
    """The parsed header and a view of the array bytes, once magic, version and checksum are checked."""
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise StateFormatError(f"state must be bytes; got {type(blob).__name__}.")
    blob = bytes(blob)
    if len(blob) < _PREFIX.size + _DIGEST:
        raise StateFormatError(f"state is truncated ({len(blob)} bytes).")
    magic, version, head_len = _PREFIX.unpack_from(blob)
    if magic != MAGIC:
        raise StateFormatError("not a kons state (bad magic bytes).")
    if version != FORMAT_VERSION:
        raise StateFormatError(f"unsupported state format version {version} (this is {FORMAT_VERSION}).")
    body, digest = blob[:-_DIGEST], blob[-_DIGEST:]
    if not nested and hashlib.sha256(body).digest() != digest:
        raise StateFormatError("state checksum mismatch: the blob is corrupted or truncated.")
    try:
        header = json.loads(
            body[_PREFIX.size : _PREFIX.size + head_len],
            parse_float=_finite_float,
            parse_constant=_reject_constant,
        )
    except (ValueError, RecursionError) as exc:
        raise StateFormatError(f"state header is malformed: {exc}") from None
    if not isinstance(header, dict):
        raise StateFormatError("state header is malformed: not a JSON object.")
    return header, memoryview(body)[_PREFIX.size + head_len :]
