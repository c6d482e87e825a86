"""Bad imports are refused with a message naming what is wrong, and leave nothing behind."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from models.build.progress import Progress
from models.importing.converted import ImportRequest
from models.importing.errors import ImportRefused
from models.importing.pipeline import import_model
from models.registry import CheckNotPassed, ModelRegistry, RegistryError
from tests.integration.models.importing.sources import Sources, export_cnn


def refused(registry: ModelRegistry, source: Path, request: ImportRequest, error: type[RegistryError] = ImportRefused,
            match: str = "") -> None:
    with pytest.raises(error, match=match):
        import_model(registry, str(source), request, Progress(io.StringIO()))
    # Nothing half-registered: no version, and no staged folder either.
    assert registry.versions(request.name) == []
    model_dir = registry.root / request.name
    assert not model_dir.exists() or list(model_dir.iterdir()) == []


def test_a_file_that_is_not_onnx(registry: ModelRegistry, tmp_path: Path) -> None:
    bogus = tmp_path / "model.onnx"
    bogus.write_text("this is a README, not a graph\n")
    refused(registry, bogus, ImportRequest(name="bogus"), match="is not a valid ONNX model")


def test_a_text_model_without_a_tokenizer(registry: ModelRegistry, sources: Sources, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    shutil.copytree(sources.classifier, bare, ignore=shutil.ignore_patterns("tokenizer*"))
    refused(registry, bare, ImportRequest(name="bare"), match="a text task needs a tokenizer")


def test_labels_that_do_not_match_the_output_width(registry: ModelRegistry, sources: Sources) -> None:
    refused(registry, sources.classifier, ImportRequest(name="intents", labels=("yes", "no")),
            match="2 labels for output 'probabilities' of width 3")


def test_a_task_the_architecture_cannot_serve(registry: ModelRegistry, sources: Sources) -> None:
    refused(registry, sources.token_classifier, ImportRequest(name="ner", task="rerank"),
            match="does not fit architecture")


def _batch_mixing_graph(path: Path) -> Path:
    """y = x - mean(x over the batch): each row's answer depends on its batch mates."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], axes=[0], keepdims=1),
             helper.make_node("Sub", ["x", "mean"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "mixing", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # as the built models; onnx's default (14) is newer than the GPU flavour's ONNX Runtime reads
    onnx.save(model, str(path))
    return path


def test_a_graph_that_fails_its_check(registry: ModelRegistry, tmp_path: Path) -> None:
    refused(registry, _batch_mixing_graph(tmp_path / "mixing.onnx"), ImportRequest(name="mixing"), CheckNotPassed,
            match="import-smoke-batches failed: max_abs_diff_batched_vs_single")


def test_a_fixed_batch_axis_cannot_be_batched(registry: ModelRegistry, tmp_path: Path) -> None:
    fixed = export_cnn(tmp_path / "fixed.onnx", dynamic_batch=False)
    refused(registry, fixed, ImportRequest(name="fixed"), match=r"'image' has shape \[2, 1, 8, 8\]: its axis 0 must be")


def test_inputs_a_text_task_does_not_know(registry: ModelRegistry, sources: Sources, tmp_path: Path) -> None:
    folder = tmp_path / "cnn"
    folder.mkdir()
    shutil.copyfile(sources.cnn, folder / "model.onnx")
    shutil.copyfile(sources.classifier / "tokenizer.json", folder / "tokenizer.json")
    refused(registry, folder, ImportRequest(name="cnn-as-text", task="classification", labels=("a", "b", "c")),
            match=r"inputs \['image'\] are not what a tokenizer makes")


def test_an_int8_failure_registers_neither_version(registry: ModelRegistry, tmp_path: Path) -> None:
    """The FP32 version of an --int8 import is not registered when the INT8 step is refused."""
    # A MatMul for INT8 to quantise, then only integer outputs to gate it on.
    rows = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    out = helper.make_tensor_value_info("y", TensorProto.INT64, ["batch"])
    weights = helper.make_tensor("w", TensorProto.FLOAT, [3, 4], [0.1 * i for i in range(12)])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["scores"]),
             helper.make_node("ArgMax", ["scores"], ["y"], axis=1, keepdims=0)]
    graph = helper.make_graph(nodes, "ints", [rows], [out], initializer=[weights])
    path = tmp_path / "ints.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    refused(registry, path, ImportRequest(name="ints", int8=True), match="no float output")
