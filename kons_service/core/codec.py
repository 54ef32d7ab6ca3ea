"""Byte encodings of what the log and the id store hold: features, labels and played predictions.

Dense features are stored as raw little-endian float64 (exact, compact); any other shape (a sparse
``{"indices": [...], "values": [...]}``, a record ``{name: number | string | bool | null}``) as JSON, whose
floats round-trip exactly in Python. A label that is a float (a regression target, a binary label as the
learner plays it) is its 8 bytes of float64, as the log has always held them; any other label (a class
given as a string, an integer or a boolean) is JSON, padded so that it is never 8 bytes long: the length
tells the two apart, and entries logged before labels could be anything still decode. Decoding gives kons
the same values bit for bit, so a replay reproduces the original rounds.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np

__all__ = ["decode_features", "decode_label", "encode_features", "encode_label", "pack_float", "to_kons",
           "unpack_float"]

_DENSE, _JSON = b"D", b"J"
_F64 = struct.Struct("<d")


def to_kons(x: Any) -> Any:
    """What kons receives for a validated request ``x``: dense lists as float64 arrays, others as given."""
    return np.asarray(x, dtype=np.float64) if isinstance(x, list) else x


def encode_features(x: Any) -> bytes:
    if isinstance(x, np.ndarray):
        return _DENSE + np.ascontiguousarray(x, dtype="<f8").tobytes()
    return _JSON + json.dumps(x, allow_nan=False, separators=(",", ":")).encode()


def decode_features(payload: bytes) -> Any:
    kind, body = payload[:1], payload[1:]
    if kind == _DENSE:
        return np.frombuffer(body, dtype="<f8").astype(np.float64)
    if kind == _JSON:
        return json.loads(body)
    raise ValueError(f"unknown feature encoding {kind!r}")


def pack_float(value: float) -> bytes:
    return _F64.pack(value)


def unpack_float(payload: bytes) -> float:
    return float(_F64.unpack(payload)[0])


def encode_label(y: Any) -> bytes:
    """A label as the log keeps it: a float as its float64 bytes, anything else as JSON (never 8 bytes)."""
    if isinstance(y, float):  # (NumPy's float64 too)
        return _F64.pack(y)
    text = json.dumps(y, allow_nan=False, separators=(",", ":")).encode()
    return text + b" " if len(text) == _F64.size else text  # (JSON allows the trailing space)


def decode_label(payload: bytes) -> Any:
    if len(payload) == _F64.size:
        return float(_F64.unpack(payload)[0])
    return json.loads(payload)
