"""What the service's answers of a classifier hold, computed from kons in-process: the class the service
learns for a label, and a distribution keyed as the answers key it."""

from __future__ import annotations

import json
from typing import Any

from kons.classes import class_label, legacy_sign


def learnt(label: Any) -> Any:
    """The class the service learns for ``label``: the label as given, but the labels of the binary
    learners of before (-1, 0, 1, false, true) as the classes -1 and 1 (what ``Auto.check_round`` gives,
    so that a learner's log, floats for those labels, replays as it was played)."""
    sign = legacy_sign(class_label(label))
    return label if sign is None else int(sign)


def keyed(distribution: dict[Any, float]) -> dict[str, float]:
    """A distribution as the answers key it: each class as a JSON object key."""
    return {c if isinstance(c, str) else json.dumps(c): p for c, p in distribution.items()}


def key(label: Any) -> str:
    """The key of the class the service learns for ``label`` in an answer's probabilities."""
    return next(iter(keyed({learnt(label): 0.0})))
