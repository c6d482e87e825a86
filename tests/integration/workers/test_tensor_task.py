"""The tensor task end to end on the real Kafka and Redis: a tiny ONNX graph made by the test,
served by a worker, queried through FleetClient, a raw Kafka producer (msgpack written by hand)
and the gateway (sync and async, JSON arrays); every answer equals ONNX Runtime run directly.
Bad tensors never reach the model: dead letters naming the tensor, 4xx at the gateway."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import onnxruntime as ort
import pytest
from aiokafka import AIOKafkaProducer

from common.settings import FleetSettings
from gateway.client import FleetClient
from gateway.settings import GatewaySettings
from models.loading import ModelLoader
from models.registry import ModelRegistry
from schemas.names import DLQ_TOPIC, fallback_topic, requests_topic
from schemas.tensors import output_tensors
from schemas.wire import DeadLetter, ReplyTo, Result, Status, new_request_id, now_ms
from tests.integration.conftest import end_offsets, read_from, serving
from tests.integration.gateway.gateway_harness import GatewayHttp, in_process
from tests.task_models import TENSOR_MODEL, letter_ids, register_onnx, tensor_graph
from workers.settings import Role, WorkerSettings
from workers.worker import Worker

RNG = np.random.default_rng(23)
# Their own topics and groups: no other worker of this module answers them.
CACHED_MODEL = "tiny-tensor-cached"
BURST_MODEL = "tiny-tensor-burst"
FALLBACK_MODEL = "tiny-tensor-cpu"


def direct(x: np.ndarray, scale: np.ndarray) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(tensor_graph().SerializeToString(), providers=["CPUExecutionProvider"])
    y, total = session.run(["y", "total"], {"x": x, "scale": scale})
    return {"y": y, "total": total}


def rows(n: int) -> tuple[np.ndarray, np.ndarray]:
    return RNG.normal(size=(n, 4)).astype(np.float32), RNG.uniform(0.5, 2, size=(n, 1)).astype(np.float32)


def assert_equal_to_direct(result: Result | None, x: np.ndarray, scale: np.ndarray) -> None:
    assert result is not None and result.status is Status.ok, result
    got, want = output_tensors(result.outputs), direct(x, scale)
    assert sorted(got) == ["total", "y"]
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6)


@pytest.fixture(scope="module")
def tensor_settings(stack: FleetSettings, tmp_path_factory: pytest.TempPathFactory) -> WorkerSettings:
    root = tmp_path_factory.mktemp("registry") / "models"
    register_onnx(ModelRegistry(root), TENSOR_MODEL, tensor_graph())
    register_onnx(ModelRegistry(root), CACHED_MODEL, tensor_graph())
    register_onnx(ModelRegistry(root), BURST_MODEL, tensor_graph())
    register_onnx(ModelRegistry(root), FALLBACK_MODEL, tensor_graph())
    return WorkerSettings(model=TENSOR_MODEL, model_dir=root, max_batch_size=32, max_queue_delay_ms=10,
                          session_timeout_ms=6000, exact_cache=False)


@pytest.fixture(scope="module")
async def tensor_worker(tensor_settings: WorkerSettings) -> AsyncIterator[Worker]:
    backend = ModelLoader(tensor_settings.runtime()).load()
    async with serving(tensor_settings, backend) as worker:
        yield worker


async def test_the_client_gets_the_tensors_onnx_runtime_gives(tensor_worker: Worker, client: FleetClient) -> None:
    x, scale = rows(3)
    result = await client.infer(TENSOR_MODEL, {"x": x, "scale": scale})
    assert_equal_to_direct(result, x, scale)
    assert result.version == tensor_worker.backend.manifest.id and result.batch_size >= 1
    info = {"model": TENSOR_MODEL, "version": result.version, "task": "tensor", "precision": "fp32"}
    assert tensor_worker.metrics.registry.get_sample_value("fleet_model_info", info) == 1


async def test_requests_of_several_rows_share_batches_and_get_their_own_rows(
        tensor_settings: WorkerSettings, client: FleetClient) -> None:
    sent = [rows(n) for n in (1, 2, 5, 1, 3, 1, 4, 2) * 3]
    settings = tensor_settings.model_copy(update={"model": BURST_MODEL})
    async with Worker(settings, backend=ModelLoader(settings.runtime()).load()) as worker:
        ids = [await client.submit(BURST_MODEL, {"x": x, "scale": scale}) for x, scale in sent]
        await worker.run(burst=True)
    results = [await client.result(request_id) for request_id in ids]
    for (x, scale), result in zip(sent, results, strict=True):
        assert_equal_to_direct(result, x, scale)
    assert max(r.batch_size for r in results if r is not None) > 1, "queued tensor requests should share batches"


def raw_request(request_id: str, inputs: dict[str, Any]) -> bytes:
    """A request as a producer in any language writes it: a msgpack map, tensors as bin."""
    return msgpack.packb({"v": 1, "id": request_id, "model": TENSOR_MODEL, "inputs": inputs,
                          "deadline_ms": now_ms() + 30_000, "submitted_ms": now_ms()}, use_bin_type=True)


def raw_tensor(dtype: str, shape: list[int], data: bytes) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data": data}


async def test_a_raw_kafka_producer_gets_the_same_tensors(tensor_worker: Worker, producer: AIOKafkaProducer,
                                                          client: FleetClient) -> None:
    x, scale = rows(2)
    request_id = new_request_id()
    inputs = {"x": raw_tensor("float32", [2, 4], x.astype("<f4").tobytes()),
              "scale": raw_tensor("float32", [2, 1], scale.astype("<f4").tobytes())}
    await producer.send_and_wait(requests_topic(TENSOR_MODEL), raw_request(request_id, inputs))
    result = await _result_of(client, request_id)
    assert_equal_to_direct(result, x, scale)


async def _result_of(client: FleetClient, request_id: str, timeout_s: float = 30) -> Result | None:
    for _ in range(int(timeout_s * 10)):
        if (result := await client.result(request_id)) is not None:
            return result
        await asyncio.sleep(0.1)
    return None


BAD_TENSORS = {
    "dtype": ({"x": raw_tensor("float64", [1, 4], b"\0" * 32)}, "inputs.x: dtype float64 where the model takes float32"),
    "rank": ({"x": raw_tensor("float32", [4], b"\0" * 16)}, "inputs.x: shape [4] has rank 1"),
    "length": ({"x": raw_tensor("float32", [2, 4], b"\0" * 16)}, "inputs.x: shape [2, 4] of float32 needs 32 bytes"),
    "huge": ({"x": raw_tensor("float32", [100000, 100000, 100000], b"")}, "inputs.x: shape [100000, 100000, 100000] "
             "holds more than"),
    "nan": ({"x": raw_tensor("float32", [1, 4], np.array([[1, np.nan, 0, 0]], "<f4").tobytes())},
            "inputs.x: holds NaN or infinity"),
    "axis": ({"x": raw_tensor("float32", [1, 3], b"\0" * 12)}, "inputs.x: shape [1, 3]: axis 1 is 3, the model takes 4"),
    "missing": ({"x": raw_tensor("float32", [1, 4], b"\0" * 16)}, "inputs.scale: missing"),
}


async def test_bad_tensors_are_dead_letters_naming_the_tensor_and_the_worker_keeps_serving(
        tensor_worker: Worker, producer: AIOKafkaProducer, client: FleetClient, stack: FleetSettings) -> None:
    before = await end_offsets(stack, DLQ_TOPIC)
    scale = raw_tensor("float32", [1, 1], np.ones((1, 1), "<f4").tobytes())
    marks = {}
    for case, (inputs, _) in BAD_TENSORS.items():
        marks[case] = new_request_id()
        with_scale = inputs if case == "missing" else {**inputs, "scale": scale}
        await producer.send_and_wait(requests_topic(TENSOR_MODEL), raw_request(marks[case], with_scale))
    x, good_scale = rows(1)
    assert_equal_to_direct(await client.infer(TENSOR_MODEL, {"x": x, "scale": good_scale}), x, good_scale)
    values = await read_from(stack, before, until=lambda v: set(marks.values()) <= set(letter_ids(v)))
    by_id = {(letter.masked or {}).get("id"): letter for letter in map(DeadLetter.decode, values)}
    for case, (_, reason) in BAD_TENSORS.items():
        letter = by_id[marks[case]]
        assert letter.code == "invalid_input" and reason in letter.reason, (case, letter.reason)
        errored = await client.result(marks[case])
        assert errored is not None and errored.error is not None and reason in errored.error.message


@pytest.fixture(scope="module")
async def gateway(tensor_worker: Worker, client: FleetClient) -> AsyncIterator[GatewayHttp]:
    async with in_process(GatewaySettings(models=[TENSOR_MODEL], default_timeout_s=30)) as http:
        yield http


async def test_the_gateway_takes_json_tensors_sync_and_async(gateway: GatewayHttp) -> None:
    x, scale = rows(2)
    body = {"inputs": {"x": x.tolist(), "scale": {"shape": [2, 1], "data": scale.ravel().tolist()}}}
    answer = await gateway.post(f"/v1/models/{TENSOR_MODEL}/infer", json=body)
    assert answer.status_code == 200, answer.text
    tensors = answer.json()["outputs"]["tensors"]
    want = direct(x, scale)
    for name in ("y", "total"):
        assert tensors[name]["dtype"] == "float32" and tensors[name]["shape"] == list(want[name].shape)
        np.testing.assert_allclose(np.asarray(tensors[name]["data"], np.float32), want[name], rtol=1e-6, atol=1e-6)
    submitted = await gateway.post(f"/v1/models/{TENSOR_MODEL}/requests", json=body)
    assert submitted.status_code == 202, submitted.text
    for _ in range(300):
        fetched = await gateway.get(submitted.json()["result_url"])
        if fetched.status_code == 200:
            break
        await asyncio.sleep(0.1)
    assert fetched.status_code == 200 and fetched.json()["outputs"]["tensors"] == tensors


@pytest.mark.parametrize(("inputs", "field", "message"), [
    ({"x": [[1.0, 2.0, 3.0]], "scale": [[1.0]]}, "inputs.x", "axis 1 is 3"),
    ({"x": [[1.0, 2.0, 3.0, 4.0]]}, "inputs.scale", "missing"),
    ({"x": [[1, 2, 3, 4]], "scale": [[1.0]], "z": [[1.0]]}, "inputs.z", "not an input of this model"),
    ({"x": [[1.0, 2.0], [3.0]], "scale": [[1.0], [1.0]]}, "inputs.x", "rectangular array"),
    ({"x": {"shape": [1000000, 1000000], "data": []}, "scale": [[1.0]]}, "inputs.x", "holds more than"),
    ({"x": {"shape": [2, 4], "data": [1.0] * 4}, "scale": [[1.0]]}, "inputs.x", "needs 8 elements"),
    ({"x": [["a", 1, 2, 3]], "scale": [[1.0]]}, "inputs.x", "float32 numbers"),
    ({"x": [[1.0, 2.0, 3.0, 4.0]], "scale": [[1.0], [2.0]]}, "inputs.x", "disagree on the number of rows"),
])
async def test_bad_json_tensors_are_422_naming_the_tensor(gateway: GatewayHttp, inputs: dict[str, Any], field: str,
                                                          message: str) -> None:
    answer = await gateway.post(f"/v1/models/{TENSOR_MODEL}/infer", json={"inputs": inputs})
    assert answer.status_code == 422, answer.text
    detail = str(answer.json())
    assert field in detail and message in detail, detail


async def test_a_text_for_a_tensor_model_is_422(gateway: GatewayHttp, tmp_path: Path) -> None:
    answer = await gateway.post(f"/v1/models/{TENSOR_MODEL}/infer", json={"text": "hello"})
    assert answer.status_code == 422 and "tensor model" in answer.text


async def test_the_exact_cache_keys_tensors_by_their_bytes(tensor_settings: WorkerSettings, client: FleetClient) -> None:
    settings = tensor_settings.model_copy(update={"model": CACHED_MODEL, "exact_cache": True,
                                                  "exact_cache_redis": False})
    x, scale = rows(2)
    async with serving(settings, ModelLoader(settings.runtime()).load()):
        first = await client.infer(CACHED_MODEL, {"x": x, "scale": scale})
        again = await client.infer(CACHED_MODEL, {"x": x.copy(), "scale": scale.copy()})
        other = await client.infer(CACHED_MODEL, {"x": x, "scale": scale * 2})
    assert (first.cache, again.cache, other.cache) == ("miss", "exact", "miss")
    assert output_tensors(again.outputs).keys() == {"y", "total"}
    np.testing.assert_array_equal(output_tensors(again.outputs)["y"], output_tensors(first.outputs)["y"])
    assert_equal_to_direct(other, x, scale * 2)


async def test_a_cpu_fallback_worker_answers_tensors_degraded(tensor_settings: WorkerSettings, client: FleetClient,
                                                              producer: AIOKafkaProducer) -> None:
    settings = tensor_settings.model_copy(update={"model": FALLBACK_MODEL, "role": Role.fallback})
    x, scale = rows(3)
    async with serving(settings, ModelLoader(settings.runtime()).load()) as worker:
        assert worker.topics[0] == fallback_topic(FALLBACK_MODEL)  # the first lane's fallback topic
        request = client.build_request(FALLBACK_MODEL, {"x": x, "scale": scale}, timeout=30, reply=ReplyTo())
        await producer.send_and_wait(fallback_topic(FALLBACK_MODEL), request.encode())
        result = await _result_of(client, request.id)
    assert result is not None and result.status is Status.degraded
    assert_equal_to_direct(result.model_copy(update={"status": Status.ok}), x, scale)


async def test_a_model_without_a_card_takes_texts_and_refuses_tensors_with_503(stack: FleetSettings) -> None:
    async with in_process(GatewaySettings(models=["no-card-yet"], default_timeout_s=1)) as http:
        tensors = await http.post("/v1/models/no-card-yet/requests", json={"inputs": {"x": [[1.0]]}})
        text = await http.post("/v1/models/no-card-yet/requests", json={"text": "hello"})
        neither = await http.post("/v1/models/no-card-yet/requests", json={"priority": 1})
    assert tensors.status_code == 503 and "model card" in tensors.text
    assert text.status_code == 202
    assert neither.status_code == 422 and "text" in neither.text
