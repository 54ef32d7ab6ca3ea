"""Byte encodings of what the log and the id store hold: features, labels and played predictions.

Dense features are stored as raw little-endian float64 (exact, compact); any other shape (such as a
sparse ``{"indices": [...], "values": [...]}``) as JSON, whose floats round-trip exactly in Python.
Decoding gives kons the same values bit for bit, so a replay reproduces the original rounds.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np

__all__ = ["decode_features", "encode_features", "pack_float", "to_kons", "unpack_float"]

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
