"""The routing tier (deploy/haproxy/haproxy.cfg, docker-compose.yml): HAProxy as shipped in front of real
service processes on one real Redis. Each tenant's learner stays on one replica (a consistent hash of the
API key and the learner's name); when a replica leaves, only its learners move, and one that moves to a
replica holding an older copy catches up from the log instead of loading the whole learner; no
acknowledged round is lost through a replica's SIGKILL and restart behind it."""

from __future__ import annotations

import collections
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from testkit.processes import (
    HAPROXY_CONFIG,
    REPO,
    SPEC,
    LoadBalancer,
    ServiceProcess,
    haproxy_binary,
    services_on_redis,
)
from testkit.scrape import value

NO_HAPROXY = "no haproxy (scripts/test.sh installs it)"
needs_haproxy = pytest.mark.skipif(haproxy_binary() is None, reason=NO_HAPROXY)

KEYS = {"alpha": "key-a", "beta": "key-b"}
HEADERS = {tenant: {"authorization": f"Bearer {key}"} for tenant, key in KEYS.items()}
NAMES = [f"m{i}" for i in range(12)]
X = {"x": [0.1, 0.2, 0.3]}


def _compose() -> dict[str, dict[str, dict[str, object]]]:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


def test_compose_runs_replicas_behind_the_shipped_load_balancer() -> None:
    services = _compose()["services"]
    kons, lb = services["kons"], services["lb"]
    replicas = str(kons["deploy"]["replicas"])  # type: ignore[index]
    assert int(re.sub(r"\$\{KONS_REPLICAS:-(\d+)\}", r"\1", replicas)) >= 2
    assert "ports" not in kons  # the replicas are reached through the load balancer only
    assert lb["ports"] == ["8000:8000"]
    assert str(lb["image"]).startswith("haproxy:2.")
    mounts = lb["volumes"]
    assert isinstance(mounts, list) and len(mounts) == 1
    source, target, mode = str(mounts[0]).split(":")
    assert (REPO / source).resolve() == HAPROXY_CONFIG and target == "/usr/local/etc/haproxy/haproxy.cfg"
    assert mode == "ro"
    environment = lb["environment"]
    assert isinstance(environment, dict)
    host, port = environment["KONS_LB_REPLICAS"].split(":")
    assert host == "kons" and port == str(kons["expose"][0]) == "8000"  # type: ignore[index]
    # every variable the configuration reads is set by compose
    assert set(re.findall(r"\$\{(\w+)}", HAPROXY_CONFIG.read_text())) == set(environment)


@needs_haproxy
def test_the_shipped_haproxy_configuration_is_valid_and_hashes_the_learner_path_consistently() -> None:
    env = {**os.environ, **_compose()["services"]["lb"]["environment"]}  # type: ignore[dict-item]
    checked = subprocess.run([str(haproxy_binary()), "-c", "-f", str(HAPROXY_CONFIG)], env=env,
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    lines = [line.split() for line in HAPROXY_CONFIG.read_text().splitlines()]
    assert ["hash-type", "consistent"] in lines and ["balance", "hash", "var(txn.route)"] in lines
    assert ["option", "httpchk", "GET", "/readyz"] in lines


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LoadBalancer, list[ServiceProcess]]]:
    if haproxy_binary() is None:
        pytest.skip(NO_HAPROXY)
    workdir = tmp_path_factory.mktemp("routing")
    api_keys = ",".join(f"{tenant}:{key}" for tenant, key in KEYS.items())
    # (snapshots far apart: a replica's older copy must find its rounds still in the log)
    with services_on_redis(workdir, replicas=3, api_keys=api_keys, metrics_key="metrics-key",
                           snapshot_every_rounds=100_000, snapshot_interval_seconds=3600,
                           snapshot_min_seconds=3600) as (_, services):
        balancer = LoadBalancer(workdir / "lb", [service.port for service in services]).start()
        try:
            balancer.wait_states({f"kons{i + 1}": "UP" for i in range(len(services))})
            yield balancer, services
        finally:
            balancer.stop()


def _homes(client: httpx.Client) -> dict[tuple[str, str], str]:
    """The replica that answers each learner of each tenant (asked three times: always the same one)."""
    homes = {}
    for tenant, headers in HEADERS.items():
        for name in NAMES:
            answered = {client.post(f"/v1/learners/{name}/predict", json=X, headers=headers)
                        for _ in range(3)}
            assert all(response.status_code == 200 for response in answered)
            (home,) = {response.headers["x-kons-replica"] for response in answered}
            homes[tenant, name] = home
    return homes


def _metric(service: ServiceProcess, name: str, **labels: str) -> float:
    text = httpx.get(f"{service.url}/metrics", headers={"authorization": "Bearer metrics-key"}).text
    return value(text, name, **labels) or 0.0


@pytest.mark.redis
def test_learners_stay_on_their_replica_and_only_a_leaving_replicas_learners_move(
    deployment: tuple[LoadBalancer, list[ServiceProcess]],
) -> None:
    balancer, services = deployment
    with httpx.Client(base_url=balancer.url, timeout=60) as client:
        for headers in HEADERS.values():
            for name in NAMES:
                created = client.put(f"/v1/learners/{name}", json=SPEC, headers=headers)
                assert created.status_code in (200, 201), created.text
        homes = _homes(client)
        assert set(homes.values()) == {"kons1", "kons2", "kons3"}
        # the tenant is part of the key: one name of two tenants lands on two replicas at least once
        assert any(homes["alpha", name] != homes["beta", name] for name in NAMES)
        # once each learner is home, requests load nothing more
        loads = [_metric(service, "kons_learner_loads_total") for service in services]
        assert homes == _homes(client)
        assert [_metric(service, "kons_learner_loads_total") for service in services] == loads

        # kons1 and kons3 hold an older copy of a learner homed on kons2 (asked directly once) ...
        moved = next(key for key, home in homes.items() if home == "kons2")
        tenant, name = moved
        for service in (services[0], services[2]):
            assert httpx.post(f"{service.url}/v1/learners/{name}/predict", json=X,
                              headers=HEADERS[tenant]).status_code == 200
        acknowledged: collections.Counter[tuple[str, str]] = collections.Counter()

        def feed(keys: list[tuple[str, str]]) -> None:
            for tenant, name in keys:
                fed = client.post(f"/v1/learners/{name}/feedback", json={**X, "y": 0.5},
                                  headers=HEADERS[tenant])
                if fed.status_code == 200:
                    acknowledged[tenant, name] += 1

        every = list(homes)
        feed(every * 3)  # ... and falls behind as kons2 plays its rounds
        others = {"kons1": services[0], "kons3": services[2]}
        behind = {home: _metric(s, "kons_learner_loads_total", reason="behind") for home, s in others.items()}
        replayed = {home: _metric(s, "kons_replayed_rounds_total") for home, s in others.items()}

        services[1].kill()  # kons2 leaves (SIGKILL): requests in flight to it are sent on
        feed(every)
        balancer.wait_states({"kons2": "DOWN"})
        after = _homes(client)
        assert {key: home for key, home in after.items() if homes[key] != "kons2"} == \
            {key: home for key, home in homes.items() if home != "kons2"}  # only kons2's learners moved
        assert all(after[key] != "kons2" for key in homes)
        # the learner's new home caught its older copy up from the log, without loading it whole
        new_home = others[after[moved]]
        assert _metric(new_home, "kons_learner_loads_total", reason="behind") == behind[after[moved]]
        assert _metric(new_home, "kons_replayed_rounds_total") >= replayed[after[moved]] + 3

        services[1].start()  # kons2 comes back: its learners go home again
        balancer.wait_states({"kons2": "UP"})
        feed(every)
        assert _homes(client) == homes
        for (tenant, name), rounds in acknowledged.items():  # no acknowledged round lost
            info = client.get(f"/v1/learners/{name}", headers=HEADERS[tenant])
            assert info.json()["version"] == rounds, (tenant, name)
        assert sum(acknowledged.values()) >= len(every) * 4  # (the few during the kill may be 503)


@needs_haproxy
def test_the_load_balancer_config_is_rendered_from_the_shipped_file(tmp_path: Path) -> None:
    """The tests' HAProxy runs the shipped file but for its backend addresses (and an admin socket)."""
    balancer = LoadBalancer(tmp_path, [1111, 2222])
    shipped = HAPROXY_CONFIG.read_text().splitlines()
    rendered = balancer.text.splitlines()
    assert [line for line in shipped if not line.lstrip().startswith("server-template")] == \
        [line for line in rendered if not line.lstrip().startswith(("server ", "stats socket"))]
    assert "    server kons2 127.0.0.1:2222 check" in rendered
