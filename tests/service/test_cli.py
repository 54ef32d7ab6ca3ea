"""The ``kons`` command: version, ``serve`` (flags from the settings, --help starts nothing), the lifecycle
verbs against a service process, ``state inspect`` and ``bench`` dispatch."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import pytest

import kons
from kons_service import cli
from kons_service.main import create_app
from kons_service.settings import SECRET, Settings
from testkit.processes import (
    SPEC,
    RedisServer,
    free_port,
    service_env,
    services_on_redis,
    start_service,
    terminate,
)

KONS = [sys.executable, "-m", "kons_service.cli"]


def test_one_version_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    installed = version("kons")
    assert kons.__version__ == installed
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"kons {installed}"
    assert create_app(Settings()).openapi()["info"]["version"] == installed


@pytest.mark.parametrize("argv", [[*KONS, "serve", "--help"],
                                  [sys.executable, "-m", "kons_service", "--help"]])
def test_serve_help_lists_every_setting_and_starts_nothing(tmp_path: Path, argv: list[str]) -> None:
    shown = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60, env=service_env())
    assert shown.returncode == 0 and shown.stderr == ""
    for name, field in Settings.model_fields.items():
        flag = re.compile(f"--{name.replace('_', '-')}(?![\\w-])")
        if field.json_schema_extra == SECRET:  # a credential is named, but only as a variable
            assert not flag.search(shown.stdout) and f"KONS_{name.upper()}" in shown.stdout
        else:
            assert flag.search(shown.stdout)
    assert "KONS_REDIS_URL" in shown.stdout
    assert list(tmp_path.iterdir()) == []  # no ./data: nothing was started


def test_serve_rejects_a_bad_flag_before_starting(tmp_path: Path) -> None:
    bad = subprocess.run([*KONS, "serve", "--port", "70000", "--blas-threads", "zero"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, env=service_env())
    assert bad.returncode == 2
    assert "--port" in bad.stderr and "--blas-threads" in bad.stderr and "Traceback" not in bad.stderr
    assert list(tmp_path.iterdir()) == []


def test_credentials_are_not_flags(tmp_path: Path) -> None:
    """A key given as an argument would be readable by every user of the machine in ps."""
    refused = subprocess.run([*KONS, "serve", "--api-keys", "acme:secret"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60, env=service_env())
    assert refused.returncode == 2 and "--api-keys" in refused.stderr and "Traceback" not in refused.stderr
    assert list(tmp_path.iterdir()) == []


def test_serve_flags_override_the_environment(tmp_path: Path, redis_server: RedisServer) -> None:
    port = free_port()
    env = service_env(KONS_PORT=str(free_port()), KONS_MAX_BATCH="1000")
    argv = [*KONS, "serve", "--port", str(port), "--redis-url", redis_server.url, "--max-batch", "2",
            "--no-metrics-per-learner", "--log-level", "warning"]
    proc = start_service(port, env, tmp_path / "serve.log", argv=argv)
    try:
        url = f"http://127.0.0.1:{port}/v1/learners/cli"
        assert httpx.put(url, json={"algorithm": "kernel_ogd", "dim": 1}).status_code in (200, 201)
        too_many = httpx.post(f"{url}/predict", json={"xs": [[0.0]] * 3})
        assert too_many.status_code == 413 and too_many.json()["error"]["code"] == "batch_too_large"
    finally:
        terminate(proc, 30)


@pytest.mark.redis
def test_lifecycle_verbs_are_the_clients(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """versions, rollback, fork, shadow, challengers and promote against a service process: each prints
    the service's answer as JSON and leaves the learners as the HTTP API says; an error answer is exit
    code 1 with the service's code on stderr."""
    with services_on_redis(tmp_path) as (_, [service]):
        def kons_json(*argv: str) -> dict[str, Any]:
            assert cli.main([*argv, "--url", service.url]) == 0
            answer: dict[str, Any] = json.loads(capsys.readouterr().out)
            return answer

        learner = f"{service.url}/v1/learners"
        httpx.put(f"{learner}/m", json=SPEC).raise_for_status()
        for t in range(12):
            httpx.post(f"{learner}/m/feedback", json={"x": [t, 1.0, -t], "y": 0.1 * t}).raise_for_status()
        versions = kons_json("versions", "m")
        assert (versions["oldest"], versions["newest"]) == (0, 12)
        assert kons_json("rollback", "m", "5") == {"version": 13, "restored": 5, "rounds": 5}
        forked = kons_json("fork", "f", "--from", "m", "--version", "12")
        assert forked["name"] == "f" and forked["version"] == 12
        assert httpx.get(f"{learner}/f").json()["stats"]["rounds"] == 12

        shadow = kons_json("shadow", "c", "--of", "m", "--algorithm", "ons", "--dim", "3",
                           "--params", '{"loss": "squared", "C": 3.0}')
        assert shadow["name"] == "c" and shadow["config"]["shadow"] == "m"
        assert shadow["config"]["algorithm"] == "ons" and shadow["config"]["params"]["C"] == 3.0
        for t in range(4):
            httpx.post(f"{learner}/m/feedback", json={"x": [1.0, t, 0.5], "y": 0.3}).raise_for_status()
        compared = kons_json("challengers", "m")
        assert compared["champion"] == "m" and [c["name"] for c in compared["challengers"]] == ["c"]
        promoted = kons_json("promote", "m", "c")
        assert promoted["promoted"] == "c" and promoted["version"] == 18
        assert httpx.get(f"{learner}/m").json()["config"]["algorithm"] == "ons"
        assert httpx.get(f"{learner}/c").status_code == 404

        assert cli.main(["rollback", "m", "99", "--url", service.url]) == 1
        refused = capsys.readouterr()
        assert refused.out == "" and "409 version_not_kept" in refused.err
        assert httpx.get(f"{learner}/m").json()["version"] == 18  # nothing changed
    with pytest.raises(SystemExit) as done:
        cli.main(["shadow", "c", "--of", "m", "--params", "[1]"])
    assert done.value.code == 2 and "not a JSON object" in capsys.readouterr().err


def _blob(rounds: int) -> bytes:
    # the paper learner (the dict path would wrap it in kons.preprocessing's Preprocessed)
    learner = kons.learner_from_params("sketched_kons", {"dim": 2, "seed": 0, "preprocess": False})
    for t in range(rounds):
        learner.learn_one([0.1 * t, 1.0], 0.5)
    return learner.to_bytes()


def test_state_inspect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.kons"
    path.write_bytes(_blob(7))
    assert cli.main(["state", "inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "SketchedKONS (sketched_kons)" in out and "dim 2" in out
    assert "rounds:    7 " in out and "checksum:  ok" in out and "loads:     ok" in out

    corrupted = bytearray(path.read_bytes())
    corrupted[len(corrupted) // 2] ^= 1
    path.write_bytes(bytes(corrupted))
    assert cli.main(["state", "inspect", str(path)]) == 1
    assert "checksum:  FAILED" in capsys.readouterr().out


def test_state_inspect_of_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["state", "inspect", str(tmp_path / "nothing")])
    assert done.value.code == 2


def test_bench_runs_the_checkouts_benchmark(capfd: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "scaling", "--help"]) == 0
    assert capfd.readouterr().out.startswith("usage: scaling.py")


def test_bench_outside_a_checkout_says_so(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli, "_checkout", lambda: None)
    assert cli.main(["bench", "load"]) == 2
    assert "checkout of the kons repository" in capsys.readouterr().err


def test_bench_quality_without_data_is_a_usage_error_without_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """A fresh clone has no data sets: a message naming where to put them, exit code 2, nothing written."""
    monkeypatch.setenv("KONS_BENCH_DATA_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert cli.main(["bench", "quality", "--quick"]) == 2
    err = capfd.readouterr().err
    assert "no data set" in err and "KONS_BENCH_DATA_DIR" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_without_a_data_directory_the_benchmarks_say_where_to_find_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.common import require_datasets

    monkeypatch.delenv("KONS_BENCH_DATA_DIR", raising=False)
    monkeypatch.setenv("KONS_DATA_DIR", str(tmp_path))  # the service's directory: not the data sets'
    monkeypatch.chdir(tmp_path)  # no shared/data beside it
    with pytest.raises(SystemExit) as done:
        require_datasets(["space_ga"], "benchmarks.quality")
    assert done.value.code == 2
    assert "set KONS_BENCH_DATA_DIR or run beside ../shared/data" in capsys.readouterr().err
