"""Token ids of lowercased printable-ASCII texts, put together from each word's remembered
WordPiece ids instead of running the tokenizer on every text.

A BERT tokenizer splits such a text into words (runs of letters and digits) and punctuation
marks, then WordPiece maps each of them on its own: the same word always gives the same ids,
so a text's ids are its words' ids in order, between the template's special tokens, cut at the
length limit. The tokenizer still decides every id: a word is learnt by running the tokenizer
on it. What the memo saves is the tokenizer's pipeline and its per-text objects, about three
quarters of what a short text costs; a batch's words are nearly all known after the first few
batches, as a model's traffic repeats its vocabulary.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from itertools import chain

from tokenizers import Tokenizer

# How BertPreTokenizer splits lowercased printable ASCII: a run of letters and digits is a word,
# every other character but the space (all of them ASCII punctuation) is one on its own.
PLAIN_WORDS = re.compile(r"[0-9a-z]+|[^ 0-9a-z]")
MAX_WORDS = 50_000  # ~15 MB; full, the memo starts again (a flood of made-up words can only empty it)
LEARN_PER_BATCH = 1_024  # a batch's texts with more unknown words than this go to the tokenizer
_PROBE = "a"


class WordMemo:
    """Use `of`, which says whether a tokenizer splits and maps words as this memo assumes."""

    def __init__(self, words: Tokenizer, prefix: tuple[int, ...], suffix: tuple[int, ...], room: int) -> None:
        self._words = words  # no special tokens, no truncation: a word's ids alone
        self._prefix = prefix
        self._suffix = suffix
        self._room = room  # ids a text keeps between prefix and suffix
        self._ids: dict[str, tuple[int, ...]] = {}

    @classmethod
    def of(cls, tokenizer: Tokenizer, max_length: int) -> WordMemo | None:
        """For `tokenizer` (without a normalizer: its texts come lowercased) truncating at
        `max_length`; None unless it is a BertPreTokenizer before a WordPiece model, adding special
        tokens only around the text."""
        config = json.loads(tokenizer.to_str())
        if config.get("normalizer") is not None or (config.get("pre_tokenizer") or {}).get("type") != "BertPreTokenizer" \
                or (config.get("model") or {}).get("type") != "WordPiece":
            return None
        words = Tokenizer.from_str(tokenizer.to_str())
        words.no_truncation()
        words.no_padding()
        alone = tuple(words.encode(_PROBE, add_special_tokens=False).ids)
        framed = tuple(words.encode(_PROBE).ids)
        at = next((i for i in range(len(framed) - len(alone) + 1) if framed[i:i + len(alone)] == alone), None)
        if not alone or at is None:
            return None
        prefix, suffix = framed[:at], framed[at + len(alone):]
        return cls(words, prefix, suffix, max_length - len(prefix) - len(suffix))

    def __len__(self) -> int:
        return len(self._ids)

    def rows(self, lowered: Sequence[str]) -> list[tuple[list[int], bool] | None]:
        """Per text (lowercased printable ASCII, no added token in it) its ids and whether they were
        cut at the length limit; None for a text with a word this batch could not learn."""
        split = [PLAIN_WORDS.findall(text) for text in lowered]
        known = self._ids
        unknown = list(dict.fromkeys(word for words in split for word in words if word not in known))
        if len(known) + min(len(unknown), LEARN_PER_BATCH) > MAX_WORDS:
            known.clear()  # before anything is looked up: every word of the batch is unknown again
            unknown = list(dict.fromkeys(chain.from_iterable(split)))
        if unknown:
            self._learn(unknown[:LEARN_PER_BATCH])
        complete = len(unknown) <= LEARN_PER_BATCH
        rows: list[tuple[list[int], bool] | None] = []
        prefix, suffix, room = self._prefix, self._suffix, self._room
        for words in split:
            if not complete and not all(word in known for word in words):
                rows.append(None)
                continue
            ids = list(chain(prefix, chain.from_iterable(map(known.__getitem__, words))))
            cut = len(ids) - len(prefix) > room
            if cut:
                del ids[len(prefix) + room:]
            ids += suffix
            rows.append((ids, cut))
        return rows

    def _learn(self, words: list[str]) -> None:
        # One pre-split sequence: word_ids says which word each id came from.
        encoding = self._words.encode(words, is_pretokenized=True, add_special_tokens=False)
        pieces: list[list[int]] = [[] for _ in words]
        for word, token in zip(encoding.word_ids, encoding.ids, strict=True):
            if word is not None:
                pieces[word].append(token)
        self._ids.update((word, tuple(ids)) for word, ids in zip(words, pieces, strict=True))
