"""e5-embed's tokenizer, on a tiny vocabulary: the compiled normalisation map does what the map
says, and the post-processor's "query: " is exactly tokenising "query: " + text."""

import pytest
from tokenizers import Tokenizer

from models.build.e5_charsmap import compile_charsmap, verify_charsmap
from models.build.e5_tokenizer import build_tokenizer, prefix_mismatches
from models.build.e5_weights import E5Vocabulary

MAP = {0x7: "", 0x3000: " ", 0xFF21: "A", 0x2460: "1"}
PIECES = ["<s>", "<pad>", "</s>", "<unk>", "\u2581", "\u2581que", "ry", ":", "\u2581hello", "\u2581今天", "A", "1",
          "h", "e", "l", "o", "q", "u", "r", "y"]


@pytest.fixture(scope="module")
def charsmap() -> bytes:
    return compile_charsmap(MAP)


@pytest.fixture(scope="module")
def tokenizer(charsmap: bytes) -> Tokenizer:
    vocabulary = E5Vocabulary(pieces=tuple((piece, -float(i)) for i, piece in enumerate(PIECES)),
                              bos_id=0, eos_id=2, pad_id=1, unk_id=3)
    return build_tokenizer(vocabulary, charsmap, max_length=16)


def test_the_compiled_charsmap_does_what_the_map_says_on_every_codepoint(charsmap: bytes) -> None:
    verify_charsmap(charsmap, MAP)


def test_a_wrong_charsmap_is_caught(charsmap: bytes) -> None:
    with pytest.raises(ValueError, match="differs"):
        verify_charsmap(charsmap, {**MAP, 0xFF21: "B"})


def test_the_prefix_is_the_tokens_of_query_colon(tokenizer: Tokenizer) -> None:
    assert tokenizer.encode("hello").tokens == ["<s>", "\u2581que", "ry", ":", "\u2581hello", "</s>"]


def test_templated_ids_equal_tokenising_the_prefixed_text(tokenizer: Tokenizer) -> None:
    texts = ["hello", " hello", "hello\u3000\u3000hello", "\x07hello", "今天", "Ａ①", "zz", " "]
    assert prefix_mismatches(tokenizer, texts) == []


def test_only_an_empty_text_differs_by_the_prefix_s_trailing_space(tokenizer: Tokenizer) -> None:
    # "query: " alone ends in a lone metaspace; with nothing after the prefix the template has none.
    assert prefix_mismatches(tokenizer, ["", "\x07"]) == ["", "\x07"]
    assert tokenizer.encode("").tokens == ["<s>", "\u2581que", "ry", ":", "</s>"]


def test_unknown_characters_are_the_unknown_id(tokenizer: Tokenizer) -> None:
    assert 3 in tokenizer.encode("zz", add_special_tokens=False).ids


def test_the_pair_template_gives_each_text_its_prefix_and_the_second_its_token_type(tokenizer: Tokenizer) -> None:
    from models.build.e5_tokenizer import with_pair_template

    single = tokenizer.encode("hello").ids
    paired = with_pair_template(Tokenizer.from_str(tokenizer.to_str()))
    encoding = paired.encode("hello", "今天")
    assert encoding.tokens == ["<s>", "\u2581que", "ry", ":", "\u2581hello", "</s>",
                               "\u2581que", "ry", ":", "\u2581今天", "</s>"]
    assert encoding.type_ids == [0] * 6 + [1] * 5
    assert paired.encode("hello").ids == single, "one text is tokenised as before"
