"""What the service's answers of a classifier hold, computed from kons in-process: the class the service
learns for a label, and a distribution keyed as the answers key it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from kons.classes import class_label


def learnt(label: Any) -> Any:
    """The label the service gives kons for ``label``: the user's own, as a class label (``1.0`` is the
    integer ``1``); kons itself reads -1, 0 and 1 as ``False``/``True`` for a learner of booleans."""
    return class_label(label)


def keyed(distribution: Mapping[Any, float] | Iterable[tuple[Any, float]]) -> dict[str, float]:
    """A distribution (a dict, or (class, probability) pairs) as the answers key it: each class as a JSON
    object key."""
    pairs = distribution.items() if isinstance(distribution, Mapping) else distribution
    return {c if isinstance(c, str) else json.dumps(c): p for c, p in pairs}


def key(label: Any) -> str:
    """The key of the class the service learns for ``label`` in an answer's probabilities."""
    return next(iter(keyed({learnt(label): 0.0})))
