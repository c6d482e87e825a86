"""How each task's requests and results map onto the protocol's tensors, one function per task
(`embedding_task`, `classification_task`), named in `TASKS`. Until workers publish model
cards, what a model's task is comes from the gateway's `model_tasks` setting (gateway/oip/model_tasks.py),
and what cannot be known without the card (an embedding's width, a classifier's label list) is -1.

Text tasks take one BYTES input of shape [N] or [N, 1]: each element is one request row,
published to Kafka as one fleet request (one text each)."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gateway.oip.call import InputTensor
from gateway.oip.datatypes import BYTES
from gateway.oip.errors import Failure, OipError, bad_input
from schemas.wire import Result

TEXT_INPUT = "text"


@dataclass(frozen=True, slots=True)
class TensorSpec:
    name: str
    datatype: str
    shape: tuple[int, ...]

    def metadata(self) -> dict[str, object]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclass(frozen=True, slots=True)
class OutputTensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    # BYTES: the elements; numbers: an array, a flat list of values, or their little-endian bytes
    data: np.ndarray | list[bytes] | list[float] | bytes


# An output's tensor from the call's results, given the classification extension's K (0: none) and
# whether it goes out in binary (a mapper may then hand over raw bytes, else a JSON-ready list).
Mapper = Callable[[list[Result], int, bool], OutputTensor]
# A call's request rows from its inputs (and the most characters a text may have): a text each,
# or an inputs map (rerank's query and passages, a tensor model's arrays).
Row = str | dict[str, Any]
Rows = Callable[[list[InputTensor], int], list[Row]]


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    mappers: dict[str, Mapper]
    labels: tuple[str, ...] = ()  # a classifier's labels in score order, when known
    classifiable: frozenset[str] = frozenset()  # outputs the classification extension applies to
    rows: Rows = field(default=lambda inputs, max_chars: list(texts_of(inputs, max_chars)))

    def output(self, name: str, results: list[Result], classification: int, binary: bool) -> OutputTensor:
        mapper = self.mappers.get(name)
        if mapper is None:
            raise bad_input(f"output {name[:80]!r}: this model's outputs are {sorted(self.mappers)}")
        return mapper(results, classification, binary)


def texts_of(inputs: list[InputTensor], max_chars: int) -> list[str]:
    """The rows of a text task's call: one BYTES input, [N] or [N, 1], each element UTF-8 text."""
    if len(inputs) != 1:
        raise bad_input(f"inputs: this model takes one input ({TEXT_INPUT!r}), got {len(inputs)}")
    return strings_of(inputs[0], max_chars)


def strings_of(tensor: InputTensor, max_chars: int) -> list[str]:
    """The UTF-8 texts of a BYTES input of shape [N] or [N, 1]."""
    if tensor.datatype != BYTES:
        raise bad_input(f"input {tensor.name[:80]!r}: datatype {tensor.datatype}, this model takes BYTES (UTF-8 text)")
    if len(tensor.shape) not in (1, 2) or (len(tensor.shape) == 2 and tensor.shape[1] != 1) or tensor.shape[0] < 1:
        raise bad_input(f"input {tensor.name[:80]!r}: shape {list(tensor.shape)}, this model takes [N] or [N, 1]")
    assert isinstance(tensor.data, list), "BYTES data is a list of elements"
    texts = []
    for index, element in enumerate(tensor.data):
        try:
            text = element.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise bad_input(f"input {tensor.name[:80]!r}[{index}]: not UTF-8 (byte {exc.start})") from None
        if len(text) > max_chars:
            raise bad_input(f"input {tensor.name[:80]!r}[{index}]: {len(text)} characters is over {max_chars}")
        texts.append(text)
    return texts


def _embeddings(results: list[Result], classification: int, binary: bool) -> OutputTensor:
    """The rows as they came: raw float32 bytes (`f32le`, asked for when the output goes out in
    binary) joined, or float lists made one flat list for JSON; numpy only when they differ."""
    if classification:
        raise bad_input("output 'embedding': the classification extension applies to a classifier's outputs")
    values = [(result.outputs or {}).get("embedding") for result in results]
    widths = {len(value) // 4 if isinstance(value, bytes) else len(value) if isinstance(value, list) else 0
              for value in values}
    if len(widths) != 1 or 0 in widths:
        raise OipError(Failure.unavailable, "output 'embedding': the results hold no embeddings of one width",
                       tuple(result.id for result in results), retry_after_s=1)
    shape = (len(results), widths.pop())
    if binary and all(isinstance(value, bytes) for value in values):
        return OutputTensor("embedding", "FP32", shape, b"".join(value for value in values if isinstance(value, bytes)))
    if not binary and all(isinstance(value, list) for value in values):
        flat = values[0] if len(values) == 1 else [x for value in values if isinstance(value, list) for x in value]
        return OutputTensor("embedding", "FP32", shape, flat if isinstance(flat, list) else [])
    rows = [result.embedding() for result in results]
    return OutputTensor("embedding", "FP32", shape, np.stack([row for row in rows if row is not None]))


def embedding_task(width: int = -1) -> Task:
    return Task("embedding", (TensorSpec(TEXT_INPUT, BYTES, (-1,)),), (TensorSpec("embedding", "FP32", (-1, width)),),
                {"embedding": _embeddings})


def _top(result: Result) -> list[tuple[str, float]]:
    outputs = result.outputs or {}
    top = outputs.get("top") or [[outputs.get("label"), outputs.get("score")]]
    pairs = [(str(label), float(score)) for label, score in top if label is not None and score is not None]
    if not pairs:
        raise bad_input("this model's results hold no label")
    return pairs


def classification_task(labels: tuple[str, ...] = ()) -> Task:
    index = {label: position for position, label in enumerate(labels)}

    def classes(results: list[Result], k: int, _: bool) -> OutputTensor:
        tops = [_top(result)[:k] for result in results]
        width = min(len(top) for top in tops)
        cells = [f"{score:g}:{index.get(label, -1)}:{label}".encode() for top in tops for label, score in top[:width]]
        return OutputTensor("", BYTES, (len(results), width), cells)

    def label(results: list[Result], k: int, binary: bool) -> OutputTensor:
        if k:
            return _named("label", classes(results, k, binary))
        return OutputTensor("label", BYTES, (len(results),), [_top(result)[0][0].encode() for result in results])

    def score(results: list[Result], k: int, binary: bool) -> OutputTensor:
        if k:
            return _named("score", classes(results, k, binary))
        scores = np.asarray([_top(result)[0][1] for result in results], dtype="<f4")
        return OutputTensor("score", "FP32", scores.shape, scores)

    return Task("classification", (TensorSpec(TEXT_INPUT, BYTES, (-1,)),),
                (TensorSpec("label", BYTES, (-1,)), TensorSpec("score", "FP32", (-1,))),
                {"label": label, "score": score}, labels, frozenset({"label", "score"}))


def _named(name: str, tensor: OutputTensor) -> OutputTensor:
    return OutputTensor(name, tensor.datatype, tensor.shape, tensor.data)


TASKS: dict[str, Callable[[], Task]] = {"embedding": embedding_task, "classification": classification_task}
