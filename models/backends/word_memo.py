"""Token ids of lowercased printable-ASCII texts, put together from the remembered WordPiece ids
of their space-separated pieces instead of running the tokenizer on every text.

A BERT tokenizer splits such a text at its spaces, splits each piece again before and after every
punctuation mark, then maps each part with WordPiece on its own: the same space-free piece ("reset",
"password?") always gives the same ids, so a text's ids are its pieces' ids in order, between the
template's special tokens, cut at the length limit. The tokenizer still decides every id: a piece
is learnt by running the tokenizer on it. What the memo saves is the tokenizer's pipeline and its
per-text objects, about three quarters of what a short text costs; a batch's pieces are nearly all
known after the first few batches, as a model's traffic repeats its vocabulary.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import chain

from tokenizers import Tokenizer

MAX_PIECES = 32_768  # ~24 MB full of words, ~36 MB of punctuation runs; full, the memo starts again
MAX_PIECE_CHARS = 24  # longer pieces are not learnt (their texts go to the tokenizer): ids are at most this many
LEARN_PER_BATCH = 256  # new pieces learnt a batch, first come; texts with a piece past them go to the tokenizer
Row = tuple[list[int], bool]  # a text's ids, and whether they were cut at the length limit
_PROBE = "a"


class WordMemo:
    """Use `of`, which says whether a tokenizer splits and maps text as this memo assumes."""

    def __init__(self, piece_tokenizer: Tokenizer, prefix: tuple[int, ...], suffix: tuple[int, ...], room: int) -> None:
        self._piece_tokenizer = piece_tokenizer  # no special tokens, no truncation: a piece's ids alone
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
        piece_tokenizer = Tokenizer.from_str(tokenizer.to_str())
        piece_tokenizer.no_truncation()
        piece_tokenizer.no_padding()
        alone = tuple(piece_tokenizer.encode(_PROBE, add_special_tokens=False).ids)
        framed = tuple(piece_tokenizer.encode(_PROBE).ids)
        at = next((i for i in range(len(framed) - len(alone) + 1) if framed[i:i + len(alone)] == alone), None)
        if not alone or at is None:
            return None
        prefix, suffix = framed[:at], framed[at + len(alone):]
        room = max_length - len(prefix) - len(suffix)
        # Below its special tokens' length the tokenizer does not truncate at all; not worth copying.
        return cls(piece_tokenizer, prefix, suffix, room) if room >= 0 else None

    def __len__(self) -> int:
        return len(self._ids)

    def rows(self, lowered: Sequence[str]) -> list[Row | None]:
        """Per text (lowercased printable ASCII, no added token in it) its ids and whether they were
        cut at the length limit; None for a text with a piece this batch could not learn (past
        LEARN_PER_BATCH new pieces, or longer than MAX_PIECE_CHARS)."""
        # Printable ASCII has no whitespace but the space: str.split() cuts where the tokenizer does.
        split = [text.split() for text in lowered]
        rows = [self._row(pieces) for pieces in split]
        missing = [i for i, row in enumerate(rows) if row is None]
        if not missing:
            return rows
        known = self._ids
        unknown = list(dict.fromkeys(piece for i in missing for piece in split[i]
                                     if piece not in known and len(piece) <= MAX_PIECE_CHARS))
        if len(known) + min(len(unknown), LEARN_PER_BATCH) > MAX_PIECES:
            known.clear()
            unknown = list(dict.fromkeys(piece for piece in chain.from_iterable(split[i] for i in missing)
                                         if len(piece) <= MAX_PIECE_CHARS))
        if unknown:
            self._learn(unknown[:LEARN_PER_BATCH])
        for i in missing:
            rows[i] = self._row(split[i])
        return rows

    def _row(self, pieces: list[str]) -> Row | None:
        ids = list(self._prefix)
        get = self._ids.get
        for piece in pieces:
            piece_ids = get(piece)
            if piece_ids is None:
                return None
            ids += piece_ids
        cut = len(ids) - len(self._prefix) > self._room
        if cut:
            del ids[len(self._prefix) + self._room:]
        ids += self._suffix
        return ids, cut

    def _learn(self, pieces: list[str]) -> None:
        # One pre-split sequence: word_ids says which of the pieces each id came from.
        encoding = self._piece_tokenizer.encode(pieces, is_pretokenized=True, add_special_tokens=False)
        ids: list[list[int]] = [[] for _ in pieces]
        for piece, token in zip(encoding.word_ids, encoding.ids, strict=True):
            if piece is not None:
                ids[piece].append(token)
        self._ids.update((piece, tuple(piece_ids)) for piece, piece_ids in zip(pieces, ids, strict=True))
