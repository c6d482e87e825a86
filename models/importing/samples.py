"""Sample inputs an import checks a graph on: tokenised sentences, (query, passage) pairs, or tensors.

Every sample set hands out any subset of its rows as one batch of feeds, so the same rows can
run one at a time and in batches of 1, 3 and 8. Text rows are padded to the longest of the
batch, the way the serving side pads; tensors are stacked along axis 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from models.build.sentences import CHECK_SENTENCES
from models.importing.errors import ImportRefused

Arrays = dict[str, npt.NDArray[np.generic]]
SAMPLE_ROWS = 8
TENSOR_SAMPLE_ROWS = 64
# Free (named, non-batch) axes of a tensor input get this size in the samples.
FREE_AXIS_SIZE = 8
_SEED = 20240601


class Samples(Protocol):
    @property
    def count(self) -> int: ...

    def feeds(self, rows: Sequence[int]) -> Arrays: ...


@dataclass
class TextSamples:
    """Sentences (or sentence pairs) through the model's own tokenizer, truncated at max_length."""

    tokenizer_file: Path
    max_length: int
    input_names: Sequence[str]
    texts: Sequence[str | tuple[str, str]] = field(default_factory=lambda: check_texts(pairs=False))

    def __post_init__(self) -> None:
        self._tokenizer = Tokenizer.from_file(str(self.tokenizer_file))
        self._tokenizer.enable_truncation(max_length=self.max_length)
        self._tokenizer.no_padding()
        padding = self._tokenizer.padding or {}
        pad_token = str(padding.get("pad_token", "[PAD]"))
        pad_id = self._tokenizer.token_to_id(pad_token)
        self._pad_id = 0 if pad_id is None else pad_id

    @property
    def count(self) -> int:
        return len(self.texts)

    def feeds(self, rows: Sequence[int]) -> Arrays:
        encodings = self._tokenizer.encode_batch([self.texts[row] for row in rows])
        width = max(len(encoding.ids) for encoding in encodings)
        columns = {"input_ids": np.full((len(rows), width), self._pad_id, dtype=np.int64),
                   "attention_mask": np.zeros((len(rows), width), dtype=np.int64),
                   "token_type_ids": np.zeros((len(rows), width), dtype=np.int64)}
        for row, encoding in enumerate(encodings):
            length = len(encoding.ids)
            columns["input_ids"][row, :length] = encoding.ids
            columns["attention_mask"][row, :length] = encoding.attention_mask
            columns["token_type_ids"][row, :length] = encoding.type_ids
        return {name: columns[name] for name in self.input_names}


def check_texts(*, pairs: bool) -> list[str | tuple[str, str]]:
    """The build's check sentences: single texts, or (query, passage) pairs for a reranker."""
    sentences = list(CHECK_SENTENCES[: SAMPLE_ROWS * 2])
    if not pairs:
        return list(sentences[:SAMPLE_ROWS])
    return [(sentences[row], sentences[row + SAMPLE_ROWS]) for row in range(SAMPLE_ROWS)]


@dataclass(frozen=True)
class TensorSamples:
    """Whole tensors; a batch is a selection of their rows (axis 0)."""

    arrays: Arrays

    @property
    def count(self) -> int:
        return len(next(iter(self.arrays.values())))

    def feeds(self, rows: Sequence[int]) -> Arrays:
        selection = np.asarray(rows, dtype=np.intp)
        return {name: array[selection] for name, array in self.arrays.items()}


def random_tensors(shapes: dict[str, tuple[int | str, ...]], dtypes: dict[str, str],
                   rows: int = TENSOR_SAMPLE_ROWS) -> TensorSamples:
    """Seeded random rows for every input: normal floats, small non-negative integers, booleans."""
    rng = np.random.default_rng(_SEED)
    arrays: Arrays = {}
    for name, shape in shapes.items():
        full = (rows, *(axis if isinstance(axis, int) else FREE_AXIS_SIZE for axis in shape[1:]))
        dtype = np.dtype(dtypes[name])
        if dtype.kind == "f":
            arrays[name] = rng.standard_normal(full).astype(dtype)
        elif dtype.kind in "iu":
            arrays[name] = rng.integers(0, 4, size=full).astype(dtype)
        elif dtype.kind == "b":
            arrays[name] = rng.integers(0, 2, size=full).astype(bool)
        else:
            raise ImportRefused(f"input {name!r} has element type {dtype}: the tensor task takes numbers only")
    return TensorSamples(arrays)
