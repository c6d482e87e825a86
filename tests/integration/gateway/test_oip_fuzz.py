"""A fuzz of POST /v2/models/{m}/infer bodies against a live fleet: wrong shapes, lengths that
disagree with the data, binary_data_size past the body, a header length past the body, huge
declared shapes, bad UTF-8 in BYTES, and seeded random mutations of valid JSON and binary
bodies. Every answer is 4xx (or 200 for a mutation that is still valid), never 5xx, and the
workers and the gateway keep serving."""

import json
import random
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from common.settings import FleetSettings
from tests.integration.gateway.oip_fleet import CLASSIFY, EMBED, OipFleet, live_fleet

pytestmark = pytest.mark.models
INFER = f"/v2/models/{EMBED}/infer"
MUTATIONS = 60
SEED = 20261203


def element(text: bytes) -> bytes:
    return struct.pack("<I", len(text)) + text


def binary_body(elements: bytes, *, size: int | None = None, shape: list[int] | None = None,
                header_length: int | None = None) -> tuple[bytes, dict[str, str]]:
    header = json.dumps({"inputs": [{"name": "text", "shape": shape or [2], "datatype": "BYTES",
                                     "parameters": {"binary_data_size": len(elements) if size is None else size}}],
                         "outputs": [{"name": "embedding", "parameters": {"binary_data": True}}]}).encode()
    length = len(header) if header_length is None else header_length
    return header + elements, {"Inference-Header-Content-Length": str(length)}


def json_body(shape: object, data: object, datatype: str = "BYTES") -> bytes:
    return json.dumps({"inputs": [{"name": "text", "shape": shape, "datatype": datatype, "data": data}]}).encode()


TWO = element(b"first text") + element(b"second text")
CASES: dict[str, tuple[bytes, dict[str, str]]] = {
    "shape larger than data": (json_body([3], ["a", "b"]), {}),
    "shape smaller than data": (json_body([1], ["a", "b"]), {}),
    "rank 2 not [N, 1]": (json_body([1, 2], [["a", "b"]]), {}),
    "nested deeper than shape": (json_body([2], [["a"], ["b"]]), {}),
    "huge declared shape": (json_body([2**40], ["a"]), {}),
    "shape product past int64": (json_body([2**31, 2**31, 2**31], ["a"]), {}),
    "negative shape": (json_body([-1], ["a"]), {}),
    "shape not a list": (json_body("2", ["a"]), {}),
    "unknown datatype": (json_body([1], ["a"], "STRING"), {}),
    "FP32 to a text model": (json_body([1], [1.5], "FP32"), {}),
    "numbers as BYTES": (json_body([1], [1]), {}),
    "lone surrogate": (b'{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["\\ud800"]}]}', {}),
    "not JSON": (b"{inputs: nope", {}),
    "JSON array": (b"[1, 2]", {}),
    "no inputs": (b"{}", {}),
    "unknown output": (json.dumps({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a"]}],
                                   "outputs": [{"name": "nope"}]}).encode(), {}),
    "classification of an embedding": (json.dumps({
        "inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a"]}],
        "outputs": [{"name": "embedding", "parameters": {"classification": 2}}]}).encode(), {}),
    "timeout past the limit": (json.dumps({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                                                       "data": ["a"]}], "parameters": {"timeout": 10**15}}).encode(), {}),
    "binary_data_size past the body": binary_body(TWO, size=len(TWO) + 1),
    "binary_data_size short of the body": binary_body(TWO, size=len(TWO) - 1),
    "header length past the body": binary_body(TWO, header_length=10**6),
    "header length not a number": (TWO, {"Inference-Header-Content-Length": "12abc"}),
    "element length past its data": binary_body(struct.pack("<I", 1000) + b"short"),
    "element length cut off": binary_body(element(b"ok") + b"\x01\x00"),
    "binary count disagrees with shape": binary_body(TWO, shape=[3]),
    "bad UTF-8 in BYTES": binary_body(element(b"\xff\xfe bad") + element(b"fine")),
    "raw form bad UTF-8": (element(b"\xc3\x28"), {"Inference-Header-Content-Length": "0"}),
    "raw form cut off": (b"\x05\x00\x00\x00ab", {"Inference-Header-Content-Length": "0"}),
}


@pytest.fixture(scope="module")
async def fleet(stack: FleetSettings, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[OipFleet]:
    async with live_fleet(stack, Path(tmp_path_factory.mktemp("oip-fuzz"))) as running:
        yield running


@pytest.fixture(scope="module")
async def http(fleet: OipFleet) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=fleet.http_url, headers=fleet.headers(), timeout=30) as client:
        yield client


async def still_serving(http: httpx.AsyncClient, fleet: OipFleet) -> None:
    answer = await http.post(INFER, content=json_body([1], ["still serving"]))
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"][0]["shape"][0] == 1
    labels = await http.post(f"/v2/models/{CLASSIFY}/infer", content=json_body([1], ["reset my password"]))
    assert labels.status_code == 200, labels.text
    assert fleet.all_running()


@pytest.mark.parametrize("case", list(CASES))
async def test_malformed_bodies_are_400(http: httpx.AsyncClient, case: str) -> None:
    body, headers = CASES[case]
    answer = await http.post(INFER, content=body, headers=headers)
    assert answer.status_code == 400, (case, answer.status_code, answer.text)
    assert isinstance(answer.json()["error"], str)


async def test_oversized_body_is_413(http: httpx.AsyncClient) -> None:
    answer = await http.post(INFER, content=json_body([1], ["x" * (5 * 1024 * 1024)]))
    assert answer.status_code == 413, answer.text


def mutate(body: bytes, rng: random.Random) -> bytes:
    """Flip, drop, duplicate or cut bytes of a valid body."""
    mutated = bytearray(body)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(mutated))
        choice = rng.random()
        if choice < 0.4:
            mutated[at] = rng.randrange(256)
        elif choice < 0.6:
            del mutated[at]
        elif choice < 0.8:
            mutated[at:at] = mutated[at:at + rng.randint(1, 8)]
        else:
            del mutated[at:]
            mutated += b"\x00" if not mutated else b""
    return bytes(mutated)


async def test_random_mutations_never_5xx_and_workers_keep_serving(http: httpx.AsyncClient, fleet: OipFleet) -> None:
    rng = random.Random(SEED)
    valid_json = json_body([2], ["mutated one", "mutated two"])
    valid_binary, binary_headers = binary_body(TWO)
    statuses = []
    for index in range(MUTATIONS):
        if index % 2:
            answer = await http.post(INFER, content=mutate(valid_json, rng))
        else:
            answer = await http.post(INFER, content=mutate(valid_binary, rng), headers=binary_headers)
        statuses.append(answer.status_code)
        assert answer.status_code in (200, 400, 404), (index, answer.status_code, answer.text)
    assert statuses.count(400) >= MUTATIONS // 2  # the mutations do reach the checks
    await still_serving(http, fleet)


def grpc_cases() -> dict[str, object]:
    from tritonclient.grpc import service_pb2

    def request(shape: list[int], raw: list[bytes] | None = None, datatype: str = "BYTES",
                typed: list[bytes] | None = None, model: str = EMBED) -> object:
        message = service_pb2.ModelInferRequest(model_name=model)
        tensor = message.inputs.add(name="text", datatype=datatype, shape=shape)
        if typed is not None:
            tensor.contents.bytes_contents.extend(typed)
        message.raw_input_contents.extend(raw or [])
        return message

    return {
        "element length past its data": request([1], [struct.pack("<I", 99) + b"short"]),
        "count disagrees with shape": request([3], [TWO]),
        "more buffers than inputs": request([2], [TWO, TWO]),
        "bad UTF-8": request([1], [element(b"\xff\xfe")]),
        "huge declared shape": request([2**40], [TWO]),
        "negative shape": request([-2], [TWO]),
        "unknown datatype": request([2], [TWO], datatype="STRING"),
        "FP32 bytes not a multiple of 4": request([1], [b"\x00\x00\x80"], datatype="FP32"),
        "typed contents disagree with shape": request([3], typed=[b"a"]),
        "no inputs": service_pb2.ModelInferRequest(model_name=EMBED),
    }


def test_malformed_grpc_requests_are_invalid_argument(fleet: OipFleet) -> None:
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    with grpc.insecure_channel(fleet.grpc_address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        metadata = (("authorization", f"Bearer {fleet.key}"),)
        for case, request in grpc_cases().items():
            with pytest.raises(grpc.RpcError) as refused:
                stub.ModelInfer(request, metadata=metadata, timeout=30)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (case, refused.value)
    assert fleet.all_running()
