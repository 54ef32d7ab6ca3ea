"""Running kons learners inside the service: configs, tasks, input checks, numeric guards, worker threads.

A learner's config is the JSON object ``{"algorithm", "dim", "params"}``; its canonical text is what the
store keeps, so two configs are the same iff their texts are equal.

**Tasks.** A learner does regression (labels are numbers) or classification (labels are strings, integers
or booleans). A learner whose algorithm has a ``task`` parameter (``auto``) may leave it to its first
feedback: its config then holds ``"task": null`` (it predicts as a regression learner that learned
nothing) and the first feedback's label decides it, by its JSON type (:func:`task_of_label`); the store
replaces the config by the decided one with a compare-and-set (``Store.decide_config``), so that two
replicas racing on the first feedback agree, and every replay and restart reads the decided config. Any
other learner's task is its loss's: classification for a binary loss.

**Rounds.** Every round is kons's own (:meth:`kons.Learner.learn_round`, :meth:`kons.Learner.predict_round`:
the play, and for a learner that gives class probabilities, ``auto`` for classification, the distribution
over its classes that the round played, the label's class, the loss and whether it was right), so the
service's answers are the library's. Such a learner is given, and its log keeps, the labels as the user
sent them, so its answers echo them: ``0``/``1`` in, ``0``/``1`` out (:func:`check_rows`,
:func:`replayed_label` for its log of before). The log keeps kons's play, which a replay checks; the
answers' ``prediction`` of such a learner is the probability of its most probable class, however many
classes it has (:func:`shown_predictions`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeGuard, TypeVar

import anyio.to_thread
import numpy as np

import kons
import kons.rounds
from kons.classes import class_label
from kons.losses import get_loss, probability, top_label
from kons_service.core.errors import BatchTooLargeError, ResourceLimitError, ShadowFeedbackError

__all__ = [
    "CLASSIFICATION",
    "REGRESSION",
    "SHADOW_REQUEST",
    "ConformalAnswers",
    "Distribution",
    "Round",
    "asked_coverage",
    "build",
    "canonical",
    "check_budget",
    "check_config_coverage",
    "check_labels",
    "check_rows",
    "check_shadow_writer",
    "check_work",
    "classifier",
    "config_of",
    "conformal_answers",
    "decided",
    "finite",
    "label_key",
    "new_class_keys",
    "numerics",
    "offload",
    "replayed_label",
    "shown_labels",
    "shown_predictions",
    "task_of",
    "task_of_label",
    "timed",
    "track_coverage",
    "undecided",
    "undecided_config",
]

log = logging.getLogger("kons_service.learning")

T = TypeVar("T")
#: A single round runs on the event loop when the learner's state is at most this many bytes (about 0.1-0.5
#: ms), or when its rounds, as timed, take at most :data:`_INLINE_ROUND_SECONDS`: handing such a round to a
#: worker thread costs more than it spares the others. A round of many small arrays (``auto``'s, a few MB
#: of them) holds the GIL nearly throughout, so the loop waits for it in a thread too, and the hand-over
#: wakes two threads, each of which may wait for a core on a busy machine. Anything else (a batch, a
#: round of a large exact learner, whose operations on large arrays release the GIL) runs in a worker
#: thread.
_INLINE_STATE_BYTES = 2**20
_INLINE_ROUND_SECONDS = 0.002

REGRESSION, CLASSIFICATION = "regression", "classification"
#: The task a learner whose config leaves it undecided plays with until its first feedback.
_PLACEHOLDER_TASK = REGRESSION


#: A played distribution over classes, and a round as played (kons's own answer, :class:`kons.Round`).
Distribution = kons.rounds.Distribution
Round = kons.Round


def classifier(learner: kons.Learner) -> TypeGuard[kons.Auto]:
    """Whether ``learner`` is a classifier that gives class probabilities (``auto`` for classification:
    :attr:`kons.Learner.gives_class_probabilities`)."""
    return learner.gives_class_probabilities


def shown_labels(distributions: Sequence[Distribution], labels: Sequence[Any] | None) -> list[Any]:
    """The answers' ``label`` of a classifier's rounds: the class each predicted (``labels``,
    :attr:`kons.Round.predicted`: ``auto``'s label of fewest errors), or for answers kept from before the
    rounds said it (``labels`` None), the most probable class of each distribution."""
    return list(labels) if labels is not None else [top_label(d) for d in distributions]


def shown_predictions(plays: list[float], distributions: Sequence[Distribution] | None,
                      labels: Sequence[Any] | None = None) -> list[float]:
    """The answers' ``prediction`` of rounds played as ``plays`` with ``distributions``: a classifier's
    probability of the class it predicts (the answer's ``label``, :func:`shown_labels`), with two classes
    as with ten (0.0 while it predicts none: before it knows a class), so that it means one thing to a
    user; any other learner's plays as kons made them."""
    if distributions is None:
        return plays
    return [0.0 if label is None else probability(d, label)
            for d, label in zip(distributions, shown_labels(distributions, labels), strict=True)]


#: Each round's interval (regression) or prediction set (classes) at the coverage asked.
ConformalAnswers = list[tuple[float, float]] | list[list[Any]]


def check_config_coverage(learner: kons.Learner, coverage: float | None) -> None:
    """Refuse a config's ``coverage`` for a learner that gives neither intervals nor sets."""
    if coverage is not None and learner.conformal_kind is None:
        raise kons.InvalidParameterError(
            "'coverage' asks an interval (a regression learner) or a prediction set (a learner of class "
            f"probabilities: 'auto' with task 'classification'); this learner (loss {learner.loss}) gives "
            "neither.")


def track_coverage(learner: kons.Learner, config: dict[str, Any]) -> None:
    """Track the config's ``coverage``, if any, in every round the learner plays or replays (its state is
    then its log's and its config's alone, whatever coverage its callers ask; idempotent)."""
    coverage = config.get("coverage")
    if coverage is not None:
        learner.track_coverage(coverage)


def asked_coverage(config: dict[str, Any], asked: float | None) -> float | None:
    """The coverage a request's answers give: the one it asked, else its learner's config's (None: none).
    A coverage asked of a learner whose config tracks none is refused: it has no scores to answer from."""
    if asked is None:
        coverage: float | None = config.get("coverage")
        return coverage
    if config.get("coverage") is None:
        raise kons.InvalidParameterError(
            "this learner gives no intervals or prediction sets: create it with a 'coverage' (e.g. 0.9, "
            "the one it calibrates on every round; any other can then be asked of a request).")
    return asked


def conformal_answers(rounds: Sequence[Round]) -> ConformalAnswers | None:
    """The rounds' intervals or sets (None: no coverage was asked of them)."""
    if not rounds or rounds[0].coverage is None:
        return None
    if rounds[0].prediction_set is not None:
        return [list(r.prediction_set or []) for r in rounds]
    return [r.interval or (math.nan, math.nan) for r in rounds]


def canonical(config: dict[str, Any]) -> str:
    """The stored text of a config: two configs are the same iff their texts are equal."""
    try:
        return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise kons.InvalidParameterError(f"parameters must be finite JSON values: {exc}") from None


def config_of(learner: kons.Learner) -> dict[str, Any]:
    """The config of ``learner``: the algorithm and parameters it is built from (a preprocessed learner
    shown as the base algorithm it wraps, :meth:`kons.Learner.algorithm_params`)."""
    algorithm, params = learner.algorithm_params()
    dim = params.pop("dim", None)
    return {"algorithm": algorithm, "dim": dim, "params": params}


def build(config: dict[str, Any]) -> kons.Learner:
    """A fresh learner of ``config`` (one whose task is undecided: a regression learner until decided)."""
    params = {**config["params"], "dim": config["dim"]}
    if undecided(config):
        params["task"] = _PLACEHOLDER_TASK
    return kons.learner_from_params(config["algorithm"], params)


def undecided(config: dict[str, Any]) -> bool:
    """Whether ``config`` leaves its learner's task to the first feedback's label."""
    params = config["params"]
    return "task" in params and params["task"] is None


def undecided_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (of a learner with a ``task`` parameter) with its task left to the first feedback."""
    return {**config, "params": {**config["params"], "task": None}}


def decided(config: dict[str, Any], task: str) -> dict[str, Any]:
    """``config`` with its task decided as ``task``."""
    return {**config, "params": {**config["params"], "task": task}}


def task_of(config: dict[str, Any], learner: kons.Learner) -> str | None:
    """The task of a learner of ``config``: None while undecided, else its ``task`` parameter, or its
    loss's (classification for a binary loss)."""
    if "task" in config["params"]:
        task: str | None = config["params"]["task"]
        return task
    return CLASSIFICATION if get_loss(learner.loss).binary else REGRESSION


def task_of_label(y: Any) -> str:
    """The task a first label decides, by its JSON type: a number means regression; a string or a
    boolean, classification."""
    return REGRESSION if isinstance(y, int | float) and not isinstance(y, bool) else CLASSIFICATION


def check_labels(task: str, ys: Sequence[Any]) -> None:
    """Refuse (422, naming the task) a label of the wrong kind: a string or boolean for regression, a
    number with a fraction for classification (whose labels are strings, integers or booleans; ``1.0``
    is JSON's ``1``)."""
    for i, y in enumerate(ys):
        if task == REGRESSION and task_of_label(y) != REGRESSION:
            problem = "this learner does regression: a label must be a number"
        elif task == CLASSIFICATION and isinstance(y, float) and not y.is_integer():
            problem = "this learner does classification: a label must be a string, an integer or a boolean"
        else:
            continue
        where = f"item {i}: " if len(ys) > 1 else ""
        raise kons.InvalidInputError(f"{where}{problem}; got {json.dumps(y)[:40]}.")


def label_key(label: Any) -> str:
    """A class's key in an answer's ``probabilities`` (a JSON object): a string as given, any other label as
    its JSON text (``true``, ``1``)."""
    return label if isinstance(label, str) else json.dumps(label)


def new_class_keys(classes: Sequence[Any], labels: Sequence[Any]) -> set[str]:
    """The keys in ``probabilities`` of the ``labels`` (the learner's own classes, see
    :meth:`kons.Auto.class_of`) that are not ``classes`` yet. Refuses (422) a label whose key would be
    another class's: ``"1"`` and ``1``, or ``"true"`` and ``true``, are two classes (as in kons), which one
    JSON object cannot tell apart. Sent by one source they are usually one class whose type changed (a CSV
    column read as text): the message says so rather than letting one class's probability hide the
    other's."""
    known = {label_key(c): c for c in classes}
    before = set(known)
    for i, y in enumerate(labels):
        key = label_key(y)
        other = known.setdefault(key, y)
        if type(other) is not type(y) or other != y:
            where = f"item {i}: " if len(labels) > 1 else ""
            raise kons.InvalidInputError(
                f"{where}the label {json.dumps(y)} and the class {json.dumps(other)} would share the key "
                f"{key!r} in probabilities; send each class with one JSON type.")
    return set(known) - before


def check_budget(learner: kons.Learner, dim: int | None, budget: int) -> int:
    """Refuse (nothing allocated) a learner whose state at input dimension ``dim`` would exceed ``budget``
    bytes; ``learner`` may be one built without its dimension (kons's estimate from its parameters).
    Returns that estimate."""
    state_bytes = type(learner).state_bytes({**learner.get_params(), "dim": dim})
    if state_bytes > budget:
        raise ResourceLimitError(
            f"This learner's state would take {state_bytes:.4g} bytes at dim {dim}; at most {budget} are "
            "allowed per learner (a smaller dim or sketch_size fits)."
        )
    return state_bytes


def check_work(state: int, rows: int, max_work_bytes: int) -> None:
    """Refuse (413, nothing played) a batch whose work, about ``rows`` times the learner's ``state`` bytes
    (a round of every learner reads or updates most of its state: d^2 for ONS, t^2 for exact KONS), is over
    ``max_work_bytes``: one request may not hold the process for long. A single row always passes."""
    if rows > 1 and rows * state > max_work_bytes:
        allowed = max(max_work_bytes // max(state, 1), 1)
        raise BatchTooLargeError(
            f"This learner's state is {state} bytes, so a batch may hold at most {allowed} rows now "
            f"(rows x state bytes <= KONS_BATCH_MAX_WORK_BYTES = {max_work_bytes}); got {rows}. Send smaller "
            "batches.")


def check_rows(learner: kons.Learner, xs: Sequence[Any], ys: Sequence[Any] | None = None) -> list[Any]:
    """kons's own check of every row (and label) of a batch, before any round is played, so that bad input
    changes nothing; a message names the item when the batch has several. Returns the labels to learn and
    log: a probabilistic classifier's as the user sent them (:func:`kons.classes.class_label`: ``1.0`` is
    the integer ``1``), any other learner's as it uses them ({0, 1} and booleans of a preprocessing
    learner's binary loss become {-1, +1}).

    For a learner whose dimension is not known yet (created without ``dim``), the batch's first row fixes
    it, so every other row must have its length (kons takes any length until its first round).
    """
    labels = []
    first_length = len(xs[0]) if xs and learner.input_dim is None and isinstance(xs[0], np.ndarray) else None
    for i, x in enumerate(xs):
        try:
            _, label = learner.check_round(x, None if ys is None else ys[i])
            if first_length is not None and isinstance(x, np.ndarray) and len(x) != first_length:
                raise kons.InvalidInputError(
                    f"x must have dimension {first_length} (the batch's first row's); got {len(x)}.")
        except kons.InvalidInputError as exc:
            raise kons.InvalidInputError(f"item {i}: {exc}" if len(xs) > 1 else str(exc)) from None
        if label is not None:
            labels.append(class_label(ys[i]) if ys is not None and classifier(learner) else label)
    return labels


def replayed_label(learner: kons.Learner, y: Any) -> Any:
    """The label to replay for the logged label ``y``. A probabilistic classifier's labels are logged as
    the user sent them (JSON), but the service of before logged them as the floats -1.0 and +1.0 (its
    binary learners' labels, whatever the user sent): those replay as ``False`` and ``True`` to a learner
    whose classes are booleans or none yet, the classes such a learner's snapshot restores
    (:mod:`kons.classes`), with the same roles and plays. So a learner written before labels were echoed
    has boolean classes whether it is restored from a snapshot or replayed from its first round, and goes
    on learning the users' ``0``/``1`` or ``false``/``true`` as those two classes."""
    if (isinstance(y, float) and classifier(learner)
            and all(isinstance(c, bool) for c in learner.classes) and y in (-1.0, 1.0)):
        return y > 0
    return y


@contextlib.contextmanager
def numerics() -> Iterator[None]:
    """kons's own errors pass; any other arithmetic failure inside a learner rejects the round (422)."""
    try:
        yield
    except kons.KonsError:
        raise
    except (ArithmeticError, ValueError) as exc:
        log.warning("a learner failed with %s; the round is rejected", type(exc).__name__)
        raise kons.NumericalError(f"the round overflowed float64 ({type(exc).__name__}).") from None


def finite(plays: Sequence[float], losses: Sequence[float], stats: dict[str, Any]) -> bool:
    """Whether played predictions, their losses and the learner's counters are all finite."""
    numbers = [*plays, *losses, *(v for v in stats.values() if isinstance(v, float))]
    return all(math.isfinite(v) for v in numbers)


async def offload(fn: Callable[[], T], rows: int, state_bytes: int, round_cpu_seconds: float) -> T:
    """Run learner numerics inline when small (one round of a learner of at most
    :data:`_INLINE_STATE_BYTES`, or whose rounds take ``round_cpu_seconds`` of a core, at most
    :data:`_INLINE_ROUND_SECONDS`; 0: not timed yet), else in a worker thread (never abandoned mid-way): a
    single round of a large exact learner (tens of ms at hundreds of MB) would otherwise stall every
    tenant's requests."""
    quick = state_bytes <= _INLINE_STATE_BYTES or 0 < round_cpu_seconds <= _INLINE_ROUND_SECONDS
    if rows <= 1 and quick:
        return fn()
    return await anyio.to_thread.run_sync(fn)


def timed(fn: Callable[[], T]) -> Callable[[], tuple[T, float, float]]:
    """``fn``, also giving the wall and CPU seconds it took in the thread that ran it (a hand-over to a
    worker thread is no part of them)."""

    def run() -> tuple[T, float, float]:
        started, cpu_started = time.perf_counter(), time.thread_time()
        result = fn()
        return result, time.perf_counter() - started, time.thread_time() - cpu_started

    return run


#: The prefix of the request ids a shadow challenger's catch-up feeds it with (:mod:`.shadows`; a client's
#: request id cannot hold a '/').
SHADOW_REQUEST = "shadow/"


def check_shadow_writer(config: dict[str, Any], request_ids: Iterable[str | None]) -> None:
    """Refuse feedback to a shadow challenger from anyone but its catch-up: its log holds its champion's
    rounds only (:mod:`.shadows`)."""
    if config.get("shadow") and any(not (rid or "").startswith(SHADOW_REQUEST) for rid in request_ids):
        raise ShadowFeedbackError(
            f"This learner is a shadow challenger of {config['shadow']!r}: it learns that learner's rounds "
            "only. Send the feedback to the champion.")
