"""Read a built ONNX graph's inputs and outputs into manifest specs.

The manifest describes the graph as exported, not as we meant it to be, so a surprise
(an extra input, a fixed axis) is visible in the registry instead of at serving time.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import helper

from models.registry import OutputSpec, TensorSpec


def _spec_fields(value: onnx.ValueInfoProto) -> tuple[str, str, tuple[int | str, ...]]:
    tensor_type = value.type.tensor_type
    dtype = str(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
    shape: list[int | str] = []
    for axis, dim in enumerate(tensor_type.shape.dim):
        if dim.HasField("dim_value"):
            shape.append(dim.dim_value)
        elif dim.dim_param:
            shape.append(dim.dim_param)
        else:
            raise ValueError(f"{value.name}: axis {axis} has neither a size nor a name")
    return value.name, dtype, tuple(shape)


def describe_io(onnx_path: Path, *, normalized_outputs: bool) -> tuple[tuple[TensorSpec, ...], tuple[OutputSpec, ...]]:
    # Only the graph's signature is needed: skip loading ~90 MB of weights.
    model = onnx.load(str(onnx_path), load_external_data=False)
    initializers = {init.name for init in model.graph.initializer}
    inputs = tuple(
        TensorSpec(name=name, dtype=dtype, shape=shape)
        for name, dtype, shape in map(_spec_fields, model.graph.input)
        if name not in initializers
    )
    outputs = tuple(
        OutputSpec(name=name, dtype=dtype, shape=shape, normalized=normalized_outputs)
        for name, dtype, shape in map(_spec_fields, model.graph.output)
    )
    return inputs, outputs
