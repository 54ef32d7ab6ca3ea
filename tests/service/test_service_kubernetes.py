"""The Kubernetes manifests (deploy/kubernetes/): every object valid against the Kubernetes API's own
schemas (kubernetes-validate, which bundles them: no cluster, no network), strictly (an unknown field
fails), and wired together: the probes, the Secret, the routing tier's ConfigMap (the shipped HAProxy
configuration, byte for byte) and the names each object finds the others by."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from testkit.processes import HAPROXY_CONFIG, REPO

MANIFESTS = REPO / "deploy" / "kubernetes"
#: The oldest Kubernetes release still supported upstream when this was written, and the newest the
#: validator bundles: the manifests must hold for both.
VERSIONS = ("1.31.0", kubernetes_validate.latest_version())


def _objects() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, doc) for path in sorted(MANIFESTS.rglob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _object(kind: str, name: str) -> dict[str, Any]:
    (found,) = [doc for _, doc in _objects() if doc["kind"] == kind and doc["metadata"]["name"] == name]
    return found


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_for_the_kubernetes_api(version: str) -> None:
    objects = _objects()
    kinds = {doc["kind"] for _, doc in objects}
    assert {"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler", "StatefulSet",
            "ConfigMap", "Secret"} <= kinds
    for _, doc in objects:
        kubernetes_validate.validate(doc, version, strict=True)  # raises on an invalid object
    # and the validator does refuse what the API would: an unknown field, a wrong type
    deployment = copy.deepcopy(_object("Deployment", "kons"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] = "/"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, version, strict=True)
    deployment = copy.deepcopy(_object("Deployment", "kons"))
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, version, strict=True)


def test_the_service_is_probed_on_readyz_and_healthz_and_reads_its_keys_from_a_secret() -> None:
    deployment = _object("Deployment", "kons")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    env = _env(container)
    secret = _object("Secret", "kons-keys")
    for variable, key in (("KONS_API_KEYS", "api-keys"), ("KONS_METRICS_KEY", "metrics-key")):
        reference = env[variable]["secretKeyRef"]
        assert reference == {**reference, "name": "kons-keys", "key": key} and key in secret["stringData"]
    assert "examples" in [part for path, doc in _objects() if doc["kind"] == "Secret" for part in path.parts]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == 10001
    # Redis: the StatefulSet's first pod, through its headless Service
    redis = _object("StatefulSet", "redis")
    assert env["KONS_REDIS_URL"] == f"redis://{redis['metadata']['name']}-0.{redis['spec']['serviceName']}:6379/0"
    assert "noeviction" in redis["spec"]["template"]["spec"]["containers"][0]["args"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    for kind in ("PodDisruptionBudget",):
        assert _object(kind, "kons")["spec"]["selector"]["matchLabels"] == labels
    assert _object("HorizontalPodAutoscaler", "kons")["spec"]["scaleTargetRef"]["name"] == "kons"
    assert _object("Service", "kons-replicas")["spec"]["selector"] == labels


def test_the_routing_tier_runs_the_shipped_haproxy_configuration_on_the_replicas_headless_service() -> None:
    assert _object("ConfigMap", "kons-haproxy")["data"]["haproxy.cfg"] == HAPROXY_CONFIG.read_text()
    router = _object("Deployment", "kons-router")
    (container,) = router["spec"]["template"]["spec"]["containers"]
    env = _env(container)
    assert set(re.findall(r"\$\{(\w+)}", HAPROXY_CONFIG.read_text())) <= set(env)
    host, port = env["KONS_LB_REPLICAS"].split(":")
    headless = _object("Service", "kons-replicas")
    assert headless["spec"]["clusterIP"] == "None"
    assert host.startswith(f"{headless['metadata']['name']}.$(POD_NAMESPACE).svc.")
    assert port == str(headless["spec"]["ports"][0]["port"])
    (mount,) = container["volumeMounts"]
    assert mount["mountPath"] == "/usr/local/etc/haproxy"
    assert router["spec"]["replicas"] == 1  # (two would each place the replicas on the ring: haproxy.yaml)
    front = _object("Service", "kons")
    assert front["spec"]["selector"] == router["spec"]["template"]["metadata"]["labels"]
