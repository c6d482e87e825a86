"""What both backends share: one tokenizer (so ONNX Runtime and torch see identical token
ids and padding), length-aware sub-batches, `infer`, and the shapes a warm-up runs."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Sequence
from itertools import chain
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tokenizers import Encoding, Tokenizer

from models.backends.base import Encoded, Feeds
from models.backends.word_memo import Row, WordMemo
from models.registry import ModelManifest, ModelRegistry

WARMUP_TOKENS = (8, 32, 128)
WARMUP_TOKEN_ID = 101  # [CLS]: any real id does; the shapes are what warm-up is for

# Inputs the tokenizer can produce, by the names BERT-style graphs use.
_TOKENIZER_FIELDS = ("input_ids", "attention_mask", "token_type_ids")


class BatchTokenizer:
    """A `tokenizers.Tokenizer` set up to truncate to `max_length`; rows are padded per sub-batch.

    Padding to the longest of a sub-batch (not to a fixed length, as the shipped
    tokenizer.json says) keeps short-query batches cheap. The graph pools over
    attention_mask, so padding never changes an embedding.
    """

    def __init__(self, tokenizer_file: Path, max_length: int, input_names: Sequence[str]) -> None:
        unknown = [name for name in input_names if name not in _TOKENIZER_FIELDS]
        if unknown:
            raise ValueError(f"model inputs {unknown} are not produced by a tokenizer")
        self._input_names = tuple(input_names)
        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        padding = self._tokenizer.padding or {}
        pad_token = str(padding.get("pad_token", "[PAD]"))
        pad_id = self._tokenizer.token_to_id(pad_token)
        if pad_id is None:
            raise ValueError(f"{tokenizer_file}: pad token {pad_token!r} is not in the vocabulary")
        self._tokenizer.enable_truncation(max_length=max_length)
        self._tokenizer.no_padding()
        self._plain_ascii = _without_bert_normalizer(self._tokenizer)
        self._memo = WordMemo.of(self._plain_ascii, max_length) if self._plain_ascii is not None else None
        self._added = _added_tokens(self._tokenizer)
        self._unknown_id = unknown_token_id(self._tokenizer)
        self._special_count = len(self._tokenizer.encode("").ids)  # what the post-processor adds to every text
        self._pad_id = pad_id
        # The Rust tokenizer is shared mutable state behind the Python object; one lock makes
        # concurrent `infer` calls safe for a cost of milliseconds next to the model run.
        self._lock = threading.Lock()
        self.max_length = max_length

    @classmethod
    def of(cls, registry: ModelRegistry, manifest: ModelManifest, max_input_tokens: int) -> BatchTokenizer:
        """The version's own tokenizer, truncating at `max_input_tokens` or the manifest's max_length,
        whichever is shorter: the model's position table ends there."""
        if manifest.tokenizer_file is None or manifest.max_length is None:
            raise ValueError(f"{manifest.id} is a {manifest.task} model: it has no tokenizer")
        return cls(registry.path_of(manifest, manifest.tokenizer_file),
                   max_length=min(max_input_tokens, manifest.max_length),
                   input_names=[spec.name for spec in manifest.inputs])

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Truncated token ids per text, unpadded: padding is decided per sub-batch."""
        return self.token_rows(texts)[0]

    def token_rows(self, texts: Sequence[str]) -> tuple[list[list[int]], list[bool]]:
        """Token ids per text and whether each text was cut at max_length."""
        texts = list(texts)
        # The printable-ASCII texts, lowercased: the plain path's, and the memo's.
        lowered = {i: text.lower() for i, text in enumerate(texts) if text.isascii() and text.isprintable()} \
            if self._plain_ascii is not None else {}
        if self._added is not None:
            # "[CLS]" typed in a text is the special token to the full tokenizer, and not to the plain path.
            lowered = {i: text for i, text in lowered.items() if not self._added.search(text)}
        rows: list[Row | None] = [None] * len(texts)
        with self._lock:
            if self._memo is not None and lowered:
                for i, row in zip(lowered, self._memo.rows(list(lowered.values())), strict=True):
                    rows[i] = row
            plain = [i for i in lowered if rows[i] is None]
            if plain and self._plain_ascii is not None:
                # Without character offsets, which nothing here reads: a sixth less CPU per text.
                self._fill(rows, plain, self._plain_ascii.encode_batch_fast([lowered[i] for i in plain]))
            rest = [i for i, row in enumerate(rows) if row is None]
            if rest:
                self._fill(rows, rest, self._tokenizer.encode_batch_fast([texts[i] for i in rest]))
        done = [row for row in rows if row is not None]
        return [ids for ids, _ in done], [cut for _, cut in done]

    def unknown_shares(self, texts: Sequence[str]) -> list[float]:
        """Per text, the share of its tokens that are the unknown token: the words the model cannot
        see. 0.0 for an empty text and for a vocabulary with no unknown token (byte-level BPE)."""
        return self.unknown_shares_of(self.token_rows(texts)[0])

    def unknown_shares_of(self, rows: Sequence[Sequence[int]]) -> list[float]:
        """`unknown_shares` of rows this tokenizer made (special tokens are not counted)."""
        if self._unknown_id is None:
            return [0.0] * len(rows)
        unknown, specials = self._unknown_id, self._special_count
        return [list(ids).count(unknown) / (len(ids) - specials) if len(ids) > specials else 0.0 for ids in rows]

    def encode_reading(self, texts: Sequence[str], bucket_size: int) -> tuple[Encoded, list[float]]:
        """`encode`, and the unknown shares of the very same token ids: one tokenisation for both."""
        if isinstance(texts, str):
            raise TypeError("encode takes a sequence of texts, not a single string")
        rows, truncated = self.token_rows(texts)
        return Encoded.group(rows, bucket_size, self.feeds, truncated=truncated), self.unknown_shares_of(rows)

    @staticmethod
    def _fill(rows: list[Row | None], at: list[int], encodings: list[Encoding]) -> None:
        for i, encoding in zip(at, encodings, strict=True):
            rows[i] = (encoding.ids, bool(encoding.overflowing))

    def encode(self, texts: Sequence[str], bucket_size: int) -> Encoded:
        """Tokenise and group rows of similar length into sub-batches (see Encoded.group)."""
        if isinstance(texts, str):
            # A bare string is a Sequence[str] too and would embed each character.
            raise TypeError("encode takes a sequence of texts, not a single string")
        rows, truncated = self.token_rows(texts)
        return Encoded.group(rows, bucket_size, self.feeds, truncated=truncated)

    def feeds(self, rows: Sequence[Sequence[int]]) -> dict[str, npt.NDArray[np.int64]]:
        """The model's input arrays for `rows`, padded to the longest of them."""
        lengths = np.fromiter(map(len, rows), dtype=np.intp, count=len(rows))
        present = np.arange(int(lengths.max())) < lengths[:, None]  # row-major: the rows' tokens in order
        ids = np.full(present.shape, self._pad_id, dtype=np.int64)
        ids[present] = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
        columns = {"input_ids": ids, "attention_mask": present.astype(np.int64), "token_type_ids": np.zeros_like(ids)}
        return {name: columns[name] for name in self._input_names}


def _added_tokens(tokenizer: Tokenizer) -> re.Pattern[str] | None:
    """Finds the tokenizer's added tokens ("[CLS]", "[MASK]", ...) in a lowercased text, whatever
    their case was; None when it has none."""
    contents = sorted({token.content.lower() for token in tokenizer.get_added_tokens_decoder().values()})
    return re.compile("|".join(map(re.escape, contents))) if contents else None


def unknown_token_id(tokenizer: Tokenizer) -> int | None:
    """The id of the vocabulary's unknown token ("[UNK]", "<unk>"), or None where it has none."""
    model = json.loads(tokenizer.to_str())["model"]
    if isinstance(model.get("unk_id"), int):  # Unigram (SentencePiece)
        return int(model["unk_id"])
    token = model.get("unk_token")
    return tokenizer.token_to_id(token) if isinstance(token, str) else None


def _without_bert_normalizer(tokenizer: Tokenizer) -> Tokenizer | None:
    """The tokenizer without its normalizer, where that is a lowercasing BertNormalizer; else None.

    On printable ASCII text such a normalizer only lowercases: there are no control characters
    to clean, no accents to strip, no CJK characters to space out. `str.lower` does that in a
    fraction of what the normalizer costs (about 12 of 31 us per short text, tracking every
    character's alignment), and the ids come out the same (tests/unit/models/test_tokenizer.py).
    """
    config = json.loads(tokenizer.to_str())
    normalizer = config.get("normalizer") or {}
    if normalizer.get("type") != "BertNormalizer" or not normalizer.get("lowercase"):
        return None
    config["normalizer"] = None
    return Tokenizer.from_str(json.dumps(config))  # truncation and padding travel in the config


class TokenizedBackend:
    """The part of a backend that is not the runtime: subclasses add `run` and `warm_up`."""

    def __init__(self, manifest: ModelManifest, tokenizer: BatchTokenizer, device: str, *,
                 length_bucket_size: int = 16) -> None:
        self.manifest = manifest
        self.device = device
        self.length_bucket_size = length_bucket_size
        self._tokenizer = tokenizer

    @property
    def embedding_dim(self) -> int:
        return self.manifest.embedding_dim

    @property
    def max_input_tokens(self) -> int:
        return self._tokenizer.max_length

    def encode(self, texts: Sequence[str]) -> Encoded:
        return self._tokenizer.encode(texts, self.length_bucket_size)

    def unknown_shares(self, texts: Sequence[str]) -> list[float]:
        return self._tokenizer.unknown_shares(texts)

    def infer_reading(self, texts: Sequence[str]) -> tuple[npt.NDArray[np.float32], list[float]]:
        """`infer`, and each text's share of tokens unknown to the model, from the same tokenisation."""
        encoded, shares = self._tokenizer.encode_reading(texts, self.length_bucket_size)
        return self.run(encoded), shares

    def run(self, encoded: Encoded) -> npt.NDArray[np.float32]:
        raise NotImplementedError

    def infer(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.run(self.encode(texts))

    def warm_up_feeds(self) -> Iterator[Feeds]:
        """The common shapes: one row and a full sub-batch, at short, medium and long lengths."""
        rows = max(self.length_bucket_size, 1)
        for tokens in WARMUP_TOKENS:
            length = min(tokens, self.max_input_tokens)
            for count in (1, rows):
                yield self._tokenizer.feeds([[WARMUP_TOKEN_ID] * length] * count)
