"""The edge's one error table (:mod:`kons_service.http.errors`): each error of the core, of kons and of the
store gets the status, code and headers the service has always answered with (these are the answers of
main before the core had its own error tree, recorded one by one)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest
from fastapi import FastAPI

import kons
from kons_service.core import errors as core
from kons_service.core.fairness import RefusalPause
from kons_service.http import errors as edge
from kons_service.store import NotReplicatedError, SnapshotUnstableError, StoreUnavailableError

#: name -> (the error, status, code, headers other than the content's).
CASES: dict[str, tuple[Callable[[], BaseException], int, str, dict[str, str]]] = {
    "invalid_json": (lambda: edge.InvalidJSONError("m"), 400, "invalid_json", {}),
    "unauthorized": (lambda: edge.UnauthorizedError("m"), 401, "unauthorized",
                     {"www-authenticate": "Bearer"}),
    "learner_not_found": (lambda: core.LearnerNotFoundError("m"), 404, "learner_not_found", {}),
    "unknown_id": (lambda: core.UnknownIdError("m"), 404, "unknown_id", {}),
    "config_conflict": (lambda: core.ConfigConflictError("m"), 409, "config_conflict", {}),
    "state_mismatch": (lambda: core.StateMismatchError("m"), 409, "state_mismatch", {}),
    "request_id_conflict": (lambda: core.RequestIdConflictError("m"), 409, "request_id_conflict", {}),
    "payload_too_large": (lambda: core.PayloadTooLargeError("m"), 413, "payload_too_large",
                          {"connection": "close"}),
    "batch_too_large": (lambda: core.BatchTooLargeError("m"), 413, "batch_too_large", {}),
    "resource_limit": (lambda: core.ResourceLimitError("m"), 422, "resource_limit", {}),
    "invalid_name": (lambda: core.InvalidNameError("m"), 422, "invalid_name", {}),
    "too_many_requests": (lambda: core.TooManyRequestsError("m", 7), 429, "too_many_requests",
                          {"retry-after": "7"}),
    "too_many_requests_now": (lambda: core.TooManyRequestsError("m", 0), 429, "too_many_requests",
                              {"retry-after": "1"}),
    "learner_busy": (lambda: core.BusyError("m"), 503, "learner_busy", {"retry-after": "1"}),
    "parser_unavailable": (lambda: edge.ParserUnavailableError("m"), 503, "parser_unavailable",
                           {"retry-after": "1"}),
    "store_may_evict": (lambda: core.StoreMayEvictError("m", 2), 503, "store_may_evict",
                        {"retry-after": "2"}),
    "invalid_input": (lambda: kons.InvalidInputError("m"), 422, "invalid_input", {}),
    "invalid_parameter": (lambda: kons.InvalidParameterError("m"), 422, "invalid_parameter", {}),
    "numerical_error": (lambda: kons.NumericalError("m"), 422, "numerical_error", {}),
    "invalid_state": (lambda: kons.StateFormatError("m"), 422, "invalid_state", {}),
    "kons_error": (lambda: kons.KonsError("m"), 422, "invalid_request", {}),
    "store_unavailable": (lambda: StoreUnavailableError("m"), 503, "store_unavailable", {"retry-after": "1"}),
    "not_replicated": (lambda: NotReplicatedError("m"), 503, "not_replicated", {"retry-after": "1"}),
    "snapshot_unstable": (lambda: SnapshotUnstableError("m"), 503, "learner_busy", {"retry-after": "1"}),
    "out_of_memory": (lambda: MemoryError(), 422, "resource_limit", {}),
    # an error raised while FastAPI reads a large body: carried through, with the edge's own header
    "carried": (lambda: edge.Carried(edge.UnauthorizedError("m"), {"Connection": "close"}), 401,
                "unauthorized", {"www-authenticate": "Bearer", "connection": "close"}),
}


@pytest.fixture(scope="module")
def app() -> FastAPI:
    app = FastAPI()
    edge.install_error_handlers(app, RefusalPause(0, 1))  # (no pause: the answers are what is tested)

    @app.get("/raise/{case}")
    async def raise_(case: str) -> None:
        raise CASES[case][0]()

    return app


def _get(app: FastAPI, path: str) -> httpx.Response:
    async def get() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.get(path)

    return asyncio.run(get())


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_error_gets_its_status_code_and_headers(app: FastAPI, case: str) -> None:
    _, status, code, headers = CASES[case]
    answer = _get(app, f"/raise/{case}")
    assert answer.status_code == status
    assert answer.json()["error"]["code"] == code
    assert {k: v for k, v in answer.headers.items() if k not in ("content-length", "content-type")} == headers


def test_every_service_error_has_its_own_answer() -> None:
    """A new error class of the core or of the edge must be given its status in the table, not fall back
    to the base's 400 (a 404 or a 503 answered as a 400 would mislead every client's retry logic)."""
    errors = {cls for module in (core, edge) for cls in vars(module).values()
              if isinstance(cls, type) and issubclass(cls, core.ServiceError)} - {core.ServiceError}
    assert len(errors) >= 16
    unlisted = [cls.__name__ for cls in errors if not any(
        base in edge.ANSWERS for base in cls.__mro__[:cls.__mro__.index(core.ServiceError)])]
    assert not unlisted
