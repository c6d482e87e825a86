"""The Open Inference Protocol's pure parts: routes, reading calls (JSON flat and nested, binary
tensor extension, raw form), BYTES framing, answers, the task mappings and the OpenAPI paths."""

import json
import struct

import numpy as np
import pytest

from gateway.app import create_app
from gateway.oip.call import Limits, parse_call
from gateway.oip.codec import answer_body, read_call
from gateway.oip.datatypes import join_bytes, split_bytes
from gateway.oip.errors import Failure, OipError
from gateway.oip.rest import match
from gateway.oip.service import Answer
from gateway.oip.tasks import classification_task, embedding_task, texts_of
from gateway.refusals import Kind, Refused
from gateway.settings import GatewaySettings
from schemas.wire import Result, Status

LIMITS = Limits(max_elements=8, max_element_bytes=64, max_timeout_ms=60_000)


def failure(call: object) -> Failure:
    with pytest.raises(OipError) as raised:
        call()  # type: ignore[operator]
    return raised.value.failure


def test_routes_and_their_labels() -> None:
    assert match("GET", "/v2").action == "server"
    assert match("GET", "/v2/health/ready").action == "ready"
    route = match("POST", "/v2/models/m/versions/m-1/infer")
    assert (route.action, route.model, route.version, route.label) == (
        "infer", "m", "m-1", "/v2/models/{model}/versions/{version}/infer")
    assert match("GET", "/v2/models/m/ready").label == "/v2/models/{model}/ready"
    assert failure(lambda: match("GET", "/v2/models/m/infer")) is Failure.wrong_method
    assert failure(lambda: match("GET", "/v2/models/m/explain")) is Failure.not_found
    assert failure(lambda: match("GET", "/v2/models//ready")) is Failure.not_found


def test_bytes_framing_round_trips_and_refuses_overruns() -> None:
    elements = [b"", b"one", "dü".encode()]
    assert split_bytes(join_bytes(elements), 8, "x") == elements
    assert failure(lambda: split_bytes(struct.pack("<I", 9) + b"short", 8, "x")) is Failure.bad_input
    assert failure(lambda: split_bytes(b"\x01\x00", 8, "x")) is Failure.bad_input
    assert failure(lambda: split_bytes(join_bytes([b"a"] * 9), 8, "x")) is Failure.bad_input


def test_json_data_flat_or_nested_are_the_same_call() -> None:
    flat = {"inputs": [{"name": "text", "shape": [2, 1], "datatype": "BYTES", "data": ["a", "b"]}]}
    nested = {"inputs": [{"name": "text", "shape": [2, 1], "datatype": "BYTES", "data": [["a"], ["b"]]}]}
    for document in (flat, nested):
        call = parse_call(document, memoryview(b""), LIMITS)
        assert call.inputs[0].data == [b"a", b"b"] and call.inputs[0].shape == (2, 1)
    floats = parse_call({"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2], [3, 4.5]]}]},
                        memoryview(b""), LIMITS)
    assert isinstance(floats.inputs[0].data, np.ndarray) and floats.inputs[0].data.tolist() == [1, 2, 3, 4.5]


def test_binary_extension_and_raw_form() -> None:
    data = join_bytes([b"first", b"second"])
    header = json.dumps({"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES",
                                     "parameters": {"binary_data_size": len(data)}}],
                         "parameters": {"binary_data_output": True, "timeout": 2_000_000, "priority": 3}}).encode()
    task = embedding_task()
    call = read_call(header + data, [(b"inference-header-content-length", str(len(header)).encode())], task, LIMITS)
    assert texts_of(call.inputs, 100) == ["first", "second"]
    assert (call.binary_outputs, call.timeout_ms, call.priority) == (True, 2000, 3)
    raw = read_call(data, [(b"inference-header-content-length", b"0")], task, LIMITS)
    assert texts_of(raw.inputs, 100) == ["first", "second"] and raw.binary_outputs
    assert failure(lambda: read_call(header + data, [(b"inference-header-content-length", b"99999")], task,
                                     LIMITS)) is Failure.bad_input


@pytest.mark.parametrize("document", [
    {"inputs": [{"name": "t", "shape": [3], "datatype": "BYTES", "data": ["a"]}]},
    {"inputs": [{"name": "t", "shape": [2**62], "datatype": "BYTES", "data": ["a"]}]},
    {"inputs": [{"name": "t", "shape": [1], "datatype": "BYTES", "data": [["a"]]}]},
    {"inputs": [{"name": "t", "shape": [1], "datatype": "INT64", "data": [1.5]}]},
    {"inputs": [{"name": "t", "shape": [1], "datatype": "BYTES", "data": ["x" * 65]}]},
    {"inputs": [{"name": "t", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 1}}]},
    {"inputs": []},
    {"inputs": [{"name": "t", "shape": [1], "datatype": "BYTES", "data": ["a"]}], "parameters": {"timeout": -1}},
])
def test_bad_calls_are_bad_input(document: dict[str, object]) -> None:
    assert failure(lambda: parse_call(document, memoryview(b""), LIMITS)) is Failure.bad_input


def test_text_tasks_take_bytes_n_or_n_by_1_in_utf8() -> None:
    def texts(datatype: str, shape: tuple[int, ...], data: object) -> list[str]:
        from gateway.oip.call import InputTensor
        return texts_of([InputTensor("text", datatype, shape, data)], 10)  # type: ignore[arg-type]
    assert texts("BYTES", (1, 1), [b"ok"]) == ["ok"]
    assert failure(lambda: texts("BYTES", (1, 2), [b"a", b"b"])) is Failure.bad_input
    assert failure(lambda: texts("FP32", (1,), np.zeros(1))) is Failure.bad_input
    assert failure(lambda: texts("BYTES", (1,), [b"\xff"])) is Failure.bad_input
    assert failure(lambda: texts("BYTES", (1,), [b"x" * 11])) is Failure.bad_input


def test_answers_in_json_and_binary() -> None:
    rows = [np.arange(3, dtype=np.float32), np.arange(3, 6, dtype=np.float32)]
    results = [Result(id=f"{i:032x}", model="m", version="m-1", status=Status.ok,
                      outputs={"embedding": row.tobytes()}, embedding_encoding="f32le") for i, row in enumerate(rows)]
    task = embedding_task(3)
    binary = task.output("embedding", results, 0, True)
    body, header_length = answer_body(Answer("m", "m-1", "call-1", [(binary, True)], ["a"]))
    assert header_length is not None
    header = json.loads(body[:header_length])
    assert header["id"] == "call-1" and header["outputs"][0]["parameters"]["binary_data_size"] == 24
    assert np.frombuffer(body[header_length:], dtype="<f4").tolist() == [0, 1, 2, 3, 4, 5]
    as_json = task.output("embedding", results, 0, False)
    text, none = answer_body(Answer("m", "m-1", None, [(as_json, False)], ["a"]))
    assert none is None and json.loads(text)["outputs"][0] == {"name": "embedding", "datatype": "FP32",
                                                               "shape": [2, 3], "data": [0, 1, 2, 3, 4, 5]}


def test_classification_extension_names_score_index_and_label() -> None:
    task = classification_task(("billing", "refund", "shipping"))
    result = Result(id="0" * 32, model="c", status=Status.ok, outputs={
        "label": "refund", "score": 0.7, "top": [["refund", 0.7], ["shipping", 0.2], ["billing", 0.1]]})
    classes = task.output("label", [result], 2, False)
    assert classes.shape == (1, 2) and classes.data == [b"0.7:1:refund", b"0.2:2:shipping"]
    assert task.output("label", [result], 0, False).data == [b"refund"]
    assert task.output("score", [result], 0, False).shape == (1,)


def test_openapi_documents_the_v2_routes() -> None:
    paths = create_app(GatewaySettings()).openapi()["paths"]
    for path in ("/v2", "/v2/health/live", "/v2/health/ready", "/v2/models/{model}", "/v2/models/{model}/ready",
                 "/v2/models/{model}/infer", "/v2/models/{model}/versions/{version}/infer"):
        assert path in paths, path
    infer = paths["/v2/models/{model}/infer"]["post"]
    assert {"400", "401", "404", "429", "503", "504"} <= set(infer["responses"]) and infer["security"]


def test_compressed_bodies_are_inflated_within_the_limit() -> None:
    import gzip
    import zlib

    from gateway.oip.codec import decoded_body
    body = b'{"inputs": []}'
    assert decoded_body(gzip.compress(body), [(b"content-encoding", b"gzip")], 1024) == body
    assert decoded_body(zlib.compress(body), [(b"content-encoding", b"deflate")], 1024) == body
    assert decoded_body(body, [], 1024) == body
    bomb = gzip.compress(b"0" * 10_000)
    with pytest.raises(Refused) as inflated:  # admission's body limit, past which nothing is inflated
        decoded_body(bomb, [(b"content-encoding", b"gzip")], 1024)
    assert inflated.value.refusal.kind is Kind.too_large
    assert failure(lambda: decoded_body(b"not gzip", [(b"content-encoding", b"gzip")], 1024)) is Failure.bad_input
    assert failure(lambda: decoded_body(body, [(b"content-encoding", b"br")], 1024)) is Failure.bad_input
