"""Does a graph fit its task? Inputs the task knows, a batch axis it can stack on, labels that fit.

Read from the graph as stored (via `models.build.graph.describe_io`), so what is refused here is
exactly what the manifest would have said.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import onnx

from models.build.graph import describe_io
from models.importing.errors import ImportRefused
from models.manifest import TOKENIZER_INPUTS as TEXT_INPUTS
from models.registry import OutputSpec, TensorSpec
from schemas.tasks import TEXT_TASKS

BATCH_AXIS = "batch"


def name_anonymous_axes(onnx_path: Path) -> None:
    """Give every unnamed dynamic axis of the graph's inputs and outputs a name (axis 0: "batch").

    Converters such as skl2onnx leave a dynamic axis without a name; the manifest (and the
    tensor task's shape checks) need one. Only the declared signature changes, not the graph.
    """
    model = onnx.load(str(onnx_path))
    changed = False
    for value in [*model.graph.input, *model.graph.output]:
        if not value.type.HasField("tensor_type"):
            raise ImportRefused(f"{onnx_path.name}: {value.name!r} is not a tensor ({value.type.WhichOneof('value')}); "
                                "convert without maps or sequences (skl2onnx: zipmap=False)")
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if not dim.HasField("dim_value") and not dim.dim_param:
                dim.dim_param = BATCH_AXIS if axis == 0 else f"{value.name}_axis{axis}"
                changed = True
    if changed:
        onnx.save(model, str(onnx_path))


def read_signature(onnx_path: Path, task: str, *, unit_rows: bool = True
                   ) -> tuple[tuple[TensorSpec, ...], tuple[OutputSpec, ...]]:
    """The graph's inputs and outputs as the manifest states them; an embedding's outputs are
    `normalized` when `unit_rows` (what the import measured on its rows)."""
    try:
        return describe_io(onnx_path, normalized_outputs=task == "embedding" and unit_rows)
    except ValueError as exc:
        raise ImportRefused(f"{onnx_path.name}: {exc}") from exc


def check_fits_task(task: str, inputs: Sequence[TensorSpec], outputs: Sequence[OutputSpec],
                    labels: Sequence[str]) -> None:
    """Refuse, naming the tensor, whatever the task could not serve."""
    if not outputs:
        raise ImportRefused("the graph has no outputs")
    for spec in [*inputs, *outputs]:
        if not spec.shape or isinstance(spec.shape[0], int):
            raise ImportRefused(f"{spec.name!r} has shape {list(spec.shape)}: its axis 0 must be a dynamic batch axis "
                                "(re-export with a dynamic first axis) so requests can be batched")
    if task in TEXT_TASKS:
        check_text_inputs(inputs)
    else:
        _check_tensor_inputs(inputs)
    _check_labels(task, outputs[0], labels)


def check_text_inputs(inputs: Sequence[TensorSpec]) -> None:
    """Refuse inputs a tokenizer does not make, naming them."""
    names = [spec.name for spec in inputs]
    unknown = [name for name in names if name not in TEXT_INPUTS]
    if unknown:
        raise ImportRefused(f"inputs {unknown} are not what a tokenizer makes ({', '.join(TEXT_INPUTS)}); "
                            "a graph with other inputs is a tensor model (--task tensor)")
    if "input_ids" not in names:
        raise ImportRefused(f"a text model needs an input_ids input; the graph takes {names}")
    for spec in inputs:
        if spec.dtype != "int64":
            raise ImportRefused(f"input {spec.name!r} is {spec.dtype}; token inputs must be int64")
        if len(spec.shape) != 2 or isinstance(spec.shape[1], int):
            raise ImportRefused(f"input {spec.name!r} has shape {list(spec.shape)}; token inputs are "
                                "[batch, sequence] with a dynamic sequence axis (texts differ in length)")


def _check_tensor_inputs(inputs: Sequence[TensorSpec]) -> None:
    if not inputs:
        raise ImportRefused("the graph takes no inputs")
    for spec in inputs:
        if spec.dtype in ("object", "str") or spec.dtype.startswith("<U"):
            raise ImportRefused(f"input {spec.name!r} is {spec.dtype}: the tensor task takes numeric tensors only")


def _check_labels(task: str, first: OutputSpec, labels: Sequence[str]) -> None:
    width = first.shape[-1] if len(first.shape) > 1 else None
    if task == "classification" or task == "token-classification":
        rank = 2 if task == "classification" else 3
        if len(first.shape) != rank:
            raise ImportRefused(f"a {task} model's first output is [{'batch, sequence' if rank == 3 else 'batch'}, "
                                f"labels]; {first.name!r} has shape {list(first.shape)}")
        if not labels:
            raise ImportRefused(f"a {task} model needs labels, one per column of {first.name!r} (--labels, or id2label "
                                "in config.json)")
        if width != len(labels):
            raise ImportRefused(f"{len(labels)} labels for output {first.name!r} of width {width}: "
                                "one label per output column")
        if len(set(labels)) != len(labels):
            raise ImportRefused(f"labels must be distinct: {list(labels)}")
    elif labels:
        raise ImportRefused(f"a {task} model has no labels, but {len(labels)} were given")
    if task == "rerank" and not (len(first.shape) == 1 or (len(first.shape) == 2 and width == 1)):
        raise ImportRefused(f"a reranker scores each (query, passage) pair once: its first output is [batch] or "
                            f"[batch, 1]; {first.name!r} has shape {list(first.shape)}")
    if task == "embedding" and (len(first.shape) != 2 or not isinstance(width, int)):
        raise ImportRefused(f"an embedding model's first output is [batch, width] with a fixed width; "
                            f"{first.name!r} has shape {list(first.shape)}")
