r"""Records as features: a dict of named values, encoded online into the learner's fixed-width vector.

The learners that preprocess (:class:`~kons.Auto`, :class:`~kons.preprocessing.Preprocessed`, i.e. those
that declare ``accepts_records``) take a *record* wherever they take an array: a dict
``{name: number | str | bool | None}``, as an HTTP client sends a JSON object. A dict whose keys are
``{"indices", "values"}`` (optionally with ``"dim"``) is not a record but the sparse form
(:mod:`kons.sparse`), whatever its values.

How a record becomes a vector (:class:`RecordEncoder`)
------------------------------------------------------
* **Names take coordinates in order of first appearance** (the names new in one record in sorted order,
  so a record's key order never changes a result). A name or a category first seen at any round is
  accepted.
* **Numbers** (and booleans as 0/1) are the value of the name's numeric coordinate.
* **Strings are categories**, one-hot: each category of a name takes its own coordinate, up to
  :data:`MAX_CATEGORIES` per name; later categories share the name's *other* coordinate (counted).
* **None or absent** is missing (an empty record is all missing): the name's numeric and category
  coordinates are left out of the round (NaN in the encoded vector: the feature scaler imputes its
  running mean, i.e. 0 after standardising, and does not count the round in that coordinate's
  statistics) and the name's missing-indicator coordinate is 1 (0 when the value is given). For
  :class:`~kons.Auto` a missing number is first imputed by its conditional mean given the record's
  present numbers (:class:`GaussianImputer`, whose statistics count the numbers given only; the scaler
  then counts the imputed value as given); a record missing no number is encoded as before. Its feature
  scaler also scales a number's missing indicator by a fixed variance
  (:data:`~kons.preprocessing.GAP_VARIANCE`, :meth:`RecordEncoder.number_gaps`) rather than its own: a
  rare gap standardised would stand out by the inverse root of its rate.
* **A name given both numbers and strings** (``"age": "unknown"`` in a numeric column) holds both kinds:
  a string leaves its numeric coordinate out of the round (as missing, without the indicator) and sets
  its category; a number sets the numeric coordinate and 0 on its categories.
* **A coordinate's statistics start at its first value**: the coordinates a name or a category takes are
  left out of the feature scaler's statistics (NaN) until then, so a feature first seen at round 10,000
  is standardised by its own values, not diluted by 10,000 rounds in which it did not exist.

The width is fixed (the second-order learners hold :math:`d \times d` matrices)
-----------------------------------------------------------------------------------
The learner's ``dim`` when it is given; otherwise the first record sets it, with headroom:
:math:`\min(\mathrm{MAX\_WIDTH}, \max(\mathrm{MIN\_WIDTH}, \mathrm{WIDTH\_PER\_KEY} \cdot k))` for a first
record of :math:`k` keys (6 a key, 32 to 256 coordinates): a round's cost grows with the width (the
learners' matrices and dictionaries are as wide), so it is as narrow as the tuning records allowed
(docs/auto.md#warmup_ridge_per_key). The last ``width // 8`` coordinates (at least one) are hash buckets;
the others are taken one by one by names, categories and indicators as they appear. Once they are all
taken, every further name, category or indicator is *hashed* (CRC-32 of the name, kind and category) into
the buckets, where values add up, as River's ``FeatureHasher`` does; each hashed value is counted
(:meth:`RecordEncoder.encoding`). Names that never got a coordinate are not remembered, so the encoder's
state is bounded by the width whatever the stream: memory and per-round cost (O(keys + width)) are flat in
the number of rounds.

Bounds
------
A record is refused with :class:`~kons.errors.InvalidInputError` (the learner unchanged) when it has
more than :data:`MAX_KEYS` keys (checked before anything else is read), a name that is not a string or
is longer than :data:`MAX_NAME_LENGTH` characters, a string value longer than that, a nested dict, a
list inside it, a non-finite number, or numbers whose squared norm overflows.

Examples
--------
>>> import kons
>>> model = kons.Auto()
>>> for t in range(200):
...     city = ("Paris", "Lyon", "Lille")[t % 3]
...     _ = model.learn_one({"city": city, "rooms": t % 5, "floor": None if t % 7 == 0 else t % 4},
...                         {"Paris": 300.0, "Lyon": 200.0, "Lille": 100.0}[city] + 10.0 * (t % 5))
>>> round(model.predict_one({"city": "Lyon", "rooms": 2, "floor": 1}))  # (the target: 220)
219
>>> encoding = model.encoding()
>>> encoding["width"], [f["name"] for f in encoding["features"]]
(32, ['city', 'floor', 'rooms'])
>>> [(c["value"], c["count"]) for c in encoding["features"][0]["categories"]]
[('Paris', 67), ('Lyon', 67), ('Lille', 66)]
"""

from __future__ import annotations

import math
import operator
import zlib
from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.linalg.lapack import dpotrf, dpotri

from kons._validation import check_feature_floats
from kons.errors import InvalidInputError

__all__ = ["IMPUTE_BOUND", "IMPUTE_REFRESH", "IMPUTE_RIDGE", "MAX_CATEGORIES", "MAX_KEYS", "MAX_NAME_LENGTH",
           "MAX_WIDTH", "MIN_WIDTH", "WIDTH_PER_KEY", "GaussianImputer", "Record", "RecordEncoder",
           "is_record", "parse_record", "same_record"]

#: The most keys a record may have (a larger one is refused before its keys are read).
MAX_KEYS = 1000
#: The longest name, and the longest category string, in characters.
MAX_NAME_LENGTH = 256
#: Categories of one name with their own coordinate; later ones share the name's "other" coordinate.
MAX_CATEGORIES = 64
#: The width a first record of ``k`` keys sets (no ``dim`` given): ``WIDTH_PER_KEY * k`` within
#: ``[MIN_WIDTH, MAX_WIDTH]``.
MIN_WIDTH = 32
WIDTH_PER_KEY = 6
MAX_WIDTH = 256
#: One coordinate in this many (at least one) is a hash bucket for what finds no free coordinate.
_BUCKET_SHARE = 8
#: The keys of the sparse form, which a dict with exactly these keys is (never a record).
_SPARSE_FORMS = (frozenset({"indices", "values"}), frozenset({"indices", "values", "dim"}))

Value = float | str | None


def is_record(x: Any) -> bool:
    """Whether ``x`` is a record: a dict that is not the sparse form ``{"indices", "values"[, "dim"]}``."""
    return isinstance(x, dict) and not (len(x) in (2, 3) and frozenset(x) in _SPARSE_FORMS)


@dataclass(frozen=True)
class Record:
    """A validated record: its ``(name, value)`` pairs sorted by name (numbers as floats, bools as 0/1),
    and the width a learner takes when this record is its first row; ``numbers``, the bytes of its numbers
    in that order, tells apart two records whose items compare equal but hold 0.0 and -0.0."""

    items: tuple[tuple[str, Value], ...]
    width: int
    numbers: bytes = field(default=b"", compare=False, repr=False)

    def __len__(self) -> int:
        """The width (what fixes a learner's dimension at its first row, as an array's length does)."""
        return self.width


#: A record's pair's name, what its pairs are sorted by.
_NAME = operator.itemgetter(0)


def _value(name: str, value: Any) -> Value:
    if type(value) is float and math.isfinite(value):  # the most common value first: kept as it is
        return value
    if value is None or isinstance(value, str):
        if isinstance(value, str) and len(value) > MAX_NAME_LENGTH:
            raise InvalidInputError(
                f"the category of {name!r} is longer than {MAX_NAME_LENGTH} characters.")
        return value
    if isinstance(value, bool | np.bool_):
        return 1.0 if value else 0.0
    if isinstance(value, int | float | np.integer | np.floating):
        try:
            number = float(value)
        except OverflowError:
            raise InvalidInputError(f"the value of {name!r} is too large for float64.") from None
        if not math.isfinite(number):
            raise InvalidInputError(f"the value of {name!r} is not finite ({number!r}).")
        return number
    if isinstance(value, dict):
        raise InvalidInputError(f"the value of {name!r} is a nested object; a record's values are "
                                "numbers, strings, booleans or null.")
    if isinstance(value, list | tuple | np.ndarray):
        raise InvalidInputError(f"the value of {name!r} is a list; a record's values are numbers, "
                                "strings, booleans or null.")
    raise InvalidInputError(f"the value of {name!r} has the unsupported type {type(value).__name__}.")


def parse_record(x: dict[Any, Any], dim: int | None) -> Record:
    """``x`` validated as a record for a learner of dimension ``dim`` (None: fixed by this record).

    Raises :class:`~kons.errors.InvalidInputError` naming the problem; never modifies ``x``.
    """
    if len(x) > MAX_KEYS:  # before reading any key: a record of 10^5 keys costs nothing
        raise InvalidInputError(f"a record has at most {MAX_KEYS} keys; got {len(x)}.")
    items = []
    for name, value in x.items():
        if not isinstance(name, str):
            raise InvalidInputError(f"a record's names are strings; got {name!r}.")
        if len(name) > MAX_NAME_LENGTH:
            raise InvalidInputError(f"a record's names have at most {MAX_NAME_LENGTH} characters; "
                                    f"got one of {len(name)}.")
        # (a finite float, the most common value, kept as _value() keeps it, without its call)
        items.append((name, value if type(value) is float and math.isfinite(value) else _value(name, value)))
    items.sort(key=_NAME)
    numbers = [v for _, v in items if type(v) is float]  # (each finite: _value's floats)
    check_feature_floats(numbers)
    width = dim if dim is not None else min(MAX_WIDTH, max(MIN_WIDTH, WIDTH_PER_KEY * len(items)))
    return Record(tuple(items), width, array("d", numbers).tobytes())  # (float64's bytes, as numpy's)


#: The value types whose equal values of one type a record parses alike (a float's sign of zero aside).
_PLAIN = frozenset({float, int, bool, str, type(None)})


def same_record(x: dict[Any, Any], kept: dict[Any, Any]) -> bool:
    """Whether the dict ``x`` holds what ``kept`` held, so that :func:`parse_record` of it gives the
    :class:`Record` it gave (a prediction, then the learning round of the same record): the same names,
    each with a value of the same plain type and equal, a float's zero of the same sign (a NaN is equal to
    no other); any other type of value is never taken for the same."""
    if len(x) != len(kept):
        return False
    for name, value in x.items():
        if name not in kept:
            return False
        old = kept[name]
        kind = type(value)
        if kind is not type(old) or kind not in _PLAIN or not (value is old or value == old):
            return False
        if kind is float and value == 0.0 and math.copysign(1.0, value) != math.copysign(1.0, old):
            return False
    return True


@dataclass
class _Name:
    """The coordinates a name holds (-1: none yet) and its counts over the learned rounds."""

    numeric: int = -1
    missing: int = -1
    other: int = -1
    categories: dict[str, int] = field(default_factory=dict)  # category -> coordinate
    category_counts: dict[str, int] = field(default_factory=dict)
    numbers: int = 0  # rounds with a number
    missing_count: int = 0  # rounds with None or without the name
    other_count: int = 0  # rounds with a category beyond MAX_CATEGORIES
    hashed: int = 0  # values of this name that went to a hash bucket

    def slot(self, kind: str, category: str) -> int:
        """The coordinate of one of the name's kinds ("numeric", "missing", "other", "category")."""
        return self.categories.get(category, -1) if kind == "category" else int(getattr(self, kind))

    def slots(self) -> list[int]:
        taken = [self.numeric, self.missing, self.other, *self.categories.values()]
        return [s for s in taken if s >= 0]

    def one_hot_slots(self) -> list[int]:
        return [s for s in (self.other, *self.categories.values()) if s >= 0]


@dataclass
class _Pending:
    """What a round adds to the encoder, kept only if the round succeeds (:meth:`RecordEncoder.commit`)."""

    record: Record
    taken: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (name, kind, category) -> slot
    hashed: list[tuple[str, int]] = field(default_factory=list)  # (name, bucket)
    absent: list[str] = field(default_factory=list)  # known names the record lacks


class RecordEncoder:
    """The online encoder of records into ``width`` coordinates (see :mod:`kons.records`).

    Parameters
    ----------
    width : int
        The learner's dimension; the last ``max(1, width // 8)`` coordinates are hash buckets.
    """

    def __init__(self, width: int) -> None:
        self.width = width
        self.buckets = max(1, width // _BUCKET_SHARE)
        self.free = width - self.buckets  # coordinates [0, free) are taken in order of appearance
        self.taken = 0
        self.names: dict[str, _Name] = {}
        self.bucket_counts = [0] * self.buckets
        self.untracked = 0  # values of names that never got a coordinate (hashed)
        # What a name absent from every record encodes to: NaN but 1 on missing indicators and 0 on the
        # buckets used so far (a bucket sums what is hashed into it).
        self.template = np.full(width, np.nan)
        # the commits so far, the last record pending() encoded and the commits it was encoded after, and
        # its result (not state): a prediction and the learning round of the same record encode it once
        self._commits = 0
        self._pending: tuple[Record, int, tuple[np.ndarray, _Pending]] | None = None

    # ----------------------------------------------------------------- a round
    def pending(self, record: Record) -> tuple[np.ndarray, _Pending]:
        """The record's vector (NaN: left out of the round; read-only) and what learning it adds; nothing
        kept."""
        kept = self._pending
        if (kept is not None and kept[1] == self._commits and kept[0] == record
                and kept[0].numbers == record.numbers):
            return kept[2]
        encoded = self._pending_of(record)
        encoded[0].flags.writeable = False  # (the vector of every round that encodes this record again)
        self._pending = record, self._commits, encoded
        return encoded

    def _pending_of(self, record: Record) -> tuple[np.ndarray, _Pending]:
        pending = _Pending(record)
        vector = self.template.copy()
        hashed_sum: dict[int, float] = {}

        def slot(name: str, kind: str, category: str = "") -> int:
            """The coordinate of ``(name, kind, category)``, taking a free one if any; -1: hashed."""
            known = self.names.get(name)
            held = -1 if known is None else known.slot(kind, category)
            if held >= 0:
                return held
            key = (name, kind, category)
            if key not in pending.taken:
                if self.taken + len(pending.taken) >= self.free:
                    return -1
                pending.taken[key] = self.taken + len(pending.taken)
            return pending.taken[key]

        def put(name: str, kind: str, value: float, category: str = "") -> None:
            s = slot(name, kind, category)
            if s >= 0:
                vector[s] = value
                return
            bucket = self.free + zlib.crc32(f"{name}\x1f{kind}\x1f{category}".encode()) % self.buckets
            hashed_sum[bucket] = hashed_sum.get(bucket, 0.0) + value
            pending.hashed.append((name, bucket))

        given = set()
        for name, value in record.items:
            given.add(name)
            known = self.names.get(name)
            if value is None:
                put(name, "missing", 1.0)
                continue
            if known is not None:
                if known.missing >= 0:
                    vector[known.missing] = 0.0
                if known.other >= 0 or known.categories:  # a value is given: not the other categories
                    for s in known.one_hot_slots():  # (one by one: NumPy's assignment through a list
                        vector[s] = 0.0  # costs more for a few)
            if isinstance(value, float):
                if known is not None and known.numeric >= 0:  # (put()'s, without its lookups)
                    vector[known.numeric] = value
                else:
                    put(name, "numeric", value)
            elif known is not None and value in known.categories:
                vector[known.categories[value]] = 1.0
            elif known is None or len(known.categories) < MAX_CATEGORIES:
                put(name, "category", 1.0, value)
            else:
                put(name, "other", 1.0)
        for name, known in self.names.items():
            if name not in given:
                pending.absent.append(name)
                if known.missing < 0:
                    put(name, "missing", 1.0)
        # The hashed values were added in the order of the sorted names, then of the names known: the
        # same sums whatever the record's key order.
        for bucket, total in hashed_sum.items():
            vector[bucket] = total if np.isnan(vector[bucket]) else vector[bucket] + total
        return vector, pending

    def category_groups(self) -> tuple[np.ndarray, ...]:
        """The coordinates of each categorical name (its categories, its "other" and its missing
        indicator: a missing value is one more category of the name) that holds two or more: the groups
        a feature scaler gives one scale (:class:`~kons.preprocessing.FeatureScaler`)."""
        groups = []
        for known in self.names.values():
            one_hot = known.one_hot_slots()
            group = sorted([*one_hot, known.missing] if one_hot and known.missing >= 0 else one_hot)
            if len(group) > 1:
                groups.append(np.array(group))
        return tuple(groups)

    def number_gaps(self) -> np.ndarray:
        """The missing indicators of the names that are no categorical name (numbers, or never given a
        value): the coordinates a feature scaler gives a fixed variance
        (:data:`~kons.preprocessing.GAP_VARIANCE`)."""
        return np.array([known.missing for known in self.names.values()
                         if known.missing >= 0 and not known.one_hot_slots()], dtype=np.int64)

    def encode(self, record: Record) -> np.ndarray:
        """The record's vector on the current state (a prediction: nothing kept)."""
        return self.pending(record)[0]

    def commit(self, pending: _Pending) -> None:
        """Keep what :meth:`pending` computed: the coordinates taken and the counts of the round."""
        self._commits += 1
        for (name, kind, category), s in pending.taken.items():
            holder = self.names.setdefault(name, _Name())
            if kind == "category":
                holder.categories[category] = s
                holder.category_counts[category] = 0
            else:
                setattr(holder, kind, s)
            if kind == "missing":
                self.template[s] = 1.0
        self.taken += len(pending.taken)
        for name, bucket in pending.hashed:
            self.bucket_counts[bucket - self.free] += 1
            self.template[bucket] = 0.0
            if name in self.names:
                self.names[name].hashed += 1
            else:
                self.untracked += 1
        for name, value in pending.record.items:
            known = self.names.get(name)  # (one lookup: every round counts each of its names)
            if known is None:
                continue
            if value is None:
                known.missing_count += 1
            elif isinstance(value, float):
                known.numbers += 1
            elif value in known.categories:
                known.category_counts[value] += 1
            elif known.other >= 0:
                known.other_count += 1
        for name in pending.absent:
            self.names[name].missing_count += 1

    # ----------------------------------------------------------------- what it holds
    def encoding(self) -> dict[str, Any]:
        """Names, their kind, coordinates, categories with counts, missing and overflow counts (JSON)."""
        features = []
        for name, known in self.names.items():
            kinds = [k for k, held in (("numeric", known.numeric >= 0),
                                        ("categorical", bool(known.categories) or known.other >= 0)) if held]
            features.append({
                "name": name,
                "kind": "mixed" if len(kinds) == 2 else (kinds[0] if kinds else "missing"),
                "coordinate": None if known.numeric < 0 else known.numeric,
                "numbers": known.numbers,
                "categories": [{"value": c, "coordinate": s, "count": known.category_counts[c]}
                               for c, s in known.categories.items()],
                "other": None if known.other < 0 else {"coordinate": known.other, "count": known.other_count},
                "missing": known.missing_count,
                "missing_coordinate": None if known.missing < 0 else known.missing,
                "hashed": known.hashed,
            })
        return {"width": self.width, "coordinates_taken": self.taken,
                "coordinates_free": self.free - self.taken,
                "buckets": {"first_coordinate": self.free, "count": self.buckets,
                            "values": sum(self.bucket_counts), "untracked_names_values": self.untracked},
                "features": features}

    def nbytes(self) -> int:
        """About the bytes of the encoder's state (its template and what :meth:`scalars` saves)."""
        text = sum(len(n) + sum(len(c) + 16 for c in k.categories) + 64 for n, k in self.names.items())
        return int(self.template.nbytes) + text + 8 * self.buckets

    def growth_nbytes(self) -> int:
        """An upper bound of what :meth:`nbytes` may still add (every free coordinate taken by a new
        name or category of the longest length)."""
        return (self.free - self.taken) * (MAX_NAME_LENGTH + 80)

    # ----------------------------------------------------------------- persistence
    def scalars(self) -> dict[str, Any]:
        names = [[n, k.numeric, k.missing, k.other, k.numbers, k.missing_count, k.other_count, k.hashed,
                  [[c, s, k.category_counts[c]] for c, s in k.categories.items()]]
                 for n, k in self.names.items()]
        return {"width": self.width, "names": names, "buckets": list(self.bucket_counts),
                "untracked": self.untracked}

    @classmethod
    def from_scalars(cls, saved: dict[str, Any], width: int) -> RecordEncoder:
        """Inverse of :meth:`scalars` (ValueError, KeyError or TypeError if it is inconsistent)."""
        if saved["width"] != width:
            raise ValueError("the record encoder's width does not match the dimension.")
        encoder = cls(width)
        for entry in saved["names"]:
            name, numeric, missing, other, numbers, missing_count, other_count, hashed, categories = entry
            known = _Name(int(numeric), int(missing), int(other), numbers=int(numbers),
                          missing_count=int(missing_count), other_count=int(other_count), hashed=int(hashed))
            for category, s, count in categories:
                known.categories[str(category)] = int(s)
                known.category_counts[str(category)] = int(count)
            encoder.names[str(name)] = known
            if known.missing >= 0:
                encoder.template[known.missing] = 1.0
        slots = sorted(s for known in encoder.names.values() for s in known.slots())
        if slots != list(range(len(slots))) or len(slots) > encoder.free:
            raise ValueError("the record encoder's coordinates are inconsistent.")
        encoder.taken = len(slots)
        counts = [int(c) for c in saved["buckets"]]
        if len(counts) != encoder.buckets:
            raise ValueError("the record encoder's buckets do not match the width.")
        encoder.bucket_counts = counts
        for i, count in enumerate(counts):
            if count:
                encoder.template[encoder.free + i] = 0.0
        encoder.untracked = int(saved["untracked"])
        return encoder


#: The ridge added to the present numbers' correlations when the missing ones are imputed from them.
IMPUTE_RIDGE = 0.1
#: How many deviations from its mean an imputed number may lie: the present numbers of a row that the
#: correlations do not describe (nearly collinear coordinates, a rare row) would otherwise extrapolate far.
IMPUTE_BOUND = 2.0
#: The rows between two computations of what the imputer imputes by (from its moments).
IMPUTE_REFRESH = 16
#: The keys of what the imputer imputes by, in a saved state.
_STATISTICS = ("impute_known", "impute_mean", "impute_scale", "impute_precision")
#: The rows with a value a numeric coordinate needs before it is imputed or used to impute another.
_IMPUTE_MIN_ROWS = 2


def _ridge_inverse(correlation: np.ndarray, ridge: float) -> np.ndarray:
    """The inverse of ``correlation + ridge I``; if that is not positive definite (pairwise-complete
    correlations need not be positive semi-definite), of the correlations with their negative eigenvalues
    taken as 0, plus the ridge."""
    if not len(correlation):  # (LAPACK refuses an empty matrix)
        return correlation
    gram = correlation.copy()
    gram.ravel()[::len(gram) + 1] += ridge  # (its diagonal, through a view: ndarray.flat iterates slowly)
    factor, failed = dpotrf(gram, lower=False, clean=True, overwrite_a=True)
    if not failed:
        # (the inverse's upper triangle over the factor's zero lower one: the inverse is it plus its
        # transpose, the diagonal halved)
        inverse: np.ndarray = dpotri(factor, lower=False, overwrite_c=True)[0]
        inverse += inverse.T.copy()
        inverse.ravel(order="K")[::len(inverse) + 1] *= 0.5  # (a view of LAPACK's column-major array)
        return inverse
    eigenvalues, vectors = np.linalg.eigh(correlation)
    positive: np.ndarray = (vectors / (np.maximum(eigenvalues, 0.0) + ridge)) @ vectors.T
    return positive


#: What the imputer imputes by: whether each coordinate has enough rows, the means, the deviations and the
#: inverse of the correlations plus the ridge (:meth:`GaussianImputer._derived`).
_Statistics = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class _Gaps:
    r"""How a row missing some numbers is imputed, all but its present values precomputed from the
    statistics (:meth:`GaussianImputer.filled`): the precision's rows :math:`P_{m \cdot}` of the missing
    numbers with enough rows :math:`m` (``block``), by which :meth:`given` weighs the row's present values;
    what the subclasses add, :math:`P_{mm}` and the missing numbers' means and deviations."""

    def __init__(self, missing: int | np.ndarray, block: np.ndarray, coordinates: int | np.ndarray,
                 statistics: _Statistics) -> None:
        """``missing``, the row's positions without a value (among the numeric coordinates); ``block``, the
        precision's rows of those imputed; ``coordinates``, theirs in the row."""
        _, self.mean, self.scale, _ = statistics
        self.missing, self.block, self.coordinates = missing, block, coordinates

    def given(self, values: np.ndarray) -> np.ndarray:
        r""":math:`P_{m \cdot} z`, ``z`` the standardised ``values`` with the missing ones at 0."""
        standardised = (values - self.mean) / self.scale
        standardised[self.missing] = 0.0  # (and a coordinate without enough rows has no precision)
        given: np.ndarray = self.block.dot(standardised)  # (BLAS's gemv, as ``@`` calls it: no gufunc)
        return given

    def imputed(self, values: np.ndarray) -> float | np.ndarray:
        """The imputed numbers of a row whose numeric coordinates hold ``values``."""
        raise NotImplementedError


class _OneGap(_Gaps):
    """One number imputed (most often): no solve, and floats rather than arrays of one."""

    def __init__(self, missing: int | np.ndarray, target: int, coordinates: np.ndarray,
                 statistics: _Statistics) -> None:
        precision = statistics[3]
        # (a row, C-ordered as an array's rows taken by index are: the precision may be LAPACK's
        # column-major array, and BLAS sums the product in the order of the layout)
        super().__init__(missing, precision[target:target + 1].copy(), int(coordinates[target]), statistics)
        self.negated_pivot = -float(precision[target, target])
        self.target_mean, self.target_scale = float(self.mean[target]), float(self.scale[target])

    def imputed(self, values: np.ndarray) -> float:
        alone: float = self.given(values).item() / self.negated_pivot
        return self.target_mean + self.target_scale * min(max(alone, -IMPUTE_BOUND), IMPUTE_BOUND)


class _SeveralGaps(_Gaps):
    """Several numbers imputed: one solve on :math:`P_{mm}`."""

    def __init__(self, missing: np.ndarray, targets: np.ndarray, coordinates: np.ndarray,
                 statistics: _Statistics) -> None:
        super().__init__(missing, statistics[3][targets], coordinates[targets], statistics)
        self.pivot = self.block[:, targets]
        self.target_mean, self.target_scale = self.mean[targets], self.scale[targets]

    def imputed(self, values: np.ndarray) -> np.ndarray:
        regressed = -np.linalg.solve(self.pivot, self.given(values))
        np.clip(regressed, -IMPUTE_BOUND, IMPUTE_BOUND, out=regressed)
        imputed: np.ndarray = self.target_mean + self.target_scale * regressed
        return imputed


class GaussianImputer:
    r"""The conditional mean of a record's missing numbers given its present ones (a Gaussian conditional).

    It keeps, over the learned rounds, the sums of the outer products of ``[v, p]`` for each row, ``v`` its
    numeric coordinates' values (less each one's first value, so that a large offset costs no precision;
    0 where missing) and ``p`` their presence (1 or 0): for each pair of coordinates the rows with both
    values, the sum of each one's values over those rows and the sum of their products, i.e. the
    pairwise-complete means, variances and correlations. A row's missing numeric coordinates :math:`m` are
    then imputed by :math:`\mu_m + s_m R_{mo} (R_{oo} + \lambda I)^{-1} (x_o - \mu_o) / s_o` on its
    present ones :math:`o` (:math:`R`: the correlations, :math:`s`: the deviations), the ridge
    :math:`\lambda` keeping the solve well conditioned (if it does not make the pairwise-complete
    correlations positive definite, their negative eigenvalues are taken as 0), each within
    :data:`IMPUTE_BOUND` deviations of its mean. The means, deviations and inverse it imputes by are
    computed from the moments every :data:`IMPUTE_REFRESH` rows (and when a coordinate is new), and saved;
    the rows in between are held and added to the moments then, by one matrix product.
    A row missing no number is left as it is, without a solve; what a row missing one number is imputed by
    (the precision's row of that number, its pivot, mean and deviation) is kept, one per coordinate, until
    the statistics change. Its state is a :math:`2k \times 2k` array and a :math:`k \times k` one for
    :math:`k` numeric coordinates, so bounded by the encoder's width; a round costs :math:`O(k^2)`, an
    inverse :math:`O(k^3)`.
    """

    def __init__(self, ridge: float) -> None:
        self.ridge = ridge
        self.coordinates = np.zeros(0, dtype=np.int64)  # the numeric coordinates, in order of first value
        self.shift = np.zeros(0)  # what each coordinate's values are taken less of (its first value)
        self.moments = np.zeros((0, 0))  # the sum over the rows of outer([v, p], [v, p])
        self.rows = 0  # the rows learnt
        self.held: list[np.ndarray] = []  # the values of the rows learnt since the moments last took them
        # what the rows impute by, computed from the moments every IMPUTE_REFRESH rows (None before)
        self.statistics: _Statistics | None = None
        # (not state) the last row filled, at a count of rows, and its result: a prediction and the
        # learning round of the same record impute it once
        self._filled: tuple[np.ndarray, int, np.ndarray] | None = None
        # (not state) the gaps of one number computed on the statistics (_gaps())
        self._kept_gaps: tuple[_Statistics | None, dict[bytes, _Gaps | None]] = None, {}

    def _derived(self) -> _Statistics:
        """Whether each coordinate has enough rows; the means (with the shift), the deviations (1 for none)
        and the inverse of the correlations plus the ridge among the coordinates with enough rows (0
        elsewhere) of the current moments."""
        k = len(self.coordinates)
        pairs, sums, products = self.moments[k:, k:], self.moments[:k, k:], self.moments[:k, :k]
        enough = pairs >= _IMPUTE_MIN_ROWS
        counts = np.where(enough, pairs, 1.0)
        covariance = np.where(enough, (products - sums * sums.T / counts) / counts, 0.0)
        deviation = np.sqrt(np.maximum(covariance.diagonal(), 0.0))
        scale = np.where(deviation > 0.0, deviation, 1.0)
        known = enough.diagonal().copy()
        inside = np.flatnonzero(known)
        correlation = covariance / np.outer(scale, scale)
        if len(inside) < k:
            correlation = correlation[np.ix_(inside, inside)]
        inverse = _ridge_inverse(correlation, self.ridge)
        if len(inside) < k:
            precision = np.zeros((k, k))
            precision[np.ix_(inside, inside)] = inverse
        else:
            precision = inverse
        return known, self.shift + sums.diagonal() / counts.diagonal(), scale, precision

    def filled(self, x: np.ndarray) -> np.ndarray:
        r"""``x`` with its missing numeric coordinates imputed (``x`` itself when none is, or cannot be).

        With :math:`P` the inverse of the correlations plus the ridge, the conditional mean's
        :math:`R_{mo} (R_{oo} + \lambda I)^{-1} z_o` is :math:`-P_{mm}^{-1} P_{mo} z_o`: one inverse every
        :data:`IMPUTE_REFRESH` rows, and a row solves on its missing coordinates only (one, most often)."""
        kept = self._filled
        if kept is not None and kept[0] is x and kept[1] == self.rows:  # (a read-only encoded row)
            return kept[2]
        values = x[self.coordinates]
        filled = x
        # a solve only for a row with a gap (the common row has none): the squared norm, one BLAS dot
        # (cheaper than the ufunc's sum), is NaN exactly when a value is (the encoder's numbers are finite)
        if math.isnan(values.dot(values)):
            gaps = self._gaps(np.isnan(values))
            if gaps is not None:
                filled = x.copy()
                filled[gaps.coordinates] = gaps.imputed(values)
                filled.flags.writeable = False
        self._filled = x, self.rows, filled
        return filled

    def _gaps(self, missing: np.ndarray) -> _Gaps | None:
        """How a row missing the coordinates ``missing`` (a mask) is imputed (None: it is not); that of a
        row missing one number is kept until the statistics change (at most one per coordinate)."""
        statistics = self.statistics
        if statistics is None:
            return None
        if self._kept_gaps[0] is not statistics:
            self._kept_gaps = statistics, {}
        kept = self._kept_gaps[1]
        pattern = missing.tobytes()
        if pattern in kept:
            return kept[pattern]
        known = statistics[0]
        if pattern.count(1) == 1:  # (one number missing, the common gap: its position is the pattern's 1)
            at = pattern.index(1)
            gaps = _OneGap(at, at, self.coordinates, statistics) if known[at] else None
            kept[pattern] = gaps
            return gaps
        targets = np.flatnonzero(missing & known)
        if not len(targets):
            return None
        if len(targets) == 1:  # (the others missing have too few rows to be imputed)
            return _OneGap(np.flatnonzero(missing), int(targets[0]), self.coordinates, statistics)
        return _SeveralGaps(np.flatnonzero(missing), targets, self.coordinates, statistics)

    def commit(self, x: np.ndarray, new: list[int]) -> None:
        """Count the learned row ``x`` (NaN: missing), whose round took the numeric coordinates ``new``."""
        if new:
            self._fold()
            k, grown = len(self.coordinates), len(self.coordinates) + len(new)
            moments = np.zeros((2 * grown, 2 * grown))
            for rows, into in ((slice(0, k), slice(0, k)), (slice(k, 2 * k), slice(grown, grown + k))):
                moments[into, :k] = self.moments[rows, :k]
                moments[into, grown:grown + k] = self.moments[rows, k:]
            self.moments = moments
            self.coordinates = np.concatenate([self.coordinates, np.array(new, dtype=np.int64)])
            self.shift = np.concatenate([self.shift, x[new]])
        self.held.append(x[self.coordinates])
        self.rows += 1
        if new or self.rows % IMPUTE_REFRESH == 0:  # (its coordinates the moments', a stale row at most)
            self._fold()
            self.statistics = self._derived()

    def _fold(self) -> None:
        """Add the held rows to the moments (one matrix product for them all)."""
        if self.held:
            shifted = np.array(self.held) - self.shift
            present = shifted == shifted  # (False where NaN)
            block = np.hstack([np.where(present, shifted, 0.0), present])
            self.moments += block.T @ block
            self.held = []

    def track(self, coordinates: list[int], shift: np.ndarray) -> None:
        """Start the statistics of ``coordinates`` taken less ``shift`` (a state saved before the imputer
        existed: its numeric coordinates, less the feature scaler's running means)."""
        self.coordinates = np.array(coordinates, dtype=np.int64)
        self.shift = shift.copy()
        self.moments = np.zeros((2 * len(coordinates), 2 * len(coordinates)))
        self.rows, self.held, self.statistics = 0, [], None

    def nbytes(self) -> int:
        """The bytes of :meth:`arrays`, counted from the coordinates and the held rows (every round asks)."""
        k, held = len(self.coordinates), len(self.held)
        statistics = 0 if self.statistics is None else 8 * k * k + 17 * k  # (whether known: a byte each)
        return 8 * (4 * k * k + 2 * k + 1) + 9 * held * k + statistics  # (a held row's gaps: a byte each)

    @staticmethod
    def growth_nbytes(tracked: int, most: int) -> int:
        """An upper bound of what the statistics of ``tracked`` coordinates may add up to ``most``."""
        held = 9 * IMPUTE_REFRESH * (most - tracked)  # (the held rows' values and gaps)
        return 8 * ((5 * most + 5) * most - (5 * tracked + 5) * tracked) + held

    def arrays(self) -> dict[str, np.ndarray]:
        held = np.array(self.held).reshape(len(self.held), len(self.coordinates))
        gaps = np.isnan(held)  # (a state holds finite numbers only)
        arrays = {"impute_coordinates": self.coordinates, "impute_shift": self.shift,
                  "impute_moments": self.moments, "impute_rows": np.array([self.rows], dtype=np.int64),
                  "impute_held": np.where(gaps, 0.0, held), "impute_held_gaps": gaps}
        if self.statistics is not None:
            arrays.update(zip(_STATISTICS, self.statistics, strict=True))
        return arrays

    def restore(self, arrays: dict[str, np.ndarray], width: int) -> None:
        """Inverse of :meth:`arrays` (ValueError if it is inconsistent)."""
        coordinates = arrays["impute_coordinates"].astype(np.int64)
        k = len(coordinates)
        inside = k == 0 or 0 <= coordinates.min() <= coordinates.max() < width
        statistics = tuple(arrays[key] for key in _STATISTICS) if _STATISTICS[0] in arrays else None
        shapes = [(k,), (k,), (k,), (k, k)]
        if (arrays["impute_shift"].shape != (k,) or arrays["impute_moments"].shape != (2 * k, 2 * k)
                or len(set(coordinates.tolist())) != k or not inside or arrays["impute_rows"].shape != (1,)
                or arrays["impute_held"].shape[1:] != (k,) or len(arrays["impute_held"]) >= IMPUTE_REFRESH
                or arrays["impute_held_gaps"].shape != arrays["impute_held"].shape
                or (statistics is not None and [a.shape for a in statistics] != shapes)):
            raise ValueError("the imputer's statistics are inconsistent.")
        self.coordinates, self.shift = coordinates, arrays["impute_shift"]
        self.moments, self.rows = arrays["impute_moments"], int(arrays["impute_rows"][0])
        self.held = list(np.where(arrays["impute_held_gaps"], np.nan, arrays["impute_held"]))
        self.statistics = (None if statistics is None
                           else (statistics[0].astype(bool), statistics[1], statistics[2], statistics[3]))
