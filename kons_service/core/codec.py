"""Byte encodings of what the log and the id store hold: features, labels and played predictions.

Dense features are stored as raw little-endian float64 (exact, compact); any other shape (a sparse
``{"indices": [...], "values": [...]}``, a record ``{name: number | string | bool | null}``) as JSON, whose
floats round-trip exactly in Python. A label that is a float (a regression target, a binary label as the
learner plays it) is its 8 bytes of float64, as the log has always held them; any other label (a class
given as a string, an integer or a boolean) is JSON, padded so that it is never 8 bytes long: the length
tells the two apart, and entries logged before labels could be anything still decode. Decoding gives kons
the same values bit for bit, so a replay reproduces the original rounds.

The answer of a feedback request kept for its retries (:func:`encode_answer`) holds a classifier's played
probabilities as raw float64 in base64 (exact, under 11 characters each), the classes once: a JSON pair
``[label, p]`` per class and round made a 209-round answer of a 256-class learner 1.99 MB.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["decode_answer", "decode_features", "decode_label", "encode_answer", "encode_features",
           "encode_label", "pack_float", "pack_play", "play_scored", "to_kons", "unpack_float"]

_DENSE, _JSON = b"D", b"J"
_F64 = struct.Struct("<d")
_PLAY_SCORED = struct.Struct("<dd?")


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
    """A float packed by :func:`pack_float` (or a play packed by :func:`pack_play`)."""
    return float(_F64.unpack_from(payload)[0])


def pack_play(value: float, scored: tuple[float, bool] | None = None) -> bytes:
    """A round's play as the log keeps it: its float, then, for a classifier that plays class probabilities,
    ``scored``: the round's log loss and whether it predicted the label (one byte), which its float does
    not say (what :meth:`.Shadows.compare` scores)."""
    if scored is None:
        return _F64.pack(value)
    return _PLAY_SCORED.pack(value, scored[0], scored[1])


def play_scored(payload: bytes) -> tuple[float, bool] | None:
    """The log loss of a play packed by :func:`pack_play` and whether it predicted its label (None: not
    recorded)."""
    if len(payload) != _PLAY_SCORED.size:
        return None
    _, loss, correct = _PLAY_SCORED.unpack(payload)
    return float(loss), bool(correct)


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


def encode_answer(fingerprint: str, predictions: list[float], losses: list[float],
                  distributions: Sequence[Sequence[tuple[Any, float]]] | None,
                  labels: Sequence[Any] | None = None, conformal: Sequence[Any] | None = None) -> str:
    """The record of a request's answer (``fingerprint``: its body's): its rounds' predictions and losses
    and, for a classifier, the distribution each played over the classes then known and the class each
    predicted (``labels``). A learner's classes only grow, in order, so each round's are the first ones of
    the last round's: kept once, with each round's count, and every probability as float64 (base64).
    ``conformal``: the rounds' intervals (pairs of floats) or prediction sets (lists of labels), if the
    request asked a coverage."""
    record: dict[str, Any] = {"body": fingerprint, "predictions": predictions, "losses": losses}
    if distributions is not None and labels is not None:
        record["labels"] = list(labels)
    if conformal:  # (only then: the records of before are as they were)
        record["conformal"] = {"sets" if isinstance(conformal[0], list) else "intervals": list(conformal)}
    if distributions is not None:
        classes = [label for label, _ in distributions[-1]] if distributions else []
        typed = [(type(label), label) for label in classes]  # (True and 1 are two classes)
        if all([(type(label), label) for label, _ in d] == typed[:len(d)] for d in distributions):
            probabilities = np.array([p for d in distributions for _, p in d], dtype="<f8")
            record["classes"] = classes
            record["counts"] = [len(d) for d in distributions]
            record["probabilities"] = base64.b64encode(probabilities.tobytes()).decode()
        else:  # (not seen: a learner whose classes were not kept in order) as pairs
            record["distributions"] = [[[label, p] for label, p in d] for d in distributions]
    return json.dumps(record, separators=(",", ":"))


def decode_answer(record: str) -> tuple[dict[str, Any], list[list[tuple[Any, float]]] | None]:
    """:func:`encode_answer`'s record: its fields (``labels`` absent from a record written before the
    rounds said their class; ``conformal`` as ``{"intervals": [[low, high], ...]}`` or
    ``{"sets": [[label, ...], ...]}``), and the distributions (None: not a classifier's). Reads records of
    every format (as pairs, written before the compact one; none, before classes)."""
    answer = json.loads(record)
    if "probabilities" in answer:
        values = np.frombuffer(base64.b64decode(answer["probabilities"]), dtype="<f8").tolist()
        distributions, start = [], 0
        for count in answer["counts"]:
            classes, probabilities = answer["classes"][:count], values[start:start + count]
            distributions.append(list(zip(classes, probabilities, strict=True)))
            start += count
        return answer, distributions
    pairs = answer.get("distributions")
    return answer, None if pairs is None else [[(c, p) for c, p in d] for d in pairs]
