"""Accuracy checks a version must pass before it is registered.

FP32: the ONNX graph must reproduce sentence-transformers' own embeddings (an independent
implementation of pooling and normalisation, with its own tokenizer wrapper) to 1e-4, and so
must the PyTorch artifacts stored with the version, run the way the torch backend runs them.
INT8: the quantised graph's embeddings must point where the FP32 ones do, mean cosine
>= 0.98 (the min is recorded too, so a single outlier sentence is visible).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from pathlib import Path

import numpy as np
import numpy.typing as npt

from models.backends.base import Feeds
from models.backends.onnx import open_session
from models.backends.tokenized import BatchTokenizer
from models.registry import AccuracyCheck

if TYPE_CHECKING:
    from transformers import PreTrainedModel

FP32_MAX_ABS_DIFF = 1e-4
INT8_MIN_MEAN_COSINE = 0.98

Embeddings = npt.NDArray[np.float32]


def reference_embeddings(model_dir: Path, sentences: Sequence[str]) -> Embeddings:
    """all-MiniLM-L6-v2 in PyTorch via sentence-transformers, from the package folder."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    rows = model.encode(list(sentences), batch_size=len(sentences), convert_to_numpy=True, show_progress_bar=False)
    return np.asarray(rows, dtype=np.float32)


@dataclass(frozen=True)
class TextBatches:
    """Texts cut into batches and tokenised exactly the way the serving backend does (same tokenizer setup)."""

    tokenizer_file: Path
    max_length: int
    input_names: Sequence[str]
    sentences: Sequence[str]
    batch_size: int

    def feeds(self) -> Iterator[Feeds]:
        tokenizer = BatchTokenizer(self.tokenizer_file, max_length=self.max_length, input_names=self.input_names)
        for start in range(0, len(self.sentences), self.batch_size):
            yield tokenizer.feeds(tokenizer.token_ids(self.sentences[start : start + self.batch_size]))


def onnx_embeddings(onnx_path: Path, texts: TextBatches) -> Embeddings:
    """Run a graph on CPU the way the serving backend does."""
    session = open_session(onnx_path, device="cpu", intra_op_threads=0)
    return np.concatenate([np.asarray(session.run(None, feeds)[0], dtype=np.float32) for feeds in texts.feeds()])


def torch_embeddings(config_file: Path, weights_file: Path, texts: TextBatches) -> Embeddings:
    """Run stored PyTorch artifacts exactly the way the torch backend does, on CPU (FP32)."""
    import torch

    from models.backends.torch_backend import load_encoder

    model = load_encoder(config_file, weights_file, device=torch.device("cpu"), dtype=torch.float32)
    return encoder_embeddings(model, texts)


def encoder_embeddings(model: PreTrainedModel, texts: TextBatches) -> Embeddings:
    """A loaded transformers encoder, run as the torch backend runs it: mean pooled, normalised, FP32."""
    import torch

    from models.backends.torch_backend import mean_pool_normalize

    batches: list[Embeddings] = []
    with torch.inference_mode():
        for feeds in texts.feeds():
            tensors = {name: torch.from_numpy(array) for name, array in feeds.items()}
            hidden = model(**tensors).last_hidden_state
            batches.append(mean_pool_normalize(hidden, tensors["attention_mask"]).numpy().astype(np.float32))
    return np.concatenate(batches)


def check_fp32_matches_reference(
    onnx_runs: Sequence[Embeddings], reference: Embeddings, torch_run: Embeddings | None = None
) -> AccuracyCheck:
    """Worst element-wise difference over several ONNX runs (batched/padded and one-by-one)
    and, when the version stores PyTorch artifacts, their run too."""
    differences = [float(np.max(np.abs(run - reference))) for run in onnx_runs]
    figures = {"sentences": float(len(reference)), "max_abs_diff_batched": differences[0]}
    if torch_run is not None:
        figures["max_abs_diff_torch_artifacts"] = float(np.max(np.abs(torch_run - reference)))
        figures["min_cosine_torch_vs_onnx"] = float(row_cosines(torch_run, onnx_runs[0]).min())
        differences.append(figures["max_abs_diff_torch_artifacts"])
    return AccuracyCheck.evaluate(
        name="fp32-onnx-vs-pytorch",
        metric="max_abs_diff",
        value=max(differences),
        threshold=FP32_MAX_ABS_DIFF,
        comparison="<=",
        figures=figures,
    )


def check_int8_close_to_fp32(int8: Embeddings, fp32: Embeddings) -> AccuracyCheck:
    cosines = row_cosines(int8, fp32)
    return AccuracyCheck.evaluate(
        name="int8-vs-fp32-onnx",
        metric="mean_cosine",
        value=float(cosines.mean()),
        threshold=INT8_MIN_MEAN_COSINE,
        comparison=">=",
        figures={"min_cosine": float(cosines.min()), "sentences": float(len(cosines))},
    )


def row_cosines(left: Embeddings, right: Embeddings) -> npt.NDArray[np.float64]:
    if left.shape != right.shape:
        raise ValueError(f"cannot compare embeddings of shapes {left.shape} and {right.shape}")
    left64 = left.astype(np.float64)
    right64 = right.astype(np.float64)
    norms = np.linalg.norm(left64, axis=1) * np.linalg.norm(right64, axis=1)
    return np.asarray((left64 * right64).sum(axis=1) / norms, dtype=np.float64)
