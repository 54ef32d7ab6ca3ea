"""The README's examples are executable documentation: every Python and curl block of the README, then of
the pages its detail moved to (:data:`DOCUMENTS`), runs in their order against a live ``python -m
kons_service`` on its embedded store, and prints what the page says. The README's Python needs nothing but
what ``pip install ".[service]"`` installs.

Conventions the README follows so that this test can read it:

* a Python line ``print(...)  # text`` prints exactly ``text`` (every ``print`` carries its output);
* a ``# {...}`` line right after a curl command is that command's JSON answer (its numbers to
  :data:`DIGITS` significant digits: the last digits of a float depend on the CPU's vector instructions);
* ``localhost:8000`` / ``127.0.0.1:8000`` is the service (here on a free port);
* a bash block that is not made of curl commands is run by the test named in :data:`RUN_ELSEWHERE`.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testkit.processes import REPO, free_port, service_env, start_service, terminate

README = REPO / "README.md"
#: The pages whose examples run, in this order, in one namespace against one service.
DOCUMENTS = [README, REPO / "docs" / "library.md", REPO / "docs" / "service.md"]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
PRINTED = re.compile(r"^\s*print\(.*\)\s+# (.*)$")
SERVICE = re.compile(r"(localhost|127\.0\.0\.1):8000")
#: Significant digits to which an answer's floats must be the README's.
DIGITS = 12

#: The bash blocks that are not curl calls (keyed by their first command) and the test that runs them.
RUN_ELSEWHERE = {
    "bash scripts/serve.sh": "scripts/test.sh is CI itself; tests/test_wheel.py serves from a fresh install",
    'pip install ".[service]"': "tests/test_wheel.py installs from a copy of the checkout",
    "pip wheel --no-deps -w dist .": "tests/test_wheel.py builds the wheel and installs it",
}


@dataclass(frozen=True)
class Block:
    language: str
    source: str
    where: str  # the page and line where the block starts, for the failure messages

    def commands(self) -> list[str]:
        """The block's shell commands, continuation lines joined, comment lines kept as they are."""
        return self.source.replace("\\\n", " ").splitlines()


def _blocks(pages: list[Path] = DOCUMENTS) -> list[Block]:
    blocks = []
    for page in pages:
        text = page.read_text()
        name = page.relative_to(REPO)
        blocks += [Block(m.group(1), m.group(2), f"{name}:{text.count(chr(10), 0, m.start()) + 1}")
                   for m in FENCE.finditer(text)]
    return blocks


def _is_curl(block: Block) -> bool:
    commands = [c for c in block.commands() if c.strip() and not c.lstrip().startswith("#")]
    return bool(commands) and all(c.startswith("curl ") for c in commands)


@pytest.fixture(scope="module")
def service_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The README's set-up: ``python -m kons_service`` with no KONS_REDIS_URL (its embedded Redis)."""
    workdir = tmp_path_factory.mktemp("readme")
    port = free_port()
    env = service_env(KONS_PORT=str(port), KONS_DATA_DIR=str(workdir / "data"), KONS_LOG_LEVEL="warning")
    proc = start_service(port, env, workdir / "service.log")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        terminate(proc, 30)


def test_every_code_block_is_python_or_bash_and_every_bash_block_is_run_somewhere() -> None:
    blocks = _blocks()
    assert len(blocks) >= 10
    for block in blocks:
        assert block.language in ("python", "bash"), f"{block.where}: a ``` block without a language"
        if block.language == "bash" and not _is_curl(block):
            assert block.commands()[0].split("#")[0].strip() in RUN_ELSEWHERE, block.where


def test_the_readme_python_needs_only_the_service_extra() -> None:
    """The quick start runs where ``pip install ".[service]"`` installed kons: every module the README's
    Python imports is the standard library's or one of the declared runtime and service dependencies (the
    issue: it imported scikit-learn, which that extra does not bring)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {re.split(r"[\[<>=; ]", requirement)[0].lower().replace("-", "_")
                for requirement in [*project["dependencies"], *project["optional-dependencies"]["service"]]}
    allowed = declared | set(sys.stdlib_module_names) | {"kons", "kons_service"}
    for block in _blocks([README]):
        if block.language != "python":
            continue
        nodes = list(ast.walk(ast.parse(block.source)))
        imported = {alias.name for node in nodes if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module for node in nodes if isinstance(node, ast.ImportFrom) and node.module}
        roots = {name.split(".")[0] for name in imported}
        assert roots <= allowed, (block.where, roots - allowed)


def _run_python(block: Block, namespace: dict[str, object], service: str) -> None:
    expected = [m.group(1).strip() for m in map(PRINTED.match, block.source.splitlines()) if m]
    printed = [line for line in block.source.splitlines() if line.lstrip().startswith("print(")]
    assert len(expected) == len(printed), f"{block.where}: a print() without its output comment"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(SERVICE.sub(service, block.source), block.where, "exec"), namespace)
    assert out.getvalue().splitlines() == expected, block.where


def _run_curl(block: Block, service: str, cwd: Path) -> None:
    commands = block.commands()
    for i, command in enumerate(commands):
        if not command.startswith("curl "):
            continue
        done = subprocess.run(["bash", "-c", SERVICE.sub(service, command.replace("curl ", "curl -sS ", 1))],
                              cwd=cwd, capture_output=True, text=True, timeout=60)
        where = f"{block.where}: {command}"
        assert done.returncode == 0, (where, done.stderr)
        answer = json.loads(done.stdout)
        assert "error" not in answer, (where, answer)
        following = commands[i + 1] if i + 1 < len(commands) else ""
        if following.startswith("# {"):
            assert _rounded(answer) == _rounded(json.loads(following[2:])), where


def _rounded(value: object) -> object:
    """A JSON value with its floats to :data:`DIGITS` significant digits."""
    if isinstance(value, float):
        return float(f"{value:.{DIGITS}g}")
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


@pytest.mark.redis
def test_every_readme_example_prints_what_the_readme_says(
    service_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KONS_URL", f"http://{service_url}")  # a Client() without an address: the service's
    namespace: dict[str, object] = {"__name__": "readme"}
    ran = 0
    for block in _blocks():
        if block.language == "python":
            _run_python(block, namespace, service_url)
        elif _is_curl(block):
            _run_curl(block, service_url, tmp_path)
        else:
            continue
        ran += 1
    assert ran >= 8
