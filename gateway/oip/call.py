"""An inference request of the protocol, read into an `InferCall` and checked before anything is
published: the JSON form (`data` flat or nested), Triton's binary tensor extension (inputs whose
`parameters.binary_data_size` names their share of the bytes after the JSON header), for REST;
gRPC builds the same `InferCall` (gateway/oip/grpc_calls.py). Every size is bounded: elements
by `Limits`, shapes by their rank and element count, and binary parts by the body they are in."""

from dataclasses import dataclass
from typing import Any

import numpy as np

from gateway.oip.datatypes import BYTES, NUMPY_OF, check_datatype, element_count, split_bytes
from gateway.oip.errors import bad_input

MAX_RANK = 8
MAX_ID_CHARS = 256
Data = list[bytes] | np.ndarray


@dataclass(frozen=True, slots=True)
class Limits:
    max_elements: int  # elements of one BYTES tensor (text rows for the text tasks)
    max_element_bytes: int  # bytes of one BYTES element
    max_timeout_ms: int
    max_numbers: int = 4 * 1024 * 1024  # elements of one numeric tensor


@dataclass(frozen=True, slots=True)
class InputTensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    data: Data


@dataclass(frozen=True, slots=True)
class OutputRequest:
    name: str
    binary: bool
    classification: int  # 0: the tensor itself; K: Triton's classification extension, the top K


@dataclass(slots=True)
class InferCall:
    id: str | None
    inputs: list[InputTensor]
    outputs: list[OutputRequest] | None  # None: every output the model has
    binary_outputs: bool  # how outputs not named in `outputs` are sent
    timeout_ms: int | None = None
    priority: int = 0


def check_shape(shape: object, where: str, limits: Limits, datatype: str = BYTES) -> tuple[int, ...]:
    if not isinstance(shape, list | tuple) or len(shape) > MAX_RANK:
        raise bad_input(f"{where}: shape must be a list of at most {MAX_RANK} sizes")
    if not all(isinstance(size, int) and not isinstance(size, bool) and size >= 0 for size in shape):
        raise bad_input(f"{where}: shape sizes must be non-negative integers")
    dims = tuple(shape)
    bound = limits.max_elements if datatype == BYTES else limits.max_numbers
    # Checked size by size, so a huge declared shape is refused before it is multiplied out.
    count = 1
    for size in dims:
        count *= size
        if count > bound:
            raise bad_input(f"{where}: shape {list(dims)[:MAX_RANK]} holds more than {bound} elements")
    return dims


def _flatten(data: Any, rank: int, where: str) -> list[Any]:
    """`data` flat, or nested as deep as the shape's rank, as one flat list."""
    if not isinstance(data, list):
        raise bad_input(f"{where}: data must be a list")
    flat: list[Any] = []
    level = data
    for _ in range(max(rank - 1, 0)):
        if not any(isinstance(item, list) for item in level):
            break
        if not all(isinstance(item, list) for item in level):
            raise bad_input(f"{where}: data mixes lists and values at one level")
        level = [value for item in level for value in item]
    if any(isinstance(item, list) for item in level):
        raise bad_input(f"{where}: data is nested deeper than its shape")
    flat.extend(level)
    return flat


def _json_data(values: list[Any], datatype: str, where: str, limits: Limits) -> Data:
    if datatype == BYTES:
        if not all(isinstance(value, str) for value in values):
            raise bad_input(f"{where}: BYTES data must be strings")
        elements = [value.encode("utf-8", "surrogatepass") for value in values]
        if any(len(element) > limits.max_element_bytes for element in elements):
            raise bad_input(f"{where}: a BYTES element is over {limits.max_element_bytes} bytes")
        return elements
    wanted = NUMPY_OF[datatype]
    kinds = (bool,) if datatype == "BOOL" else (int, float) if wanted.kind == "f" else (int,)
    if not all(isinstance(value, kinds) and (datatype == "BOOL" or not isinstance(value, bool)) for value in values):
        raise bad_input(f"{where}: {datatype} data must be {'booleans' if datatype == 'BOOL' else 'numbers'}")
    try:
        return np.asarray(values, dtype=wanted)
    except (OverflowError, ValueError):
        raise bad_input(f"{where}: a value does not fit {datatype}") from None


def binary_data(raw: bytes | memoryview, datatype: str, count: int, where: str, limits: Limits) -> Data:
    """A tensor's data from its binary form: length-prefixed elements for BYTES, else raw little-endian values."""
    if datatype == BYTES:
        elements = split_bytes(raw, limits.max_elements, where)
        if any(len(element) > limits.max_element_bytes for element in elements):
            raise bad_input(f"{where}: a BYTES element is over {limits.max_element_bytes} bytes")
        return elements
    wanted = NUMPY_OF[datatype]
    if len(raw) != count * wanted.itemsize:
        raise bad_input(f"{where}: {len(raw)} bytes of data for {count} {datatype} elements "
                        f"({count * wanted.itemsize} bytes)")
    return np.frombuffer(raw, dtype=wanted)


def _input(spec: Any, index: int, binary: memoryview, at: int, limits: Limits) -> tuple[InputTensor, int]:
    where = f"inputs[{index}]"
    if not isinstance(spec, dict) or not isinstance(name := spec.get("name"), str) or not name:
        raise bad_input(f"{where}: an object with a name is required")
    datatype = check_datatype(spec.get("datatype"), where)
    shape = check_shape(spec.get("shape"), where, limits, datatype)
    count = element_count(shape)
    size = _parameters(spec, where).get("binary_data_size")
    if size is not None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise bad_input(f"{where}: binary_data_size must be a non-negative integer")
        if at + size > len(binary):
            raise bad_input(f"{where}: binary_data_size {size} runs past the end of the body")
        data = binary_data(binary[at:at + size], datatype, count, where, limits)
        at += size
    elif "data" in spec:
        data = _json_data(_flatten(spec["data"], len(shape), where), datatype, where, limits)
    else:
        raise bad_input(f"{where}: neither data nor parameters.binary_data_size")
    if len(data) != count:
        raise bad_input(f"{where}: shape {list(shape)} holds {count} elements, data has {len(data)}")
    return InputTensor(name, datatype, shape, data), at


def _parameters(holder: dict[str, Any], where: str) -> dict[str, Any]:
    parameters = holder.get("parameters", {})
    if not isinstance(parameters, dict):
        raise bad_input(f"{where}: parameters must be an object")
    return parameters


def _output(spec: Any, index: int, binary_default: bool) -> OutputRequest:
    where = f"outputs[{index}]"
    if not isinstance(spec, dict) or not isinstance(name := spec.get("name"), str) or not name:
        raise bad_input(f"{where}: an object with a name is required")
    parameters = _parameters(spec, where)
    binary = parameters.get("binary_data", binary_default)
    classification = parameters.get("classification", 0)
    if not isinstance(binary, bool):
        raise bad_input(f"{where}: binary_data must be true or false")
    if not isinstance(classification, int) or isinstance(classification, bool) or not 0 <= classification <= 1000:
        raise bad_input(f"{where}: classification must be an integer from 1 to 1000")
    return OutputRequest(name, binary, classification)


def parse_call(document: Any, binary: memoryview, limits: Limits) -> InferCall:
    """The call in a JSON inference header and the binary data after it; 400 naming the field."""
    if not isinstance(document, dict):
        raise bad_input("body: expected a JSON object")
    call_id = document.get("id")
    if call_id is not None and (not isinstance(call_id, str) or len(call_id) > MAX_ID_CHARS):
        raise bad_input(f"id: a string of at most {MAX_ID_CHARS} characters")
    parameters = _parameters(document, "body")
    binary_default = parameters.get("binary_data_output", False)
    if not isinstance(binary_default, bool):
        raise bad_input("parameters.binary_data_output must be true or false")
    specs = document.get("inputs")
    if not isinstance(specs, list) or not specs or len(specs) > 64:
        raise bad_input("inputs: a list of 1 to 64 tensors is required")
    inputs, at = [], 0
    for index, spec in enumerate(specs):
        tensor, at = _input(spec, index, binary, at, limits)
        inputs.append(tensor)
    if at != len(binary):
        raise bad_input(f"body: {len(binary) - at} bytes after the inference header that no input claims")
    requested = document.get("outputs")
    if requested is not None and (not isinstance(requested, list) or len(requested) > 64):
        raise bad_input("outputs: a list of at most 64 outputs")
    outputs = None if not requested else [_output(spec, i, binary_default) for i, spec in enumerate(requested)]
    call = InferCall(call_id, inputs, outputs, binary_default)
    call.timeout_ms, call.priority = call_options(parameters, limits)
    return call


def call_options(parameters: dict[str, Any], limits: Limits) -> tuple[int | None, int]:
    """The deadline (`timeout`, microseconds, as tritonclient sends it) and `priority` (0-9) of a call."""
    timeout_us = parameters.get("timeout")
    priority = parameters.get("priority", 0)
    if timeout_us is not None and (not isinstance(timeout_us, int) or isinstance(timeout_us, bool) or timeout_us <= 0
                                   or timeout_us > limits.max_timeout_ms * 1000):
        raise bad_input(f"parameters.timeout: microseconds, from 1 to {limits.max_timeout_ms * 1000}")
    if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 9:
        raise bad_input("parameters.priority: an integer from 0 to 9")
    return (None if timeout_us is None else max(timeout_us // 1000, 1)), priority
