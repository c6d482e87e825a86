"""A model version's task from its model card (`card_task`), and the tasks whose tensors come
from the card alone: rerank and tensor.

This module sits above gateway/oip/tasks.py (the task interface and the text tasks, which need
no card) and imports it; nothing there imports this, so the two form no cycle.

rerank: `query` BYTES [1] and `passages` BYTES [P] (or [P, 1]) make one fleet request; it answers
`scores` FP32 [P] (the passages' relevance, in their order) and `ranking` INT64 [P] (passage
indices, best first). tensor: the model's named inputs, each in the card's datatype with the
card's fixed axes (checked by schemas/tensors.py before anything is published), make one fleet
request whose rows the worker batches along the first axis; its outputs are the model's, named
and typed as the card says."""

from typing import Any

import numpy as np

from gateway.oip.call import InputTensor
from gateway.oip.datatypes import BYTES, NUMPY_OF
from gateway.oip.errors import Failure, OipError, bad_input
from gateway.oip.tasks import (Mapper, OutputTensor, Row, Task, TensorSpec, classification_task, embedding_task,
                               strings_of)
from schemas.model_card import ModelCard, oip_datatype
from schemas.task_inputs import MAX_PASSAGES
from schemas.tensors import check_tensors, output_tensors
from schemas.wire import Result, WireError


def _rerank_rows(inputs: list[InputTensor], max_chars: int) -> list[Row]:
    named = {tensor.name: tensor for tensor in inputs}
    if set(named) != {"query", "passages"}:
        raise bad_input(f"inputs: this model takes 'query' and 'passages', got {sorted(named)[:4]}")
    query = strings_of(named["query"], max_chars)
    passages = strings_of(named["passages"], max_chars)
    if len(query) != 1:
        raise bad_input(f"input 'query': one text ([1]), got {len(query)}")
    if len(passages) > MAX_PASSAGES:
        raise bad_input(f"input 'passages': at most {MAX_PASSAGES} passages, got {len(passages)}")
    return [{"query": query[0], "passages": passages}]


def _rerank_output(name: str, datatype: str) -> Mapper:
    def output(results: list[Result], classification: int, binary: bool) -> OutputTensor:
        if classification:
            raise bad_input(f"output {name!r}: the classification extension applies to a classifier's outputs")
        values = (results[0].outputs or {}).get(name)
        if not isinstance(values, list):
            raise OipError(Failure.unavailable, f"output {name!r}: the result holds none", (results[0].id,), 1)
        array = np.asarray(values, dtype=NUMPY_OF[datatype])
        return OutputTensor(name, datatype, array.shape, array)
    return output


def rerank_task() -> Task:
    return Task("rerank", (TensorSpec("query", BYTES, (1,)), TensorSpec("passages", BYTES, (-1,))),
                (TensorSpec("scores", "FP32", (-1,)), TensorSpec("ranking", "INT64", (-1,))),
                {"scores": _rerank_output("scores", "FP32"), "ranking": _rerank_output("ranking", "INT64")},
                rows=_rerank_rows)


def _tensor_rows(card: ModelCard) -> Any:
    def rows(inputs: list[InputTensor], _: int) -> list[Row]:
        arrays = {}
        for tensor in inputs:
            if tensor.datatype == BYTES or not isinstance(tensor.data, np.ndarray):
                raise bad_input(f"input {tensor.name[:80]!r}: this model takes numbers, not BYTES")
            arrays[tensor.name] = tensor.data.reshape(tensor.shape)
        try:
            check_tensors(arrays, card.inputs)
        except WireError as exc:
            raise bad_input(str(exc)) from None
        return [dict(arrays)]
    return rows


def _tensor_output(name: str) -> Mapper:
    def output(results: list[Result], classification: int, binary: bool) -> OutputTensor:
        if classification:
            raise bad_input(f"output {name!r}: the classification extension applies to a classifier's outputs")
        try:
            array = output_tensors(results[0].outputs).get(name)
        except WireError as exc:
            raise OipError(Failure.unavailable, f"output {name!r}: {exc}", (results[0].id,), 1) from None
        if array is None:
            raise OipError(Failure.unavailable, f"output {name!r}: the result holds none", (results[0].id,), 1)
        return OutputTensor(name, oip_datatype(array.dtype.name), array.shape, array)
    return output


def tensor_task(card: ModelCard) -> Task:
    inputs = tuple(TensorSpec(spec.name, spec.datatype, spec.shape) for spec in card.inputs)
    outputs = tuple(TensorSpec(spec.name, spec.datatype, spec.shape) for spec in card.outputs)
    return Task("tensor", inputs, outputs, {spec.name: _tensor_output(spec.name) for spec in card.outputs},
                rows=_tensor_rows(card))


def card_task(card: ModelCard) -> Task | None:
    """The task of a model version from its card (schemas/model_card.py); None for a task the
    protocol does not map (token-classification: its spans have no tensor form here)."""
    if card.task == "embedding":
        width = card.outputs[0].shape[-1] if card.outputs and card.outputs[0].shape else -1
        return embedding_task(width)
    if card.task == "classification":
        return classification_task(tuple(card.labels))
    if card.task == "rerank":
        return rerank_task()
    if card.task == "tensor":
        return tensor_task(card)
    return None
