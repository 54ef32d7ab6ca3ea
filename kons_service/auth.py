"""Bearer-key authentication: each API key maps to a tenant; no keys configured = one open tenant.

Keys are compared in constant time (``hmac.compare_digest`` over SHA-256 digests, against every
configured key) and are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import logging

from kons_service.errors import UnauthorizedError
from kons_service.metrics import EVERY_TENANT, Visible
from kons_service.settings import DEFAULT_TENANT, Settings

__all__ = ["Authenticator"]

log = logging.getLogger("kons_service.auth")


class Authenticator:
    """Resolves an ``Authorization`` header to a tenant."""

    def __init__(self, settings: Settings) -> None:
        keys = settings.tenant_keys()
        self._digests = [(hashlib.sha256(k.encode()).digest(), t) for k, t in keys.items()]
        self.single_tenant = not keys
        metrics_key = settings.metrics_key
        self._metrics_digest = None if metrics_key is None else hashlib.sha256(metrics_key.encode()).digest()

    def log_mode(self) -> None:
        if self.single_tenant:
            log.warning("No API keys configured (KONS_API_KEYS / KONS_API_KEYS_FILE): running single-tenant "
                        "(tenant %r) without authentication.", DEFAULT_TENANT)
        else:
            tenants = sorted({t for _, t in self._digests})
            log.info("Authentication on: %d key(s) for %d tenant(s).", len(self._digests), len(tenants))

    def metrics_tenants(self, authorization: str | None) -> Visible:
        """Whose names ``/metrics`` may show this caller: every tenant's when single-tenant or with the
        metrics key, its own with a tenant's API key, nobody's without a key; an unknown key is a 401.
        A blank bearer is no key: it is what Prometheus sends from an empty credentials file (compose's
        default KONS_METRICS_KEY), and the scrape must still work."""
        if self.single_tenant:
            return EVERY_TENANT
        scheme, _, key = (authorization or "").partition(" ")
        if authorization is None or (scheme.lower() == "bearer" and not key.strip()):
            return frozenset()
        digest = hashlib.sha256(self._bearer(authorization).encode()).digest()
        if self._metrics_digest is not None and hmac.compare_digest(digest, self._metrics_digest):
            return EVERY_TENANT
        return frozenset({self.tenant(authorization)})

    @staticmethod
    def _bearer(authorization: str | None) -> str:
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise UnauthorizedError("Missing API key: send 'Authorization: Bearer <key>'.")
        return key.strip()

    def tenant(self, authorization: str | None) -> str:
        """The tenant of a bearer key; raises :class:`UnauthorizedError` for a missing or unknown key."""
        if self.single_tenant:
            return DEFAULT_TENANT
        digest = hashlib.sha256(self._bearer(authorization).encode()).digest()
        found = None
        for known, tenant in self._digests:  # no early exit: the time does not depend on which key
            if hmac.compare_digest(digest, known):
                found = tenant
        if found is None:
            raise UnauthorizedError("Invalid API key.")
        return found
