"""Packing maps whose values may be numpy rows, without a Python float per element.

An embedding is a float32 row. `msgpack.packb(row.tolist(), use_single_float=True)` turns its
384 floats into Python objects and packs them one by one; `float32_array` writes the very same
bytes (an array header, then per element the float 32 marker 0xca and the value big-endian)
from numpy in one step. `f32le` (EmbeddingEncoding) is the wire option for callers that take the
row as raw little-endian float32 bytes instead (schemas/README.md, "Embedding encodings").

`pack_with_outputs` packs a result-like map: every field but `outputs` through one `msgpack.packb`,
the outputs spliced in after them under a map header that counts them too.
"""

from typing import Any, Literal

import msgpack
import numpy as np
import numpy.typing as npt

_FLOAT32_ELEMENT = np.dtype([("marker", "u1"), ("value", ">f4")])
_FLOAT32_MARKER = 0xCA


# How a result carries an embedding row; absent from a request or result: a msgpack array of float 32.
# `f32le`: msgpack bin, the row's float32 values little-endian, 4 bytes each.
EmbeddingEncoding = Literal["f32le"]
F32LE: EmbeddingEncoding = "f32le"


def packb(value: Any) -> bytes:
    """msgpack as the wire contract packs it: str as str, bytes as bin, floats as float 32."""
    packed: bytes = msgpack.packb(value, use_bin_type=True, use_single_float=True)
    return packed


def array_header(length: int) -> bytes:
    return _header(length, fixed=0x90, with_16_bits=b"\xdc", with_32_bits=b"\xdd")


def map_header(length: int) -> bytes:
    return _header(length, fixed=0x80, with_16_bits=b"\xde", with_32_bits=b"\xdf")


def _header(length: int, *, fixed: int, with_16_bits: bytes, with_32_bits: bytes) -> bytes:
    if length < 16:
        return bytes((fixed | length,))
    if length < 1 << 16:
        return with_16_bits + length.to_bytes(2, "big")
    return with_32_bits + length.to_bytes(4, "big")


def float32_array(row: npt.NDArray[Any]) -> bytes:
    """The bytes `packb(row.tolist())` gives for a 1-D row, as float 32."""
    flat = np.asarray(row, dtype=np.float32).reshape(-1)
    elements = np.empty(flat.shape[0], dtype=_FLOAT32_ELEMENT)
    elements["marker"] = _FLOAT32_MARKER
    elements["value"] = flat
    return array_header(flat.shape[0]) + elements.tobytes()


def f32le(row: npt.NDArray[Any] | list[float]) -> bytes:
    """A row as raw little-endian float32 bytes (the `f32le` encoding's payload)."""
    return np.asarray(row, dtype="<f4").reshape(-1).tobytes()


def pack_outputs(outputs: dict[str, Any]) -> bytes:
    """A result's outputs map; a numpy row in it becomes a float 32 array (the bytes its list would give)."""
    if len(outputs) == 1 and type(outputs.get("embedding")) is np.ndarray:  # an embedding model's: one check
        return _EMBEDDING_ONLY + float32_array(outputs["embedding"])
    if not holds_rows(outputs):
        return packb(outputs)
    return map_header(len(outputs)) + b"".join(
        packb(key) + (float32_array(value) if isinstance(value, np.ndarray) else packb(value))
        for key, value in outputs.items())


def pack_with_outputs(fields: dict[str, Any], outputs: dict[str, Any] | None) -> bytes:
    """`fields` and, last, `outputs` as one msgpack map: the fields in one `packb`, the outputs spliced after."""
    head = packb(fields)
    if outputs is None:
        return head
    return map_header(len(fields) + 1) + head[len(map_header(len(fields))):] + _OUTPUTS_KEY + pack_outputs(outputs)


def holds_rows(outputs: dict[str, Any]) -> bool:
    return any(isinstance(value, np.ndarray) for value in outputs.values())


_EMBEDDING_ONLY = map_header(1) + packb("embedding")
_OUTPUTS_KEY = packb("outputs")
