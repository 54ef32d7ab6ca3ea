"""What every expert of :class:`~kons.Auto`'s grid is to the grid: :class:`Expert`, played on a :class:`Row`.

The grid's rounds are single loops over its experts (:mod:`kons.auto.grid`); what differs from one kind
to another (the form of the row it takes, how it guards its numerics, whether it learns outside its
plays) is its adapter's business, in the kind's own module. A kind of expert is added to the grid by its
adapter and one line of :data:`kons.auto.grid.EXPERTS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from kons.errors import NumericalError
from kons.sparse import SparseVector, dense

__all__ = ["Expert", "Form", "Row", "guarded", "guarded_probabilities"]

#: A form of the row an expert takes: (the signed-log view?, with the intercept?).
Form = tuple[bool, bool]


class Row:
    """One round's row as the experts take it: each form of the standardised views (computed and checked
    once for all the experts that take it) and the raw row ``x``."""

    __slots__ = ("forms", "x")

    def __init__(self, forms: dict[Form, np.ndarray | SparseVector], x: np.ndarray | SparseVector) -> None:
        self.forms, self.x = forms, x

    def raw(self) -> np.ndarray:
        """The raw row, dense."""
        return dense(self.x)


class Expert(Protocol):
    """An expert of the grid: it plays a score (regression: a standardised target; binary: log-odds) or
    the probabilities of ``classes`` classes, and learns the round's target or label.

    ``sleeps``: an expert that sleeps plays only while its slot is in the mixture (it enters when
    :meth:`ready`); the others play from when they exist. :meth:`observe` is its round outside its plays
    (a sleeping expert that keeps rows, a tree that learns every row after the mixture's update).
    """

    sleeps: bool

    def predict(self, row: Row) -> float: ...

    def learn(self, row: Row, target: float) -> float:
        """Play the score for ``row``, then learn ``target``; the score played."""
        ...

    def probabilities(self, row: Row, classes: int) -> np.ndarray: ...

    def learn_class(self, row: Row, label: int, classes: int) -> np.ndarray:
        """Play the probabilities of ``classes`` classes, then learn ``label``; the probabilities played."""
        ...

    def widen(self, classes: int) -> None:
        """Make room for ``classes`` classes (from a binary model, or for a new class)."""
        ...

    def observe(self, row: Row, target: float, classes: int, playing: bool) -> None:
        """A round outside its plays (``target``: the standardised target, or the class index)."""
        ...

    def ready(self) -> bool:
        """Whether a sleeping expert would play: it enters the mixture then."""
        ...

    def hold_growth(self, held: bool) -> None: ...

    def nbytes(self) -> int: ...

    def growth_nbytes(self, rounds: int) -> int:
        """An upper bound of the growth of :meth:`nbytes` over ``rounds`` rounds (0 while held)."""
        ...

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        """The state's arrays, named after the expert's slot ``name``."""
        ...

    def scalars(self) -> Any:
        """The state's JSON scalars, None if it has none."""
        ...


def guarded(call: Callable[..., float], *args: Any) -> float:
    """An expert's play, or 0 (the mean) when its round overflows: the expert is then left as it was, and
    the others and the mixture go on, so that one expert's numerics never reject the round."""
    try:
        return call(*args)
    except NumericalError:
        return 0.0


def guarded_probabilities(call: Callable[..., np.ndarray], classes: int, *args: Any) -> np.ndarray:
    """An expert's class probabilities, or the uniform ones when its round overflows (as :func:`guarded`)."""
    try:
        return call(*args)
    except NumericalError:
        return np.full(classes, 1.0 / classes)
