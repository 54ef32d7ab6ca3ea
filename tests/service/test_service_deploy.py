"""Deployment files: there is no Docker engine here, so check what can be checked without one."""

from __future__ import annotations

import fnmatch
import inspect
import json
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from kons_service.core.service import LearnerService
from kons_service.shutdown import SERVICE_SECONDS, TOTAL_SECONDS
from testkit.processes import REPO

#: What a SIGTERMed process's exit takes past the bounded steps of its shutdown (the parser processes' end,
#: the interpreter's exit).
_EXIT_MARGIN_SECONDS = 5.0


def test_compose_file_names_the_service_and_a_durable_redis() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    always = {name for name, service in services.items() if "profiles" not in service}
    assert always == {"kons", "redis", "lb"}
    kons, redis = services["kons"], services["redis"]
    assert redis["image"].startswith("redis:7")
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command and "--maxmemory-policy noeviction" in command
    volume = redis["volumes"][0].split(":")
    assert volume[1] == "/data" and volume[0] in compose["volumes"]
    assert kons["build"] == "."
    assert kons["environment"]["KONS_REDIS_URL"].startswith("redis://redis:")
    keys = kons["environment"]["KONS_API_KEYS"]
    assert keys.startswith("${KONS_API_KEYS:?") and "change-me" not in keys  # no public default key
    assert kons["depends_on"]["redis"]["condition"] == "service_healthy"


def test_the_shutdowns_bounds_fit_the_grace_periods() -> None:
    """Kubernetes SIGKILLs a pod still running ``terminationGracePeriodSeconds`` after its SIGTERM, compose a
    container ``stop_grace_period`` after it: the shutdown's bounded steps must end before (4a56b63's added
    up to 97 s: uvicorn's 30 s for the requests, the service's 60 s and its last steps, the store's 5 s;
    against 60 s)."""
    pods = [doc for doc in yaml.safe_load_all((REPO / "deploy/kubernetes/kons.yaml").read_text())
            if doc["kind"] == "Deployment"]
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    graces = [pods[0]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
              int(compose["services"]["kons"]["stop_grace_period"].removesuffix("s"))]
    assert min(graces) >= TOTAL_SECONDS + _EXIT_MARGIN_SECONDS
    assert inspect.signature(LearnerService.close).parameters["timeout"].default == SERVICE_SECONDS
    assert "timeout_graceful_shutdown=CONNECTIONS_SECONDS" in (REPO / "kons_service/__main__.py").read_text()


def test_dockerfile_is_slim_non_root_with_a_healthcheck() -> None:
    lines = [line.strip() for line in (REPO / "Dockerfile").read_text().splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    assert instructions[0] == "FROM python:3.11-slim"
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    uid, _, gid = users[-1].partition(":")  # numeric: Kubernetes' runAsNonRoot checks the image's user
    assert uid.isdigit() and int(uid) >= 1000 and gid.isdigit() and int(gid) >= 1000
    assert any(line.startswith("HEALTHCHECK") for line in lines)
    assert any("KONS_WORKERS" in line for line in lines)
    cmd = json.loads(instructions[-1].removeprefix("CMD "))
    assert cmd == ["python", "-m", "kons_service"]
    for copied in ("pyproject.toml", "README.md", "kons", "kons_service"):
        assert (REPO / copied).exists()


def test_serve_script_runs_python_m_kons_service_in_its_own_venv_after_installing_the_service_extra() -> None:
    script = REPO / "scripts" / "serve.sh"
    text = script.read_text()
    assert os.access(script, os.X_OK)
    assert "\nmake_venv\n" in text and "install_checkout service\n" in text
    assert text.rstrip().endswith('exec "$venv/bin/python" -m kons_service')
    for checked in (script, REPO / "scripts" / "setup.sh"):
        assert subprocess.run(["bash", "-n", str(checked)], check=False).returncode == 0


def test_a_venv_left_without_pip_is_made_again(tmp_path: Path) -> None:
    """``python3 -m venv`` without ensurepip (Debian's python3 without python3-venv) fails after it made
    .venv/bin/python: scripts/setup.sh must make the venv again once venv works, not take it as made."""
    broken = tmp_path / ".venv" / "bin" / "python"
    broken.parent.mkdir(parents=True)
    broken.write_text('#!/bin/sh\necho "No module named pip" >&2; exit 1\n')  # what the failed make leaves
    broken.chmod(0o755)
    python3 = tmp_path / "bin" / "python3"  # the interpreter of the tests, whose stdlib has ensurepip
    python3.parent.mkdir()
    python3.symlink_to(sys.executable)
    environment = {**os.environ, "PATH": f"{python3.parent}:{os.environ['PATH']}"}
    command = f". {shlex.quote(str(REPO / 'scripts' / 'setup.sh'))} && make_venv"
    subprocess.run(["bash", "-c", command], cwd=tmp_path, env=environment, check=True)
    subprocess.run([broken, "-m", "pip", "--version"], capture_output=True, check=True)


def test_the_wheel_packages_the_library_and_the_service_only() -> None:
    """``testkit/`` and ``benchmarks/`` are development code: setuptools' package patterns (matched like
    ``fnmatch`` on package names) must pick no top-level package of the checkout but these two."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {path.parent.name for path in REPO.glob("*/__init__.py")}
    assert {"testkit", "benchmarks"} <= packages
    shipped = {name for name in packages if any(fnmatch.fnmatchcase(name, p) for p in include)}
    assert shipped == {"kons", "kons_service"}


def test_the_monitoring_profile_scrapes_with_the_metrics_key() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    monitoring = {name for name, s in compose["services"].items() if "monitoring" in s.get("profiles", [])}
    assert monitoring == {"prometheus", "grafana"}
    prometheus = yaml.safe_load((REPO / "deploy/monitoring/prometheus.yml").read_text())
    (job,) = prometheus["scrape_configs"]
    (replicas,) = job["dns_sd_configs"]  # every replica of the service, not the one DNS answers first
    assert (replicas["names"], replicas["type"], replicas["port"]) == (["kons"], "A", 8000)
    secret = job["authorization"]["credentials_file"].rsplit("/", 1)[-1]
    assert secret in compose["services"]["prometheus"]["secrets"]
    assert compose["secrets"][secret] == {"environment": "KONS_METRICS_KEY"}
    assert compose["services"]["kons"]["environment"]["KONS_METRICS_KEY"] == "${KONS_METRICS_KEY:-}"
    for mount in compose["services"]["grafana"]["volumes"] + compose["services"]["prometheus"]["volumes"][:1]:
        assert (REPO / mount.split(":")[0]).exists(), mount


def test_the_image_and_ci_install_the_pinned_versions() -> None:
    """constraints.txt pins every dependency the image and the tests install (transitive ones too), each
    within pyproject's ranges; the Dockerfile and scripts/test.sh (CI) install with it."""
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            (spec,) = requirement.specifier
            assert spec.operator == "==", line
            pins[canonicalize_name(requirement.name)] = spec.version
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = [*config["dependencies"], *config["optional-dependencies"]["service"],
                *config["optional-dependencies"]["test"]]
    for line in declared:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pins, line
        assert requirement.specifier.contains(pins[name], prereleases=True), (line, pins[name])
    assert "pip install -c constraints.txt" in (REPO / "Dockerfile").read_text()
    assert "COPY pyproject.toml constraints.txt" in (REPO / "Dockerfile").read_text()
    assert "install_checkout service,test\n" in (REPO / "scripts" / "test.sh").read_text()
    assert '-c constraints.txt --config-settings editable_mode=compat -e ".[$1]"' in " ".join(
        (REPO / "scripts" / "setup.sh").read_text().split())


def _dockerfile_instructions() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined as Docker joins them, comments dropped."""
    joined = (REPO / "Dockerfile").read_text().replace("\\\n", "")
    lines = [line.strip() for line in joined.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_the_image_installs_the_dependencies_before_it_copies_the_code(tmp_path: Path) -> None:
    """Layer caching: the dependency layer depends on pyproject.toml and constraints.txt alone, so a code
    change reinstalls the package, not every dependency. Its requirement list, made here from pyproject.toml
    by the Dockerfile's own command, is exactly the declared runtime and service dependencies."""
    instructions = _dockerfile_instructions()
    copies = [i for i, line in enumerate(instructions) if line.startswith("COPY ")]
    code_copy = next(i for i in copies if {"kons", "kons_service"} & set(instructions[i].split()[1:-1]))
    installs = [i for i, line in enumerate(instructions) if line.startswith("RUN ") and "pip install" in line]
    dependency_install, package_install = installs[0], installs[-1]
    for i in (i for i in copies if i < dependency_install):
        assert set(instructions[i].split()[1:-1]) <= {"pyproject.toml", "constraints.txt"}, instructions[i]
    assert dependency_install < code_copy < package_install
    assert "pip install -c constraints.txt -r /tmp/requirements.txt" in instructions[dependency_install]
    assert "pip install --no-deps" in instructions[package_install]
    listing = instructions[dependency_install].removeprefix("RUN ").split(" && ")[0]
    assert listing.startswith("python -c ")
    (tmp_path / "pyproject.toml").write_bytes((REPO / "pyproject.toml").read_bytes())
    command = shlex.quote(sys.executable) + listing.removeprefix("python").replace("/tmp/", "./")
    subprocess.run(["sh", "-c", command], cwd=tmp_path, check=True)
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    listed = (tmp_path / "requirements.txt").read_text().splitlines()
    assert listed == [*config["dependencies"], *config["optional-dependencies"]["service"]]


def test_serve_script_installs_only_when_the_declared_dependencies_changed(tmp_path: Path) -> None:
    """A restart of scripts/serve.sh skips pip when pyproject.toml and constraints.txt are those of its last
    install (pip took 10 of a restart's 13 s to find nothing to do); a change of either installs again.
    Run on a copy of the checkout's files with a stand-in .venv/bin/python that logs what it is asked."""
    (tmp_path / "scripts").mkdir()
    for name in ("scripts/serve.sh", "scripts/setup.sh", "pyproject.toml", "constraints.txt"):
        (tmp_path / name).write_bytes((REPO / name).read_bytes())
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\necho "$*" >> "$(dirname "$0")/../../calls"\n')
    python.chmod(0o755)

    def serve() -> list[str]:
        (tmp_path / "calls").unlink(missing_ok=True)
        subprocess.run(["bash", str(tmp_path / "scripts" / "serve.sh")], check=True, cwd=tmp_path)
        return [" ".join(line.split()[:3]) for line in (tmp_path / "calls").read_text().splitlines()]

    venv_checked = "-m pip --version"  # scripts/setup.sh: whether the venv has a pip, else it is made again
    assert serve() == [venv_checked, "-m pip install", "-m kons_service"]
    assert serve() == [venv_checked, "-m kons_service"]
    with (tmp_path / "constraints.txt").open("a") as constraints:
        constraints.write("# a new pin\n")
    assert serve() == [venv_checked, "-m pip install", "-m kons_service"]
    assert serve() == [venv_checked, "-m kons_service"]
