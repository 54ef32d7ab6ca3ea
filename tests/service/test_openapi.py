"""The OpenAPI document is one a user can copy from: every model has examples that validate against the
document, the request examples succeed against a service (with an API key, through the Bearer scheme),
``algorithm`` is an enum of the registry, operation ids are readable."""

from __future__ import annotations

import re
from typing import Any

import httpx
import jsonschema_rs
import pytest

import kons
from kons_service.http.openapi import EXAMPLES
from kons_service.main import create_app
from kons_service.settings import Settings, valid_name
from testkit.processes import AppFactory

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return create_app(Settings()).openapi()


def _validator(document: dict[str, Any], schema: dict[str, Any]) -> Any:
    """A validator of ``schema`` whose ``#/components/...`` references resolve in ``document``."""
    return jsonschema_rs.Draft202012Validator({**schema, "components": document["components"]})


def test_every_model_has_examples_that_validate(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    assert set(schemas) == set(EXAMPLES), set(schemas) ^ set(EXAMPLES)
    for name, schema in schemas.items():
        assert schema.get("examples"), name
        validator = _validator(document, {"$ref": f"#/components/schemas/{name}"})
        for example in schema["examples"]:
            errors = [e.message for e in validator.iter_errors(example)]
            assert not errors, (name, example, errors)


def test_a_wrong_example_would_be_caught(document: dict[str, Any]) -> None:
    validator = _validator(document, {"$ref": "#/components/schemas/LearnerSpec"})
    assert not validator.is_valid({"algorithm": "no_such_learner", "dim": 3})
    assert not validator.is_valid({"algorithm": "kons", "dim": 0})


def test_algorithm_is_an_enum_of_the_registry(document: dict[str, Any]) -> None:
    algorithm = document["components"]["schemas"]["LearnerSpec"]["properties"]["algorithm"]
    branches = algorithm.get("anyOf", [algorithm])
    assert [b["enum"] for b in branches if "enum" in b] == [sorted(kons.LEARNERS)]


def test_operation_ids_are_readable_and_the_key_is_a_bearer_scheme(document: dict[str, Any]) -> None:
    operations = {(method, path): op for path, ops in document["paths"].items() for method, op in ops.items()}
    ids = [op["operationId"] for op in operations.values()]
    assert len(set(ids)) == len(ids) and all(re.fullmatch(r"[a-z][a-z0-9_]*", i) for i in ids), ids
    assert operations["post", "/v1/learners/{name}/predict"]["operationId"] == "predict"
    assert operations["post", "/v1/learners/{name}/feedback"]["operationId"] == "feedback"
    assert operations["put", "/v1/learners/{name}"]["operationId"] == "create_learner"
    scheme = document["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    for (_, path), operation in operations.items():
        secured = path.startswith(("/v1/", "/v2/models/"))
        assert ("bearer" in str(operation.get("security"))) == secured, path
        assert all(p["name"].lower() != "authorization" for p in operation.get("parameters", []))


def _request_examples(document: dict[str, Any], path: str, method: str) -> list[dict[str, Any]]:
    schema = document["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    name = schema["$ref"].rsplit("/", 1)[-1]
    examples: list[dict[str, Any]] = document["components"]["schemas"][name]["examples"]
    return examples


def _check_answer(document: dict[str, Any], path: str, method: str, response: httpx.Response) -> None:
    assert response.is_success, (path, response.status_code, response.text)
    documented = document["paths"][path][method]["responses"][str(response.status_code)]
    schema = documented["content"]["application/json"]["schema"]
    errors = [e.message for e in _validator(document, schema).iter_errors(response.json())]
    assert not errors, (path, response.json(), errors)


async def test_the_request_examples_succeed_against_a_service(
    make_client: AppFactory, document: dict[str, Any]
) -> None:
    client = await make_client(api_keys="acme:secret")
    client.headers["Authorization"] = "Bearer secret"
    session = [("/v1/learners/{name}", "put"), ("/v1/learners/{name}/predict", "post"),
               ("/v1/learners/{name}/feedback", "post"), ("/v2/models/{name}/infer", "post"),
               ("/v1/learners/{name}/rollback", "post")]
    sent = 0
    for path, method in session:
        for example in _request_examples(document, path, method):
            response = await client.request(method, path.format(name="m"), json=example)
            _check_answer(document, path, method, response)
            sent += 1
    assert sent == 9
    learner = await client.get("/v1/learners/m")
    _check_answer(document, "/v1/learners/{name}", "get", learner)
    # the three feedback examples (one, one by id, two), then the rollback to version 2
    assert learner.json()["version"] == 1 + 1 + 2 + 1
    assert learner.json()["stats"]["rounds"] == 2
    versions = await client.get("/v1/learners/m/versions")
    _check_answer(document, "/v1/learners/{name}/versions", "get", versions)


def _operations(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(method, path): op for path, ops in document["paths"].items() for method, op in ops.items()}


def test_the_learner_name_has_the_servers_rule(document: dict[str, Any]) -> None:
    """Every ``{name}`` path parameter carries the name rule the server applies: a name the document
    allows is one the server takes, and the other way round."""
    names = ["m", "churn-model_v2.1", "a" * 64, "a" * 65, "", ".", "..", "...", ".a", "a b", "a/b", "é",
             "a\n"]
    for (_, path), operation in _operations(document).items():
        for parameter in operation.get("parameters", []):
            if parameter["in"] == "path" and parameter["name"] == "name":
                validator = jsonschema_rs.Draft202012Validator(parameter["schema"])
                assert [validator.is_valid(n) for n in names] == [valid_name(n) for n in names], path


def test_the_body_schemas_say_which_fields_exclude_each_other(document: dict[str, Any]) -> None:
    """``x`` or ``xs`` (``id`` with ``x``, ``ids`` with ``xs``); one round (``x`` or ``id``, and ``y``) or
    ``items``, never empty: what the server refuses, the document refuses too."""
    row = [0.0, 1.0, 2.0]
    refused = {
        "PredictRequest": [{}, {"x": row, "xs": [row]}, {"xs": [row], "id": "a"}, {"x": row, "ids": ["a"]},
                           {"xs": [row, row], "ids": ["a", "a"]}],
        "FeedbackRequest": [{"y": 1.0}, {"x": row}, {"x": row, "id": "a", "y": 1.0},
                            {"items": [{"x": row, "y": 1.0}], "x": row},
                            {"items": [{"x": row, "y": 1.0}], "y": 1.0},
                            {"items": []}],
        "FeedbackItem": [{"y": 1.0}, {"x": row, "id": "a", "y": 1.0}],
    }
    taken = {
        "PredictRequest": [{"x": row}, {"x": row, "id": "a"}, {"xs": [row]}, {"xs": [row], "ids": ["a"]}],
        "FeedbackRequest": [{"x": row, "y": 1.0}, {"id": "a", "y": 1.0, "request_id": "r"},
                            {"items": [{"x": row, "y": 1.0}, {"id": "a", "y": 2.0}]}],
        "FeedbackItem": [{"x": row, "y": 1.0}, {"id": "a", "y": "cat"}],
    }
    for name, bodies in refused.items():
        validator = _validator(document, {"$ref": f"#/components/schemas/{name}"})
        assert [b for b in bodies if validator.is_valid(b)] == [], name
        assert all(validator.is_valid(b) for b in taken[name]), name


def test_the_seen_version_header_is_a_number(document: dict[str, Any]) -> None:
    """A header has no null: ``Kons-Seen-Version`` is an integer >= 0 (a client sending "null" was
    refused)."""
    seen = [p for op in _operations(document).values() for p in op.get("parameters", [])
            if p["name"] == "Kons-Seen-Version"]
    assert seen and all(p["schema"] == {"type": "integer", "minimum": 0} for p in seen)


def test_the_key_is_optional_and_its_limits_are_documented(document: dict[str, Any]) -> None:
    """A keyless (single-tenant) service needs no key: each keyed route's security lets a request without
    one through; and each documents the 429 of its tenant's limits, with Retry-After."""
    for (_, path), operation in _operations(document).items():
        if path.startswith(("/v1/", "/v2/models/")):
            assert operation["security"] == [{"bearer": []}, {}], path
            limited = operation["responses"]["429"]
            assert "Retry-After" in limited["headers"] and limited["content"], path


async def test_a_method_not_allowed_names_every_method_of_the_path(client: httpx.AsyncClient) -> None:
    for method, path, allowed in (("POST", "/v1/learners/m", "DELETE, GET, PUT"),
                                  ("PATCH", "/v1/learners/m", "DELETE, GET, PUT"),
                                  ("POST", "/v1/learners/m/state", "GET, PUT"),
                                  ("GET", "/v1/learners/m/predict", "POST")):
        answer = await client.request(method, path)
        assert answer.status_code == 405 and answer.json()["error"]["code"] == "method_not_allowed"
        assert answer.headers["allow"] == allowed, (method, path)
