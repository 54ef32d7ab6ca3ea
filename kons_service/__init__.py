"""The kons service: a FastAPI app hosting named kons learners for many tenants (``kons_service.main``),
and its Python client (:class:`Client`, :class:`AsyncClient`; :mod:`kons_service.client`)."""

from kons_service.client import AsyncClient, Client

__all__ = ["AsyncClient", "Client"]
