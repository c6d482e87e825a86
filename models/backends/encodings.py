"""Tokenising for the text tasks that need more than token ids: sentence pairs (rerank) and
character offsets (token classification). One `tokenizers.Tokenizer` per version, truncating at
max_length; rows are padded per length group (models/backends/base.py's Encoded.group), and a
request that owns several model rows (a query's passages) is told apart by `counts`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import numpy.typing as npt
from tokenizers import Encoding, Tokenizer

from models.backends.base import Encoded, Feeds
from models.registry import ModelManifest, ModelRegistry


@dataclass(frozen=True)
class RowsOfRequests(Encoded):
    """An encoded batch whose model rows belong to requests: request i owns the `counts[i]` rows
    after those of the requests before it (a query and each of its passages, in order)."""

    counts: tuple[int, ...] = ()
    encodings: tuple[Encoding, ...] = ()  # per model row, for the offsets of its tokens


class TaskTokenizer:
    def __init__(self, tokenizer_file: str, *, max_length: int, input_names: Sequence[str]) -> None:
        self._tokenizer = Tokenizer.from_file(tokenizer_file)
        self._tokenizer.enable_truncation(max_length=max_length)
        self._tokenizer.no_padding()
        padding = self._tokenizer.padding or {}
        self._pad_id = self._tokenizer.token_to_id(str(padding.get("pad_token", "[PAD]"))) or 0
        self._input_names = tuple(input_names)
        self._lock = threading.Lock()  # the Rust tokenizer is shared mutable state
        self.max_length = max_length

    @classmethod
    def of(cls, registry: ModelRegistry, manifest: ModelManifest, max_input_tokens: int) -> TaskTokenizer:
        if manifest.tokenizer_file is None or manifest.max_length is None:
            raise ValueError(f"{manifest.id} is a {manifest.task} model: it has no tokenizer")
        return cls(str(registry.path_of(manifest, manifest.tokenizer_file)),
                   max_length=min(max_input_tokens, manifest.max_length),
                   input_names=[spec.name for spec in manifest.inputs])

    def encode(self, texts: Sequence[str | tuple[str, str]], counts: Sequence[int], bucket_size: int,
               max_tokens: int = 0) -> RowsOfRequests:
        """Rows (texts, or (query, passage) pairs) grouped by length, at most `bucket_size` rows and
        `max_tokens` padded tokens a run (0: no bound); `counts`: rows per request."""
        with self._lock:
            encodings = self._tokenizer.encode_batch(list(texts))
        rows = [encoding.ids for encoding in encodings]
        truncated = [bool(encoding.overflowing) for encoding in encodings]
        encoded = Encoded.group(rows, bucket_size, lambda _rows: self.feeds(encodings), truncated=truncated,
                                max_tokens=max_tokens)
        per_request, start = [], 0
        for count in counts:
            per_request.append(any(truncated[start:start + count]))
            start += count
        return RowsOfRequests(count=encoded.count, chunks=encoded.chunks, real_tokens=encoded.real_tokens,
                              padded_tokens=encoded.padded_tokens, lengths=encoded.lengths,
                              truncated=tuple(per_request), counts=tuple(counts), encodings=tuple(encodings))

    def feeds(self, encodings: Sequence[Encoding]) -> Feeds:
        """The model's inputs for every row, padded on the right to the longest."""
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.intp, count=len(encodings))
        present = np.arange(int(lengths.max())) < lengths[:, None]
        total = int(lengths.sum())
        ids = np.full(present.shape, self._pad_id, dtype=np.int64)
        ids[present] = np.fromiter(chain.from_iterable(e.ids for e in encodings), dtype=np.int64, count=total)
        types = np.zeros_like(ids)
        types[present] = np.fromiter(chain.from_iterable(e.type_ids for e in encodings), dtype=np.int64, count=total)
        columns: dict[str, npt.NDArray[np.int64]] = {"input_ids": ids, "attention_mask": present.astype(np.int64),
                                                     "token_type_ids": types}
        return {name: columns[name] for name in self._input_names}
