"""The README's examples are executable documentation: every Python and curl block runs, in the README's
order, against a live ``python -m kons_service`` on its embedded store, and prints what the README says.

Conventions the README follows so that this test can read it:

* a Python line ``print(...)  # text`` prints exactly ``text`` (every ``print`` carries its output);
* a ``# {...}`` line right after a curl command is that command's JSON answer (its numbers to
  :data:`DIGITS` significant digits: the last digits of a float depend on the CPU's vector instructions);
* ``localhost:8000`` / ``127.0.0.1:8000`` is the service (here on a free port);
* a bash block that is not made of curl commands is run by the test named in :data:`RUN_ELSEWHERE`.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testkit.processes import REPO, free_port, service_env, start_service, terminate

README = REPO / "README.md"
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
    line: int  # where the block starts in README.md, for the failure messages

    def commands(self) -> list[str]:
        """The block's shell commands, continuation lines joined, comment lines kept as they are."""
        return self.source.replace("\\\n", " ").splitlines()


def _blocks() -> list[Block]:
    text = README.read_text()
    return [Block(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(text)]


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
        assert block.language in ("python", "bash"), f"README.md:{block.line}: a ``` block without a language"
        if block.language == "bash" and not _is_curl(block):
            assert block.commands()[0].split("#")[0].strip() in RUN_ELSEWHERE, f"README.md:{block.line}"


def _run_python(block: Block, namespace: dict[str, object], service: str) -> None:
    expected = [m.group(1).strip() for m in map(PRINTED.match, block.source.splitlines()) if m]
    printed = [line for line in block.source.splitlines() if line.lstrip().startswith("print(")]
    assert len(expected) == len(printed), f"README.md:{block.line}: a print() without its output comment"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(SERVICE.sub(service, block.source), f"README.md:{block.line}", "exec"), namespace)
    assert out.getvalue().splitlines() == expected, f"README.md:{block.line}"


def _run_curl(block: Block, service: str, cwd: Path) -> None:
    commands = block.commands()
    for i, command in enumerate(commands):
        if not command.startswith("curl "):
            continue
        done = subprocess.run(["bash", "-c", SERVICE.sub(service, command.replace("curl ", "curl -sS ", 1))],
                              cwd=cwd, capture_output=True, text=True, timeout=60)
        where = f"README.md:{block.line}: {command}"
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
def test_every_readme_example_prints_what_the_readme_says(service_url: str, tmp_path: Path) -> None:
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
