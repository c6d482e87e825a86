"""The Open Inference Protocol with the real client libraries against a live fleet (workers and
gateway as processes on the stack): tritonclient.http in binary and JSON, tritonclient.grpc, and
KServe's InferenceRESTClient, for health, metadata and infer; embeddings equal to /v1's for the
same texts, the classifier's labels, and the documented errors."""

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from common.settings import FleetSettings
from tests.integration.conftest import end_offsets
from tests.paths import REPO_ROOT
from tests.integration.gateway.oip_fleet import CLASSIFY, EMBED, OipFleet, live_fleet

pytestmark = pytest.mark.models
TEXTS = ["where is my parcel?", "I forgot my password", "héllo wörld ✓"]
INTENTS = {"I forgot my password, how do I reset it?": "reset_password",
           "where is my order, can I track it?": "track_order"}


@pytest.fixture(scope="module")
async def fleet(stack: FleetSettings, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[OipFleet]:
    async with live_fleet(stack, Path(tmp_path_factory.mktemp("oip-clients"))) as running:
        yield running


@pytest.fixture(scope="module")
async def v1_embeddings(fleet: OipFleet) -> np.ndarray:
    async with httpx.AsyncClient(base_url=fleet.http_url, headers=fleet.headers(), timeout=30) as http:
        rows = []
        for text in TEXTS:
            answer = await http.post(f"/v1/models/{EMBED}/infer", json={"text": text})
            assert answer.status_code == 200, answer.text
            rows.append(answer.json()["outputs"]["embedding"])
    return np.asarray(rows, dtype=np.float32)


def texts_input(module: object, texts: list[str], *, binary: bool = True, shape: list[int] | None = None) -> object:
    tensor = module.InferInput("text", shape or [len(texts)], "BYTES")  # type: ignore[attr-defined]
    data = np.array([text.encode() for text in texts], dtype=object).reshape(shape or [len(texts)])
    if module is triton_http:
        tensor.set_data_from_numpy(data, binary_data=binary)
    else:
        tensor.set_data_from_numpy(data)
    return tensor


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_tritonclient_http_embeddings_equal_v1(fleet: OipFleet, v1_embeddings: np.ndarray, binary: bool) -> None:
    client = triton_http.InferenceServerClient(fleet.http_address)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready(EMBED, headers=fleet.headers())
    metadata = client.get_model_metadata(EMBED, headers=fleet.headers())
    assert metadata["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    # The width comes from the model card the embedding worker wrote to Redis.
    assert metadata["outputs"] == [{"name": "embedding", "datatype": "FP32", "shape": [-1, v1_embeddings.shape[1]]}]
    wanted = [triton_http.InferRequestedOutput("embedding", binary_data=binary)]
    result = client.infer(EMBED, [texts_input(triton_http, TEXTS, binary=binary)], outputs=wanted,
                          request_id="call-7", headers=fleet.headers())
    embeddings = result.as_numpy("embedding")
    assert embeddings.dtype == np.float32 and embeddings.shape == (len(TEXTS), v1_embeddings.shape[1])
    np.testing.assert_allclose(embeddings, v1_embeddings, atol=1e-5)
    assert result.get_response()["id"] == "call-7"
    assert len(result.get_response()["parameters"]["request_ids"]) == len(TEXTS)


def test_tritonclient_http_classifier_labels_and_classification(fleet: OipFleet) -> None:
    client = triton_http.InferenceServerClient(fleet.http_address)
    texts = list(INTENTS)
    result = client.infer(CLASSIFY, [texts_input(triton_http, texts, shape=[len(texts), 1])], headers=fleet.headers())
    assert [label.decode() for label in result.as_numpy("label")] == list(INTENTS.values())
    scores = result.as_numpy("score")
    assert scores.dtype == np.float32 and scores.shape == (2,) and all(0.5 < score <= 1 for score in scores)
    wanted = [triton_http.InferRequestedOutput("score", class_count=2)]
    ranked = client.infer(CLASSIFY, [texts_input(triton_http, texts)], outputs=wanted, headers=fleet.headers(),
                          request_compression_algorithm="gzip", response_compression_algorithm="gzip")
    cells = ranked.as_numpy("score")
    assert cells.shape == (2, 2)
    for row, intent in zip(cells, INTENTS.values()):
        score, index, label = row[0].decode().split(":")
        assert label == intent and int(index) >= 0  # the index in the card's label list
        assert float(score) >= float(row[1].decode().split(":")[0])


def test_tritonclient_grpc_health_metadata_infer(fleet: OipFleet, v1_embeddings: np.ndarray) -> None:
    client = triton_grpc.InferenceServerClient(fleet.grpc_address)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready(CLASSIFY, headers=fleet.grpc_headers())
    assert client.get_server_metadata().name == "kafka-inference-fleet"
    metadata = client.get_model_metadata(CLASSIFY, headers=fleet.grpc_headers())
    assert [(o.name, o.datatype) for o in metadata.outputs] == [("label", "BYTES"), ("score", "FP32")]
    result = client.infer(EMBED, [texts_input(triton_grpc, TEXTS)], headers=fleet.grpc_headers())
    np.testing.assert_allclose(result.as_numpy("embedding"), v1_embeddings, atol=1e-5)
    labels = client.infer(CLASSIFY, [texts_input(triton_grpc, list(INTENTS))], headers=fleet.grpc_headers(),
                          outputs=[triton_grpc.InferRequestedOutput("label")])
    assert [label.decode() for label in labels.as_numpy("label")] == list(INTENTS.values())


def test_kserve_rest_client(fleet: OipFleet, v1_embeddings: np.ndarray) -> None:
    checked = subprocess.run([sys.executable, "-m", "tests.integration.gateway.oip_kserve_check", fleet.http_url,
                              fleet.key, EMBED, CLASSIFY, json.dumps(TEXTS)], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=120)
    assert checked.returncode == 0, checked.stderr[-3000:]
    seen = json.loads(checked.stdout.strip().splitlines()[-1])
    assert seen["live"] and seen["ready"] and seen["model_ready"]
    np.testing.assert_allclose(np.asarray(seen["embeddings"], dtype=np.float32), v1_embeddings, atol=1e-5)
    assert seen["labels"][1] == "reset_password"
    assert seen["unknown_model_status"] == 404


async def test_tritonclient_priority_picks_the_lane_over_grpc_and_http(stack: FleetSettings, fleet: OipFleet) -> None:
    """tritonclient's own `priority` argument (a uint64 request parameter) routes each row of a call."""
    interactive, bulk = stack.lane_plan.topics(EMBED)
    before = {topic: await end_offsets(stack, topic) for topic in (interactive, bulk)}
    grpc = triton_grpc.InferenceServerClient(fleet.grpc_address)
    http = triton_http.InferenceServerClient(fleet.http_address)
    two = ["routed by priority", "routed too"]
    urgent = await asyncio.to_thread(grpc.infer, EMBED, [texts_input(triton_grpc, two)], priority=9,
                                     headers=fleet.grpc_headers())
    overnight = await asyncio.to_thread(grpc.infer, EMBED, [texts_input(triton_grpc, ["overnight"])], priority=2,
                                        headers=fleet.grpc_headers())
    over_http = await asyncio.to_thread(http.infer, EMBED, [texts_input(triton_http, ["urgent over http"])],
                                        priority=7, headers=fleet.headers())
    assert urgent.as_numpy("embedding").shape[0] == 2 and overnight.as_numpy("embedding").shape[0] == 1
    assert over_http.as_numpy("embedding").shape[0] == 1
    after = {topic: await end_offsets(stack, topic) for topic in (interactive, bulk)}
    landed = {topic: sum(end - before[topic].get(tp, 0) for tp, end in after[topic].items()) for topic in after}
    assert landed == {interactive: 3, bulk: 1}
    too_high = grpc_code(lambda: grpc.infer(EMBED, [texts_input(triton_grpc, ["x"])], priority=10,
                                            headers=fleet.grpc_headers()))
    assert too_high == "StatusCode.INVALID_ARGUMENT"


def http_status(call: object) -> int:
    with pytest.raises(InferenceServerException) as failed:
        call()  # type: ignore[operator]
    return int(failed.value.status())


def grpc_code(call: object) -> str:
    with pytest.raises(InferenceServerException) as failed:
        call()  # type: ignore[operator]
    return str(failed.value.status())


def test_documented_errors_over_http_and_grpc(fleet: OipFleet) -> None:
    http = triton_http.InferenceServerClient(fleet.http_address)
    grpc = triton_grpc.InferenceServerClient(fleet.grpc_address)
    floats_http, floats_grpc = triton_http.InferInput("text", [1], "FP32"), triton_grpc.InferInput("text", [1], "FP32")
    floats_http.set_data_from_numpy(np.zeros(1, np.float32))
    floats_grpc.set_data_from_numpy(np.zeros(1, np.float32))
    three = ["a", "b", "c"]
    assert http_status(lambda: http.infer("no-such-model", [texts_input(triton_http, three)],
                                          headers=fleet.headers())) == 404
    assert http_status(lambda: http.infer(EMBED, [floats_http], headers=fleet.headers())) == 400
    assert http_status(lambda: http.infer(EMBED, [texts_input(triton_http, three)])) == 401
    tight = {"Authorization": f"Bearer {fleet.tight_key}"}
    assert http_status(lambda: http.infer(EMBED, [texts_input(triton_http, three)], headers=tight)) == 429
    assert grpc_code(lambda: grpc.infer("no-such-model", [texts_input(triton_grpc, three)],
                                        headers=fleet.grpc_headers())) == "StatusCode.NOT_FOUND"
    assert grpc_code(lambda: grpc.infer(EMBED, [floats_grpc], headers=fleet.grpc_headers())
                     ) == "StatusCode.INVALID_ARGUMENT"
    assert grpc_code(lambda: grpc.infer(EMBED, [texts_input(triton_grpc, three)])) == "StatusCode.UNAUTHENTICATED"
    assert grpc_code(lambda: grpc.infer(EMBED, [texts_input(triton_grpc, three)],
                                        headers=fleet.grpc_headers(fleet.tight_key))) == "StatusCode.RESOURCE_EXHAUSTED"


def test_deadline_is_504_with_every_row_id(fleet: OipFleet) -> None:
    body = {"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": ["late one", "late two"]}],
            "parameters": {"timeout": 1}}  # one microsecond: over before any worker can answer
    answer = httpx.post(f"{fleet.http_url}/v2/models/{EMBED}/infer", json=body, headers=fleet.headers(), timeout=30)
    assert answer.status_code == 504, answer.text
    ids = answer.json()["ids"]
    assert len(ids) == 2 and all(len(request_id) == 32 for request_id in ids)
    assert "error" in answer.json()


def test_versions_from_heartbeats_and_cards(fleet: OipFleet) -> None:
    with httpx.Client(base_url=fleet.http_url, headers=fleet.headers(), timeout=30) as http:
        versions = http.get(f"/v2/models/{EMBED}").json()["versions"]
        assert versions and all(version.startswith(f"{EMBED}-") for version in versions)
        served = http.get(f"/v2/models/{EMBED}/versions/{versions[0]}")
        assert served.status_code == 200 and served.json()["name"] == EMBED
        assert http.get(f"/v2/models/{EMBED}/versions/{versions[0]}/ready").json() == {"name": EMBED, "ready": True}
        body = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["pinned"]}]}
        pinned = http.post(f"/v2/models/{EMBED}/versions/{versions[0]}/infer", json=body)
        assert pinned.status_code == 200 and pinned.json()["model_version"] == versions[0]
        assert http.get(f"/v2/models/{EMBED}/versions/{EMBED}-19990101-001").status_code == 404
        unknown = http.post(f"/v2/models/{EMBED}/versions/{EMBED}-19990101-001/infer", json=body)
        assert unknown.status_code == 404 and "error" in unknown.json()
        assert http.get(f"/v2/models/{EMBED}/versions/{EMBED}-19990101-001/ready").json()["ready"] is False


def test_grpc_typed_contents_x_api_key_and_message_bound(fleet: OipFleet) -> None:
    """KServe-style typed contents (no raw buffers) are answered in typed contents; the key may
    come as x-api-key; a message over FLEET_GRPC_MAX_MESSAGE_BYTES is RESOURCE_EXHAUSTED."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    with grpc.insecure_channel(fleet.grpc_address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        metadata = (("x-api-key", fleet.key),)
        request = service_pb2.ModelInferRequest(model_name=CLASSIFY, id="typed-1")
        tensor = request.inputs.add(name="text", datatype="BYTES", shape=[2])
        tensor.contents.bytes_contents.extend(text.encode() for text in INTENTS)
        response = stub.ModelInfer(request, metadata=metadata, timeout=30)
        assert response.id == "typed-1" and not response.raw_output_contents
        assert [label.decode() for label in response.outputs[0].contents.bytes_contents] == list(INTENTS.values())
        assert len(response.outputs[1].contents.fp32_contents) == 2
        big = service_pb2.ModelInferRequest(model_name=EMBED)
        big.inputs.add(name="text", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"x" * (5 << 20))
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(big, metadata=metadata, timeout=30)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
