"""What a worker needs from a model backend, whatever runs it (ONNX Runtime, PyTorch, ...)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from models.registry import ModelManifest


Feeds = dict[str, npt.NDArray[np.int64]]


@dataclass(frozen=True)
class Chunk:
    rows: npt.NDArray[np.intp]  # positions of these rows in the caller's batch
    feeds: Feeds


@dataclass(frozen=True)
class Encoded:
    """A tokenised batch, split into sub-batches of similar length so padding stays small."""

    count: int
    chunks: list[Chunk]
    real_tokens: int
    padded_tokens: int
    lengths: tuple[int, ...] = ()
    truncated: tuple[bool, ...] = ()  # per row: cut at the model's max input length

    @property
    def padding_efficiency(self) -> float:
        """Real tokens / padded tokens computed: 1.0 means no padding at all."""
        return self.real_tokens / self.padded_tokens if self.padded_tokens else 1.0

    @classmethod
    def group(cls, rows: Sequence[Sequence[int]], bucket_size: int, pad: Callable[[Sequence[Sequence[int]]], Feeds],
              min_efficiency: float = 0.8, truncated: Sequence[bool] = (), max_tokens: int = 0) -> Encoded:
        """Sort rows by length and cut them into sub-batches of at most `bucket_size` rows,
        starting a new one whenever the next row would push padding efficiency below
        `min_efficiency`, or the sub-batch's padded tokens above `max_tokens` (0: no bound; a row
        longer than that still runs, alone); bucket_size 0: one sub-batch in the given order."""
        if not rows:
            return cls(count=0, chunks=[], real_tokens=0, padded_tokens=0)
        lengths = np.fromiter(map(len, rows), dtype=np.intp, count=len(rows))
        groups = [np.arange(len(rows))] if bucket_size <= 0 else _length_groups(lengths, bucket_size, min_efficiency, max_tokens)
        longest = [int(lengths[group].max()) for group in groups]
        # The whole batch padded once, each sub-batch cut from it: `pad` pads on the right, so the
        # first `longest` columns of a sub-batch's rows are what padding them alone would give.
        # Padding each sub-batch on its own cost a dozen numpy calls per sub-batch, 16 of them per 256 rows.
        padded_batch = pad(rows)
        chunks = [Chunk(rows=group, feeds={name: array[group, :width] for name, array in padded_batch.items()})
                  for group, width in zip(groups, longest, strict=True)]
        padded = sum(len(group) * width for group, width in zip(groups, longest, strict=True))
        return cls(count=len(rows), chunks=chunks, real_tokens=int(lengths.sum()), padded_tokens=padded,
                   lengths=tuple(lengths.tolist()), truncated=tuple(truncated))


def _length_groups(lengths: npt.NDArray[np.intp], bucket_size: int, min_efficiency: float,
                   max_tokens: int = 0) -> list[npt.NDArray[np.intp]]:
    order = np.argsort(lengths, kind="stable")
    groups: list[list[int]] = [[]]
    real = 0
    # Ascending, so the newcomer is the longest of its group: with it, the group pads to its length.
    for index, length in zip(order.tolist(), lengths[order].tolist(), strict=True):
        current = groups[-1]
        padded = length * (len(current) + 1)
        if current and (len(current) >= bucket_size or (real + length) < min_efficiency * padded
                        or 0 < max_tokens < padded):
            groups.append([])
            current, real = groups[-1], 0
        current.append(index)
        real += length
    return [np.asarray(group, dtype=np.intp) for group in groups]


@runtime_checkable
class Backend(Protocol):
    """A loaded model version on one device.

    Written for text: `encode` takes texts, `run` gives a float32 row per text. The backends of
    the other tasks (models/loading.py picks one by the manifest's task) take what their task
    parses a request into (models/tasks: a query and passages, tensors) and give one answer per
    request, whatever the task makes of it (`TaskKind.outputs`); the worker passes both through.

    `infer` is synchronous and must be safe to call from several threads at once: the
    worker runs it through `asyncio.to_thread` so the event loop keeps consuming.
    """

    manifest: ModelManifest
    device: str

    def encode(self, texts: Sequence[str]) -> Encoded:
        """Tokenise (CPU, releases the GIL); the worker overlaps it with the previous batch's run."""
        ...

    def run(self, encoded: Encoded) -> npt.NDArray[np.float32]:
        """The model on an encoded batch: one row per text, in the order given to `encode`."""
        ...

    def infer(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One float32 row per input, in input order: shape (len(texts), dim).

        Raises ValueError when the model returns a different number of rows, so a batch
        can never be answered with another request's row.
        """
        ...


def check_rows(result: npt.NDArray[np.float32], expected_rows: int, what: str) -> npt.NDArray[np.float32]:
    """Return `result` if it has one row per input, else raise ValueError saying so."""
    if result.ndim != 2 or result.shape[0] != expected_rows:
        raise ValueError(f"{what} returned shape {result.shape} for {expected_rows} inputs")
    return result


def infer_in_chunks(backend: Backend, texts: Sequence[str], chunk: int = 64) -> npt.NDArray[np.float32]:
    """`backend.infer` over any number of texts, `chunk` at a time, so no run is unbounded."""
    if not texts:
        raise ValueError("no texts to infer")
    return np.concatenate([backend.infer(texts[start:start + chunk]) for start in range(0, len(texts), chunk)])
