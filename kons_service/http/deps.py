"""FastAPI dependencies: the service, the caller's tenant and the addressed learner.

They are coroutines although they never wait: FastAPI runs a plain function dependency in a worker thread,
a thread hop (and a GIL hand-over) per dependency on every request.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from kons_service.core.errors import InvalidNameError
from kons_service.core.service import LearnerService
from kons_service.http.auth import Authenticator
from kons_service.settings import NAME_RULE, Settings, valid_name
from kons_service.store import LearnerRef

__all__ = ["LearnerDep", "SeenVersion", "ServiceDep", "SettingsDep", "TenantDep", "learner_of", "service_of"]

def service_of(request: Request) -> LearnerService:
    """The app's service, for a route that takes it without a dependency (the rounds: each dependency
    is a step of FastAPI's solving on every request)."""
    service: LearnerService = request.app.state.service
    return service


async def _service(request: Request) -> LearnerService:
    return service_of(request)


async def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def _tenant_of(request: Request, authorization: str | None) -> str:
    auth: Authenticator = request.app.state.auth
    return auth.tenant(authorization)


async def _tenant(request: Request, authorization: Annotated[str | None, Header()] = None) -> str:
    return _tenant_of(request, authorization)


ServiceDep = Annotated[LearnerService, Depends(_service)]
SettingsDep = Annotated[Settings, Depends(_settings)]
TenantDep = Annotated[str, Depends(_tenant)]


def learner_of(request: Request, name: str, authorization: str | None) -> LearnerRef:
    """The learner ``name`` of the caller's tenant (whose key is in ``authorization``)."""
    tenant = _tenant_of(request, authorization)
    if not valid_name(name):
        raise InvalidNameError(f"Invalid learner name {name[:80]!r}: a name is {NAME_RULE}.")
    return LearnerRef(tenant, name)


async def _learner(name: str, request: Request,
                   authorization: Annotated[str | None, Header()] = None) -> LearnerRef:
    # (the tenant is resolved here rather than by TenantDep: a sub-dependency is a step of FastAPI's
    # solving on every request)
    return learner_of(request, name, authorization)


LearnerDep = Annotated[LearnerRef, Depends(_learner)]


#: The newest learner version the client was answered, sent back so that a store that lost it (a Redis
#: rollback) is reported even by a process that never held those rounds, or one restarted since.
SeenVersion = Annotated[int | None, Header(
    alias="Kons-Seen-Version", ge=0, description=(
        "Optional: the newest version of this learner you were answered. If the learner's store is "
        "below it, Redis lost acknowledged rounds (a rollback): the service logs and counts it (it does "
        "not change the answer). Forget it after deleting, re-creating or uploading the learner."))]
