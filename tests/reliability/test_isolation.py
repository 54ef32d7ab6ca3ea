"""Tenant isolation and key hygiene: tenant B can do nothing to tenant A's learners (each operation is
tried), keys are compared in constant time, and neither keys nor feature vectors reach the logs.

``tests/service/test_service_auth.py`` covers missing and malformed keys and a first isolation pass;
this file tries every operation, including overwriting (PUT /state, PUT with another config), ids and
request_ids, and checks A's learner byte for byte afterwards.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from typing import Any

import httpx
import pytest

from kons_service.http.auth import Authenticator
from kons_service.settings import Settings
from testkit.processes import SPEC, AppFactory, services_on_redis

pytestmark = pytest.mark.anyio

A = {"Authorization": "Bearer key-of-alpha"}
B = {"Authorization": "Bearer key-of-beta"}
KEYS = "alpha:key-of-alpha,beta:key-of-beta"
URL = "/v1/learners/m"


async def _fingerprint(client: httpx.AsyncClient) -> tuple[dict[str, Any], bytes]:
    info = (await client.get(URL, headers=A)).json()
    return info, (await client.get(f"{URL}/state", headers=A)).content


async def test_tenant_b_cannot_touch_tenant_a_learners(make_client: AppFactory) -> None:
    client = await make_client(api_keys=KEYS)
    assert (await client.put(URL, json=SPEC, headers=A)).status_code == 201
    await client.post(f"{URL}/predict", json={"x": [0.1, 0.2, 0.3], "id": "q-a"}, headers=A)
    fed = {"x": [0.5, 0.1, 0.2], "y": 0.3, "request_id": "r-a"}
    await client.post(f"{URL}/feedback", json=fed, headers=A)
    before = await _fingerprint(client)
    blob = before[1]
    other_spec = {**SPEC, "params": {**SPEC["params"], "C": 1.0}}
    tries = {
        "read": ("GET", URL, None),
        "predict": ("POST", f"{URL}/predict", {"x": [0.1, 0.2, 0.3]}),
        "feed": ("POST", f"{URL}/feedback", {"x": [0.1, 0.2, 0.3], "y": 1.0}),
        "feed by A's id": ("POST", f"{URL}/feedback", {"id": "q-a", "y": 1.0}),
        "export": ("GET", f"{URL}/state", None),
        "delete": ("DELETE", URL, None),
    }
    for what, (method, url, body) in tries.items():
        response = await client.request(method, url, json=body, headers=B)
        assert response.status_code == 404, (what, response.text)
        assert "alpha" not in response.text, what
    octets = {**B, "content-type": "application/octet-stream"}
    overwrite = await client.put(f"{URL}/state", content=blob, headers=octets)
    assert overwrite.status_code == 404, overwrite.text
    listing = (await client.get("/v1/learners", headers=B)).json()
    assert listing["learners"] == [] and listing["next_cursor"] is None
    assert (await client.get("/v1/learners?cursor=l", headers=B)).json()["learners"] == []
    # PUT under the same name creates B's own learner (another config is no conflict with A's)
    assert (await client.put(URL, json=other_spec, headers=B)).status_code == 201
    assert (await client.post(f"{URL}/feedback", json={"id": "q-a", "y": 1.0}, headers=B)).status_code == 404
    # A's request_id means nothing in B's namespace: a new round for B, not A's answer
    mine = await client.post(f"{URL}/feedback", json=fed, headers=B)
    assert mine.status_code == 200 and mine.json()["version"] == 1
    assert (await client.delete(URL, headers=B)).status_code == 204
    assert await _fingerprint(client) == before  # A's learner, byte for byte
    assert [x["name"] for x in (await client.get("/v1/learners", headers=A)).json()["learners"]] == ["m"]
    # A's remembered id is still A's to use
    assert (await client.post(f"{URL}/feedback", json={"id": "q-a", "y": 1.0}, headers=A)).status_code == 200


@pytest.mark.parametrize("name", ["alpha%2Fm", "%7Balpha%2Fm%7D", "m%7D", "..%2Fm", "m:log", "*"])
async def test_names_cannot_reach_into_another_namespace(make_client: AppFactory, name: str) -> None:
    client = await make_client(api_keys=KEYS)
    await client.put(URL, json=SPEC, headers=A)
    response = await client.get(f"/v1/learners/{name}", headers=B)
    assert response.status_code in (404, 422), response.text
    assert (await client.get("/v1/learners", headers=B)).json()["learners"] == []


def test_keys_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every configured key is compared, with equal-length digests, whichever key (if any) matches."""
    auth = Authenticator(Settings(api_keys="a:k1,b:a-much-longer-key-2,c:k3", redis_url="redis://x"))
    calls: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def counting(x: bytes, y: bytes) -> bool:
        calls.append((len(x), len(y)))
        return real(x, y)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    for header, tenant in [("Bearer k1", "a"), ("Bearer k3", "c"), ("Bearer a-much-longer-key-2", "b")]:
        calls.clear()
        assert auth.tenant(header) == tenant
        assert calls == [(32, 32)] * 3
    calls.clear()
    with pytest.raises(Exception, match="Invalid API key"):
        auth.tenant("Bearer " + "x" * 500)
    assert calls == [(32, 32)] * 3
    assert hashlib.sha256(b"k1").digest_size == 32


@pytest.mark.redis
def test_no_key_or_feature_vector_in_the_logs(tmp_path: Path) -> None:
    """A real process at log level debug: good and bad keys, features in good and bad bodies, rejected
    numerics and a Redis outage; then the log must hold none of the keys and none of the numbers."""
    secret_features = [0.7316492851, -0.4186205937, 0.2690134725]
    wrong_key = "wrong-key-9f3e1c"
    with services_on_redis(tmp_path, api_keys=KEYS, log_level="debug", redis_timeout_seconds=0.3) as (
            server, [service]), httpx.Client(base_url=service.url, timeout=30) as http:
        assert http.put(URL, json=SPEC, headers=A).status_code == 201
        x = secret_features
        assert http.post(f"{URL}/feedback", json={"x": x, "y": 0.5}, headers=A).status_code == 200
        assert http.post(f"{URL}/predict", json={"x": x, "id": "q1"}, headers=A).status_code == 200
        assert http.post(f"{URL}/predict", json={"x": [*x, 1.0]}, headers=A).status_code == 422
        assert http.post(f"{URL}/feedback", json={"x": x, "y": 1e300}, headers=A).status_code == 422
        assert http.post(f"{URL}/feedback", json={"x": [x[0], "a"], "y": 1}, headers=A).status_code == 422
        raw = f'{{"x": {x}, "y": NaN}}'
        json_a = {**A, "content-type": "application/json"}
        assert http.post(f"{URL}/feedback", content=raw, headers=json_a).status_code == 400
        assert http.get(URL, headers={"Authorization": f"Bearer {wrong_key}"}).status_code == 401
        assert http.post(f"{URL}/predict", json={"x": x}, headers=B).status_code == 404
        server.stop()
        assert http.post(f"{URL}/feedback", json={"x": x, "y": 0.5}, headers=A).status_code == 503
        server.start()
        assert http.post(f"{URL}/feedback", json={"x": x, "y": 0.5}, headers=A).status_code == 200
    log = service.log.read_text()
    assert "store error" in log and "DEBUG" in log.upper()  # the log did record the incidents
    for secret in ["key-of-alpha", "key-of-beta", wrong_key, *(repr(v)[:8] for v in secret_features)]:
        assert secret not in log, secret
