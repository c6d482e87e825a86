"""What a request's `inputs` map holds, per task, read the same way by the worker (from msgpack)
and the gateway (from the JSON it turns into msgpack). A WireError names the field that is wrong.

| task | inputs |
|---|---|
| embedding, classification, token-classification | `text`: a string |
| rerank | `query`: a string; `passages`: 1 to MAX_PASSAGES strings, scored in order |
| tensor | one entry per model input: a tensor map (schemas/tensors.py) |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas.model_card import CardTensor
from schemas.tasks import is_text_task
from schemas.tensors import MAX_TENSOR_BYTES, MAX_TENSOR_ROWS, Array, decode_inputs
from schemas.wire import WireError

MAX_PASSAGES = 64


@dataclass(frozen=True, slots=True)
class RerankInput:
    query: str
    passages: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TensorInput:
    arrays: dict[str, Array]
    rows: int


def text_of(inputs: Mapping[str, Any]) -> str:
    value = inputs.get("text")
    if not isinstance(value, str):
        raise WireError("inputs.text: a string is required", "invalid_input")
    return value


def rerank_of(inputs: Mapping[str, Any], *, max_passages: int = MAX_PASSAGES) -> RerankInput:
    query = inputs.get("query")
    if not isinstance(query, str):
        raise WireError("inputs.query: a string is required", "invalid_input")
    passages = inputs.get("passages")
    if not isinstance(passages, list) or not 1 <= len(passages) <= max_passages:
        raise WireError(f"inputs.passages: a list of 1 to {max_passages} strings is required", "invalid_input")
    for index, passage in enumerate(passages):
        if not isinstance(passage, str):
            raise WireError(f"inputs.passages.{index}: a string is required", "invalid_input")
    return RerankInput(query, tuple(passages))


def tensors_of(inputs: Mapping[str, Any], specs: tuple[CardTensor, ...], *, max_bytes: int = MAX_TENSOR_BYTES,
               max_rows: int = MAX_TENSOR_ROWS) -> TensorInput:
    arrays = decode_inputs(inputs, specs, max_bytes=max_bytes, max_rows=max_rows)
    return TensorInput(arrays, int(next(iter(arrays.values())).shape[0]))


def check_inputs(task: str, inputs: Mapping[str, Any], specs: tuple[CardTensor, ...] = ()) -> None:
    """Raise the WireError a worker would dead-letter this request's inputs with."""
    if task == "rerank":
        rerank_of(inputs)
    elif task == "tensor":
        tensors_of(inputs, specs)
    elif is_text_task(task):
        text_of(inputs)
    else:
        raise WireError(f"task {task[:40]!r} is not known to this version of the wire", "invalid_input")
