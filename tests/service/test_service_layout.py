"""The store speaks the service's own types, also when Redis is not there (that only the store imports
Redis is tests/service/test_layers.py's)."""

from __future__ import annotations

import pytest

from kons_service.store import LearnerRef, Store, StoreUnavailableError
from testkit.processes import free_port


@pytest.mark.anyio
async def test_an_unreachable_redis_is_a_store_error_not_a_redis_one() -> None:
    store = Store.connect(f"redis://127.0.0.1:{free_port()}/0", timeout_seconds=0.5)
    try:
        with pytest.raises(StoreUnavailableError):
            await store.head(LearnerRef("t", "m"))
        with pytest.raises(StoreUnavailableError):
            await store.server.ping()
    finally:
        await store.close()
