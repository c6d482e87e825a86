"""A sentence-transformers folder: its modules (Transformer, Pooling, Normalize) put in one graph.

Pooling and normalisation are read from the folder's modules.json and 1_Pooling/config.json.
Mean pooling with normalisation is the build's own `MeanPooledEmbedder` (what MiniLM serves
with); CLS pooling and unnormalised means are the same encoder with a different head. Modules
that change the embedding further (Dense, ...) are refused rather than silently dropped.
The check compares the graph with sentence-transformers itself running the folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.importing.converted import ONNX_FILE, Converted, ImportRequest
from models.importing.errors import ImportRefused
from models.importing.samples import Arrays, TextSamples, check_texts
from models.importing.text import find_max_length, install_tokenizer
from models.importing.torch_export import export_text_graph

OUTPUT = "embedding"
INPUT_NAMES = ("input_ids", "attention_mask")
_KNOWN = ("Transformer", "Pooling", "Normalize")


class PooledEmbedder(torch.nn.Module):
    """Encoder -> CLS or mean pooling -> optional L2 normalisation (the cases MeanPooledEmbedder does not cover)."""

    def __init__(self, encoder: torch.nn.Module, mode: str, normalize: bool) -> None:
        super().__init__()
        self.encoder = encoder
        self.mode = mode
        self.normalize = normalize

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if self.mode == "cls":
            pooled = hidden[:, 0]
        else:
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2.0, dim=1) if self.normalize else pooled


def read_modules(folder: Path) -> tuple[Path, str, bool]:
    """(transformer folder, pooling mode, normalised) from modules.json; refuses what the graph cannot hold."""
    modules: list[dict[str, Any]] = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    kinds = {str(module["type"]).rsplit(".", 1)[-1]: folder / str(module.get("path", "")) for module in modules}
    unknown = [kind for kind in kinds if kind not in _KNOWN]
    if unknown or "Transformer" not in kinds or "Pooling" not in kinds:
        raise ImportRefused(f"{folder}/modules.json has modules {list(kinds)}: only Transformer, Pooling and "
                            "Normalize can be put in the graph")
    pooling = json.loads((kinds["Pooling"] / "config.json").read_text(encoding="utf-8"))
    modes = [key.removeprefix("pooling_mode_") for key, on in pooling.items() if key.startswith("pooling_mode_") and on]
    if modes not in (["mean_tokens"], ["cls_token"]):
        raise ImportRefused(f"{kinds['Pooling']}/config.json pools by {modes}: mean_tokens or cls_token only")
    return kinds["Transformer"], "mean" if modes == ["mean_tokens"] else "cls", "Normalize" in kinds


def convert_sentence_transformers(folder: Path, request: ImportRequest, into: Path) -> Converted:
    from transformers import AutoModel

    from models.build.export import MeanPooledEmbedder

    if request.task not in (None, "embedding"):
        raise ImportRefused(f"a sentence-transformers folder is an embedding model, not {request.task}")
    transformer_dir, mode, normalize = read_modules(folder)
    tokenizer = install_tokenizer(transformer_dir, into)
    max_length = find_max_length(folder, tokenizer, request.max_length)
    samples = TextSamples(tokenizer, max_length, INPUT_NAMES, check_texts(pairs=False))
    encoder = AutoModel.from_pretrained(str(transformer_dir), local_files_only=True, attn_implementation="eager")
    module = MeanPooledEmbedder(encoder) if (mode, normalize) == ("mean", True) else \
        PooledEmbedder(encoder, mode, normalize)
    width = int(encoder.config.hidden_size)
    export_text_graph(module, samples.feeds([0, 1]), into / ONNX_FILE, OUTPUT, per_token=False, width=width)
    return Converted(
        format="sentence-transformers", task="embedding", samples=samples, tokenizer_file=tokenizer,
        max_length=max_length, reference=_reference(folder),
        recipe={"graph": f"Transformer -> {mode} pooling" + (" -> L2 normalisation" if normalize else ""),
                "reference": "sentence-transformers running the folder's own modules"},
        hyperparameters={"pooling": mode, "normalize": "l2" if normalize else "none"},
    )


def _reference(folder: Path) -> Any:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu", local_files_only=True).eval()

    def embed(feeds: Arrays) -> Arrays:
        features = {name: torch.from_numpy(np.ascontiguousarray(array)) for name, array in feeds.items()}
        with torch.inference_mode():
            rows = model(features)["sentence_embedding"]
        return {OUTPUT: np.asarray(rows.numpy(), dtype=np.float32)}

    return embed
