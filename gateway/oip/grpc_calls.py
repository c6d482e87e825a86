"""gRPC ModelInfer messages to and from the protocol's `InferCall` and `Answer`: inputs from
`raw_input_contents` (what tritonclient.grpc sends: raw little-endian values, BYTES length-prefixed)
or the typed `contents`; outputs answered the same way the inputs came."""

from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from gateway.oip.call import InferCall, InputTensor, Limits, OutputRequest, binary_data, call_options, check_shape
from gateway.oip.codec import tensor_bytes, tensor_values
from gateway.oip.datatypes import BYTES, NUMPY_OF, check_datatype, element_count
from gateway.oip.errors import bad_input
from gateway.oip.service import Answer

TYPED_FIELD = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
               "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
               "UINT32": "uint_contents", "UINT64": "uint64_contents", "FP32": "fp32_contents",
               "FP64": "fp64_contents", BYTES: "bytes_contents"}


def parameters_of(parameters: Any) -> dict[str, Any]:
    """A map<string, InferParameter> as plain values."""
    plain: dict[str, Any] = {}
    for name, parameter in parameters.items():
        choice = parameter.WhichOneof("parameter_choice")
        if choice is not None:
            plain[name] = getattr(parameter, choice)
    return plain


def _typed(tensor: Any, datatype: str, where: str, limits: Limits) -> list[bytes] | np.ndarray:
    field = TYPED_FIELD.get(datatype)
    if field is None:
        raise bad_input(f"{where}: {datatype} has no typed contents; send it in raw_input_contents")
    values = getattr(tensor.contents, field)
    if datatype == BYTES:
        elements = list(values)
        if len(elements) > limits.max_elements or any(len(e) > limits.max_element_bytes for e in elements):
            raise bad_input(f"{where}: over {limits.max_elements} elements or {limits.max_element_bytes} bytes each")
        return elements
    return np.asarray(values, dtype=NUMPY_OF[datatype])


def call_of(request: Any, limits: Limits) -> InferCall:
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise bad_input(f"raw_input_contents: {len(raw)} buffers for {len(request.inputs)} inputs")
    if not 1 <= len(request.inputs) <= 64:
        raise bad_input("inputs: 1 to 64 tensors are required")
    inputs = []
    for index, tensor in enumerate(request.inputs):
        where = f"inputs[{index}]"
        datatype = check_datatype(tensor.datatype, where)
        shape = check_shape(list(tensor.shape), where, limits, datatype)
        count = element_count(shape)
        data = binary_data(raw[index], datatype, count, where, limits) if raw else _typed(tensor, datatype, where,
                                                                                            limits)
        if len(data) != count:
            raise bad_input(f"{where}: shape {list(shape)} holds {count} elements, data has {len(data)}")
        inputs.append(InputTensor(tensor.name or f"input{index}", datatype, shape, data))
    outputs = [OutputRequest(wanted.name, bool(raw), _classification(wanted, index))
               for index, wanted in enumerate(request.outputs)] or None
    call = InferCall(request.id or None, inputs, outputs, bool(raw))
    call.timeout_ms, call.priority = call_options(parameters_of(request.parameters), limits)
    return call


def _classification(wanted: Any, index: int) -> int:
    value = parameters_of(wanted.parameters).get("classification", 0)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 1000:
        raise bad_input(f"outputs[{index}]: classification must be an integer from 1 to 1000")
    return value


def response_of(answer: Answer) -> Any:
    response = pb.ModelInferResponse(model_name=answer.model, model_version=answer.version, id=answer.id or "")
    response.parameters["request_ids"].string_param = ",".join(answer.request_ids)
    for tensor, raw in answer.outputs:
        output = response.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=list(tensor.shape))
        if raw:
            response.raw_output_contents.append(tensor_bytes(tensor))
        else:
            getattr(output.contents, TYPED_FIELD[tensor.datatype]).extend(tensor_values(tensor))
    return response
