"""Tensors on the wire: the byte layout, and every check a request's tensors must pass."""

from __future__ import annotations

import numpy as np
import pytest

from schemas.model_card import CardTensor
from schemas.tensors import array_from_json, decode_inputs, encode_tensor, inputs_map, tensors_as_json
from schemas.wire import WireError

X = CardTensor(name="x", datatype="FP32", shape=(-1, 3))
IDS = CardTensor(name="ids", datatype="INT64", shape=(-1, -1))
MISSING_OK = CardTensor(name="m", datatype="FP32", shape=(-1,), allow_nan=True)


def test_the_byte_layout_is_little_endian_row_major() -> None:
    wire = encode_tensor(np.array([[1.0, 2.0, 3.0]], dtype=">f4"))  # big-endian in memory
    assert wire == {"dtype": "float32", "shape": [1, 3],
                    "data": bytes.fromhex("0000803f0000004000004040")}


def test_decoded_inputs_round_trip() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    ids = np.array([[1, 2], [3, 4]], dtype=np.int64)
    decoded = decode_inputs({"x": encode_tensor(x), "ids": encode_tensor(ids)}, (X, IDS))
    np.testing.assert_array_equal(decoded["x"], x)
    np.testing.assert_array_equal(decoded["ids"], ids)


@pytest.mark.parametrize(("inputs", "message"), [
    ({"x": {"dtype": "float32", "shape": [1, 3]}}, "data: bytes required"),
    ({"x": {"dtype": "complex64", "shape": [1, 3], "data": b""}}, "dtype 'complex64' is not one of"),
    ({"x": {"dtype": "float32", "shape": [1, -3], "data": b""}}, "non-negative integers"),
    ({"x": {"dtype": "float32", "shape": [], "data": b""}}, "1 to 8 axis sizes"),
    ({"x": {"dtype": "float32", "shape": [2**40, 2**40], "data": b""}}, "holds more than"),
    ({"x": [1.0, 2.0]}, "a tensor is a map"),
    ({"x": encode_tensor(np.zeros((0, 3), np.float32))}, "0 rows; a request carries 1 to 256"),
    ({"x": encode_tensor(np.zeros((1, 3), np.float32)), "y": encode_tensor(np.zeros(1))}, "inputs.y: not an input"),
    ({"x": encode_tensor(np.full((1, 3), np.inf, np.float32))}, "NaN or infinity"),
])
def test_bad_tensors_name_the_tensor(inputs: dict[str, object], message: str) -> None:
    with pytest.raises(WireError, match=message) as raised:
        decode_inputs(inputs, (X,))
    assert str(raised.value).startswith("inputs.") and raised.value.code == "invalid_input"


def test_nan_is_taken_where_the_model_allows_it_and_bytes_are_bounded() -> None:
    assert np.isnan(decode_inputs({"m": encode_tensor(np.array([np.nan], np.float32))}, (MISSING_OK,))["m"][0])
    with pytest.raises(WireError, match="bytes of tensors in all"):
        decode_inputs({"x": encode_tensor(np.zeros((100, 3), np.float32))}, (X,), max_bytes=1000)


def test_json_tensors_take_the_card_dtype_and_refuse_what_does_not_fit() -> None:
    assert array_from_json("ids", [[1, 2]], IDS).dtype == np.int64
    with pytest.raises(WireError, match="rectangular array of int64"):
        array_from_json("ids", [[1.5, 2]], IDS)
    with pytest.raises(WireError, match="rectangular array of int64"):
        array_from_json("ids", [[2**70, 2]], IDS)
    with pytest.raises(WireError, match="dtype 'int32' where the model takes int64"):
        array_from_json("ids", {"dtype": "int32", "shape": [1, 2], "data": [1, 2]}, IDS)


def test_results_turn_into_json_and_callers_arrays_into_tensors() -> None:
    outputs = {"tensors": {"y": encode_tensor(np.array([[0.5, 1.5]], np.float32))}}
    assert tensors_as_json(outputs) == {"tensors": {"y": {"dtype": "float32", "shape": [1, 2], "data": [[0.5, 1.5]]}}}
    assert inputs_map("hi") == {"text": "hi"}
    assert inputs_map({"x": np.zeros((1, 3), np.float32), "query": "q"})["x"]["shape"] == [1, 3]


def test_the_readme_tensor_example_is_what_the_encoder_writes() -> None:
    import re

    from schemas.wire import ReplyTo, Request
    from tests.paths import REPO_ROOT

    block = (REPO_ROOT / "schemas" / "README.md").read_text().split("encodes to these 203 bytes")[1].split("```")[1]
    documented = bytes.fromhex("".join(re.findall(r"[0-9a-f]{2}", block)))
    request = Request(id="0123456789abcdef0123456789abcdef", model="tiny-tensor",
                      inputs={"x": encode_tensor(np.array([[1.0, -2.0]], np.float32))},
                      reply=ReplyTo(topic="fleet.results"), deadline_ms=1798761600000, submitted_ms=1798761590000)
    assert request.encode() == documented and len(documented) == 203
    assert documented[69] == 0x83 and documented.find(bytes.fromhex("c408")) == 98
    assert decode_inputs(Request.decode(documented).inputs, (CardTensor(name="x", datatype="FP32", shape=(-1, 2)),))[
        "x"].tolist() == [[1.0, -2.0]]
