"""Rounds: predictions and feedback."""

from __future__ import annotations

from fastapi import APIRouter

from kons_service.core.service import Feedback
from kons_service.http.body import KonsRoute
from kons_service.http.deps import LearnerDep, SeenVersion, ServiceDep
from kons_service.http.routers import V1
from kons_service.http.schemas import (
    BatchFeedbackResponse,
    BatchPredictResponse,
    FeedbackRequest,
    FeedbackResponse,
    PredictRequest,
    PredictResponse,
    error_responses,
)

router = APIRouter(prefix=f"{V1}/learners", tags=["rounds"], route_class=KonsRoute,
                   responses=error_responses(400, 401, 404, 409, 413, 422, 503))


@router.post("/{name}/predict", response_model=PredictResponse | BatchPredictResponse)
async def predict(
    ref: LearnerDep, body: PredictRequest, service: ServiceDep, seen: SeenVersion = None
) -> PredictResponse | BatchPredictResponse:
    result = await service.predict(ref, body.rows(), body.row_ids(), seen)
    if body.xs is None:
        return PredictResponse(prediction=result.predictions[0], version=result.version)
    return BatchPredictResponse(predictions=result.predictions, version=result.version)


@router.post("/{name}/feedback", response_model=FeedbackResponse | BatchFeedbackResponse)
async def feedback(
    ref: LearnerDep, body: FeedbackRequest, service: ServiceDep, seen: SeenVersion = None
) -> FeedbackResponse | BatchFeedbackResponse:
    rounds = [Feedback(y=it.y, x=it.x, id=it.id) for it in body.rounds()]
    result = await service.feedback(ref, rounds, body.request_id, seen)
    predictions, losses, version = result.predictions, result.losses, result.version
    if body.items is None:
        return FeedbackResponse(prediction=predictions[0], loss=losses[0], version=version)
    return BatchFeedbackResponse(predictions=predictions, losses=losses, version=version)
