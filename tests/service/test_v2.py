"""Open Inference Protocol V2: a tritonclient round trip against a service process (JSON tensors), and
the protocol's error bodies and tensor checks in-process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

import kons
from kons_service.http.v2 import model_version
from testkit.processes import SPEC, AppFactory, ServiceProcess, services_on_redis

pytestmark = pytest.mark.anyio

ROWS = np.array([[0.0, 1.0, 2.0], [1.0, 2.0, 3.0], [0.5, -1.0, 0.25]])


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    with services_on_redis(tmp_path_factory.mktemp("v2")) as (_, [process]):
        yield process


def _reference(rounds: int) -> kons.Learner:
    learner = kons.learner_from_params(SPEC["algorithm"], {**SPEC["params"], "dim": 3})
    for t in range(rounds):
        learner.learn_one(list(ROWS[t % 3]), float(t))
    return learner


def _infer(client: triton.InferenceServerClient, rows: np.ndarray, datatype: str,
           model: str = "m") -> triton.InferResult:
    tensor = triton.InferInput("x", list(rows.shape), datatype)
    tensor.set_data_from_numpy(rows, binary_data=False)
    wanted = triton.InferRequestedOutput("prediction", binary_data=False)
    return client.infer(model, [tensor], outputs=[wanted], request_id="req-7")


@pytest.mark.redis
def test_tritonclient_round_trip(service: ServiceProcess) -> None:
    httpx.put(f"{service.url}/v1/learners/m", json=SPEC).raise_for_status()
    for t in range(4):
        httpx.post(f"{service.url}/v1/learners/m/feedback",
                   json={"x": list(ROWS[t % 3]), "y": float(t)}).raise_for_status()
    reference = _reference(4)
    client = triton.InferenceServerClient(url=service.url.removeprefix("http://"))
    try:
        assert client.is_server_live() and client.is_server_ready()
        assert client.get_server_metadata()["name"] == "kons"
        assert client.is_model_ready("m") and not client.is_model_ready("nothing")
        metadata = client.get_model_metadata("m")
        config_version = model_version(httpx.get(f"{service.url}/v1/learners/m").json()["config"])
        assert metadata["versions"] == [config_version] and metadata["platform"] == "kons/sketched_kons"
        assert metadata["inputs"] == [{"name": "x", "datatype": "FP64", "shape": [-1, 3]}]

        result = _infer(client, ROWS, "FP64")
        response = result.get_response()
        assert response["model_version"] == config_version and response["id"] == "req-7"
        expected = [reference.predict_one(list(row)) for row in ROWS]
        assert result.as_numpy("prediction").tolist() == expected

        single = _infer(client, ROWS[:1].astype(np.float32), "FP32").as_numpy("prediction")
        assert single.tolist() == [reference.predict_one([float(v) for v in ROWS[0].astype(np.float32)])]
        integers = np.array([[1, 2, 3], [0, 0, 1]], dtype=np.int32)
        assert _infer(client, integers, "INT32").as_numpy("prediction").tolist() == [
            reference.predict_one([float(v) for v in row]) for row in integers]

        with pytest.raises(InferenceServerException) as missing:
            _infer(client, ROWS, "FP64", model="nothing")
        assert missing.value.status() == "404" and "nothing" in missing.value.message()
        with pytest.raises(InferenceServerException) as wrong_dim:
            _infer(client, ROWS[:, :2].copy(), "FP64")
        assert wrong_dim.value.status() == "422" and "dimension" in wrong_dim.value.message()
        # a route V2 clients know that kons does not serve: a V2 error, which the client reports
        with pytest.raises(InferenceServerException) as unknown:
            client.get_model_repository_index()
        assert unknown.value.status() == "404" and "/v2/repository/index" in unknown.value.message()
        # the version path of the model's one version
        pinned = client.infer("m", [_input(ROWS)], model_version=config_version).as_numpy("prediction")
        assert pinned.tolist() == expected
    finally:
        client.close()


def _input(rows: np.ndarray, name: str = "x", datatype: str = "FP64") -> triton.InferInput:
    tensor = triton.InferInput(name, list(rows.shape), datatype)
    tensor.set_data_from_numpy(rows, binary_data=False)
    return tensor


@pytest.mark.redis
def test_tritonclient_classifier_outputs(service: ServiceProcess) -> None:
    httpx.put(f"{service.url}/v1/learners/pets", json={"task": "classification"}).raise_for_status()
    labels = ["cat", "dog", "bird", "cat"]
    local = kons.Auto(task="classification")
    for t in range(12):
        x, y = ROWS[t % 3] + t, labels[t % 4]
        fed = httpx.post(f"{service.url}/v1/learners/pets/feedback", json={"x": x.tolist(), "y": y})
        fed.raise_for_status()
        local.learn_one(x, y)
    client = triton.InferenceServerClient(url=service.url.removeprefix("http://"))
    try:
        outputs = client.get_model_metadata("pets")["outputs"]
        assert outputs == [{"name": "prediction", "datatype": "FP64", "shape": [-1]},
                           {"name": "label", "datatype": "BYTES", "shape": [-1]},
                           {"name": "probabilities", "datatype": "FP64", "shape": [-1, 3]}]
        wanted = [triton.InferRequestedOutput(name, binary_data=False) for name in ("label", "probabilities")]
        result = client.infer("pets", [_input(ROWS)], outputs=wanted)
        expected = [local.predict_proba_dict_one(row) for row in ROWS]
        classes = result.get_output("probabilities")["parameters"]["classes"]
        assert classes == local.classes
        assert result.as_numpy("probabilities").tolist() == [[d[c] for c in classes] for d in expected]
        # the class the learner predicts (in auto's multi-class warm-up not always the most probable one)
        assert result.as_numpy("label").tolist() == [local.predict_round(row).predicted for row in ROWS]
        assert result.get_output("prediction") is None  # asked for two outputs: those two
    finally:
        client.close()


INFER = "/v2/models/m/infer"


def _tensor(data: list[Any], shape: list[int], datatype: str = "FP64", **extra: Any) -> dict[str, Any]:
    return {"inputs": [{"name": "x", "shape": shape, "datatype": datatype, "data": data}], **extra}


def _columns(*inputs: tuple[str, list[Any], list[int], str]) -> dict[str, Any]:
    """A request of named inputs, one feature each: (name, data, shape, datatype)."""
    return {"inputs": [{"name": name, "shape": shape, "datatype": datatype, "data": data}
                       for name, data, shape, datatype in inputs]}


async def test_nested_data_and_id_echo(client: httpx.AsyncClient) -> None:
    await client.put("/v1/learners/m", json=SPEC)
    flat = await client.post(INFER, json=_tensor([0, 1, 2, 1, 2, 3], [2, 3], id="a"))
    nested = await client.post(INFER, json=_tensor([[0, 1, 2], [1, 2, 3]], [2, 3], "INT64"))
    assert flat.status_code == nested.status_code == 200, flat.text
    assert flat.json()["id"] == "a" and nested.json()["id"] is None
    assert flat.json()["outputs"] == nested.json()["outputs"]
    assert flat.json()["outputs"][0]["shape"] == [2]


async def test_model_version_names_the_configuration_not_the_round(client: httpx.AsyncClient) -> None:
    """A V2 client pins ``model_version``: feedback must not move it, another configuration must."""
    await client.put("/v1/learners/m", json=SPEC)
    before = (await client.post(INFER, json=_tensor([0, 1, 2], [1, 3]))).json()["model_version"]
    for t in range(3):
        fed = await client.post("/v1/learners/m/feedback", json={"x": [t, 1, 2], "y": 0.5})
        assert fed.status_code == 200
    after = await client.post(INFER, json=_tensor([0, 1, 2], [1, 3]))
    assert after.json()["model_version"] == before and len(before) == 12
    assert (await client.get("/v2/models/m")).json()["versions"] == [before]
    await client.delete("/v1/learners/m")
    await client.put("/v1/learners/m", json={**SPEC, "params": {**SPEC["params"], "eta": 0.2}})
    other = (await client.post(INFER, json=_tensor([0, 1, 2], [1, 3]))).json()["model_version"]
    assert other != before


@pytest.mark.parametrize(("body", "status", "words"), [
    (_tensor([0, 1, 2], [1, 2]), 422, "holds 3 elements"),
    (_tensor([0, 1, 2], [3]), 422, "[batch, dim]"),
    (_tensor([0, 1, 300], [1, 3], "INT8"), 422, "not a INT8 value"),
    (_tensor([0, 1, 2.5], [1, 3], "INT32"), 422, "not a INT32 value"),
    (_tensor([0, 1, True], [1, 3]), 422, "not a finite FP64 value"),
    (_tensor([0, 1, 1e300], [1, 3], "FP32"), 422, "not a finite FP32 value"),
    (_tensor([0, 1, 2], [1, 3], "BYTES"), 422, "a named input is one feature"),
    (_tensor([0, 1, 2], [3], "BYTES"), 422, "not a BYTES value"),
    (_tensor(["a", "b"], [2], "BOOL"), 422, "not a BOOL value"),
    (_columns(("a", [1, 2], [2], "FP64"), ("b", ["x"], [1], "BYTES")), 422, "input 'b' has 1 rows"),
    (_columns(("a", [1, 2], [2], "FP64"), ("a", [1, 2], [2], "FP64")), 422, "same name"),
    (_columns(("a", [1, 2], [2], "FP64"), ("b", ["x", "y", "z"], [2], "BYTES")), 422, "holds 3 elements"),
    (_columns(("a", [], [0], "FP64"), ("b", [], [0], "BYTES")), 422, "empty"),
    (_columns(("a", [1], [1], "FP64"), ("b", ["x" * 300], [1], "BYTES")), 422, "at most 256 characters"),
    (_tensor([0, 1, 2], [1, 3], outputs=[{"name": "proba"}]), 422, "unknown output"),
    (_tensor([0, 1], [1, 2]), 422, "dimension"),
    ({"inputs": []}, 422, "inputs"),
    ({"id": "no inputs"}, 422, "inputs"),
])
async def test_bad_inference_requests_get_a_v2_error(
    client: httpx.AsyncClient, body: dict[str, Any], status: int, words: str
) -> None:
    await client.put("/v1/learners/m", json=SPEC)
    response = await client.post(INFER, json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert isinstance(error, str) and words in error, error


async def test_v2_errors_keep_the_service_statuses(client: httpx.AsyncClient) -> None:
    unknown = await client.post("/v2/models/none/infer", json=_tensor([0, 1, 2], [1, 3]))
    assert unknown.status_code == 404 and isinstance(unknown.json()["error"], str)
    bad_json = await client.post(INFER, content=b"{", headers={"content-type": "application/json"})
    assert bad_json.status_code == 400 and isinstance(bad_json.json()["error"], str)
    binary = await client.post(INFER, content=b"{}", headers={"Inference-Header-Content-Length": "2"})
    assert binary.status_code == 422 and "binary" in binary.json()["error"]
    assert (await client.get("/v2/health/live")).json() == {"live": True}
    assert (await client.get("/v2/health/ready")).json() == {"ready": True}


@pytest.mark.redis
def test_tritonclient_named_inputs_and_bytes(service: ServiceProcess) -> None:
    """A table's columns as a KServe or MLServer client sends them: one named input per feature, BYTES for
    the categories, BOOL for a flag; the metadata names the inputs the learner has seen."""
    rows: list[dict[str, Any]] = [{"rooms": 2.0, "city": "Paris", "garden": True},
                                  {"rooms": 4.0, "city": "Lille", "garden": False},
                                  {"rooms": 3.0, "city": "Lyon", "garden": True}]
    httpx.put(f"{service.url}/v1/learners/flats", json={}).raise_for_status()
    local = kons.Auto()
    for t in range(30):
        row, price = rows[t % 3], 100.0 * rows[t % 3]["rooms"] + 7.0 * t
        fed = httpx.post(f"{service.url}/v1/learners/flats/feedback", json={"x": row, "y": price})
        fed.raise_for_status()
        local.learn_one(row, price)
    client = triton.InferenceServerClient(url=service.url.removeprefix("http://"))
    try:
        inputs = client.get_model_metadata("flats")["inputs"]
        assert sorted((i["name"], i["datatype"]) for i in inputs) == [
            ("city", "BYTES"), ("garden", "FP64"), ("rooms", "FP64")]
        columns = [_input(np.array([r["rooms"] for r in rows]), "rooms"),
                   _input(np.array([r["city"] for r in rows], dtype=object), "city", "BYTES"),
                   _input(np.array([r["garden"] for r in rows]), "garden", "BOOL")]
        result = client.infer("flats", columns)
        assert result.as_numpy("prediction").tolist() == [local.predict_one(r) for r in rows]
    finally:
        client.close()


async def test_a_regression_model_has_no_classifier_outputs(client: httpx.AsyncClient) -> None:
    await client.put("/v1/learners/m", json=SPEC)
    answer = await client.post(INFER, json=_tensor([0, 1, 2], [1, 3], outputs=[{"name": "label"}]))
    assert answer.status_code == 422 and "not a classifier" in answer.json()["error"]
    plain = (await client.post(INFER, json=_tensor([0, 1, 2], [1, 3]))).json()
    assert [o["name"] for o in plain["outputs"]] == ["prediction"] and "parameters" not in plain["outputs"][0]


async def test_version_paths_answer_for_the_model_version_only(client: httpx.AsyncClient) -> None:
    await client.put("/v1/learners/m", json=SPEC)
    await client.post("/v1/learners/m/feedback", json={"x": [0, 1, 2], "y": 0.5})
    version = (await client.get("/v2/models/m")).json()["versions"][0]
    base = f"/v2/models/m/versions/{version}"
    assert (await client.get(base)).json() == (await client.get("/v2/models/m")).json()
    assert (await client.get(f"{base}/ready")).json() == {"name": "m", "ready": True}
    pinned = await client.post(f"{base}/infer", json=_tensor([0, 1, 2], [1, 3]))
    unpinned = await client.post(INFER, json=_tensor([0, 1, 2], [1, 3]))
    assert pinned.status_code == 200 and pinned.json() == unpinned.json()
    for path in ("/v2/models/m/versions/0", "/v2/models/m/versions/0/ready"):
        other = await client.get(path)
        assert other.status_code == 404 and version in other.json()["error"], other.text
    wrong = await client.post("/v2/models/m/versions/0/infer", json=_tensor([0, 1, 2], [1, 3]))
    assert wrong.status_code == 404 and isinstance(wrong.json()["error"], str)


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/v2/nothing", 404), ("POST", "/v2/models/m/explain", 404), ("GET", "/v2/models/m/infer", 405),
    ("DELETE", "/v2/models/m", 405), ("GET", "/v2/repository/index", 404), ("PUT", "/v2/health/live", 405),
    ("GET", "/v2/", 404)])
async def test_every_v2_route_answers_a_v2_error_body(client: httpx.AsyncClient, method: str, path: str,
                                                      status: int) -> None:
    await client.put("/v1/learners/m", json=SPEC)
    answer = await client.request(method, path)
    assert answer.status_code == status, answer.text
    assert set(answer.json()) == {"error"} and isinstance(answer.json()["error"], str), answer.text
    if status == 405:
        assert answer.headers["allow"]


async def test_v2_needs_the_api_key(make_client: AppFactory) -> None:
    client = await make_client(api_keys="acme:secret")
    denied = await client.get("/v2/models/m")
    assert denied.status_code == 401 and isinstance(denied.json()["error"], str)
    assert denied.headers["www-authenticate"] == "Bearer"
    assert (await client.get("/v2/health/live")).status_code == 200


async def test_named_inputs_are_a_record_per_row(client: httpx.AsyncClient) -> None:
    await client.put("/v1/learners/r", json={})
    rows = [{"rooms": 2.0, "city": "Paris", "garden": True}, {"rooms": 4.0, "city": "Lille", "garden": False}]
    for t, row in enumerate(rows * 10):
        fed = await client.post("/v1/learners/r/feedback", json={"x": row, "y": 100.0 + t})
        assert fed.status_code == 200, fed.text
    columns = _columns(("rooms", [2.0, 4.0], [2], "FP64"), ("city", ["Paris", "Lille"], [2, 1], "BYTES"),
                       ("garden", [True, False], [2], "BOOL"))
    answer = await client.post("/v2/models/r/infer", json=columns)
    assert answer.status_code == 200, answer.text
    v1 = (await client.post("/v1/learners/r/predict", json={"xs": rows})).json()["predictions"]
    assert answer.json()["outputs"][0]["data"] == v1
