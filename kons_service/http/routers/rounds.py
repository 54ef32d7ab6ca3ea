"""Rounds: predictions and feedback."""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import APIRouter, Request
from pydantic import BaseModel

from kons_service.core.learning import ConformalAnswers, Distribution, shown_labels, shown_predictions
from kons_service.core.service import Feedback
from kons_service.http.body import RoundRoute
from kons_service.http.deps import LearnerDep, SeenVersion, service_of
from kons_service.http.responses import TextJSONResponse
from kons_service.http.routers import V1
from kons_service.http.schemas import (
    BatchFeedbackResponse,
    BatchPredictResponse,
    FeedbackRequest,
    FeedbackResponse,
    PredictRequest,
    PredictResponse,
    error_responses,
    json_keyed,
)

T = TypeVar("T")

router = APIRouter(prefix=f"{V1}/learners", tags=["rounds"], route_class=RoundRoute,
                   responses=error_responses(400, 401, 404, 409, 413, 422, 503))


# (a classifier's fields are None for other learners and left out: their answers are as they always were)
@router.post("/{name}/predict", response_model=PredictResponse | BatchPredictResponse,
             response_model_exclude_none=True)
async def predict(
    ref: LearnerDep, body: PredictRequest, request: Request, seen: SeenVersion = None
) -> TextJSONResponse:
    result = await service_of(request).predict(ref, body.rows(), body.row_ids(), seen, body.coverage)
    predictions = shown_predictions(result.predictions, result.distributions, result.labels)
    labels, probabilities = _classes(result.distributions, result.labels)
    intervals, sets = _conformal(result.conformal)
    if body.xs is None:
        return _answer(PredictResponse(prediction=predictions[0], version=result.version,
                                       label=_first(labels), probabilities=_first(probabilities),
                                       interval=_first(intervals), set=_first(sets)))
    return _answer(BatchPredictResponse(predictions=predictions, version=result.version, labels=labels,
                                        probabilities=probabilities, intervals=intervals, sets=sets))


@router.post("/{name}/feedback", response_model=FeedbackResponse | BatchFeedbackResponse,
             response_model_exclude_none=True)
async def feedback(
    ref: LearnerDep, body: FeedbackRequest, request: Request, seen: SeenVersion = None
) -> TextJSONResponse:
    rounds = [Feedback(y=it.y, x=it.x, id=it.id, coverage=body.coverage) for it in body.rounds()]
    result = await service_of(request).feedback(ref, rounds, body.request_id, seen)
    predictions = shown_predictions(result.predictions, result.distributions, result.labels)
    losses, version = result.losses, result.version
    labels, probabilities = _classes(result.distributions, result.labels)
    intervals, sets = _conformal(result.conformal)
    if body.items is None:
        return _answer(FeedbackResponse(prediction=predictions[0], loss=losses[0], version=version,
                                        label=_first(labels), probabilities=_first(probabilities),
                                        interval=_first(intervals), set=_first(sets)))
    return _answer(BatchFeedbackResponse(predictions=predictions, losses=losses, version=version,
                                         labels=labels, probabilities=probabilities, intervals=intervals,
                                         sets=sets))


# The rounds are the hot path: their answers are built checked and rendered once, as FastAPI renders a
# route's response model (which it would otherwise validate again).
def _answer(answer: BaseModel) -> TextJSONResponse:
    """The answer as FastAPI renders it for ``response_model_exclude_none``: its JSON without None fields."""
    return TextJSONResponse(answer.model_dump(mode="json", exclude_none=True))


def _classes(
    distributions: list[Distribution] | None, labels: list[Any] | None,
) -> tuple[list[Any] | None, list[dict[str, float]] | None]:
    """Each row's predicted class (:func:`shown_labels`) and its probabilities by JSON key (None: not a
    classifier)."""
    if distributions is None:
        return None, None
    return shown_labels(distributions, labels), [json_keyed(d) for d in distributions]


def _conformal(answers: ConformalAnswers | None
               ) -> tuple[list[tuple[float, float]] | None, list[list[Any]] | None]:
    """The rows' intervals or sets (both None: no coverage asked)."""
    if not answers:
        return None, None
    if isinstance(answers[0], list):
        return None, answers
    return answers, None


def _first(values: list[T] | None) -> T | None:
    return None if values is None else values[0]
