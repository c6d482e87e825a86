"""The tensor and rerank tasks over the Open Inference Protocol, against a live fleet whose
models are tiny ONNX graphs made by the tests (tests/task_models.py): a tensor model's named
inputs and outputs through tritonclient.http (binary) and tritonclient.grpc equal ONNX Runtime
run directly; its metadata is its model card; a tensor that does not fit the card is 400
before anything is published; a reranker's scores and ranking equal /v1's; a task the protocol
does not map (token classification) is 400."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from common.settings import FleetSettings
from models.registry import ModelRegistry
from tests.integration.gateway.oip_fleet import OipFleet, live_fleet
from tests.built_models import built_registry, resolve_or_skip
from tests.task_models import (RERANK_MODEL, TENSOR_MODEL, TOKENS_MODEL, register_onnx, register_text_task_models,
                               tensor_graph)

pytestmark = pytest.mark.models
QUERY = "where is paris"
PASSAGES = ["Paris is the capital of France.", "Bananas are yellow.", "The Eiffel tower stands in Paris, France."]
RNG = np.random.default_rng(7)


@pytest.fixture(scope="module")
async def fleet(stack: FleetSettings, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[OipFleet]:
    built = built_registry()
    encoder = resolve_or_skip(built, "fp32")
    assert encoder.tokenizer_file is not None
    registry = ModelRegistry(tmp_path_factory.mktemp("oip-registry") / "models")
    register_onnx(registry, TENSOR_MODEL, tensor_graph())
    register_text_task_models(registry, built.path_of(encoder, encoder.tokenizer_file))
    env = {"FLEET_MODEL_DIR": str(registry.root)}
    async with live_fleet(stack, Path(tmp_path_factory.mktemp("oip-tasks")),
                          {TENSOR_MODEL: env, RERANK_MODEL: env, TOKENS_MODEL: env}) as running:
        yield running


def direct(x: np.ndarray, scale: np.ndarray) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(tensor_graph().SerializeToString(), providers=["CPUExecutionProvider"])
    y, total = session.run(["y", "total"], {"x": x, "scale": scale})
    return {"y": y, "total": total}


def tensor_inputs(module: object, x: np.ndarray, scale: np.ndarray) -> list[object]:
    tensors = []
    for name, array in (("x", x), ("scale", scale)):
        tensor = module.InferInput(name, list(array.shape), "FP32")  # type: ignore[attr-defined]
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def test_tensor_model_through_tritonclient_http_and_grpc(fleet: OipFleet) -> None:
    x, scale = RNG.normal(size=(3, 4)).astype(np.float32), RNG.uniform(0.5, 2, size=(3, 1)).astype(np.float32)
    want = direct(x, scale)
    http = triton_http.InferenceServerClient(fleet.http_address)
    metadata = http.get_model_metadata(TENSOR_MODEL, headers=fleet.headers())
    assert metadata["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]},
                                  {"name": "scale", "datatype": "FP32", "shape": [-1, 1]}]
    assert [output["name"] for output in metadata["outputs"]] == ["y", "total"]
    answered = http.infer(TENSOR_MODEL, tensor_inputs(triton_http, x, scale), headers=fleet.headers())
    grpc = triton_grpc.InferenceServerClient(fleet.grpc_address)
    by_grpc = grpc.infer(TENSOR_MODEL, tensor_inputs(triton_grpc, x, scale), headers=fleet.grpc_headers())
    for result in (answered, by_grpc):
        for name, array in want.items():
            got = result.as_numpy(name)
            assert got.dtype == array.dtype and got.shape == array.shape
            np.testing.assert_allclose(got, array, rtol=1e-6, atol=1e-6)


def test_tensor_that_does_not_fit_the_card_is_400(fleet: OipFleet) -> None:
    http = triton_http.InferenceServerClient(fleet.http_address)
    x, scale = np.zeros((2, 5), np.float32), np.ones((2, 1), np.float32)
    with pytest.raises(InferenceServerException) as refused:
        http.infer(TENSOR_MODEL, tensor_inputs(triton_http, x, scale), headers=fleet.headers())
    assert refused.value.status() == "400" and "axis 1" in refused.value.message()
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, float("nan")]},
                       {"name": "scale", "shape": [1, 1], "datatype": "FP32", "data": [1]}]}
    answer = httpx.post(f"{fleet.http_url}/v2/models/{TENSOR_MODEL}/infer", content=_json(body),
                        headers=fleet.headers(), timeout=30)
    assert answer.status_code == 400, answer.text


def _json(body: dict[str, object]) -> bytes:
    import json
    return json.dumps(body).encode()  # NaN as the bare token Python writes


def test_rerank_scores_and_ranking_equal_v1(fleet: OipFleet) -> None:
    with httpx.Client(base_url=fleet.http_url, headers=fleet.headers(), timeout=30) as http:
        native = http.post(f"/v1/models/{RERANK_MODEL}/infer", json={"query": QUERY, "passages": PASSAGES})
        assert native.status_code == 200, native.text
        body = {"inputs": [{"name": "query", "shape": [1], "datatype": "BYTES", "data": [QUERY]},
                           {"name": "passages", "shape": [len(PASSAGES)], "datatype": "BYTES", "data": PASSAGES}]}
        answer = http.post(f"/v2/models/{RERANK_MODEL}/infer", json=body)
        assert answer.status_code == 200, answer.text
        outputs = {output["name"]: output for output in answer.json()["outputs"]}
        assert outputs["scores"]["shape"] == [len(PASSAGES)] and outputs["ranking"]["datatype"] == "INT64"
        np.testing.assert_allclose(outputs["scores"]["data"], native.json()["outputs"]["scores"], atol=1e-6)
        assert outputs["ranking"]["data"] == native.json()["outputs"]["ranking"]
        tokens = http.post(f"/v2/models/{TOKENS_MODEL}/infer", json={
            "inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["I flew to Paris"]}]})
        assert tokens.status_code == 400 and "token-classification" in tokens.json()["error"]
