"""What every expert of :class:`~kons.Auto`'s grid is to the grid: :class:`Expert`, played on a :class:`Row`.

The grid's rounds are single loops over its experts (:mod:`kons.auto.grid`); what differs from one kind
to another (the form of the row it takes, how it guards its numerics, whether it learns outside its
plays) is its adapter's business, in the kind's own module, and so are the kind's build from a grid, its
restore from a saved state and the bytes one more class adds to it (they take the grid as a
:class:`GridContext`: the experts' modules do not import the grid). A kind of expert is added to the grid by
its module and one line of :data:`kons.auto.grid.EXPERTS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np

from kons.errors import NumericalError, StateFormatError
from kons.sparse import SparseVector, dense

if TYPE_CHECKING:
    from kons.auto.experts.bins import QuantileBins
    from kons.auto.mixture import Mixture
    from kons.preprocessing import FeatureScaler, TargetScaler

__all__ = ["ClassModel", "Expert", "Form", "GridContext", "LearnsInItsPlays", "ModelExpert", "PlayTogether",
           "Row", "by_play", "guarded", "guarded_probabilities", "in_play", "ints_and_floats",
           "restore_saved"]

#: A form of the row an expert takes: (its view: 0 (or False) the standardised row, 1 (or True) its signed
#: log, 2 the standardised row without a record's categorical names; with the intercept?).
Form = tuple[int, bool]


class Row:
    """One round's row as the experts take it: each form of the standardised views (computed and checked
    once for all the experts that take it), the raw row ``x`` and, where the grid has it, ``before``: the
    standardised view with the intercept by the statistics of the rows before this one (regression's dense
    rows; :meth:`~kons.auto.grid.Grid.inputs`), which the linear models play on."""

    __slots__ = ("before", "forms", "x")

    def __init__(self, forms: dict[Form, np.ndarray | SparseVector], x: np.ndarray | SparseVector,
                 before: np.ndarray | None = None) -> None:
        self.forms, self.x, self.before = forms, x, before

    def raw(self) -> np.ndarray:
        """The raw row, dense."""
        return dense(self.x)


#: How experts of one kind play a multinomial round's class probabilities all at once: given them in play
#: with their slots, the row and the grid's (slots, classes) probabilities, it fills their rows as each
#: one's :meth:`Expert.probabilities` would, bit for bit, with fewer numpy calls than one play each.
PlayTogether = Callable[[list[tuple[int, Any]], "Row", np.ndarray], None]


class Expert(Protocol):
    """An expert of the grid: it plays a score (regression: a standardised target; binary: log-odds) or
    the probabilities of ``classes`` classes, and learns the round's target or label.

    Every expert plays only while its slot is in the mixture. ``sleeps``: an expert that sleeps enters it
    when :meth:`ready`; the others are in it from when they exist. Either kind may nap (out of the mixture
    while its weight is negligible, back at a declared change: :class:`kons.auto.grid.Kind`).
    :meth:`observe` is its round outside its plays (a sleeping expert that keeps rows, a tree that learns
    every row after the mixture's update).
    """

    sleeps: bool
    @property
    def plays_together(self) -> PlayTogether | None:
        """None, or how the experts of this kind play their class probabilities together (the grid then
        calls it once for all of them in play instead of their :meth:`probabilities`)."""
        ...

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

    def forget(self, rounds: int) -> None:
        """At a declared change: of the rows it keeps, keep only those of the last ``rounds`` rounds (the
        rows since the change's onset); nothing for an expert that keeps no rows."""
        ...

    def hold_growth(self, held: bool) -> None: ...

    def nbytes(self) -> int: ...

    def growth_nbytes(self, rounds: int) -> int:
        """An upper bound of the growth of :meth:`nbytes` over ``rounds`` rounds (while held, only what
        no hold stops: the forest's saved counts widen when a class's rows pass what their integers
        hold)."""
        ...

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        """The state's arrays, named after the expert's slot ``name``."""
        ...

    def scalars(self) -> Any:
        """The state's JSON scalars, None if it has none."""
        ...


class LearnsInItsPlays:
    """The :class:`Expert` calls outside its plays of an expert that learns only in them and keeps no rows:
    it never sleeps, and observes and forgets nothing."""

    sleeps = False

    def observe(self, row: Row, target: float, classes: int, playing: bool) -> None:
        """Nothing: it learns in its plays."""

    def ready(self) -> bool:
        return True

    def forget(self, rounds: int) -> None:
        """Nothing: it keeps no rows."""


def by_play(playing: Iterable[tuple[int, Expert]]
            ) -> tuple[list[tuple[int, Expert]], dict[PlayTogether, list[tuple[int, Expert]]]]:
    """The experts in ``playing`` (slot, expert) that play their class probabilities alone, and the others
    grouped by their kind's :attr:`Expert.plays_together`, each in ``playing``'s order."""
    alone: list[tuple[int, Expert]] = []
    together: dict[PlayTogether, list[tuple[int, Expert]]] = {}
    for played in playing:
        play = played[1].plays_together
        if play is None:
            alone.append(played)
        else:
            together.setdefault(play, []).append(played)
    return alone, together


def guarded(call: Callable[..., float], *args: Any) -> float:
    """An expert's play, or 0 (the mean) when its round overflows: the expert is then left as it was, and
    the others and the mixture go on, so that one expert's numerics never reject the round."""
    try:
        return call(*args)
    except NumericalError:
        return 0.0


def guarded_probabilities(call: Callable[[Any, Any], np.ndarray], classes: int, first: Any, second: Any
                          ) -> np.ndarray:
    """An expert's class probabilities ``call(first, second)`` (a play of a row, or a learning round of a
    row and its label), or the uniform ones when its round overflows (as :func:`guarded`). Two arguments,
    not ``*args``: every Newton expert plays and learns each round of classes through it, and packing
    them into a tuple about doubles the call's own cost."""
    try:
        return call(first, second)
    except NumericalError:
        return np.full(classes, 1.0 / classes)


class GridContext(Protocol):
    """What a kind of expert's build and restore take of the grid (:class:`kons.auto.grid.Grid`): its
    task and rows, the thresholds of its warm-up rows, the log view's scaler (sparse rows?), its mixture,
    the mixture's slots by name and the experts of the kinds before."""

    @property
    def loss(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def linear_dim(self) -> int: ...

    @property
    def weight_variance(self) -> float: ...

    @property
    def bound(self) -> float: ...

    @property
    def seed(self) -> int: ...

    @property
    def classes(self) -> int: ...

    @property
    def quantile_bins(self) -> QuantileBins | None: ...

    @property
    def log_scaler(self) -> FeatureScaler: ...

    @property
    def targets(self) -> TargetScaler | None: ...

    @property
    def mixture(self) -> Mixture: ...

    @property
    def slot(self) -> Mapping[str, int]: ...

    def experts_of(self, name: str) -> list[Expert] | None:
        """The experts of the kind whose first slot is ``name``, built before the one building."""
        ...

    @property
    def kept_targets(self) -> Callable[[], np.ndarray]:
        """The targets of the rounds kept for a replay, oldest first, as they are when called."""
        ...


def in_play(grid: GridContext, slot: str) -> bool:
    """Whether the mixture's slot ``slot`` is in play."""
    return bool(grid.mixture.switching.active[grid.slot[slot]])


def restore_saved(grid: GridContext, built: list[Expert] | None, arrays: dict[str, np.ndarray], slot: str,
                  what: str, restore: Callable[[list[Expert]], None]) -> list[Expert] | None:
    """The experts of the kind whose first slot is ``slot`` (``what`` they are, for the errors), loaded into
    ``built`` by ``restore`` from their arrays ``<slot>_*``; none in a state saved before they existed
    (their slots stay empty, so that such a learner goes on as it would have)."""
    if not any(name.startswith(f"{slot}_") for name in arrays):
        if in_play(grid, slot):
            raise StateFormatError(f"{what} play where there are none.")
        return None
    if built is None:
        raise StateFormatError(f"{what} do not match the grid.")
    restore(built)
    return built


class ClassModel(Protocol):
    """A model of classes on the raw row that :class:`ModelExpert` wraps (a tree, a forest)."""

    held: bool

    @property
    def rows_learnt(self) -> int: ...

    def predict_proba(self, x: np.ndarray) -> np.ndarray: ...

    def learn(self, x: np.ndarray, label: int) -> None: ...

    def widen(self, classes: int) -> None: ...

    def nbytes(self) -> int:
        """The bytes of :meth:`state`'s arrays."""
        ...

    def growth_nbytes(self, rounds: int) -> int: ...

    def state(self, prefix: str) -> dict[str, np.ndarray]: ...


def ints_and_floats(arrays: dict[str, np.ndarray], prefix: str, what: str) -> tuple[np.ndarray, np.ndarray]:
    """The two arrays a :class:`ClassModel` saves its state in, ``<prefix>_ints`` and ``<prefix>_floats``
    (few arrays: each costs a saved state a header); ``what`` they are, for the error if one is missing."""
    try:
        return np.asarray(arrays[f"{prefix}_ints"]), np.asarray(arrays[f"{prefix}_floats"])
    except KeyError as exc:
        raise StateFormatError(f"{what} is incomplete: {exc}") from None


Model = TypeVar("Model", bound=ClassModel)


class ModelExpert(Generic[Model]):
    """A :class:`ClassModel` as an expert on the raw row, asleep until it has learnt ``wake_rows`` rows. It
    learns every row, in play or not, in :meth:`observe` (after the mixture's update: one that enters then
    plays from the next round); its plays are the model's probabilities (a subclass says its binary
    score)."""

    sleeps = True
    plays_together = None

    def __init__(self, model: Model, *, wake_rows: int) -> None:
        self.model, self.wake_rows = model, wake_rows
        # the last row played, the rows the model had learnt then, the classes and the play (not state): a
        # row played and then learnt is walked down the model once (the grid hands the same Row to both)
        self._played: tuple[Row, int, int, np.ndarray] | None = None

    def probabilities(self, row: Row, classes: int) -> np.ndarray:
        played, learnt = self._played, self.model.rows_learnt
        if played is not None and played[0] is row and played[1] == learnt and played[2] == classes:
            return played[3]
        self.model.widen(classes)
        play = self.model.predict_proba(row.raw())[:classes]
        self._played = row, learnt, classes, play
        return play

    def learn_class(self, row: Row, label: int, classes: int) -> np.ndarray:
        """Its probabilities: it learns the row in :meth:`observe`."""
        return self.probabilities(row, classes)

    def widen(self, classes: int) -> None:
        self.model.widen(classes)

    def observe(self, row: Row, target: float, classes: int, playing: bool) -> None:
        """Learn the row of class index ``target``."""
        self.model.widen(classes)
        self.model.learn(row.raw(), int(target))

    def ready(self) -> bool:
        return self.model.rows_learnt >= self.wake_rows

    def forget(self, rounds: int) -> None:
        """Nothing: its model keeps no rows."""

    def hold_growth(self, held: bool) -> None:
        self.model.held = held

    def nbytes(self) -> int:
        return self.model.nbytes()

    def growth_nbytes(self, rounds: int) -> int:
        return self.model.growth_nbytes(rounds)

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        return self.model.state(name)

    def scalars(self) -> Any:
        return None
