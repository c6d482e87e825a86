"""Named tensors on the wire: how a `tensor` request carries its inputs and a result its outputs.

In msgpack a tensor is a map `{"dtype": "float32", "shape": [2, 3], "data": <bin: the elements,
little-endian, row-major>}`; over HTTP JSON (which has no bytes) `data` is a flat or nested array
of numbers. The first axis is the batch: a request carries one or more rows, and every input
has the same number of them. Inputs are checked against the model card's specs (names, dtypes,
ranks, fixed axes, bytes against the shape, a bound on the total, finite values where the model
forbids NaN) and any mismatch is a WireError naming the tensor, so the gateway answers 4xx and
the worker dead-letters: a bad tensor never reaches the model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from schemas.model_card import CardTensor
from schemas.errors import WireError

MAX_TENSOR_BYTES = 4 * 1024 * 1024  # all inputs of one request together
MAX_TENSOR_ROWS = 256  # rows (first axis) of one request
MAX_RANK = 8
# The dtypes a tensor may have on the wire (numpy names).
WIRE_DTYPES = frozenset({"bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
                         "float16", "float32", "float64"})
Array = npt.NDArray[Any]


def _invalid(name: str, message: str) -> WireError:
    return WireError(f"inputs.{name[:64]}: {message}", "invalid_input")


def encode_tensor(array: npt.ArrayLike) -> dict[str, Any]:
    """The wire map of an array: dtype name, shape, little-endian row-major bytes."""
    value = np.asarray(array)
    little = value.astype(value.dtype.newbyteorder("<"), copy=False)
    return {"dtype": value.dtype.name, "shape": list(value.shape), "data": np.ascontiguousarray(little).tobytes()}


def decode_tensor(value: Any, name: str = "tensor") -> Array:
    """The array of a wire map (unchecked against any spec, but its bytes must fit its shape)."""
    if not isinstance(value, Mapping):
        raise _invalid(name, "a tensor is a map of dtype, shape and data")
    dtype = _dtype(name, value.get("dtype"))
    shape = _shape(name, value.get("shape"))
    data = value.get("data")
    if not isinstance(data, bytes):
        raise _invalid(name, f"data: bytes required (little-endian {dtype}), got {type(data).__name__}")
    expected = math.prod(shape) * dtype.itemsize
    if len(data) != expected:
        raise _invalid(name, f"shape {list(shape)} of {dtype} needs {expected} bytes of data, got {len(data)}")
    return np.frombuffer(data, dtype=dtype.newbyteorder("<")).reshape(shape).astype(dtype, copy=False)


def _dtype(name: str, dtype: Any) -> np.dtype[Any]:
    if not isinstance(dtype, str) or dtype not in WIRE_DTYPES:
        raise _invalid(name, f"dtype {str(dtype)[:32]!r} is not one of {sorted(WIRE_DTYPES)}")
    return np.dtype(dtype)


def _shape(name: str, shape: Any, max_elements: int = MAX_TENSOR_BYTES) -> tuple[int, ...]:
    if not isinstance(shape, list | tuple) or not 1 <= len(shape) <= MAX_RANK:
        raise _invalid(name, f"shape: a list of 1 to {MAX_RANK} axis sizes required (the first is the batch)")
    if not all(type(axis) is int and axis >= 0 for axis in shape):
        raise _invalid(name, f"shape {list(shape)[:MAX_RANK]}: axis sizes are non-negative integers")
    elements = 1
    for axis in shape:
        elements *= axis
        if elements > max_elements:  # before the product grows without bound: a billion-element claim
            raise _invalid(name, f"shape {list(shape)} holds more than {max_elements} elements")
    return tuple(shape)


def check_tensors(arrays: Mapping[str, Array], specs: Sequence[CardTensor], *,
                  max_bytes: int = MAX_TENSOR_BYTES, max_rows: int = MAX_TENSOR_ROWS) -> int:
    """Check named arrays against a model's input specs; the number of rows they carry, else a
    WireError naming the first tensor that does not fit."""
    expected = [spec.name for spec in specs]
    missing = [name for name in expected if name not in arrays]
    unexpected = [name for name in arrays if name not in expected]
    if missing or unexpected:
        name = (missing or unexpected)[0]
        raise _invalid(name, f"{'missing' if missing else 'not an input of this model'}; the model takes "
                             f"{expected}")
    total = sum(array.nbytes for array in arrays.values())
    if total > max_bytes:
        raise _invalid(expected[0], f"{total} bytes of tensors in all is over the limit of {max_bytes}")
    rows = {spec.name: _check_one(arrays[spec.name], spec) for spec in specs}
    if len(set(rows.values())) != 1:
        raise _invalid(expected[0], f"inputs disagree on the number of rows (first axis): {rows}")
    count = next(iter(rows.values()))
    if not 1 <= count <= max_rows:
        raise _invalid(expected[0], f"{count} rows; a request carries 1 to {max_rows}")
    return count


def _check_one(array: Array, spec: CardTensor) -> int:
    wanted = spec.numpy_dtype
    if wanted is None or array.dtype != np.dtype(wanted):
        raise _invalid(spec.name, f"dtype {array.dtype} where the model takes {wanted or spec.datatype}")
    if array.ndim != len(spec.shape):
        raise _invalid(spec.name, f"shape {list(array.shape)} has rank {array.ndim}; the model takes rank "
                                  f"{len(spec.shape)} {list(spec.shape)} (-1: any size)")
    for axis, (size, fixed) in enumerate(zip(array.shape, spec.shape, strict=True)):
        if fixed >= 0 and size != fixed:
            raise _invalid(spec.name, f"shape {list(array.shape)}: axis {axis} is {size}, the model takes {fixed}")
    if not spec.allow_nan and array.dtype.kind == "f" and not bool(np.isfinite(array).all()):
        raise _invalid(spec.name, "holds NaN or infinity, which this model does not take")
    return int(array.shape[0])


def decode_inputs(inputs: Mapping[str, Any], specs: Sequence[CardTensor], *,
                  max_bytes: int = MAX_TENSOR_BYTES, max_rows: int = MAX_TENSOR_ROWS) -> dict[str, Array]:
    """A tensor request's inputs, decoded and checked against `specs` (see check_tensors)."""
    claimed = 0
    arrays: dict[str, Array] = {}
    for name, value in inputs.items():
        array = decode_tensor(value, str(name))
        claimed += array.nbytes
        if claimed > max_bytes:
            raise _invalid(str(name), f"more than {max_bytes} bytes of tensors in all")
        arrays[str(name)] = array
    check_tensors(arrays, specs, max_bytes=max_bytes, max_rows=max_rows)
    return arrays


def array_from_json(name: str, value: Any, spec: CardTensor, max_elements: int = MAX_TENSOR_BYTES) -> Array:
    """A JSON tensor: a nested array in the spec's dtype, or {"shape": [...], "data": flat or nested,
    "dtype": optional, must be the spec's}. Numbers that do not fit the dtype are refused."""
    wanted = spec.numpy_dtype
    if wanted is None:
        raise _invalid(name, f"datatype {spec.datatype} cannot be sent as JSON numbers")
    shape: tuple[int, ...] | None = None
    data = value
    if isinstance(value, Mapping):
        if value.get("dtype", wanted) != wanted:
            raise _invalid(name, f"dtype {str(value.get('dtype'))[:32]!r} where the model takes {wanted}")
        shape = _shape(name, value.get("shape"), max_elements)
        data = value.get("data")
    if not isinstance(data, list):
        raise _invalid(name, "data: an array of numbers required")
    try:
        array = np.array(data, dtype=object)
        if array.dtype != object or array.size > max_elements:
            raise ValueError
        typed = _typed(array, np.dtype(wanted))
    except (ValueError, TypeError, OverflowError):
        raise _invalid(name, f"data: a rectangular array of {wanted} numbers required") from None
    if shape is not None:
        if typed.size != math.prod(shape):
            raise _invalid(name, f"shape {list(shape)} needs {math.prod(shape)} elements, data has {typed.size}")
        typed = typed.reshape(shape)
    return typed


def _typed(array: Array, dtype: np.dtype[Any]) -> Array:
    flat = array.reshape(-1).tolist() if array.ndim else [array.item()]
    if any(isinstance(x, list) for x in flat):
        raise ValueError("ragged")
    if dtype.kind == "b":
        if not all(type(x) is bool for x in flat):
            raise ValueError("not booleans")
    elif dtype.kind in "iu":
        if not all(type(x) is int for x in flat):
            raise ValueError("not integers")
        info = np.iinfo(dtype)
        if flat and (min(flat) < info.min or max(flat) > info.max):
            raise OverflowError
    elif not all(type(x) in (int, float) for x in flat):
        raise ValueError("not numbers")
    return np.asarray(array.tolist(), dtype=dtype).reshape(array.shape)


def output_tensors(outputs: Mapping[str, Any] | None) -> dict[str, Array]:
    """A tensor result's output arrays by name (empty when the outputs hold none)."""
    tensors = (outputs or {}).get("tensors")
    if not isinstance(tensors, Mapping):
        return {}
    return {str(name): decode_tensor(value, str(name)) for name, value in tensors.items()}


def tensors_as_json(outputs: dict[str, Any]) -> dict[str, Any]:
    """`outputs` with every tensor's data as a nested array of numbers, for JSON, which has no bytes."""
    tensors = outputs.get("tensors")
    if not isinstance(tensors, Mapping):
        return outputs
    converted = {}
    for name, value in tensors.items():
        array = decode_tensor(value, str(name))
        converted[name] = {"dtype": str(array.dtype), "shape": list(array.shape), "data": array.tolist()}
    return {**outputs, "tensors": converted}


def inputs_map(value: str | Mapping[str, Any]) -> dict[str, Any]:
    """A request's `inputs` from what a caller holds: a text, or a map whose numpy arrays become
    tensor maps (the rest, e.g. rerank's query and passages, as it is)."""
    if isinstance(value, str):
        return {"text": value}
    return {str(name): encode_tensor(item) if isinstance(item, np.ndarray) else item for name, item in value.items()}
