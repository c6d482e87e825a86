"""A Hugging Face transformers folder (config.json, weights, tokenizer), exported to ONNX at import.

The task comes from the config's architecture: *ForSequenceClassification is a classifier (one
label: a cross-encoder reranker), *ForTokenClassification a token classifier, a bare encoder an
embedding model (mean pooling and L2 normalisation in the graph, exactly as the build's MiniLM).
Labels come from id2label. A sequence classifier ends in a softmax, so its rows are the
probabilities the classification task serves; a reranker's graph returns its raw relevance score
([batch, 1]) and a token classifier its raw logits ([batch, sequence, labels]), which the
token-classification backend turns into probabilities per real token.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from models.importing.converted import ONNX_FILE, Converted, ImportRequest, ImportTask
from models.importing.errors import ImportRefused
from models.importing.labels import labels_from_config
from models.importing.samples import TextSamples, check_texts
from models.importing.text import find_max_length, install_tokenizer
from models.importing.torch_export import export_text_graph, run_torch

OUTPUTS: dict[str, str] = {"classification": "probabilities", "token-classification": "logits",
                           "rerank": "scores", "embedding": "embedding"}
_HEADS = {"ForSequenceClassification": ("classification", "rerank"), "ForTokenClassification": ("token-classification",)}


class TaskHead(torch.nn.Module):
    """The transformers model plus what turns its logits into the task's rows."""

    def __init__(self, model: torch.nn.Module, task: str, input_names: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.task = task
        self.input_names = input_names

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.model(**dict(zip(self.input_names, tensors))).logits
        return torch.softmax(logits, dim=-1) if self.task == "classification" else logits


def task_of(config: dict[str, Any], asked: ImportTask | None) -> ImportTask:
    architectures = [str(name) for name in config.get("architectures") or []]
    fits: tuple[str, ...] = ("embedding",)
    for suffix, tasks in _HEADS.items():
        if any(name.endswith(suffix) for name in architectures):
            fits = tasks
    if asked is None:
        if fits[0] == "classification" and int(config.get("num_labels", len(config.get("id2label") or {}))) == 1:
            return "rerank"
        return fits[0]  # type: ignore[return-value]
    if asked not in fits:
        raise ImportRefused(f"--task {asked} does not fit architecture {architectures or ['(none)']}: "
                            f"it can serve as {', '.join(fits)}")
    return asked


def _load(folder: Path, task: str) -> torch.nn.Module:
    import transformers
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoModelForTokenClassification

    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    loader = {"classification": AutoModelForSequenceClassification, "rerank": AutoModelForSequenceClassification,
              "token-classification": AutoModelForTokenClassification}.get(task, AutoModel)
    model: torch.nn.Module = loader.from_pretrained(str(folder), local_files_only=True, attn_implementation="eager")
    return model.float().eval()


def _input_names(config: dict[str, Any], task: str) -> tuple[str, ...]:
    # Single texts have all-zero token types, which BERT fills in itself; a pair needs them.
    if task == "rerank" and int(config.get("type_vocab_size", 1)) > 1:
        return ("input_ids", "attention_mask", "token_type_ids")
    return ("input_ids", "attention_mask")


def convert_transformers(folder: Path, request: ImportRequest, into: Path) -> Converted:
    from models.build.export import MeanPooledEmbedder

    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    task = task_of(config, request.task)
    labels = request.labels if request.labels is not None else labels_from_config(folder / "config.json")
    labels = labels if task in ("classification", "token-classification") else ()
    tokenizer = install_tokenizer(folder, into)
    max_length = find_max_length(folder, tokenizer, request.max_length)
    names = _input_names(config, task)
    samples = TextSamples(tokenizer, max_length, names, check_texts(pairs=task == "rerank"))
    model = _load(folder, task)
    module = MeanPooledEmbedder(model) if task == "embedding" else TaskHead(model, task, names)
    width = {"embedding": int(config.get("hidden_size", 0)) or None, "rerank": 1}.get(task, _label_count(config))
    export_text_graph(module, samples.feeds([0, 1]), into / ONNX_FILE, OUTPUTS[task],
                      per_token=task == "token-classification", width=width)
    output = OUTPUTS[task]
    return Converted(
        format="transformers", task=task, samples=samples, labels=labels, tokenizer_file=tokenizer,
        max_length=max_length, reference=lambda feeds: {output: run_torch(module, feeds, names)},
        recipe=_recipe(config, task), hyperparameters={"opset": _opset(), "attention": "eager", "task": task},
    )


def _label_count(config: dict[str, Any]) -> int | None:
    """Columns of the classifier's logits, as its config says (labels given by hand are checked against it)."""
    return len(config.get("id2label") or {}) or config.get("num_labels")


def _opset() -> int:
    from models.build.export import OPSET

    return OPSET


def _recipe(config: dict[str, Any], task: str) -> dict[str, str]:
    import transformers

    architecture = ",".join(config.get("architectures") or ["(bare encoder)"])
    head = {"embedding": "mean pooling over attention_mask -> L2 normalisation", "rerank": "raw score logit",
            "token-classification": "raw logits per token"}.get(task, "softmax over the logits")
    return {"graph": f"{architecture} (eager attention) -> {head}", "exporter": f"torch.onnx.export TorchScript, "
            f"opset {_opset()}", "torch": torch.__version__, "transformers": transformers.__version__}
