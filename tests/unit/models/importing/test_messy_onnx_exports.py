"""ONNX text exports as teams find them (other input names, several outputs, vectors per token)
import with --input, --output, --pooling, --normalize and --tokenizer, serve through the worker's
own ONNX backend, and equal ONNX Runtime on the file as given; what they leave open is refused,
listing the graph. Tiny graphs (tests/unit/models/importing/onnx_exports.py), a temporary registry."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
import pytest
from tokenizers import Tokenizer

from models.backends.onnx import OnnxEmbeddingBackend
from models.build.progress import Progress
from models.importing.converted import ImportRequest, Pooling
from models.importing.errors import ImportRefused
from models.importing.pipeline import import_model
from models.registry import ModelManifest, ModelRegistry
from tests.unit.models.importing.onnx_exports import (MAX_LENGTH, WIDTH, classifier_export, messy_export,
                                                      vocabulary_size, write_tokenizer)

# Texts of very different lengths: a batch of them is mostly padding for the short ones.
TEXTS = ["ok", "how do I reset my password", "The quick brown fox jumps over the lazy dog near the riverbank at dawn.",
         "refund status"]
NAMED_INPUTS = (("input_ids", "ids"), ("attention_mask", "mask"))
MESSY_SIGNATURE = ("The graph takes ids int64 [batch, sequence], mask int64 [batch, sequence] and gives output "
                   f"float32 [batch, sequence], 461 float32 [batch, {WIDTH}], last_hidden_state float32 [batch, "
                   f"sequence, {WIDTH}]")


@pytest.fixture
def registry(tmp_path: Path) -> ModelRegistry:
    return ModelRegistry(tmp_path / "models")


@pytest.fixture
def export(tmp_path: Path) -> Path:
    """A folder as a package ships it: the messy graph with its tokenizer beside it."""
    tokenizer = write_tokenizer(tmp_path / "paraphrase-minilm")
    return messy_export(tmp_path / "paraphrase-minilm" / "model.onnx", vocabulary_size(tokenizer))


def imported(registry: ModelRegistry, source: Path, request: ImportRequest) -> ModelManifest:
    (manifest,) = import_model(registry, str(source), request, Progress(io.StringIO()))
    return manifest


def served(registry: ModelRegistry, manifest: ModelManifest, texts: list[str]) -> npt.NDArray[np.float32]:
    """The rows a worker serves: the registered version through the worker's ONNX backend, one batch."""
    return OnnxEmbeddingBackend.load(registry, manifest).infer(texts)


def original_rows(graph: Path, output: str, text: str, tokenizer: Path) -> npt.NDArray[np.float32]:
    """ONNX Runtime on the file as given, for one text alone (no padding): its own input names."""
    ids = np.asarray([Tokenizer.from_file(str(tokenizer)).encode(text).ids], dtype=np.int64)
    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    feeds = {"ids": ids, "mask": np.ones_like(ids)}
    (rows,) = session.run([output], {value.name: feeds[value.name] for value in session.get_inputs()})
    return np.asarray(rows[0], dtype=np.float32)


def refused(registry: ModelRegistry, source: Path, request: ImportRequest, match: str) -> str:
    with pytest.raises(ImportRefused, match=match) as refusal:
        import_model(registry, str(source), request, Progress(io.StringIO()))
    assert registry.versions(request.name) == []
    return str(refusal.value)


def test_output_picks_the_pooled_vector_and_serves_what_the_file_gives(registry: ModelRegistry, export: Path) -> None:
    manifest = imported(registry, export, ImportRequest(name="minilm", inputs=NAMED_INPUTS, output="461"))
    assert [(spec.name, spec.shape) for spec in manifest.outputs] == [("461", ("batch", WIDTH))]
    assert [spec.name for spec in manifest.inputs] == ["input_ids", "attention_mask"]
    tokenizer = export.parent / "tokenizer.json"
    expected = np.stack([original_rows(export, "461", text, tokenizer) for text in TEXTS])
    np.testing.assert_allclose(served(registry, manifest, TEXTS), expected, atol=1e-6)
    check = manifest.check
    assert (check.name, check.metric, check.threshold, check.passed) == \
        ("import-onnx-vs-original-onnx", "max_abs_diff", 1e-5, True)
    assert check.value < 1e-6 and check.figures["max_abs_diff_batched_vs_single"] < 1e-6
    assert manifest.recipe["output"] == "461 (of output, 461, last_hidden_state)"
    assert manifest.recipe["inputs"] == "input_ids=ids, attention_mask=mask"
    assert not manifest.outputs[0].normalized  # a tanh pooler's rows are not unit rows, and it says so
    graph = onnx.load(str(registry.path_of(manifest, manifest.onnx_file))).graph
    computed = {name for node in graph.node for name in node.output}
    assert "output" not in computed  # what fed only the dropped outputs is pruned


@pytest.mark.parametrize("opset", [11, 17])  # ReduceSum and Unsqueeze took their axes as attributes before 13
def test_mean_pooling_over_the_mask_leaves_padding_out(registry: ModelRegistry, tmp_path: Path, opset: int) -> None:
    tokenizer = write_tokenizer(tmp_path / "export")
    graph = messy_export(tmp_path / "export" / "model.onnx", vocabulary_size(tokenizer), opset=opset)
    manifest = imported(registry, graph, ImportRequest(name="minilm", inputs=NAMED_INPUTS, output="last_hidden_state",
                                                       pooling="mean"))
    alone = [original_rows(graph, "last_hidden_state", text, tokenizer).mean(axis=0) for text in TEXTS]
    np.testing.assert_allclose(served(registry, manifest, TEXTS), np.stack(alone), atol=1e-6)
    assert manifest.outputs[0].shape == ("batch", WIDTH) and not manifest.outputs[0].normalized
    assert manifest.hyperparameters["pooling"] == "mean" and manifest.check.passed
    assert manifest.recipe["pooling"] == "mean over attention_mask"


def test_cls_pooling_takes_the_first_token(registry: ModelRegistry, export: Path) -> None:
    manifest = imported(registry, export, ImportRequest(name="minilm", inputs=NAMED_INPUTS, output="last_hidden_state",
                                                        pooling="cls"))
    tokenizer = export.parent / "tokenizer.json"
    first = [original_rows(export, "last_hidden_state", text, tokenizer)[0] for text in TEXTS]
    np.testing.assert_allclose(served(registry, manifest, TEXTS), np.stack(first), atol=1e-6)


@pytest.mark.parametrize(("output", "pooling"), [("last_hidden_state", "mean"), ("461", None)])
def test_normalize_gives_unit_rows_and_the_manifest_says_so(registry: ModelRegistry, export: Path, output: str,
                                                            pooling: Pooling | None) -> None:
    request = ImportRequest(name="minilm", inputs=NAMED_INPUTS, output=output, pooling=pooling, normalize=True)
    manifest = imported(registry, export, request)
    rows = served(registry, manifest, TEXTS)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-6)
    assert manifest.outputs[0].normalized and manifest.hyperparameters["normalize"] == "l2"
    assert manifest.check.passed and manifest.check.value <= 1e-5


def test_mean_pooling_gives_a_graph_without_a_mask_input_one(registry: ModelRegistry, tmp_path: Path) -> None:
    tokenizer = write_tokenizer(tmp_path / "export")
    graph = messy_export(tmp_path / "export" / "model.onnx", vocabulary_size(tokenizer), with_mask=False)
    manifest = imported(registry, graph, ImportRequest(name="minilm", inputs=(("input_ids", "ids"),),
                                                       output="last_hidden_state", pooling="mean"))
    assert [spec.name for spec in manifest.inputs] == ["input_ids", "attention_mask"]
    alone = [original_rows(graph, "last_hidden_state", text, tokenizer).mean(axis=0) for text in TEXTS]
    np.testing.assert_allclose(served(registry, manifest, TEXTS), np.stack(alone), atol=1e-6)


@pytest.mark.parametrize(("request_", "message"), [
    (ImportRequest(name="minilm"),
     r"inputs \['ids', 'mask'\] are not what a tokenizer makes .*--input input_ids=ids"),
    (ImportRequest(name="minilm", inputs=NAMED_INPUTS),
     r"several outputs could be the embedding \('461', 'last_hidden_state'\): name the one to serve with --output "
     r"NAME \(and --pooling mean\|cls"),
    (ImportRequest(name="minilm", inputs=NAMED_INPUTS, output="last_hidden_state"),
     r"output 'last_hidden_state' has a vector per token: for a sentence embedding pool it with --pooling mean\|cls"),
    (ImportRequest(name="minilm", inputs=NAMED_INPUTS, output="461", pooling="mean"),
     r"--pooling mean pools a vector per token, \[batch, sequence, width\]; '461' is float32 \[batch, 8\]: drop"),
    (ImportRequest(name="minilm", inputs=NAMED_INPUTS, output="pooler_output"),
     r"--output pooler_output: the graph has no output 'pooler_output'"),
    (ImportRequest(name="minilm", inputs=(("input_ids", "input"),)), r"the graph has no input 'input'"),
    (ImportRequest(name="minilm", inputs=(("ids", "ids"),)), r"a tokenizer makes input_ids, .* not 'ids'"),
])
def test_what_the_file_leaves_open_is_refused_listing_the_graph(registry: ModelRegistry, export: Path,
                                                                request_: ImportRequest, message: str) -> None:
    text = refused(registry, export, request_, message)
    if "tokenizer makes input_ids" not in text:
        assert text.endswith(MESSY_SIGNATURE)


def test_several_pooled_outputs_are_refused_with_pooling_too(registry: ModelRegistry, export: Path) -> None:
    """With --pooling only token vectors can be meant: the one such output is taken without --output."""
    manifest = imported(registry, export, ImportRequest(name="minilm", inputs=NAMED_INPUTS, pooling="mean"))
    assert manifest.recipe["output"].startswith("last_hidden_state ") and manifest.check.passed


def test_a_tokenizer_from_another_folder(registry: ModelRegistry, tmp_path: Path) -> None:
    tokenizer = write_tokenizer(tmp_path / "tokenizer-folder")
    graph = messy_export(tmp_path / "graph-only" / "model.onnx", vocabulary_size(tokenizer))
    request = ImportRequest(name="minilm", inputs=NAMED_INPUTS, output="last_hidden_state", pooling="mean")
    refused(registry, graph, request, "a text task needs a tokenizer")
    for given in (tokenizer.parent, tokenizer):  # the folder, or the file itself
        manifest = imported(registry, graph, replace(request, tokenizer=given))
        assert manifest.max_length == MAX_LENGTH and manifest.recipe["tokenizer"] == str(given)
        assert registry.path_of(manifest, "tokenizer.json").read_bytes() == tokenizer.read_bytes()
    (tmp_path / "broken.json").write_text("{}")
    refused(registry, graph, replace(request, name="broken", tokenizer=tmp_path / "broken.json"),
            "does not load as a tokenizer.json")


def test_a_classifier_export_names_its_logits_output(registry: ModelRegistry, tmp_path: Path) -> None:
    """Its logits get their Softmax appended, and the check applies it to the original's logits too."""
    tokenizer = write_tokenizer(tmp_path / "export")
    graph = classifier_export(tmp_path / "export" / "model.onnx", vocabulary_size(tokenizer), labels=3)
    manifest = imported(registry, graph, ImportRequest(name="intents", labels=("a", "b", "c"), output="logits",
                                                       inputs=(("input_ids", "ids"),)))
    assert (manifest.task, [spec.name for spec in manifest.outputs]) == ("classification", ["probabilities"])
    assert manifest.recipe["scores"].startswith("Softmax appended")
    assert manifest.check.name == "import-onnx-vs-original-onnx" and manifest.check.passed


def test_onnx_file_flags_are_refused_for_other_sources(registry: ModelRegistry, tmp_path: Path) -> None:
    (tmp_path / "model.joblib").write_bytes(b"not loaded: refused before")
    refused(registry, tmp_path / "model.joblib", ImportRequest(name="churn", pooling="mean", normalize=True),
            "--pooling, --normalize: for ONNX files exported elsewhere, not for this estimator source")


def test_a_tensor_graph_takes_output_but_no_text_flags(registry: ModelRegistry, tmp_path: Path) -> None:
    graph = messy_export(tmp_path / "bare" / "model.onnx", vocabulary=50)  # no tokenizer beside it: a tensor model
    refused(registry, graph, ImportRequest(name="ids", task="tensor", normalize=True), "--normalize: for text models")
    manifest = imported(registry, graph, ImportRequest(name="ids", output="461"))
    assert manifest.task == "tensor" and [spec.name for spec in manifest.outputs] == ["461"]
    assert manifest.check.name == "import-onnx-vs-original-onnx" and manifest.check.passed
