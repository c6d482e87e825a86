"""The manifest's per-task rules: what each task's inputs, outputs, labels and tokenizer must be,
the import source, and that manifests written before these rules still load."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from models.registry import (
    AccuracyCheck,
    ImportSource,
    ModelManifest,
    ModelSource,
    OutputSpec,
    TensorSpec,
)
from tests.paths import REPO_ROOT

IDS = TensorSpec(name="input_ids", dtype="int64", shape=("batch", "sequence"))
MASK = TensorSpec(name="attention_mask", dtype="int64", shape=("batch", "sequence"))
TEXT_FILES = {"model.onnx": "0" * 64, "tokenizer.json": "1" * 64}


def _output(shape: tuple[int | str, ...], name: str = "out") -> OutputSpec:
    return OutputSpec(name=name, dtype="float32", shape=shape, normalized=False)


def _manifest(task: str, **overrides: object) -> ModelManifest:
    fields: dict[str, object] = {
        "id": "tiny-20250314-001",
        "name": "tiny",
        "created": datetime(2025, 3, 14, tzinfo=UTC),
        "precision": "fp32",
        "parent": None,
        "source": ImportSource(format="onnx", uri="/tmp/tiny.onnx", sha256={"tiny.onnx": "2" * 64}),
        "files": TEXT_FILES,
        "onnx_file": "model.onnx",
        "tokenizer_file": "tokenizer.json",
        "max_length": 32,
        "inputs": (IDS, MASK),
        "outputs": (_output(("batch", 4)),),
        "check": AccuracyCheck.evaluate(name="c", metric="m", value=0.0, threshold=1e-4, comparison="<="),
        "task": task,
    }
    fields.update(overrides)
    return ModelManifest.model_validate(fields)


def _tensor(**overrides: object) -> ModelManifest:
    fields: dict[str, object] = {
        "files": {"model.onnx": "0" * 64},
        "tokenizer_file": None,
        "max_length": None,
        "inputs": (TensorSpec(name="pixels", dtype="float32", shape=("n", 3, "h", "w")),),
        "outputs": (_output(("n", 10), "logits"), _output(("n",), "best")),
    }
    fields.update(overrides)
    return _manifest("tensor", **fields)


def test_each_task_accepts_its_own_shapes() -> None:
    assert _manifest("embedding").embedding_dim == 4
    assert _manifest("classification", labels=("a", "b", "c", "d")).labels == ("a", "b", "c", "d")
    assert _manifest("rerank", outputs=(_output(("batch",)),)).embedding_dim == 1
    assert _manifest("rerank", outputs=(_output(("batch", 1)),)).embedding_dim == 1
    token = _manifest("token-classification", outputs=(_output(("batch", "sequence", 3)),), labels=("O", "B", "I"))
    assert token.embedding_dim == 3
    tensor = _tensor()
    assert (tensor.task, tensor.tokenizer_file, tensor.max_length, tensor.is_text) == ("tensor", None, None, False)


@pytest.mark.parametrize(
    ("task", "overrides", "message"),
    [
        ("embedding", {"labels": ("a", "b", "c", "d")}, "an embedding model has no labels"),
        ("embedding", {"outputs": (_output(("batch", "width")),)}, "last axis must be fixed"),
        ("classification", {"labels": ("a", "b")}, "2 labels for an output of width 4"),
        ("classification", {}, "needs its labels"),
        ("rerank", {}, r"one score per row: \[batch\] or \[batch, 1\]"),
        ("rerank", {"outputs": (_output(("batch",)),), "labels": ("a",)}, "rerank model has no labels"),
        ("token-classification", {"labels": ("a", "b", "c", "d")}, r"\[batch, sequence, labels\]"),
        ("token-classification", {"outputs": (_output(("b", "s", 3)),), "labels": ("a", "b")}, "2 labels"),
        ("classification", {"tokenizer_file": None, "labels": ("a", "b", "c", "d")}, "needs a tokenizer_file"),
        ("embedding", {"max_length": None}, "needs a tokenizer_file and a max_length"),
        ("embedding", {"inputs": (TensorSpec(name="pixels", dtype="float32", shape=("b", 3)),)}, "what a tokenizer"),
        ("embedding", {"tokenizer_file": "vocab.txt"}, "not listed in files"),
        ("embedding", {"outputs": (_output((1, 4)),)}, "first axis must be the"),
        ("embedding", {"inputs": ()}, "at least one input"),
    ],
)
def test_each_task_refuses_what_does_not_fit(task: str, overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _manifest(task, **overrides)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"tokenizer_file": "tokenizer.json", "files": TEXT_FILES}, "no tokenizer_file and no max_length"),
        ({"max_length": 8}, "no tokenizer_file and no max_length"),
        ({"labels": ("cat",)}, "tensor model has no labels"),
        ({"inputs": (TensorSpec(name="x", dtype="float32", shape=(1, 3)),)}, r"x: shape \[1, 3\]"),
        ({"inputs": (TensorSpec(name="x", dtype="float32", shape=()),)}, "first axis"),
        ({"outputs": (_output(("n", 2), "pixels"),)}, "names must be distinct"),
    ],
)
def test_the_tensor_task_refuses_texts_labels_and_fixed_batches(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _tensor(**overrides)


def test_a_tensor_model_has_no_single_row_width() -> None:
    with pytest.raises(ValueError, match="tensor model"):
        _ = _tensor().embedding_dim


def test_both_sources_round_trip_and_keep_their_kind() -> None:
    imported = _tensor(inputs=(TensorSpec(name="x", dtype="float32", shape=("n", 5), allow_nan=True),))
    loaded = ModelManifest.model_validate_json(imported.model_dump_json())
    assert loaded == imported and isinstance(loaded.source, ImportSource) and loaded.inputs[0].allow_nan
    built = _manifest("embedding", source=ModelSource(package="p", package_version="1", base_model="b"))
    assert isinstance(ModelManifest.model_validate_json(built.model_dump_json()).source, ModelSource)


def test_an_import_source_names_a_known_format() -> None:
    with pytest.raises(ValueError, match="format"):
        ImportSource.model_validate({"format": "pickle", "uri": "/x", "sha256": {}})


def test_a_manifest_of_the_previous_format_loads_unchanged(tmp_path: Path) -> None:
    # Written exactly as the builds before tasks wrote them: tokenizer and max_length always set,
    # no allow_nan, a packaged source.
    old = json.loads((REPO_ROOT / "tests/unit/models/data/faq_manifest_v1.json").read_text(encoding="utf-8"))
    manifest = ModelManifest.model_validate(old)
    assert (manifest.task, manifest.tokenizer_file, manifest.max_length) == ("classification", "tokenizer.json", 256)
    assert isinstance(manifest.source, ModelSource) and manifest.embedding_dim == len(manifest.labels) == 20
    assert not manifest.inputs[0].allow_nan
