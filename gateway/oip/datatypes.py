"""The protocol's tensor datatypes and Triton's BYTES element encoding.

A BYTES tensor travels, in binary form (Triton's binary tensor extension, gRPC raw contents),
as its elements one after another, each a 4-byte little-endian length and that many bytes."""

import struct

import numpy as np

from gateway.oip.errors import bad_input

NUMPY_OF = {"BOOL": np.dtype("?"), "UINT8": np.dtype("<u1"), "UINT16": np.dtype("<u2"), "UINT32": np.dtype("<u4"),
            "UINT64": np.dtype("<u8"), "INT8": np.dtype("<i1"), "INT16": np.dtype("<i2"), "INT32": np.dtype("<i4"),
            "INT64": np.dtype("<i8"), "FP16": np.dtype("<f2"), "FP32": np.dtype("<f4"), "FP64": np.dtype("<f8")}
BYTES = "BYTES"
DATATYPES = frozenset({*NUMPY_OF, BYTES})
_LENGTH = struct.Struct("<I")


def check_datatype(datatype: object, where: str) -> str:
    if not isinstance(datatype, str) or datatype not in DATATYPES:
        raise bad_input(f"{where}: datatype {str(datatype)[:40]!r} is not one of {sorted(DATATYPES)}")
    return datatype


def split_bytes(raw: bytes | memoryview, max_elements: int, where: str) -> list[bytes]:
    """The elements of a length-prefixed BYTES buffer; 400 when a length runs past the end or
    there are more than `max_elements`."""
    view = memoryview(raw)
    elements: list[bytes] = []
    at = 0
    while at < len(view):
        if len(elements) >= max_elements:
            raise bad_input(f"{where}: more than {max_elements} BYTES elements")
        if at + 4 > len(view):
            raise bad_input(f"{where}: a BYTES element's 4-byte length is cut off at byte {at}")
        (size,) = _LENGTH.unpack_from(view, at)
        at += 4
        if at + size > len(view):
            raise bad_input(f"{where}: a BYTES element of {size} bytes runs past the end of its data")
        elements.append(bytes(view[at:at + size]))
        at += size
    return elements


def join_bytes(elements: list[bytes]) -> bytes:
    """Elements as a length-prefixed BYTES buffer."""
    return b"".join(_LENGTH.pack(len(element)) + element for element in elements)


def element_count(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count
