"""Learner lifecycle: create, list, describe, delete, export and import the state blob."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import JSONResponse

from kons_service.http.body import KonsRoute
from kons_service.http.deps import LearnerDep, SeenVersion, ServiceDep, SettingsDep, TenantDep
from kons_service.http.routers import V1
from kons_service.http.schemas import (
    Challenger,
    Challengers,
    LearnerHistory,
    LearnerInfo,
    LearnerList,
    LearnerSpec,
    LearnerSummary,
    LearnerVersions,
    PromotedAnswer,
    PromoteRequest,
    RollbackRequest,
    RolledBack,
    StateImported,
    error_responses,
)

router = APIRouter(prefix=f"{V1}/learners", tags=["learners"], route_class=KonsRoute,
                   responses=error_responses(400, 401, 404, 409, 413, 422, 503))

_OCTETS = "application/octet-stream"


@router.put("/{name}", response_model=LearnerSummary, status_code=status.HTTP_201_CREATED,
            responses={200: {"model": LearnerSummary, "description": "The same config already exists."}})
async def create_learner(ref: LearnerDep, spec: LearnerSpec, service: ServiceDep) -> JSONResponse:
    if spec.fork is not None:
        result = await service.fork(ref, spec.fork.source, spec.fork.version)
    else:
        result = await service.create(ref, spec.algorithm, spec.dim, spec.params, spec.task, spec.shadow,
                                      spec.coverage)
    summary = LearnerSummary(**asdict(result.learner))
    return JSONResponse(summary.model_dump(), status_code=201 if result.created else 200)


@router.get("", response_model=LearnerList)
async def list_learners(
    tenant: TenantDep, service: ServiceDep, settings: SettingsDep,
    cursor: Annotated[str | None, Query(description="Name of the last learner of the previous page.")] = None,
    limit: Annotated[int, Query(ge=1)] = 100,
) -> LearnerList:
    page = await service.list_learners(tenant, cursor, min(limit, settings.page_size_max))
    return LearnerList(learners=[LearnerSummary(**asdict(row)) for row in page.learners],
                       next_cursor=page.next_cursor)


@router.get("/{name}", response_model=LearnerInfo)
async def get_learner(ref: LearnerDep, service: ServiceDep, seen: SeenVersion = None) -> LearnerInfo:
    return LearnerInfo(**asdict(await service.describe(ref, seen)))


@router.get("/{name}/history", response_model=LearnerHistory)
async def learner_history(ref: LearnerDep, service: ServiceDep) -> LearnerHistory:
    return LearnerHistory.model_validate(asdict(await service.history(ref)))


@router.get("/{name}/versions", response_model=LearnerVersions)
async def learner_versions(ref: LearnerDep, service: ServiceDep) -> LearnerVersions:
    return LearnerVersions.model_validate(asdict(await service.versions(ref)))


@router.get("/{name}/challengers", response_model=Challengers)
async def learner_challengers(ref: LearnerDep, service: ServiceDep) -> Challengers:
    version, reports = await service.challengers(ref)
    return Challengers(champion=ref.name, version=version,
                       challengers=[Challenger.model_validate(asdict(report)) for report in reports])


@router.post("/{name}/promote", response_model=PromotedAnswer)
async def promote_challenger(ref: LearnerDep, body: PromoteRequest, service: ServiceDep) -> PromotedAnswer:
    return PromotedAnswer(**asdict(await service.promote(ref, body.challenger)))


@router.post("/{name}/rollback", response_model=RolledBack)
async def rollback_learner(ref: LearnerDep, body: RollbackRequest, service: ServiceDep) -> RolledBack:
    return RolledBack(**asdict(await service.rollback(ref, body.version)))


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_learner(ref: LearnerDep, service: ServiceDep) -> Response:
    await service.delete(ref)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{name}/state", response_class=Response,
            responses={200: {"content": {_OCTETS: {}}, "description": "The kons state blob."}})
async def export_state(ref: LearnerDep, service: ServiceDep) -> Response:
    state = await service.export_state(ref)
    return Response(state.blob, media_type=_OCTETS, headers={"X-Kons-Version": str(state.version)})


@router.put("/{name}/state", response_model=StateImported,
            openapi_extra={"requestBody": {"required": True, "content": {_OCTETS: {"schema": {
                "type": "string", "format": "binary"}}}}})
async def import_state(ref: LearnerDep, request: Request, service: ServiceDep) -> StateImported:
    length = request.headers.get("content-length")
    return StateImported(version=await service.import_state(ref, request.stream(), length))
