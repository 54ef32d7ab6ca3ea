"""The README's install commands, run in a fresh virtualenv on a copy of the checkout (from the clone,
and through a built wheel), dependencies from the index: ``kons --help``, ``kons serve --help``,
``kons serve`` on its embedded store, and the Python client talking to it, outside the repository."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from testkit.processes import REPO, free_port, sigkill, terminate, wait_until

pytestmark = pytest.mark.slow

CLIENT_SESSION = textwrap.dedent("""
    import json, sys
    import kons_service
    from kons_service import Client

    with Client(sys.argv[1]) as client:
        client.create_learner("m", "sketched_kons", 3, {"kernel": {"name": "rbf", "gamma": 0.5}, "seed": 0})
        fed = client.feedback_batch("m", [0.5, 1.0], xs=[[0.0, 1.0, 2.0], [1.0, 2.0, 3.0]])
        asked = client.predict("m", [0.0, 1.0, 2.0])
        print(json.dumps({"module": kons_service.__file__, "fed": fed.version, "asked": asked.version,
                          "prediction": asked.prediction}))
""")


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
    return done


#: The README's "Install" commands, by way, with ``{extras}`` for the extras in brackets.
INSTALL = {
    "checkout": ['pip install ".{extras}"'],
    "wheel": ["pip wheel --no-deps -w dist .", 'pip install "$(ls dist/kons-*.whl){extras}"'],
}


def test_the_readme_gives_these_install_commands() -> None:
    readme = (REPO / "README.md").read_text()
    for commands in INSTALL.values():
        for command in commands:
            assert command.format(extras="[service]") in readme


def _installed(tmp_path: Path, extras: str, way: str = "wheel") -> tuple[Path, dict[str, str]]:
    """A fresh virtualenv (no system site-packages) where the README's ``way`` of installing has installed
    the repository with ``extras`` from the index, run in a copy of the checkout (setuptools leaves build/
    behind, and a stale one would leak into later installs); an environment without this process's
    Python or KONS_ variables, with the virtualenv first on PATH."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KONS_", "PYTHON", "VIRTUAL_ENV")) and k != "PIP_REQUIRE_VIRTUALENV"}
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "data"))
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env, 120)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    for command in INSTALL[way]:
        _run(["bash", "-c", command.format(extras=extras)], source, env, 900)
    return venv, env


@pytest.mark.redis
@pytest.mark.parametrize("way", sorted(INSTALL))
def test_the_installed_service_works_in_a_fresh_virtualenv(tmp_path: Path, way: str) -> None:
    venv, env = _installed(tmp_path, "[service]", way)
    bin_dir = venv / "bin"
    work = tmp_path / "elsewhere"  # outside the repository: nothing can be imported from the checkout
    work.mkdir()

    assert "serve" in _run(["kons", "--help"], work, env, 60).stdout
    shown = _run(["kons", "serve", "--help"], work, env, 60).stdout
    assert "--redis-url" in shown and "--data-dir" in shown
    assert list(work.iterdir()) == []  # --help started nothing

    port = free_port()
    log = tmp_path / "serve.log"
    server = subprocess.Popen(["kons", "serve", "--port", str(port), "--data-dir", str(work / "data"),
                               "--log-level", "warning"], cwd=work, env=env, stdin=subprocess.DEVNULL,
                              stdout=log.open("ab"), stderr=subprocess.STDOUT)
    try:
        def healthy() -> bool:
            assert server.poll() is None, log.read_text()[-2000:]
            try:
                return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, 60, "kons serve")
        session = _run([str(bin_dir / "python"), "-c", CLIENT_SESSION, f"http://127.0.0.1:{port}"],
                       work, env, 60)
        answer = json.loads(session.stdout)
        assert answer["module"].startswith(str(venv)) and answer["fed"] == answer["asked"] == 2
        assert 0.0 < answer["prediction"] <= 1.0
        version = httpx.get(f"http://127.0.0.1:{port}/openapi.json").json()["info"]["version"]
        assert version == _run(["kons", "--version"], work, env, 60).stdout.split()[-1]
    finally:
        terminate(server, 30)
        sigkill(server)
    # a graceful stop: uvicorn's shutdown, then SystemExit(128 + SIGTERM) from kons_service.__main__
    assert server.returncode == 128 + signal.SIGTERM, log.read_text()[-2000:]
    assert "Traceback" not in log.read_text()
    assert any((work / "data").rglob("*.aof*"))  # the embedded store kept its append-only file


def test_without_the_service_extra_kons_still_inspects_states(tmp_path: Path) -> None:
    venv, env = _installed(tmp_path, "")
    python, kons = str(venv / "bin" / "python"), str(venv / "bin" / "kons")
    blob = tmp_path / "m.kons"
    _run([python, "-c", "import kons, sys; "  # the paper learner (opt-out of the dict path's preprocessing)
          "m = kons.learner_from_params('kernel_ogd', {'dim': 2, 'preprocess': False}); "
          "m.learn_one([1.0, 2.0], 1.0); open(sys.argv[1], 'wb').write(m.to_bytes())", str(blob)],
         tmp_path, env, 60)
    shown = _run([kons, "state", "inspect", str(blob)], tmp_path, env, 60).stdout
    assert "KernelOGD (kernel_ogd)" in shown and "checksum:  ok" in shown
    serve = subprocess.run([kons, "serve"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert serve.returncode == 2 and "pip install 'kons[service]'" in serve.stderr
    assert "Traceback" not in serve.stderr
