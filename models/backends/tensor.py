"""ONNX Runtime backend for `tensor` models: named tensors in, named tensors out.

A batch is the requests' rows stacked along the first axis. Requests whose other axes differ
cannot share a stack, so they are grouped by those axes (and dtype) first; each group is one
session run, cut into runs of at most `max_rows` rows. Every request gets back its own rows of
every output, in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from models.backends.base import Chunk, Encoded
from models.backends.onnx import open_version_session
from models.backends.options import RuntimeOptions
from models.registry import ModelManifest, ModelRegistry
from schemas.task_inputs import TensorInput

TensorAnswer = dict[str, npt.NDArray[Any]]
MAX_ROWS_PER_RUN = 1024


@dataclass(frozen=True)
class StackedRows(Encoded):
    """A tensor batch: request i owns `counts[i]` rows of its chunk's stacked inputs. No tokens:
    `lengths`, `real_tokens` and `padded_tokens` stay empty, so no token metric counts rows."""

    counts: tuple[int, ...] = ()


def _shape_key(item: TensorInput) -> tuple[tuple[str, str, tuple[int, ...]], ...]:
    return tuple((name, array.dtype.str, tuple(array.shape[1:])) for name, array in sorted(item.arrays.items()))


def stack_groups(items: Sequence[TensorInput], max_rows: int = MAX_ROWS_PER_RUN) -> StackedRows:
    """Requests grouped by their non-batch axes, each group's inputs concatenated along axis 0.
    `counts` holds each request's row count, so a run can hand the rows back."""
    groups: dict[Any, list[list[int]]] = {}
    for index, item in enumerate(items):
        runs = groups.setdefault(_shape_key(item), [[]])
        if runs[-1] and sum(items[i].rows for i in runs[-1]) + item.rows > max_rows:
            runs.append([])
        runs[-1].append(index)
    chunks = []
    for runs in groups.values():
        for run in runs:
            names = items[run[0]].arrays.keys()
            feeds = {name: np.concatenate([items[i].arrays[name] for i in run]) for name in names}
            chunks.append(Chunk(rows=np.asarray(run, dtype=np.intp), feeds=feeds))
    return StackedRows(count=len(items), chunks=chunks, real_tokens=0, padded_tokens=0,
                       counts=tuple(item.rows for item in items))


class OnnxTensorBackend:
    """A registered tensor model version served by ONNX Runtime (any graph the manifest describes)."""

    def __init__(self, manifest: ModelManifest, session: ort.InferenceSession, device: str) -> None:
        self.manifest = manifest
        self.device = device
        self._session = session
        self._outputs = [spec.name for spec in manifest.outputs]

    @classmethod
    def load(cls, registry: ModelRegistry, manifest: ModelManifest,
             options: RuntimeOptions = RuntimeOptions()) -> OnnxTensorBackend:
        session = open_version_session(registry, manifest, options)
        return cls(manifest, session, options.device)

    def encode(self, items: Sequence[TensorInput]) -> StackedRows:
        return stack_groups(items)

    def run(self, encoded: StackedRows) -> list[TensorAnswer]:
        """Each request's rows of every output, in the order the requests were given."""
        answers: list[TensorAnswer | None] = [None] * encoded.count
        for chunk in encoded.chunks:
            results = self._session.run(self._outputs, chunk.feeds)
            counts = [encoded.counts[row] for row in chunk.rows.tolist()]
            total = sum(counts)
            for name, result in zip(self._outputs, results, strict=True):
                if np.ndim(result) == 0 or np.shape(result)[0] != total:
                    raise ValueError(f"{self.manifest.id}: output {name} has shape {np.shape(result)} for "
                                     f"{total} rows of input")
            start = 0
            for row, count in zip(chunk.rows.tolist(), counts, strict=True):
                answers[row] = {name: np.asarray(result[start:start + count])
                                for name, result in zip(self._outputs, results, strict=True)}
                start += count
        assert all(answer is not None for answer in answers)  # every row is in exactly one chunk
        return answers  # type: ignore[return-value]

    def infer(self, items: Sequence[TensorInput]) -> list[TensorAnswer]:
        return self.run(self.encode(items))
