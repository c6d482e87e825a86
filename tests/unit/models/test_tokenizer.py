"""BatchTokenizer's printable-ASCII path and its word memo give the ids the version's full tokenizer gives."""

import random
import string

import pytest
from tokenizers import Tokenizer

from models.backends import word_memo
from models.backends.tokenized import BatchTokenizer
from tests.built_models import built_registry, resolve_or_skip

MAX_LENGTH = 32
AWKWARD = [
    "", " ", "   leading and trailing   ", "Where IS my Parcel?!", "reset my password... (again)",
    "tabs\tand\nnewlines\r\nhere", "a\x00nul and \x07bell and \x7fdel", "café déjà vu", "naïve ÀÉÎÕÜ",
    "中文字符 mixed with English", "emoji 🙂 in text", "non\u00a0breaking\u2003spaces", "zero\u200bwidth",
    "soft\u00adhyphen", "e\u0301 combining accent", "ﬁ ligature", "Ⅻ roman numeral", "ß straße STRASSE",
    "İstanbul ǅ titlecase", "x" * 500, " ".join(["word"] * 100), "don't won't can't", "$100 & 50% off #1",
    "hello [CLS] world", "[MASK]", "x [sep] y", "[Pad]ding", "[UNK] and [unk]", "a" * 101 + " b", "a" * 100,
]
WORDS = ["the", "parcel", "unbelievably", "refund", "reset", "password", "x", "42", "e-mail", "co-op", "ok?!",
         "pneumonoultramicroscopic", "zzqxj", "don't", "(again)", "#1", "$100"]


@pytest.fixture(scope="module")
def tokenizers() -> tuple[BatchTokenizer, Tokenizer]:
    registry = built_registry()
    manifest = resolve_or_skip(registry, "fp32")
    path = registry.path_of(manifest, manifest.tokenizer_file)
    reference = Tokenizer.from_file(str(path))
    reference.enable_truncation(max_length=MAX_LENGTH)
    reference.no_padding()
    ours = BatchTokenizer(path, max_length=MAX_LENGTH, input_names=[spec.name for spec in manifest.inputs])
    return ours, reference


def random_texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    alphabet = string.printable + "éüßÅ中🙂\u00a0\u200b\x00\x1b"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))) for _ in range(count)]


def word_texts(count: int, seed: int) -> list[str]:
    """Texts of known words, some of them longer than MAX_LENGTH tokens, some exactly as long."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 40))) for _ in range(count)] + \
        [" ".join(["word"] * (MAX_LENGTH - 2 + extra)) for extra in (-1, 0, 1)]


@pytest.mark.parametrize("texts", [AWKWARD, random_texts(400, seed=1), random_texts(400, seed=2), word_texts(300, seed=3)],
                         ids=["awkward", "random-1", "random-2", "words"])
def test_ids_and_truncation_match_the_full_tokenizer(tokenizers: tuple[BatchTokenizer, Tokenizer],
                                                     texts: list[str]) -> None:
    ours, reference = tokenizers
    ids, truncated = ours.token_rows(texts)
    expected = reference.encode_batch(texts)
    assert ids == [encoding.ids for encoding in expected]
    assert truncated == [bool(encoding.overflowing) for encoding in expected]


def test_the_fast_path_is_taken_for_printable_ascii(tokenizers: tuple[BatchTokenizer, Tokenizer]) -> None:
    """Guards the point of the path: a lowercasing BertNormalizer is recognised and dropped."""
    ours, _ = tokenizers
    assert ours._plain_ascii is not None and ours._plain_ascii.normalizer is None


def test_the_word_memo_gives_the_same_ids_cold_and_warm(tokenizers: tuple[BatchTokenizer, Tokenizer]) -> None:
    _, reference = tokenizers
    ours = fresh_tokenizer()
    texts = word_texts(200, seed=4) + AWKWARD
    expected = reference.encode_batch(texts)
    for _ in range(2):
        ids, truncated = ours.token_rows(texts)
        assert ids == [encoding.ids for encoding in expected]
        assert truncated == [bool(encoding.overflowing) for encoding in expected]
    assert ours._memo is not None and len(ours._memo) >= len(WORDS)
    assert ours._memo._ids and all(len(piece) <= word_memo.MAX_PIECE_CHARS for piece in ours._memo._ids)


def test_a_batch_with_more_new_words_than_the_memo_learns_still_matches(
        tokenizers: tuple[BatchTokenizer, Tokenizer], monkeypatch: pytest.MonkeyPatch) -> None:
    """Past LEARN_PER_BATCH new pieces, texts with pieces left unlearnt go to the tokenizer; past
    MAX_PIECES the memo starts again. Neither changes an id."""
    _, reference = tokenizers
    monkeypatch.setattr(word_memo, "LEARN_PER_BATCH", 7)
    monkeypatch.setattr(word_memo, "MAX_PIECES", 20)
    ours = fresh_tokenizer()
    rng = random.Random(5)
    for _ in range(6):
        texts = [" ".join("".join(rng.choice("abcdefg?!.-") for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(0, 6)))
                 for _ in range(30)]
        ids, truncated = ours.token_rows(texts)
        expected = reference.encode_batch(texts)
        assert ids == [encoding.ids for encoding in expected]
        assert truncated == [bool(encoding.overflowing) for encoding in expected]
        assert ours._memo is not None and 0 < len(ours._memo) <= 20


def test_known_texts_are_served_by_the_memo_alone(tokenizers: tuple[BatchTokenizer, Tokenizer]) -> None:
    """Guards the point of the memo: once it knows a batch's pieces, the tokenizer is not run."""
    _, reference = tokenizers
    ours = fresh_tokenizer()
    texts = word_texts(100, seed=6)
    ours.token_rows(texts)
    ours._plain_ascii = _Refuses()  # type: ignore[assignment]
    ours._tokenizer = _Refuses()  # type: ignore[assignment]
    ids, truncated = ours.token_rows(texts)
    expected = reference.encode_batch(texts)
    assert ids == [encoding.ids for encoding in expected]
    assert truncated == [bool(encoding.overflowing) for encoding in expected]


def test_no_memo_below_the_special_tokens_length() -> None:
    """max_length 1 leaves no room for [CLS] and [SEP]: the tokenizer then does not truncate, the memo stays out."""
    registry = built_registry()
    manifest = resolve_or_skip(registry, "fp32")
    ours = BatchTokenizer(registry.path_of(manifest, manifest.tokenizer_file), max_length=1,
                          input_names=[spec.name for spec in manifest.inputs])
    reference = Tokenizer.from_file(str(registry.path_of(manifest, manifest.tokenizer_file)))
    reference.enable_truncation(max_length=1)
    reference.no_padding()
    texts = ["", "a b", "reset my password?"]
    expected = reference.encode_batch(texts)
    assert ours._memo is None
    assert ours.token_rows(texts) == ([e.ids for e in expected], [bool(e.overflowing) for e in expected])


class _Refuses:
    def encode_batch_fast(self, texts: list[str]) -> list[object]:
        raise AssertionError(f"the tokenizer ran on {len(texts)} texts")


def fresh_tokenizer() -> BatchTokenizer:
    registry = built_registry()
    manifest = resolve_or_skip(registry, "fp32")
    return BatchTokenizer(registry.path_of(manifest, manifest.tokenizer_file), max_length=MAX_LENGTH,
                          input_names=[spec.name for spec in manifest.inputs])


def test_unknown_shares_count_the_words_the_vocabulary_cannot_read(tokenizers: tuple[BatchTokenizer, Tokenizer]) -> None:
    ours, reference = tokenizers
    english, weather, refund, mixed, empty = ours.unknown_shares(
        ["How do I reset my password?", "今天天气怎么样", "如何退款", "refund 如何退款 order 123", ""])
    assert english == 0.0 and empty == 0.0
    unk = reference.token_to_id("[UNK]")
    ids = reference.encode("如何退款", add_special_tokens=False).ids
    assert refund == ids.count(unk) / len(ids) > 0.5, "MiniLM reads most Chinese characters as [UNK]"
    assert weather > 0.5
    assert 0.0 < mixed < refund


def test_encoding_while_reading_gives_the_encoders_rows_and_the_unknown_shares_of_those_same_ids(
        tokenizers: tuple[BatchTokenizer, Tokenizer]) -> None:
    ours, _ = tokenizers
    texts = ["How do I reset my password?", "今天天气怎么样", "refund 如何退款 order 123", ""]
    encoded, shares = ours.encode_reading(texts, bucket_size=16)
    plain = ours.encode(texts, bucket_size=16)
    assert shares == ours.unknown_shares(texts)
    assert encoded.lengths == plain.lengths and encoded.truncated == plain.truncated
    assert shares[0] == 0.0 and shares[1] > 0.5 and shares[3] == 0.0
