"""Open Inference Protocol V2 routes (``/v2/...``): health, server and model metadata, readiness, infer.

Errors are the service's (same statuses, one mapping in :mod:`kons_service.http.errors`) in V2's body shape,
``{"error": "<message>"}``, which V2 clients (tritonclient, KServe's) print.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

import kons
from kons_service.core.learning import ConformalAnswers, label_key, shown_labels, shown_predictions
from kons_service.core.service import LearnerService
from kons_service.http.body import KonsRoute
from kons_service.http.deps import LearnerDep, SeenVersion, ServiceDep
from kons_service.http.routers.ops import store_reachable
from kons_service.http.schemas import json_keyed
from kons_service.http.v2 import (
    BYTES,
    INPUT,
    INTERVAL,
    LABEL,
    OUTPUT,
    PROBABILITIES,
    SET,
    InferenceRequest,
    InferenceResponse,
    ModelMetadata,
    OutputTensor,
    ServerMetadata,
    TensorMetadata,
    model_version,
    rows_of,
)
from kons_service.store import LearnerRef

__all__ = ["router"]


class V2Route(KonsRoute):
    """A route whose errors carry V2's body: the service's own answer, its message as a string."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def v2_handler(request: Request) -> Response:
            try:
                if "inference-header-content-length" in request.headers:
                    raise kons.InvalidInputError(
                        "the binary tensor extension is not supported; send JSON tensors.")
                return await handler(_as_json(request))
            except Exception as exc:
                answer = await _service_answer(request, exc)
                message = json.loads(bytes(answer.body))["error"]["message"]
                headers = {k: v for k, v in answer.headers.items()
                           if k.lower() in ("retry-after", "www-authenticate", "connection", "allow")}
                return JSONResponse({"error": message}, status_code=answer.status_code, headers=headers)

        return v2_handler


def _as_json(request: Request) -> Request:
    """The request with a JSON content type: V2 bodies are JSON, and V2 clients (tritonclient) do not
    always say so."""
    headers = [(k, v) for k, v in request.scope["headers"] if k != b"content-type"]
    scope = {**request.scope, "headers": [*headers, (b"content-type", b"application/json")]}
    return Request(scope, request.receive)


async def _service_answer(request: Request, exc: Exception) -> JSONResponse:
    """The answer the service's handler for ``exc`` (the most specific one registered) gives."""
    handlers = request.app.exception_handlers
    for cls in type(exc).__mro__:
        if cls in handlers:
            answer: JSONResponse = await handlers[cls](request, exc)
            return answer
    raise exc  # pragma: no cover - errors.py registers a handler for Exception


_ERROR = {"content": {"application/json": {"schema": {
    "type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}}}}
router = APIRouter(prefix="/v2", tags=["inference (V2)"], route_class=V2Route, responses={
    status: {**_ERROR, "description": description} for status, description in (
        (400, "The body is not valid JSON."), (401, "Missing or unknown API key."),
        (404, "No such model (learner)."), (413, "The body or the batch is too large."),
        (422, "The request does not match the protocol, or the model rejected the input."),
        (503, "The store is unavailable or the learner is busy; retry."))})


@router.get("/health/live", operation_id="v2_live")
async def live() -> dict[str, bool]:
    return {"live": True}


@router.get("/health/ready", operation_id="v2_ready")
async def ready(request: Request) -> JSONResponse:
    is_ready = await store_reachable(request)
    return JSONResponse({"ready": is_ready}, status_code=200 if is_ready else 503)


@router.get("", response_model=ServerMetadata, operation_id="v2_server_metadata")
async def server_metadata() -> ServerMetadata:
    return ServerMetadata(name="kons", version=kons.__version__, extensions=[])


@router.get("/models/{name}", response_model=ModelMetadata, operation_id="v2_model_metadata")
async def model_metadata(ref: LearnerDep, service: ServiceDep, seen: SeenVersion = None) -> ModelMetadata:
    return await _metadata(ref, service, None, seen)


@router.get("/models/{name}/versions/{version}", response_model=ModelMetadata,
            operation_id="v2_model_version_metadata")
async def model_version_metadata(ref: LearnerDep, version: str, service: ServiceDep,
                                 seen: SeenVersion = None) -> ModelMetadata:
    return await _metadata(ref, service, version, seen)


@router.get("/models/{name}/ready", operation_id="v2_model_ready")
async def model_ready(ref: LearnerDep, service: ServiceDep, seen: SeenVersion = None) -> dict[str, Any]:
    await service.describe(ref, seen)  # a missing learner is a 404; one that cannot be loaded an error
    return {"name": ref.name, "ready": True}


@router.get("/models/{name}/versions/{version}/ready", operation_id="v2_model_version_ready")
async def model_version_ready(ref: LearnerDep, version: str, service: ServiceDep,
                              seen: SeenVersion = None) -> dict[str, Any]:
    learner = await service.describe(ref, seen)
    _check_version(ref, model_version(learner.config, learner.restored_at), version)
    return {"name": ref.name, "ready": True}


@router.post("/models/{name}/infer", response_model=InferenceResponse, operation_id="v2_infer")
async def infer(ref: LearnerDep, body: InferenceRequest, service: ServiceDep,
                seen: SeenVersion = None) -> InferenceResponse:
    return await _infer(ref, body, service, None, seen)


@router.post("/models/{name}/versions/{version}/infer", response_model=InferenceResponse,
             operation_id="v2_version_infer")
async def version_infer(ref: LearnerDep, version: str, body: InferenceRequest,
                        service: ServiceDep, seen: SeenVersion = None) -> InferenceResponse:
    return await _infer(ref, body, service, version, seen)


@router.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"],
                  include_in_schema=False)
async def unknown_route(request: Request, path: str) -> None:
    """Any other ``/v2`` path: V2's error body (a V2 client parses every answer), 405 for a path that
    exists with another method."""
    allowed = sorted({method for route in router.routes
                      if isinstance(route, APIRoute) and route.path != _UNKNOWN
                      and route.path_regex.fullmatch(request.url.path) for method in route.methods or ()})
    if allowed:
        raise StarletteHTTPException(405, f"{request.method} is not allowed on {request.url.path}; use "
                                     f"{' or '.join(allowed)}.", headers={"Allow": ", ".join(allowed)})
    raise StarletteHTTPException(404, f"No V2 route {request.url.path}: the protocol's are /v2, "
                                 "/v2/health/{live,ready} and /v2/models/{name}[/versions/{version}]"
                                 "[/ready|/infer].")


_UNKNOWN = "/v2/{path:path}"


async def _metadata(ref: LearnerRef, service: LearnerService, version: str | None,
                    seen: int | None) -> ModelMetadata:
    learner = await service.describe(ref, seen)
    current = model_version(learner.config, learner.restored_at)
    _check_version(ref, current, version)
    dim = -1 if learner.input_dim is None else learner.input_dim  # -1: any length, until the first row
    outputs = [TensorMetadata(name=OUTPUT, datatype="FP64", shape=[-1])]
    if learner.classes is not None:
        outputs += [TensorMetadata(name=LABEL, datatype="BYTES", shape=[-1]),
                    TensorMetadata(name=PROBABILITIES, datatype="FP64", shape=[-1, len(learner.classes)])]
    if learner.config.get("coverage") is not None:
        outputs.append(TensorMetadata(name=SET, datatype="BYTES", shape=[-1]) if learner.classes is not None
                       else TensorMetadata(name=INTERVAL, datatype="FP64", shape=[-1, 2]))
    inputs = [TensorMetadata(name=INPUT, datatype="FP64", shape=[-1, dim])]
    if learner.encoding is not None:  # a learner of records: one input per name it has seen
        kinds = {f["name"]: "FP64" if f["kind"] == "numeric" else BYTES for f in learner.encoding["features"]}
        inputs = [TensorMetadata(name=name, datatype=kind, shape=[-1]) for name, kind in kinds.items()]
    return ModelMetadata(
        name=ref.name, versions=[current],
        platform=f"kons/{learner.config['algorithm']}",
        inputs=inputs,
        outputs=outputs,
    )


async def _infer(ref: LearnerRef, body: InferenceRequest, service: LearnerService,
                 version: str | None, seen: int | None) -> InferenceResponse:
    """``seen``: the client's ``Kons-Seen-Version``, checked as /v1 checks it (a store below it is a
    rollback: :mod:`kons_service.core.rollbacks`)."""
    rows = rows_of(body)
    result = await service.predict(ref, rows, None, seen)
    current = model_version(result.config, result.restored_at)
    _check_version(ref, current, version)
    batch = len(rows)
    predictions = shown_predictions(result.predictions, result.distributions, result.labels)
    outputs = [OutputTensor(name=OUTPUT, shape=[batch], datatype="FP64", data=predictions)]
    if result.distributions is not None:
        keyed = [json_keyed(d) for d in result.distributions]
        classes = list(keyed[0])  # one state, so every row has the same classes
        labels = ["" if label is None else label_key(label)
                  for label in shown_labels(result.distributions, result.labels)]
        outputs += [OutputTensor(name=LABEL, shape=[batch], datatype="BYTES", data=labels),
                    OutputTensor(name=PROBABILITIES, shape=[batch, len(classes)], datatype="FP64",
                                 parameters={"classes": classes},
                                 data=[row[c] for row in keyed for c in classes])]
    outputs += _conformal_outputs(result.conformal, result.config.get("coverage"), batch)
    wanted = [o.name for o in body.outputs] if body.outputs else [o.name for o in outputs]
    answered = {o.name: o for o in outputs}
    missing = [name for name in wanted if name not in answered]
    if missing:
        raise kons.InvalidInputError(
            f"model {ref.name!r} " + ("was created without a 'coverage'" if missing[0] in (INTERVAL, SET)
                                      else "is not a classifier") + f": it has no output {missing[0]!r}.")
    return InferenceResponse(model_name=ref.name, model_version=current, id=body.id,
                             outputs=[answered[name] for name in wanted])


def _conformal_outputs(answers: ConformalAnswers | None, coverage: float | None, batch: int
                       ) -> list[OutputTensor]:
    """A learner created with a coverage: its rows' intervals or prediction sets (as JSON lists)."""
    if not answers:
        return []
    parameters = {"coverage": coverage}
    if isinstance(answers[0], list):
        return [OutputTensor(name=SET, shape=[batch], datatype="BYTES", parameters=parameters,
                             data=[json.dumps(labels) for labels in answers])]
    return [OutputTensor(name=INTERVAL, shape=[batch, 2], datatype="FP64", parameters=parameters,
                         data=[bound for interval in answers for bound in interval])]


def _check_version(ref: LearnerRef, current: str, version: str | None) -> None:
    """A version path names the learner's one version (:func:`model_version`), else it is a 404."""
    if version is not None and version != current:
        raise StarletteHTTPException(
            404, f"Model {ref.name!r} has no version {version!r}; its version is {current!r}.")
