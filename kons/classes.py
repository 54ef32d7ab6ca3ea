r"""Class labels of a classification learner: any JSON scalar, classes learnt as they appear.

A label is a string, an integer or a boolean (a float that is an integer, ``2.0``, is the integer ``2``;
NaN, None, other floats and containers are refused). Classes are told apart by type and value, so
``True`` and ``1`` are two classes, and :class:`Classes` gives each a fixed index:

* **Two classes: the binary learners' roles.** Index 0 is the negative class (label :math:`-1` of the
  logistic loss) and index 1 the positive one (:math:`+1`), so the score of a binary learner is the
  log-odds of ``classes[1]`` against ``classes[0]``. The labels of the binary learners of before,
  ``{-1, +1}``, ``{0, 1}`` and ``{false, true}``, keep their role: ``1`` and ``True`` are positive, ``-1``,
  ``0`` and ``False`` negative, whichever comes first (a stream of them plays exactly as before). Any other
  label takes the free role, the negative one first: for ``"a"`` then ``"b"``, ``"b"`` is positive.
* **More classes.** A third class and the next ones take the next indices, in order of first appearance;
  index 0 stays the reference class of the multinomial model (:mod:`kons.auto`).

So :attr:`Classes.labels` is the order of appearance except that the first two are listed negative first.

**Booleans.** A learner whose classes are booleans saves exactly the state the binary learners saved
before classes were recorded (the counts of its labels tell which booleans it has seen), so its state
cannot tell whether it was given booleans or the numbers -1, 0 and 1, which those learners took alike
(the service's logs of before hold its binary labels as -1.0 and +1.0, whatever its users sent, and it
replays them to such a learner). Such a learner therefore reads -1 and 0 as ``False`` and 1 as ``True``;
any other learner keeps ``True`` and ``1`` apart (a learner given ``1`` first has the class ``1``, and
``True`` is then another class).

Bounds: at most :data:`MAX_CLASSES` classes and labels of at most :data:`MAX_LABEL_CHARS` characters, so
that the state stays bounded whatever the stream sends.

Examples
--------
>>> from kons.classes import Classes
>>> def learn(classes, labels):
...     for label in labels:
...         if classes.index(label) < 0:
...             classes.add(label, classes.new_index(label))
...     return [classes.index(label) for label in labels]
>>> classes = Classes()
>>> learn(classes, ["dog", "cat", "dog", 7, True]), classes.labels
([0, 1, 0, 2, 3], ['dog', 'cat', 7, True])
>>> legacy = Classes()
>>> learn(legacy, [1, 0]), legacy.labels  # 1 keeps the positive role
([1, 0], [0, 1])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kons.errors import InvalidInputError, StateFormatError

__all__ = ["MAX_CLASSES", "MAX_LABEL_CHARS", "Classes", "class_label", "class_position", "legacy_sign"]

#: Most classes a learner keeps. Each class adds a column of weights to every base of ``auto`` (at most
#: 200 floats per Nystrom base, d + 1 per linear one): 256 classes add about 3.3 MB to a grid of 4 MB
#: for d = 8, and a round's O(j K) weight update stays below its O(j^2) matrix update up to K = j = 200.
#: Beyond it, a label is refused rather than the state allowed to grow with the stream.
MAX_CLASSES = 256
#: Longest label string (characters): a label is kept in the state as long as the learner lives.
MAX_LABEL_CHARS = 256

#: The binary roles of the labels of the binary learners of before (index 0 negative, 1 positive).
_LEGACY_ROLE = {("bool", False): 0, ("int", 0): 0, ("int", -1): 0, ("bool", True): 1, ("int", 1): 1}

_Key = tuple[str, Any]


def class_label(y: Any) -> bool | int | str:
    """``y`` as a class label (a JSON scalar: bool, int or str), else :class:`InvalidInputError`."""
    if isinstance(y, bool | np.bool_):
        return bool(y)
    if isinstance(y, int | np.integer):
        value = int(y)
        if not -(2**63) <= value < 2**63:
            raise InvalidInputError(f"an integer class label must fit in 64 bits; got {value}.")
        return value
    if isinstance(y, float | np.floating):
        if not math.isfinite(y) or not float(y).is_integer():
            raise InvalidInputError(
                f"a class label must be a string, an integer or a boolean; got the float {float(y)!r}.")
        return class_label(int(y))
    if isinstance(y, str):
        if len(y) > MAX_LABEL_CHARS:
            raise InvalidInputError(f"a class label has at most {MAX_LABEL_CHARS} characters; got {len(y)}.")
        return str(y)  # numpy's str_ too: the same class as the str
    raise InvalidInputError(
        f"a class label must be a string, an integer or a boolean; got {type(y).__name__}.")


def legacy_sign(label: bool | int | str) -> float | None:
    """The label of the binary learners of before as their -1.0 or +1.0 (None for any other label)."""
    role = _LEGACY_ROLE.get(_key(label))
    return None if role is None else (1.0 if role else -1.0)


def _key(label: bool | int | str) -> _Key:
    """The label's identity: its JSON type and value (``True`` and ``1`` are different classes)."""
    return type(label).__name__, label


def class_position(classes: Sequence[Any], label: Any) -> int:
    """The position of the class of ``label`` in ``classes`` (a learner's, in their order), -1 if absent;
    told apart by type and value, so ``True`` is not the class ``1``.

    >>> class_position([1, True], True), class_position([1, True], 1.0), class_position([1, True], "1")
    (1, 0, -1)
    """
    key = _key(class_label(label))
    return next((i for i, c in enumerate(classes) if _key(c) == key), -1)


class Classes:
    """The classes seen, each with its index (see :mod:`kons.classes`)."""

    def __init__(self) -> None:
        self._labels: list[Any] = [None, None]  # by index; None: a binary role not taken yet
        self._index: dict[_Key, int] = {}

    @property
    def labels(self) -> list[Any]:
        """The classes seen, by index (the binary roles first: negative, positive)."""
        return [label for label in self._labels if label is not None]

    def __len__(self) -> int:
        return len(self._index)

    @property
    def binary(self) -> bool:
        """Whether at most two classes have been seen (the binary learners' model)."""
        return len(self._labels) == 2

    def label_of(self, index: int) -> Any:
        return self._labels[index]

    def label(self, y: Any) -> bool | int | str:
        """The class label of ``y`` for this learner (:func:`class_label`; see *Booleans* in
        :mod:`kons.classes` for -1, 0 and 1 given to a learner of booleans)."""
        label = class_label(y)
        if (type(label) is int and -1 <= label <= 1 and self._index
                and all(kind == "bool" for kind, _ in self._index)):
            return label == 1
        return label

    def index(self, y: Any) -> int:
        """The index of the class of ``y``, ``-1`` if it is new (:class:`InvalidInputError` if invalid)."""
        return self._index.get(_key(self.label(y)), -1)

    def check(self, y: Any) -> bool | int | str:
        """``y`` as a label this learner can learn now (nothing added)."""
        label = self.label(y)
        if _key(label) not in self._index:
            self.new_index(label)
        return label

    def new_index(self, y: Any) -> int:
        """The index the new class ``y`` takes (:class:`InvalidInputError` beyond :data:`MAX_CLASSES`)."""
        key = _key(self.label(y))
        if len(self._index) >= MAX_CLASSES:
            raise InvalidInputError(f"this learner already has {MAX_CLASSES} classes, the most it keeps; "
                                    f"got the new label {key[1]!r}.")
        if not self.binary:
            return len(self._labels)
        free = [i for i, label in enumerate(self._labels) if label is None]
        if not free:
            return 2
        preferred = _LEGACY_ROLE.get(key)
        return preferred if preferred in free else free[0]

    def add(self, y: Any, index: int) -> None:
        """Add the new class ``y`` at the index :meth:`new_index` gave."""
        key = _key(self.label(y))
        if index < len(self._labels):
            self._labels[index] = key[1]
        else:
            self._labels.append(key[1])
        self._index[key] = index

    # ----------------------------------------------------------------- persistence
    def saved(self) -> list[Any] | None:
        """The labels by index (None for a free binary role), or None when they are booleans: those are
        implied by the label counts (False negative, True positive), so the state of a learner of
        booleans is the state it had before classes were recorded."""
        if all(isinstance(label, bool) for label in self._labels if label is not None):
            return None
        return list(self._labels)

    def restore(self, saved: list[Any] | None, counts: list[int]) -> None:
        """Load what :meth:`saved` gave, with the learner's label counts by index (for booleans)."""
        if saved is None:
            saved = [False if counts[0] else None, True if counts[1] else None]
        if not isinstance(saved, list) or len(saved) < 2 or len(saved) != len(counts):
            raise StateFormatError("the saved classes do not match the label counts.")
        self._labels, self._index = [None, None], {}
        for index, label in enumerate(saved):
            if label is None and index >= 2:
                raise StateFormatError("a saved class is missing.")
            if label is not None:
                if _key(class_label(label)) in self._index or (index >= 2 and index != len(self._labels)):
                    raise StateFormatError("the saved classes are inconsistent.")
                self.add(label, index)
