"""Request and response bodies of the HTTP API (pydantic v2, strict numbers, no unknown fields)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable
from typing import Annotated, Any, Literal, Self

import numpy as np
from pydantic import (
    AllowInfNan,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    Strict,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)
from pydantic_core import PydanticCustomError

from kons.classes import MAX_LABEL_CHARS
from kons.records import MAX_KEYS, MAX_NAME_LENGTH
from kons_service.core.learning import label_key

__all__ = [
    "BatchFeedbackResponse",
    "BatchPredictResponse",
    "ErrorResponse",
    "Features",
    "FeedbackItem",
    "FeedbackRequest",
    "FeedbackResponse",
    "LearnerInfo",
    "LearnerList",
    "LearnerSpec",
    "LearnerSummary",
    "PredictRequest",
    "PredictResponse",
    "StateImported",
    "check_record",
    "error_responses",
    "json_keyed",
]

#: A finite number: ints and floats, never strings, booleans, NaN or infinities.
Finite = Annotated[float, Strict(), AllowInfNan(False)]
#: A class label in an answer, with its JSON type.
ClassLabel = StrictStr | StrictInt | StrictBool
#: Client ids that link a predict to a later feedback.
#: A coverage asked of an interval or a set: in (0, 1), open.
Coverage = Annotated[float, Strict(), AllowInfNan(False), Field(gt=0.0, lt=1.0)]
_COVERAGE = ("The long-run fraction of labels the answer's `interval` (regression) or `set` (a classifier) "
             "should hold, in (0, 1): conformal, calibrated online on the learner's own rounds, so it holds "
             "while the data drift (docs/intervals.md). A learner with neither (a binary loss without class "
             "probabilities): 422.")
_INTERVAL = ("With `coverage`: `[low, high]` around the prediction, holding the target with that long-run "
             "frequency (a regression learner; absent otherwise). Its width follows the learner's recent "
             "errors.")
_SET = ("With `coverage`: the classes, most probable first, holding the label with that long-run frequency "
        "(a classifier; absent otherwise). It may be empty when the learner covers more than asked.")
ClientId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
#: A feedback request's idempotency key: a retry with the same one is answered, never applied again.
RequestId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SparseFeatures(_Body):
    """Sparse features for linear learners; handed to kons as ``{"indices": [...], "values": [...]}``."""

    indices: list[Annotated[StrictInt, Field(ge=0)]]
    values: list[Finite]


def _finite(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


#: Bounds of a record ``{name: value}``: its fields, the length of a name and of a string value (kons's
#: own: a wider row is an array). Checked here, so that a body of 10^5 names is refused before its rows
#: are built, encoded or logged.
RECORD_MAX_FIELDS = MAX_KEYS
NAME_MAX_CHARS = TEXT_MAX_CHARS = MAX_NAME_LENGTH


def _text(value: str, what: str, most: int = TEXT_MAX_CHARS) -> str:
    if len(value) > most:
        raise PydanticCustomError("text", "{what} must be a string of at most {most} characters",
                                  {"what": what, "most": most})
    return value


def check_record(value: dict[str, Any]) -> dict[str, Any]:
    """A record ``{name: number | string | bool | null}``, checked field by field (never nested)."""
    if len(value) > RECORD_MAX_FIELDS:
        raise PydanticCustomError("features", "a record may have at most {most} fields; got {count}",
                                  {"most": RECORD_MAX_FIELDS, "count": len(value)})
    for name, v in value.items():
        if len(name) > NAME_MAX_CHARS:
            raise PydanticCustomError("features", "a field name must have at most {most} characters: {name}",
                                      {"most": NAME_MAX_CHARS, "name": repr(name[:40])})
        if isinstance(v, str):
            _text(v, f"the value of {name[:40]!r}")
        elif not (v is None or isinstance(v, bool) or _finite(v)):
            kind = "an object" if isinstance(v, dict) else "a list" if isinstance(v, list) else repr(v)[:40]
            raise PydanticCustomError(
                "features", "the value of {name} is {kind}: a record's values are numbers, strings, booleans "
                "or null", {"name": repr(name[:40]), "kind": kind})
    return value


def _features(value: Any) -> Any:
    """A dense list of finite numbers (as a float64 array: what kons takes, and one buffer to copy when a
    worker process validated it), the sparse dict, or a record, with one clear error otherwise."""
    if isinstance(value, list):
        if not value:
            raise PydanticCustomError("features", "features must not be empty")
        # Fast path (C loops but for one type test per item): plain numbers (not bools), all finite.
        if all(type(v) is float or type(v) is int for v in value):
            with contextlib.suppress(OverflowError):
                floats = np.array(value, dtype=np.float64)
                if np.isfinite(floats).all():
                    return floats
        for i, v in enumerate(value):
            if not _finite(v):
                context = {"index": i, "value": repr(v)[:40]}
                raise PydanticCustomError("features", "item {index} is not a finite number: {value}", context)
        return np.array([float(v) for v in value])
    if isinstance(value, dict) and set(value) == {"indices", "values"}:
        indices, values = value["indices"], value["values"]
        if isinstance(indices, list) and all(type(i) is int and i >= 0 for i in indices) \
                and isinstance(values, list) and all(_finite(v) for v in values):
            return {"indices": indices, "values": [float(v) for v in values]}
    elif isinstance(value, dict):
        return check_record(value)
    raise PydanticCustomError(
        "features", 'features must be a list of numbers, {{"indices": [ints >= 0], "values": [numbers]}} '
        "or a record {{name: number, string, boolean or null}}"
    )


#: A record's value: what one named feature may be.
RecordValue = float | str | bool | None
#: Features: a dense list of finite numbers, the sparse form or a record; validated into what kons receives.
Features = Annotated[Any, PlainValidator(
    _features, json_schema_input_type=list[float] | SparseFeatures | dict[str, RecordValue])]


def _label(value: Any) -> Any:
    """A label as given: a finite number (a regression target, or an integer class), a string or a
    boolean (classes)."""
    if isinstance(value, bool) or _finite(value):
        return value
    if isinstance(value, str):
        return _text(value, "a label", MAX_LABEL_CHARS)
    raise PydanticCustomError("label", "y must be a number, a string or a boolean")


#: A feedback label: a number for regression, a string, integer or boolean for classification.
Label = Annotated[Any, PlainValidator(_label, json_schema_input_type=float | str | bool)]


def _exactly_one(model: BaseModel, *names: str) -> None:
    given = [n for n in names if getattr(model, n) is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of {', '.join(repr(n) for n in names)}")


class ForkSource(_Body):
    """Where a fork starts: a learner of the same tenant, at one of its kept versions."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    source: str = Field(alias="from", description="The learner to fork (of the same tenant).")
    version: Annotated[StrictInt | None, Field(ge=0, description=(
        "One of its restorable versions (GET /v1/learners/{name}/versions); left out: its newest."))] = None


class LearnerSpec(_Body):
    """Body of ``PUT /v1/learners/{name}``: a configuration, or ``{"fork": {"from": ..., "version": ...}}``
    alone (a new learner starting from that learner's state at that version, with its configuration and a
    log of its own)."""

    algorithm: str = "auto"  # the self-tuning learner when the user names none
    dim: Annotated[StrictInt | None, Field(ge=1, description=(
        "Length of a feature vector. Optional: without it the learner's first feedback row fixes it (the "
        "resource budget is then checked for that length before the row is played), and a predict "
        "before any feedback answers 0 whatever the length."))] = None
    params: dict[str, Any] = Field(default_factory=dict)
    task: Literal["regression", "classification"] | None = Field(None, description=(
        "What the labels are: numbers (regression) or classes (classification: strings, integers or "
        "booleans). For auto it is params.task; left out, the first feedback's label decides it (a number: "
        "regression; a string or a boolean: classification) and the config records it. Another algorithm "
        "does what its loss does (classification: a binary loss; asked for, the logistic loss by default)."))
    fork: ForkSource | None = Field(None, description=(
        "Start from another learner's state at one of its versions (its configuration too): give it alone."))
    shadow: str | None = Field(None, description=(
        "Make this learner a shadow challenger of that learner (of the same tenant, its champion): it "
        "learns every round the champion acknowledges, from now on and in the same order, its predictions "
        "played and scored but never served (GET /v1/learners/{champion}/challengers compares them). It "
        "takes no feedback of its own. Its task is the champion's unless given."))

    coverage: Coverage | None = Field(None, description=(
        "Give intervals (regression) or prediction sets (a classifier) at this coverage, e.g. 0.9: every "
        "round calibrates it (conformal, online: it holds while the data drift), every answer gives its "
        "`interval` or `set` unless the request asks another `coverage`. Left out: no intervals or sets "
        "(a request asking a `coverage` is then a 422)."))

    @model_validator(mode="after")
    def _fork_alone(self) -> Self:
        if self.fork is not None and self.model_fields_set - {"fork"}:
            raise ValueError("a fork takes its configuration from its source: give 'fork' alone")
        return self


class LearnerSummary(BaseModel):
    name: str
    config: dict[str, Any]
    version: int


class LearnerInfo(LearnerSummary):
    stats: dict[str, Any]
    classes: list[ClassLabel] | None = Field(None, description=(
        "A classifier's classes, with their JSON types, in the learner's order (absent otherwise)."))
    input_dim: int | None = Field(description=(
        "Length of a feature vector: the config's dim, else the one the first feedback row fixed "
        "(null before it)."))
    task: Literal["regression", "classification"] | None = Field(description=(
        "What the learner's labels are (null: the first feedback's label will decide)."))
    encoding: dict[str, Any] | None = Field(None, description=(
        "How the learner encodes records (absent for a learner of arrays): its width, and each name's kind, "
        "coordinates, categories with their counts, and its missing, overflow and hashed counts."))


class CoverageTotals(BaseModel):
    """Sums over the rounds answered with an interval or prediction set at one target coverage, from the
    round after ``since`` up to the point. Over the rounds between two points, the coverage achieved is the
    difference of their ``covered`` over that of their ``rounds`` (of the second's alone if the first has no
    totals of this target with the same ``since`` and ``since`` is at or after the first point's version;
    else the window is not covered by these totals), the mean width ``width`` likewise."""

    target: float = Field(description="The coverage asked (the config's or a request's).")
    since: int = Field(description="The version before the first round these totals count.")
    rounds: int = Field(description="Rounds answered with an interval or set at this target.")
    covered: int = Field(description="Of them, those whose interval or set held the label.")
    width: float = Field(description="Sum of the intervals' widths (regression) or of the sets' sizes "
                                     "(classes).")


class CalibrationTotals(BaseModel):
    """A classifier's rounds of class probabilities from the round after ``since`` up to the point, in 10
    bins of the probability of their most probable class ([0, 0.1), ..., [0.9, 1]). The expected
    calibration error over the rounds between two points is the sum over the bins of |difference of
    ``confidence`` - difference of ``correct``|, over the difference of their total ``count`` (windows
    as for :class:`CoverageTotals`)."""

    since: int = Field(description="The version before the first round these totals count.")
    count: list[int] = Field(description="Rounds per bin.")
    confidence: list[float] = Field(description="Sum of the most probable class's probability, per bin.")
    correct: list[int] = Field(description="Rounds whose most probable class was the label, per bin.")


class ErrorTotals(BaseModel):
    """Sums over the learner's rounds up to a point, in the user's units, of its played predictions'
    errors: the error over the rounds between two points is the difference of their sums over the
    difference of their ``rounds``."""

    rounds: int
    abs_error: float = Field(description="Regression: sum of |y - prediction| (0 for labels).")
    squared_error: float = Field(description="Regression: sum of (y - prediction)^2 (0 for labels).")
    correct: float = Field(description="Labels: rounds whose played prediction was the label (its class "
                           "the most probable, or the score's sign; 0 for numbers).")
    log_loss: float = Field(description="Labels: sum of the log loss of the played class probabilities "
                            "(of a binary learner with the logistic loss: of its log-odds), 0 otherwise.")
    coverage: list[CoverageTotals] | None = Field(None, description=(
        "Per target coverage, the rounds answered with an interval or set (the targets answered last, "
        "at most 8; absent before the first)."))
    calibration: CalibrationTotals | None = Field(None, description=(
        "A classifier of class probabilities: its rounds by confidence, for the expected calibration "
        "error (absent otherwise)."))


class HistoryPoint(BaseModel):
    """The learner at one version: the error totals of its rounds so far and, at the last version of a
    feedback request, its losses and sizes (``stats()``) and when the point was taken."""

    model_config = ConfigDict(extra="allow")

    version: int
    task: str | None = Field(None, description="regression or classification (which totals are kept).")
    totals: ErrorTotals | None = None
    time: float | None = Field(None, description="Unix time (seconds) of the point.")
    recent_loss: float | None = None
    cumulative_loss: float | None = None
    dictionary_size: float | None = None
    stored_points: float | None = None
    effective_dimension: float | None = None
    state_bytes: int | None = Field(None, description="Bytes of the learned arrays.")
    leader: str | None = Field(None, description="For an auto learner: the base leading its mixture.")
    leader_since: int | None = Field(None, description="For an auto learner: the round its leader took the "
                                                       "lead.")


class ChangeEvent(BaseModel):
    """A change of the data that the learner's change detector (``auto``'s) declared."""

    version: int = Field(description="The round at which the change was declared.")
    changes: int = Field(description="The learner's count of declared changes, this one included.")


class RollbackEvent(BaseModel):
    """A rollback the learner went through: at ``version`` it became its state after ``to``; the rounds
    between stay in its log, rolled back."""

    version: int = Field(description="The version the rollback made (one past the head it found).")
    to: int = Field(description="The version whose state it restored.")
    time: float = Field(description="Unix time (seconds) of the rollback.")


class LearnerHistory(BaseModel):
    """A learner's history, oldest first: at most ``KONS_HISTORY_POINTS`` points about ``stride`` rounds
    apart (the stride doubles as the series grows), the newest changes of the data it declared, at
    their exact rounds (never thinned), and the newest rollbacks."""

    stride: int
    points: list[HistoryPoint]
    changes: list[ChangeEvent] = Field(default_factory=list)
    rollbacks: list[RollbackEvent] = Field(default_factory=list)


class VersionPoint(BaseModel):
    """A version of the learner among its history's points and kept states."""

    version: int
    time: float | None = Field(None, description="Unix time (seconds) the version was reached or kept.")
    rounds: int | None = Field(None, description="Feedback rounds logged up to it (rolled back ones too).")
    error_name: Literal["mae", "accuracy"] | None = Field(
        None, description="mae for numbers, accuracy for labels.")
    error: float | None = Field(None, description="The played predictions' error over the window of rounds "
                                                  "before it (since the previous point of the history).")
    window_rounds: int = Field(0, description="The rounds of that window.")
    base: bool = Field(description="A kept state: restoring a version rebuilds it from the newest kept "
                                   "state at or before it and the log after that.")
    rolled_back: bool = Field(description="A later rollback went back past it (it is still restorable).")


class LearnerVersions(BaseModel):
    """The versions a learner can be restored to: every version from ``oldest`` to ``newest``
    (``KONS_KEEP_VERSIONS``, ``KONS_KEEP_VERSIONS_SECONDS`` and the tenant's byte budget decide how far
    back); ``versions`` lists the points of its history and its kept states among them."""

    oldest: int
    newest: int
    versions: list[VersionPoint]
    rollbacks: list[RollbackEvent]
    kept_bytes: int = Field(description="What its older kept states and the log after them hold (counted "
                                        "in the tenant's byte budget).")


class ErrorWindow(BaseModel):
    """A champion's and a challenger's mean error over a window of the rounds both learnt."""

    from_version: int = Field(description="The champion's version of the window's first round.")
    to_version: int
    rounds: int
    champion: float
    challenger: float


class PairedErrors(BaseModel):
    """Both learners' errors over the newest rounds both learnt (``KONS_SHADOW_COMPARE_ROUNDS``): the mean
    error per window and over all, and two paired tests of the champion's minus the challenger's error per
    round (a t test and a sign test)."""

    metric: Literal["squared_error", "error_rate", "log_loss"] = Field(
        description="squared_error for numbers, error_rate (a wrong sign) for a binary learner's labels, "
        "log_loss for a classifier that plays class probabilities.")
    rounds: int
    champion: float
    challenger: float
    mean_difference: float = Field(description="The champion's mean error minus the challenger's.")
    t: float | None = Field(description="The paired t statistic (null: fewer than two rounds, or no spread).")
    p_value: float | None = Field(description="Its two-sided p-value.")
    challenger_wins: int = Field(description="Rounds where the challenger's error was the smaller.")
    champion_wins: int
    sign_p_value: float | None = Field(description="The two-sided p-value of the sign test.")
    verdict: Literal["challenger_better", "champion_better", "undecided"] = Field(
        description="What the paired t test says at the 5% level.")
    windows: list[ErrorWindow]


class Comparison(PairedErrors):
    """How a challenger compares with its champion (:class:`PairedErrors` of its metric)."""

    error_rate: PairedErrors | None = Field(None, description=(
        "For classifiers that play class probabilities: the error rate (a play that did not predict the "
        "label) beside the log loss, with the same tests, on the rounds whose log records it."))


class Challenger(BaseModel):
    name: str
    config: dict[str, Any]
    start: int = Field(description="The champion's version it started after.")
    learnt: int = Field(description="The champion's version it has learnt up to.")
    behind: int = Field(description="The champion's rounds it has yet to learn.")
    status: str = Field(description="following, or why it stopped following.")
    comparison: Comparison | None = Field(description=(
        "Null when the two cannot be compared round by round (learners scored differently, or no round "
        "learnt by both yet)."))


class Challengers(BaseModel):
    champion: str
    version: int
    challengers: list[Challenger]


class PromoteRequest(_Body):
    """``{"challenger": "c"}``: the shadow challenger whose state and config the learner takes."""

    challenger: str


class PromotedAnswer(BaseModel):
    version: int = Field(description="The champion's new version (one past its head before).")
    promoted: str = Field(description="The challenger promoted (deleted: its state is the champion's now).")
    config: dict[str, Any] = Field(description="The champion's config now (the challenger's).")


class RollbackRequest(_Body):
    """``{"version": N}``: the version whose state the learner becomes."""

    version: Annotated[StrictInt, Field(ge=0)]


class RolledBack(BaseModel):
    version: int = Field(description="The learner's new version (one past its head before the rollback).")
    restored: int = Field(description="The version whose state it now has.")
    rounds: int = Field(description="The rounds the learner has learnt (its state's).")


class LearnerList(BaseModel):
    learners: list[LearnerSummary]
    next_cursor: str | None


class PredictRequest(_Body):
    """``{"x": [...]}`` or ``{"xs": [[...], ...]}``; ``id`` / ``ids`` remember the features for feedback."""

    x: Features | None = None
    xs: Annotated[list[Features], Field(min_length=1)] | None = None
    id: ClientId | None = None
    ids: list[ClientId] | None = None
    coverage: Coverage | None = Field(None, description=_COVERAGE)

    @model_validator(mode="after")
    def _shape(self) -> Self:
        _exactly_one(self, "x", "xs")
        if self.id is not None and self.x is None:
            raise ValueError("'id' goes with 'x'; use 'ids' with 'xs'")
        if self.ids is not None and (self.xs is None or len(self.ids) != len(self.xs)):
            raise ValueError("'ids' needs 'xs' of the same length")
        if self.ids is not None and len(set(self.ids)) != len(self.ids):
            raise ValueError("'ids' must be distinct")
        return self

    def rows(self) -> list[Any]:
        return self.xs if self.xs is not None else [self.x]

    def row_ids(self) -> list[str] | None:
        return self.ids if self.ids is not None else ([self.id] if self.id is not None else None)


class FeedbackItem(_Body):
    """One round: features ``x`` (or the ``id`` of a remembered predict) and its label ``y``."""

    x: Features | None = None
    id: ClientId | None = None
    y: Label

    @model_validator(mode="after")
    def _shape(self) -> Self:
        _exactly_one(self, "x", "id")
        return self


class FeedbackRequest(_Body):
    """One round (``x``/``id`` and ``y``) or a batch ``{"items": [...]}`` applied in order.

    ``request_id`` (optional, one per request, covering the whole batch) makes the request retry-safe:
    a request whose id was already applied is answered with the original predictions, losses and
    version and changes nothing; the same id with another body (another ``coverage`` included) is a 409.
    """

    x: Features | None = None
    id: ClientId | None = None
    y: Label | None = None
    items: list[FeedbackItem] | None = None
    request_id: RequestId | None = None
    coverage: Coverage | None = Field(None, description=_COVERAGE + " For every round of the request.")

    @model_validator(mode="after")
    def _shape(self) -> Self:
        if self.items is not None:
            if self.x is not None or self.id is not None or self.y is not None:
                raise ValueError("give either 'items' or a single 'x'/'id' with 'y', not both")
            if not self.items:
                raise ValueError("'items' must not be empty")
            return self
        _exactly_one(self, "x", "id")
        if self.y is None:
            raise ValueError("'y' is required")
        return self

    def rounds(self) -> list[FeedbackItem]:
        if self.items is not None:
            return self.items
        return [FeedbackItem.model_construct(x=self.x, id=self.id, y=self.y)]  # _shape: y is set


_LABEL = ("A classifier's predicted class (its JSON type kept; absent, or null in a batch, before any class "
          "is known): with two classes its most probable one; with three or more auto's class of fewest "
          "errors, a vote of its experts weighted by their errors, which may differ from the most "
          "probable class in `probabilities`. Absent for regression.")
_PROBABILITIES = ("A classifier's probability of each class it knows (summing to 1), keyed by the label as a "
                  "JSON object key: strings as given, integers and booleans as their JSON text (2 -> \"2\", "
                  "true -> \"true\"): the user's own labels, 0/1 in, 0/1 out (a learner of booleans also "
                  "reads -1, 0 and 1 as false and true). Absent for regression. The learner's classes with "
                  "their types: GET /v1/learners/{name}.")


_PREDICTION = ("Regression: the predicted value, in the target's units. A classifier that gives class "
               "probabilities (auto for classification): the probability of `label`, the class it "
               "predicts, with two classes as with more (0 before any class is known); every class's is in "
               "`probabilities`. Any other learner with a binary loss: its score, positive for +1 (the "
               "log-odds with the logistic loss).")


class _Answer(BaseModel):
    """An answer whose classifier fields, None for every other learner, are left out of its repr too."""

    def __repr_args__(self) -> Any:
        return [(name, value) for name, value in super().__repr_args__() if value is not None]


class PredictResponse(_Answer):
    prediction: float = Field(description=_PREDICTION)
    version: int
    label: ClassLabel | None = Field(None, description=_LABEL)
    probabilities: dict[str, float] | None = Field(None, description=_PROBABILITIES)
    interval: tuple[float, float] | None = Field(None, description=_INTERVAL)
    set: list[ClassLabel] | None = Field(None, description=_SET)


class BatchPredictResponse(_Answer):
    predictions: list[float] = Field(description=f"Per row: {_PREDICTION}")
    version: int
    labels: list[ClassLabel | None] | None = Field(None, description=f"Per row: {_LABEL}")
    probabilities: list[dict[str, float]] | None = Field(None, description=f"Per row: {_PROBABILITIES}")
    intervals: list[tuple[float, float]] | None = Field(None, description=f"Per row: {_INTERVAL}")
    sets: list[list[ClassLabel]] | None = Field(None, description=f"Per row: {_SET}")


class FeedbackResponse(_Answer):
    prediction: float = Field(description=f"The round's, before it learnt the label. {_PREDICTION}")
    loss: float
    version: int
    label: ClassLabel | None = Field(None, description=f"The class the round predicted. {_LABEL}")
    probabilities: dict[str, float] | None = Field(None, description=(
        f"The distribution the round played, before it learnt (the label's class included when new). "
        f"{_PROBABILITIES}"))
    interval: tuple[float, float] | None = Field(None, description=(
        f"The round's, before it learnt. {_INTERVAL}"))
    set: list[ClassLabel] | None = Field(None, description=f"The round's, before it learnt. {_SET}")


class BatchFeedbackResponse(_Answer):
    predictions: list[float] = Field(description=f"Per round, before it learnt its label: {_PREDICTION}")
    losses: list[float]
    version: int
    labels: list[ClassLabel | None] | None = Field(None, description=f"Per round: {_LABEL}")
    probabilities: list[dict[str, float]] | None = Field(None, description=(
        f"Per round, the distribution it played. {_PROBABILITIES}"))
    intervals: list[tuple[float, float]] | None = Field(None, description=f"Per round: {_INTERVAL}")
    sets: list[list[ClassLabel]] | None = Field(None, description=f"Per round: {_SET}")


class StateImported(BaseModel):
    version: int


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable machine-readable code, e.g. 'learner_not_found'.")
    message: str
    details: list[dict[str, Any]] | None = Field(None, description="Schema errors: field and problem.")
    request_id: str | None = Field(None, description="The request's X-Request-ID (given or generated).")


class ErrorResponse(BaseModel):
    """The body of every error: ``{"error": {"code": ..., "message": ..., "details"?: [...]}}``."""

    error: ErrorDetail


_ERRORS = {
    400: "The body is not valid JSON (or holds NaN, Infinity or an overflowing number).",
    401: "Missing or unknown API key.",
    404: "No such learner (in the caller's tenant), or an unknown or used predict id.",
    409: "A conflict with the learner's current configuration, a reused request_id, or a retry applied "
         "before whose answer is no longer kept (already_applied).",
    413: "The body or the batch is larger than the configured limit.",
    422: "The request does not match the schema, or kons rejected the input; nothing changed.",
    503: "The learner store (Redis) is unavailable or the learner is busy; retry after Retry-After.",
}


def json_keyed(distribution: Iterable[tuple[Any, float]]) -> dict[str, float]:
    """A distribution over classes, (class, probability) pairs, as a JSON object: each label as an object
    key (:func:`~kons_service.core.learning.label_key`: ``true`` and ``1`` stay two keys)."""
    return {label_key(label): p for label, p in distribution}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` documenting these error statuses with the one error body."""
    return {s: {"model": ErrorResponse, "description": _ERRORS[s]} for s in statuses}
