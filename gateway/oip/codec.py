"""The REST forms of a call and its answer: the body split by Triton's binary tensor extension
(`Inference-Header-Content-Length`: a JSON inference header, then the binary data of the inputs
that name a `binary_data_size`; a length of 0 is the raw form, the whole body the data of the
model's single input), and the answer as JSON or as a JSON header followed by binary outputs."""

import zlib
from typing import Any

import numpy as np
import orjson

from gateway.oip.call import InferCall, InputTensor, Limits, binary_data, parse_call
from gateway.oip.datatypes import BYTES, NUMPY_OF, join_bytes
from gateway.oip.errors import bad_input
from gateway.oip.service import Answer
from gateway.oip.tasks import OutputTensor, Task
from gateway.refusals import Kind, Refusal, Refused

HEADER_LENGTH = b"inference-header-content-length"


def header_length(headers: list[tuple[bytes, bytes]], body_size: int) -> int | None:
    """The declared JSON header length, None when there is none; 400 when it is not a length within the body."""
    for name, value in headers:
        if name == HEADER_LENGTH:
            if not value.isdigit() or len(value) > 12 or int(value) > body_size:
                raise bad_input(f"Inference-Header-Content-Length {value[:20]!r} is not a length within the "
                                f"{body_size}-byte body")
            return int(value)
    return None


def decoded_body(body: bytes, headers: list[tuple[bytes, bytes]], max_bytes: int) -> bytes:
    """The body with its Content-Encoding (gzip or deflate, as tritonclient's request compression
    sends) undone, never inflated past `max_bytes` (admission's body limit, the same `too_large`
    refusal); another encoding is 400."""
    encoding = next((value.strip().lower() for name, value in headers if name == b"content-encoding"), b"identity")
    if encoding in (b"identity", b""):
        return body
    if encoding not in (b"gzip", b"deflate"):
        raise bad_input(f"Content-Encoding {encoding[:20]!r}: send identity, gzip or deflate")
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding == b"gzip" else zlib.MAX_WBITS)
    try:
        inflated = inflater.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise bad_input(f"body: not {encoding.decode()}: {exc}") from None
    if len(inflated) > max_bytes:
        raise Refused(Refusal(Kind.too_large, f"the body inflates past the limit of {max_bytes} bytes"))
    if not inflater.eof or inflater.unused_data:
        raise bad_input(f"body: not one whole {encoding.decode()} stream")
    return inflated


def read_call(body: bytes, headers: list[tuple[bytes, bytes]], task: Task, limits: Limits) -> InferCall:
    length = header_length(headers, len(body))
    if length == 0:
        return _raw_call(body, task, limits)
    view = memoryview(body)
    head = view if length is None else view[:length]
    try:
        document = orjson.loads(head)
    except orjson.JSONDecodeError as exc:
        raise bad_input(f"inference header: not JSON: {str(exc)[:200]}") from None
    return parse_call(document, view[len(head):], limits)


def _raw_call(body: bytes, task: Task, limits: Limits) -> InferCall:
    """The raw binary form: the whole body is the data of the model's one input, all outputs binary."""
    if len(task.inputs) != 1:
        raise bad_input("a raw binary request (Inference-Header-Content-Length: 0) needs a model with one input")
    spec = task.inputs[0]
    if spec.datatype != BYTES:
        raise bad_input(f"a raw binary request for a {spec.datatype} input is not taken: its shape is unknown")
    elements = binary_data(body, BYTES, 0, "raw body", limits)
    assert isinstance(elements, list)
    return InferCall(None, [InputTensor(spec.name, BYTES, (len(elements),), elements)], None, True)


def tensor_bytes(tensor: OutputTensor) -> bytes:
    """The tensor's binary form: BYTES length-prefixed, numbers little-endian."""
    data = tensor.data
    if isinstance(data, bytes):
        return data
    if tensor.datatype == BYTES:
        return join_bytes([element for element in data if isinstance(element, bytes)])
    return np.ascontiguousarray(data, dtype=NUMPY_OF[tensor.datatype]).tobytes()


def tensor_values(tensor: OutputTensor) -> list[Any]:
    """The tensor's values as one flat list: bytes for BYTES, numbers otherwise."""
    data = tensor.data
    if isinstance(data, list):
        return data
    if isinstance(data, bytes):
        return np.frombuffer(data, dtype=NUMPY_OF[tensor.datatype]).tolist()
    return np.asarray(data).reshape(-1).tolist()


def _json_data(tensor: OutputTensor) -> Any:
    if tensor.datatype == BYTES:
        return [element.decode("utf-8", "replace") for element in tensor_values(tensor)]
    if isinstance(tensor.data, np.ndarray):
        return np.ascontiguousarray(tensor.data).reshape(-1)
    return tensor_values(tensor)


def answer_body(answer: Answer) -> tuple[bytes, int | None]:
    """The answer's body, and the length of its JSON header when binary outputs follow it."""
    outputs, blobs = [], []
    for tensor, binary in answer.outputs:
        entry: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}
        if binary:
            blob = tensor_bytes(tensor)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = _json_data(tensor)
        outputs.append(entry)
    document: dict[str, Any] = {"model_name": answer.model, "model_version": answer.version, "outputs": outputs,
                                "parameters": {"request_ids": answer.request_ids}}
    if answer.id is not None:
        document["id"] = answer.id
    header = orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
    if not blobs:
        return header, None
    return header + b"".join(blobs), len(header)
