"""The one exception tree of :mod:`kons`.

Every error a caller can provoke is a :class:`KonsError`; the concrete classes also derive from
:class:`ValueError` so that code written against plain NumPy conventions keeps working.
"""

from __future__ import annotations

__all__ = [
    "InvalidInputError",
    "InvalidParameterError",
    "KonsError",
    "NumericalError",
    "StateFormatError",
]


class KonsError(Exception):
    """Base class of every error raised on purpose by :mod:`kons`."""


class InvalidParameterError(KonsError, ValueError):
    """A hyper-parameter is out of its domain, unknown, or of the wrong type (raised at construction)."""


class InvalidInputError(KonsError, ValueError):
    """An example (``x`` or ``y``) is malformed: wrong shape or dimension, non-finite, bad label.

    The learner is unchanged when this is raised.
    """


class NumericalError(KonsError, ValueError):
    """The round would put a non-finite number into the learner's state; it was rejected unchanged."""


class StateFormatError(KonsError, ValueError):
    """A saved-state blob is truncated, corrupted, of an unknown version, or for another learner."""
