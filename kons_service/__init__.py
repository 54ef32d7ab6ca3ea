"""The kons service: a FastAPI app hosting named kons learners for many tenants (``kons_service.main``),
and its Python client (:class:`Client`, :class:`AsyncClient`; :mod:`kons_service.client`).

The client is imported on first use, so that the ``kons`` command (:mod:`kons_service.cli`) also runs
where only kons itself is installed (``kons state inspect``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kons_service.client import AsyncClient, Client

__all__ = ["AsyncClient", "Client"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("kons_service.client"), name)
    raise AttributeError(f"module 'kons_service' has no attribute {name!r}")
