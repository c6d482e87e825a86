"""The FAQ classifiers: an encoder's FP32 graph plus a trained softmax head, FP32 and INT8.

`faq-intent` sits on minilm-embed and reads English; `faq-intent-multilingual` sits on e5-embed
(multilingual-e5-small) and learns the same intents from the English and the Chinese examples,
scored held out per language. What follows says faq-intent; the multilingual one is built the same way.

FP32: append the shipped head (models/build/data/trained/faq-intent, trained by the maintainer's
`scripts/train-models` on embeddings of the minilm-embed FP32 graph, see models/build/trained.py)
to a copy of that graph, then score the finished graph on the held-out examples; below
`HELDOUT_MIN_ACCURACY` it is not registered. The head is shipped rather than trained here because
the embeddings it learns from round differently on another CPU, and so would its weights.
INT8: the FP32 faq graph through the same ONNX Runtime dynamic quantisation as minilm's
INT8; it must pick the FP32 parent's label on at least `INT8_MIN_LABEL_AGREEMENT` of all
examples. Both are ONNX-only (no torch_dir): the head exists only in the graph.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import numpy.typing as npt

from models.build import head as faq_head
from models.build.checks import TextBatches, onnx_embeddings
from models.build.faq_data import FaqDataset
from models.build.progress import Progress
from models.build.source import TOKENIZER_FILE
from models.build.trained import (
    TRAINED_DIR,
    WEIGHTS_FILE,
    TrainedArtifactError,
    TrainedRecord,
    read_record,
    read_weights,
)
from models.build.version import ONNX_FILE, BuiltVersion, VersionPlan, build_version, quantized
from models.registry import AccuracyCheck, HyperparameterValue, ModelManifest, ModelRegistry

FAQ_MODEL_NAME = "faq-intent"
FAQ_MULTILINGUAL_MODEL_NAME = "faq-intent-multilingual"
HELDOUT_MIN_ACCURACY = 0.85
INT8_MIN_LABEL_AGREEMENT = 0.97
_BATCH = 64

Rows = npt.NDArray[np.float32]


def registered_faq_fp32(registry: ModelRegistry, encoder: ModelManifest, trained_root: Path = TRAINED_DIR,
                        name: str = FAQ_MODEL_NAME) -> ModelManifest | None:
    """Newest FP32 version of the classifier `name` made from this encoder and its shipped head."""
    record = read_record(name, trained_root)
    matches = [
        manifest
        for manifest in registry.versions(name)
        if manifest.precision == "fp32"
        and manifest.parent == encoder.id
        and manifest.training_data == record.training_data
        and manifest.hyperparameters == shipped_hyperparameters(record)
    ]
    return matches[-1] if matches else None


def shipped_hyperparameters(record: TrainedRecord) -> dict[str, HyperparameterValue]:
    return {**record.hyperparameters, "head_sha256": record.files[WEIGHTS_FILE][:16]}


def trained_head(registry: ModelRegistry, encoder: ModelManifest, dataset: FaqDataset,
                 hyper: faq_head.HeadHyperparameters, progress: Progress) -> tuple[faq_head.LinearHead, float]:
    """Train the head on `encoder`'s embeddings of the training examples (the maintainer's command);
    returns it with its training accuracy."""
    encoder_onnx = registry.path_of(encoder, encoder.onnx_file)
    tokenizer = registry.path_of(encoder, encoder.tokenizer_file)
    progress.step(f"embedding {len(dataset.train)} training examples of {dataset.version} ({len(dataset.labels)} "
                  f"intents) with {encoder.id}")
    rows = _rows(encoder_onnx, tokenizer, encoder, [example.text for example in dataset.train])
    labels = np.array([example.label for example in dataset.train], dtype=np.int64)
    head = faq_head.train_head(rows, labels, len(dataset.labels), hyper)
    accuracy = float(np.mean(head.probabilities(rows).argmax(axis=1) == labels))
    progress.step(f"trained the softmax head ({hyper.epochs} epochs, lr {hyper.lr}, l2 {hyper.l2}, seed "
                  f"{hyper.seed}): training accuracy {accuracy:.3f}")
    return head, accuracy


def registered_faq_int8(registry: ModelRegistry, fp32: ModelManifest) -> ModelManifest | None:
    matches = [m for m in registry.versions(fp32.name) if m.precision == "int8" and m.parent == fp32.id]
    return matches[-1] if matches else None


def build_faq_fp32(registry: ModelRegistry, encoder: ModelManifest, dataset: FaqDataset, progress: Progress,
                   trained_root: Path = TRAINED_DIR, name: str = FAQ_MODEL_NAME) -> BuiltVersion:
    if encoder.task != "embedding" or encoder.precision != "fp32":
        raise ValueError(f"{encoder.id} is a {encoder.precision} {encoder.task} model, not an FP32 encoder")
    registry.verify(encoder)
    encoder_onnx = registry.path_of(encoder, encoder.onnx_file)
    tokenizer = registry.path_of(encoder, encoder.tokenizer_file)
    record, weights = read_weights(name, trained_root)
    if record.training_data != dataset.version:
        progress.step(f"NOTE: the shipped head learnt from {record.training_data}, the repository's examples are now "
                      f"{dataset.version}; scripts/train-models trains it on them")
    head = faq_head.LinearHead(weight=weights["weight"], bias=weights["bias"])
    if head.weight.shape != (encoder.embedding_dim, len(dataset.labels)):
        raise TrainedArtifactError(f"the shipped {name} head is {head.weight.shape}, {encoder.id} with "
                                   f"{len(dataset.labels)} intents needs ({encoder.embedding_dim}, {len(dataset.labels)}):"
                                   " retrain with scripts/train-models")
    progress.step(f"{name}: the shipped head ({record.files[WEIGHTS_FILE][:12]}, trained on "
                  f"{record.trained_on}) on {encoder.id}")

    def stage(folder: Path) -> None:
        progress.step(f"appending MatMul + Add + Softmax to {encoder.id}'s graph: {folder / ONNX_FILE}")
        faq_head.append_head(encoder_onnx, head, folder / ONNX_FILE)
        shutil.copyfile(tokenizer, folder / TOKENIZER_FILE)

    def check(folder: Path) -> AccuracyCheck:
        progress.step(f"scoring the built graph on {len(dataset.test)} held-out examples")
        test_texts = [example.text for example in dataset.test]
        test_labels = np.array([example.label for example in dataset.test], dtype=np.int64)
        graph_rows = _rows(folder / ONNX_FILE, tokenizer, encoder, test_texts)
        # The graph's head must be the trained one: same probabilities as numpy's on the same embeddings.
        numpy_rows = head.probabilities(_rows(encoder_onnx, tokenizer, encoder, test_texts))
        return check_heldout_accuracy(graph_rows, test_labels, len(dataset.labels), figures={
            **{key: value for key, value in record.figures.items() if key == "train_accuracy"},
            "max_abs_diff_graph_vs_numpy_head": float(np.max(np.abs(graph_rows - numpy_rows))),
        }, parts=dataset.test_parts)

    plan = VersionPlan(name=name, precision="fp32", parent=encoder.id, source=encoder.source,
                       max_length=encoder.max_length, recipe=faq_head.recipe(encoder.id),
                       training_data=record.training_data, hyperparameters=shipped_hyperparameters(record),
                       task="classification", labels=dataset.labels)
    return build_version(registry, plan, stage, check, progress)


def build_faq_int8(registry: ModelRegistry, fp32: ModelManifest, dataset: FaqDataset,
                   progress: Progress) -> BuiltVersion:
    from models.build import quantize

    stage = quantized(registry, fp32, progress)
    tokenizer = registry.path_of(fp32, fp32.tokenizer_file)

    def check(folder: Path) -> AccuracyCheck:
        texts = [example.text for example in dataset.all_examples]
        progress.step(f"checking INT8 labels against FP32 on all {len(texts)} examples")
        fp32_rows = _rows(registry.path_of(fp32, fp32.onnx_file), tokenizer, fp32, texts)
        int8_rows = _rows(folder / ONNX_FILE, tokenizer, fp32, texts)
        test_labels = np.array([example.label for example in dataset.test], dtype=np.int64)
        heldout = int8_rows[len(dataset.train):].argmax(axis=1) == test_labels
        return check_label_agreement(int8_rows, fp32_rows, figures={"int8_heldout_accuracy": float(heldout.mean())})

    plan = VersionPlan(name=fp32.name, precision="int8", parent=fp32.id, source=fp32.source,
                       max_length=fp32.max_length, recipe={**fp32.recipe, **quantize.recipe()},
                       training_data=fp32.training_data or dataset.version,
                       hyperparameters={**fp32.hyperparameters, **quantize.hyperparameters()},
                       task="classification", labels=fp32.labels)
    return build_version(registry, plan, stage, check, progress)


def check_heldout_accuracy(probabilities: Rows, labels: npt.NDArray[np.int64], n_labels: int,
                           figures: dict[str, float] | None = None,
                           parts: tuple[tuple[str, int], ...] = ()) -> AccuracyCheck:
    """Held-out accuracy; the worst single intent's accuracy is recorded next to it. With several
    data files (languages) each is scored on its own and the gate holds the worst of them."""
    correct = probabilities.argmax(axis=1) == labels
    per_label = [float(correct[labels == label].mean()) for label in range(n_labels) if np.any(labels == label)]
    by_part: dict[str, float] = {}
    start = 0
    for part, count in parts if len(parts) > 1 else ():
        by_part[f"heldout_accuracy_{part}"] = float(correct[start:start + count].mean())
        start += count
    return AccuracyCheck.evaluate(
        name="faq-heldout-accuracy",
        metric="worst_language_heldout_accuracy" if by_part else "heldout_accuracy",
        value=min(by_part.values()) if by_part else float(correct.mean()),
        threshold=HELDOUT_MIN_ACCURACY,
        comparison=">=",
        figures={**(figures or {}), **by_part, "examples": float(len(labels)), "min_intent_accuracy": min(per_label)},
    )


def check_label_agreement(int8: Rows, fp32: Rows, figures: dict[str, float] | None = None) -> AccuracyCheck:
    if int8.shape != fp32.shape:
        raise ValueError(f"cannot compare outputs of shapes {int8.shape} and {fp32.shape}")
    agree = int8.argmax(axis=1) == fp32.argmax(axis=1)
    return AccuracyCheck.evaluate(
        name="int8-vs-fp32-labels",
        metric="label_agreement",
        value=float(agree.mean()),
        threshold=INT8_MIN_LABEL_AGREEMENT,
        comparison=">=",
        figures={**(figures or {}), "examples": float(len(agree)),
                 "max_abs_prob_diff": float(np.max(np.abs(int8 - fp32)))},
    )


def _rows(onnx_path: Path, tokenizer: Path, manifest: ModelManifest, texts: list[str]) -> Rows:
    return onnx_embeddings(onnx_path, TextBatches(tokenizer, max_length=manifest.max_length,
                                                  input_names=[spec.name for spec in manifest.inputs],
                                                  sentences=texts, batch_size=_BATCH))
