"""Token feeds for a model that reads two texts together (the semantic cache's verifier):
"[CLS] a [SEP] b [SEP]" with token types 0 and 1, padded to the longest pair of the batch.

Shared by the build (training, export, checks) and the worker that serves the verifier, so
both feed the graph the same way. No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

PAIR_INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
MAX_PAIR_TOKENS = 96  # two questions fit with room; a longer pair is cut from its longer side

PairFeeds = dict[str, npt.NDArray[np.int64]]


def pair_tokenizer(tokenizer_file: Path, max_length: int = MAX_PAIR_TOKENS) -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length)
    return tokenizer


def encode_pairs(tokenizer: Tokenizer, pairs: Sequence[tuple[str, str]]) -> PairFeeds:
    """Feeds for a batch of pairs, padded to its longest."""
    encodings = tokenizer.encode_batch(list(pairs))
    width = max((len(e.ids) for e in encodings), default=0)
    feeds = {name: np.zeros((len(encodings), width), dtype=np.int64) for name in PAIR_INPUT_NAMES}
    for row, encoding in enumerate(encodings):
        n = len(encoding.ids)
        feeds["input_ids"][row, :n] = encoding.ids
        feeds["attention_mask"][row, :n] = encoding.attention_mask
        feeds["token_type_ids"][row, :n] = encoding.type_ids
    return feeds
