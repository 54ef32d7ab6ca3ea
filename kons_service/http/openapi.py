"""The service's OpenAPI document, made for copying from: an example on every model, the HTTP Bearer
security scheme (Swagger's Authorize button, optional: a single-tenant service takes no key) and the 429
of the tenant limits on every route that takes an API key, ``algorithm`` as an enum of the kons registry,
the server's own rules on learner names and on the body fields that exclude each other, and operation ids
named after the handlers (``predict``, ``feedback``, ...).
The document (``/openapi.json``) needs an API key when keys are configured: it names every route and
parameter of the service, which is not for anyone who can reach the port. Its pages, Swagger UI at
``/docs`` and ReDoc at ``/redoc`` (``static/docs.html``), are public and load their scripts from the
package (fastapi-offline's copies of Swagger UI and ReDoc, under ``/docs-assets``), so they work offline
and behind firewalls; the page asks for the key, fetches the document with it and hands it to Swagger
UI's Authorize button.

The examples form one session on one learner ``m`` (Sketched-KONS, dimension 3): created, asked, taught;
``tests/service/test_openapi.py`` validates them against the document and sends them to a service.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles

import kons
from kons_service.http.deps import TenantDep

__all__ = ["EXAMPLES", "SECURITY_SCHEME", "install_openapi", "operation_id"]

SECURITY_SCHEME = "bearer"

_PARAMS = {"kernel": {"name": "rbf", "gamma": 0.5}, "loss": "squared", "alpha": 1.0, "eta": 0.1, "C": 3.0,
           "seed": 0}
_CONFIG = {"algorithm": "sketched_kons", "dim": 3,
           "params": {**_PARAMS, "beta": 1.0, "epsilon": 0.5, "gamma": 0.0}}
_STATS = {"rounds": 3, "stored_points": 3, "dictionary_size": 2, "kors_size": 2, "cumulative_loss": 8.7435,
          "recent_loss": 0.0873, "effective_dimension": 1.0309, "eta": 0.1}
_ERROR = {"code": "learner_not_found", "message": "No learner 'm' in this tenant.",
          "request_id": "3f2b8c1e9a7d4e0f8b6c5a4d3e2f1a0b"}
_TOTALS = {"rounds": 3, "abs_error": 4.1133, "squared_error": 8.7435, "correct": 0.0, "log_loss": 0.0}
_COVERAGE = {"target": 0.9, "since": 0, "rounds": 1000, "covered": 904, "width": 3125.5}
_CALIBRATION = {"since": 0, "count": [0, 0, 0, 0, 0, 110, 140, 200, 250, 300],
                "confidence": [0, 0, 0, 0, 0, 60.5, 91.0, 150.0, 212.5, 285.0],
                "correct": [0, 0, 0, 0, 0, 58, 93, 146, 209, 290]}
_POINT = {"version": 3, "task": "regression", "totals": _TOTALS, "time": 1795450000.125,
          "recent_loss": 0.0873,
          "cumulative_loss": 8.7435, "dictionary_size": 2, "stored_points": 3, "effective_dimension": 1.0309,
          "state_bytes": 1024}
_TENSOR = {"name": "x", "shape": [2, 3], "datatype": "FP64", "data": [0.0, 1.0, 2.0, 1.0, 2.0, 3.0]}
_OUTPUT = {"name": "prediction", "shape": [2], "datatype": "FP64", "data": [1.2457, 0.7763]}

#: Examples by schema name; request bodies first in the order a session sends them.
_WINDOW = {"from_version": 4001, "to_version": 5000, "rounds": 1000, "champion": 0.52, "challenger": 0.31}
_COMPARISON = {"metric": "squared_error", "rounds": 4000, "champion": 0.49, "challenger": 0.33,
               "mean_difference": 0.16, "t": 9.7, "p_value": 4.6e-22, "challenger_wins": 2410,
               "champion_wins": 1590, "sign_p_value": 1.2e-38, "verdict": "challenger_better",
               "windows": [_WINDOW]}
_CLASSIFIER_ERRORS = {"rounds": 4000, "champion": 0.21, "challenger": 0.17, "mean_difference": 0.04,
                      "t": 3.9, "p_value": 1.0e-4, "challenger_wins": 520, "champion_wins": 360,
                      "sign_p_value": 8.1e-8, "verdict": "challenger_better",
                      "windows": [{**_WINDOW, "champion": 0.22, "challenger": 0.16}]}
_CLASSIFIER_COMPARISON = {**_CLASSIFIER_ERRORS, "metric": "log_loss", "champion": 0.48, "challenger": 0.41,
                          "mean_difference": 0.07,
                          "windows": [{**_WINDOW, "champion": 0.5, "challenger": 0.4}],
                          "error_rate": {**_CLASSIFIER_ERRORS, "metric": "error_rate"}}
_CHALLENGER = {"name": "c", "config": {"algorithm": "ons", "dim": 3, "params": {"loss": "squared"},
                                        "shadow": "m"},
               "start": 1000, "learnt": 5000, "behind": 0, "status": "following", "comparison": _COMPARISON}

EXAMPLES: dict[str, list[dict[str, Any]]] = {
    "LearnerSpec": [{"algorithm": "sketched_kons", "dim": 3, "params": _PARAMS}],
    "PredictRequest": [{"x": [0.0, 1.0, 2.0], "id": "q-1"}, {"xs": [[0.0, 1.0, 2.0], [1.0, 2.0, 3.0]]}],
    "FeedbackRequest": [
        {"x": [0.0, 1.0, 2.0], "y": 0.5, "request_id": "r-1"},
        {"id": "q-1", "y": 0.5, "request_id": "r-2"},
        {"items": [{"x": [1.0, 2.0, 3.0], "y": 1.0}, {"x": [1.0, 2.0, 4.0], "y": -2.0}],
         "request_id": "r-3"},
    ],
    "FeedbackItem": [{"x": [1.0, 2.0, 3.0], "y": 1.0},
                     {"x": {"age": 30, "city": "Paris", "member": True, "income": None}, "y": "churn"}],
    "SparseFeatures": [{"indices": [0, 7], "values": [1.0, -0.5]}],
    "InferenceRequest": [{"id": "req-1", "inputs": [_TENSOR]},
                         {"inputs": [_TENSOR], "outputs": [{"name": "prediction"}]}],
    "InputTensor": [_TENSOR],
    "RequestedOutput": [{"name": "prediction"}],
    "LearnerSummary": [{"name": "m", "config": _CONFIG, "version": 3}],
    "LearnerInfo": [{"name": "m", "config": _CONFIG, "version": 3, "stats": _STATS, "input_dim": 3,
                     "task": "regression"}],
    "LearnerList": [{"learners": [{"name": "m", "config": _CONFIG, "version": 3}], "next_cursor": None}],
    "PredictResponse": [{"prediction": 1.2457, "version": 3},
                        {"prediction": 0.5253, "version": 4, "label": "setosa",
                         "probabilities": {"setosa": 0.5253, "versicolor": 0.2361, "virginica": 0.2386}}],
    "BatchPredictResponse": [{"predictions": [1.2457, 0.7763], "version": 3}],
    "FeedbackResponse": [{"prediction": 0.0, "loss": 0.25, "version": 1},
                         {"prediction": 0.3691, "loss": 0.9968, "version": 4, "label": "versicolor",
                          "probabilities": {"setosa": 0.3691, "versicolor": 0.3998, "virginica": 0.2312}}],
    "BatchFeedbackResponse": [{"predictions": [0.2231, 0.8089], "losses": [0.6036, 7.8899], "version": 3}],
    "StateImported": [{"version": 3}],
    "ErrorTotals": [_TOTALS, {**_TOTALS, "rounds": 1000, "coverage": [_COVERAGE]},
                    {"rounds": 1000, "abs_error": 0.0, "squared_error": 0.0, "correct": 796,
                     "log_loss": 512.4, "coverage": [{**_COVERAGE, "width": 1420}],
                     "calibration": _CALIBRATION}],
    "CoverageTotals": [_COVERAGE],
    "CalibrationTotals": [_CALIBRATION],
    "HistoryPoint": [_POINT, {"version": 2, "task": "regression", "totals": {**_TOTALS, "rounds": 2}}],
    "ChangeEvent": [{"version": 1042, "changes": 1}],
    "LearnerHistory": [{"stride": 1, "points": [_POINT], "changes": []},
                       {"stride": 64, "points": [_POINT], "changes": [{"version": 1042, "changes": 1}],
                        "rollbacks": [{"version": 5001, "to": 4200, "time": 1767225600.0}]}],
    "RollbackEvent": [{"version": 5001, "to": 4200, "time": 1767225600.0}],
    "VersionPoint": [{"version": 4096, "time": 1767225600.0, "rounds": 4096, "error_name": "mae",
                      "error": 0.41, "window_rounds": 64, "base": False, "rolled_back": True},
                     {"version": 3584, "time": 1767225540.0, "rounds": None, "error_name": None,
                      "error": None, "window_rounds": 0, "base": True, "rolled_back": False}],
    "LearnerVersions": [{"oldest": 0, "newest": 5001, "kept_bytes": 1_048_576, "versions": [
        {"version": 4096, "time": 1767225600.0, "rounds": 4096, "error_name": "mae", "error": 0.41,
         "window_rounds": 64, "base": False, "rolled_back": True}],
        "rollbacks": [{"version": 5001, "to": 4200, "time": 1767225600.0}]}],
    "RollbackRequest": [{"version": 2}],
    "PromoteRequest": [{"challenger": "c"}],
    "PromotedAnswer": [{"version": 5001, "promoted": "c",
                        "config": {"algorithm": "ons", "dim": 3, "params": {"loss": "squared"}}}],
    "ErrorWindow": [_WINDOW],
    "Comparison": [_COMPARISON, _CLASSIFIER_COMPARISON],
    "PairedErrors": [_COMPARISON, {**_CLASSIFIER_ERRORS, "metric": "error_rate"}],
    "Challenger": [_CHALLENGER],
    "Challengers": [{"champion": "m", "version": 5000, "challengers": [_CHALLENGER]}],
    "ForkSource": [{"from": "m", "version": 30}, {"from": "m"}],
    "RolledBack": [{"version": 5, "restored": 2, "rounds": 2}],
    "ErrorDetail": [_ERROR],
    "ErrorResponse": [{"error": _ERROR}],
    "InferenceResponse": [{"model_name": "m", "model_version": "3", "id": "req-1", "outputs": [_OUTPUT]}],
    "OutputTensor": [_OUTPUT],
    "TensorMetadata": [{"name": "x", "datatype": "FP64", "shape": [-1, 3]}],
    "ModelMetadata": [{"name": "m", "versions": ["3"], "platform": "kons/sketched_kons",
                       "inputs": [{"name": "x", "datatype": "FP64", "shape": [-1, 3]}],
                       "outputs": [{"name": "prediction", "datatype": "FP64", "shape": [-1]}]}],
    "ServerMetadata": [{"name": "kons", "version": kons.__version__, "extensions": []}],
}


def operation_id(route: APIRoute) -> str:
    """A route's operation id: its handler's name (``predict``, ``create_learner``)."""
    return route.name


def _is_api_key(parameter: dict[str, Any]) -> bool:
    """The ``Authorization`` header of the tenant dependency: the security scheme's business."""
    return bool(parameter["in"] == "header" and parameter["name"].lower() == "authorization")


def _algorithm_enum(schema: dict[str, Any]) -> None:
    """``algorithm`` lists the registry's names (the string branch of it, should it become optional)."""
    algorithm = schema["properties"]["algorithm"]
    for branch in algorithm.get("anyOf", [algorithm]):
        if branch.get("type") == "string":
            branch["enum"] = sorted(kons.LEARNERS)


#: A learner's name as JSON Schema writes :data:`~kons_service.settings.NAME_PATTERN` (ECMA-262: ``$``
#: for Python's ``\Z``, anchored).
_NAME_SCHEMA = {"type": "string", "pattern": r"^(?!\.+$)[A-Za-z0-9_.-]{1,64}$"}


def _alone(field: str, *excluded: str) -> dict[str, Any]:
    """The schema of a body that has ``field`` and none of ``excluded``."""
    return {"required": [field], "not": {"anyOf": [{"required": [name]} for name in excluded]}}


#: What the bodies' validators check beyond each field's own type, as JSON Schema (the server's rules:
#: :mod:`kons_service.http.schemas`), so that a body the document allows is one the server takes.
_BODY_RULES: dict[str, dict[str, Any]] = {
    "PredictRequest": {"oneOf": [_alone("x", "xs", "ids"), _alone("xs", "x", "id")]},
    "FeedbackItem": {"oneOf": [_alone("x", "id"), _alone("id", "x")]},
    "FeedbackRequest": {"oneOf": [
        _alone("items", "x", "id", "y"),
        {"allOf": [{"required": ["y"]}, {"oneOf": [_alone("x", "id", "items"), _alone("id", "x", "items")]}]},
    ]},
}


def _tighten_bodies(schemas: dict[str, Any]) -> None:
    """:data:`_BODY_RULES`, and ``items`` never empty, ``ids`` distinct."""
    for name, rules in _BODY_RULES.items():
        if name in schemas:
            schemas[name].update(rules)
    for name, field, rule in (("FeedbackRequest", "items", {"minItems": 1}),
                              ("PredictRequest", "ids", {"uniqueItems": True})):
        for branch in schemas.get(name, {}).get("properties", {}).get(field, {}).get("anyOf", []):
            if branch.get("type") == "array":
                branch.update(rule)


def _tighten_parameters(operation: dict[str, Any]) -> None:
    """The learner's name with its rule; the seen version an integer (a header cannot be null)."""
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "path" and parameter["name"] == "name":
            parameter["schema"] = {**_NAME_SCHEMA, "title": "Name"}
        elif parameter["in"] == "header" and parameter["name"] == "Kons-Seen-Version":
            parameter["schema"] = {"type": "integer", "minimum": 0}


def _keyed(operation: dict[str, Any]) -> None:
    """A route that takes an API key: the key is optional (a single-tenant service has none), and with
    keys configured its tenant's limits may answer 429 (in the route's own error body)."""
    operation["security"] = [{SECURITY_SCHEME: []}, {}]
    operation["responses"]["429"] = {
        "description": "Over one of the tenant's limits (requests, body bytes, work, requests in flight; "
                       "with API keys configured): retry after Retry-After seconds.",
        "headers": {"Retry-After": {"description": "Seconds to wait before retrying.",
                                    "schema": {"type": "integer", "minimum": 1}}},
        "content": operation["responses"]["401"]["content"]}


def _document(app: FastAPI) -> dict[str, Any]:
    document = get_openapi(title=app.title, version=app.version, summary=app.summary,
                           description=app.description, routes=app.routes)
    schemas = document.get("components", {}).get("schemas", {})
    for name, examples in EXAMPLES.items():
        if name in schemas:
            schemas[name]["examples"] = examples
    if "LearnerSpec" in schemas:
        _algorithm_enum(schemas["LearnerSpec"])
    _tighten_bodies(schemas)
    document.setdefault("components", {})["securitySchemes"] = {SECURITY_SCHEME: {
        "type": "http", "scheme": "bearer",
        "description": "An API key of KONS_API_KEYS (none needed when the service runs single-tenant)."}}
    for operations in document["paths"].values():
        for operation in operations.values():
            _tighten_parameters(operation)
            parameters = operation.get("parameters", [])
            if any(_is_api_key(p) for p in parameters):
                _keyed(operation)
                operation["parameters"] = [p for p in parameters if not _is_api_key(p)]
                if not operation["parameters"]:
                    del operation["parameters"]
    return document


#: Where the pages' scripts and styles are served from (the package's files; no key needed).
DOCS_ASSETS = "/docs-assets"
_VIEWER_SCRIPTS = {"swagger": "swagger-ui-bundle.js", "redoc": "redoc.standalone.js"}


def _docs_page(request: Request, viewer: str, title: str) -> HTMLResponse:
    """``static/docs.html`` showing the document in ``viewer`` (``swagger`` or ``redoc``)."""
    root = str(request.scope.get("root_path", "")).rstrip("/")
    config = {"openapi": f"{root}/openapi.json", "viewer": viewer, "scheme": SECURITY_SCHEME}
    page = (resources.files("kons_service") / "static" / "docs.html").read_text()
    for placeholder, value in (("__CONFIG__", json.dumps(config).replace("<", "\\u003c")),
                               ("__ASSETS__", root + DOCS_ASSETS), ("__SCRIPT__", _VIEWER_SCRIPTS[viewer]),
                               ("__TITLE__", title)):
        page = page.replace(placeholder, value)
    return HTMLResponse(page, headers={"Cache-Control": "no-cache", "X-Frame-Options": "DENY"})


def install_openapi(app: FastAPI) -> None:
    """Serve the document above as the app's ``/openapi.json`` (built once, on first use, behind the
    caller's API key), with Swagger UI at ``/docs`` and ReDoc at ``/redoc`` on assets of the package
    (create the app with FastAPI's own ``openapi_url``, ``docs_url`` and ``redoc_url`` set to None)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    router = APIRouter(include_in_schema=False)

    @router.get("/openapi.json")
    async def openapi_document(_: TenantDep) -> JSONResponse:
        return JSONResponse(openapi())

    @router.get("/docs")
    async def swagger_ui(request: Request) -> HTMLResponse:
        return _docs_page(request, "swagger", f"{app.title} - Swagger UI")

    @router.get("/redoc")
    async def redoc(request: Request) -> HTMLResponse:
        return _docs_page(request, "redoc", f"{app.title} - ReDoc")

    app.include_router(router)
    assets = resources.files("fastapi_offline") / "static"
    app.mount(DOCS_ASSETS, StaticFiles(directory=str(assets)), name="docs-assets")
