"""`fleet models import` of each kind of source a team brings, checked against the source itself.

Each import must register a version whose manifest is derived (task, labels, inputs/outputs,
source hashes, a passed check), and whose stored graph answers what the source framework
answers on the same inputs.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import joblib
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from models.build.progress import Progress
from models.importing.converted import ImportRequest
from models.importing.pipeline import import_model
from models.importing.samples import TextSamples, check_texts
from models.manifest import ImportSource
from models.registry import ModelManifest, ModelRegistry, sha256_of
from tests.integration.models.importing.sources import ENTITIES, FEATURES, INTENTS, Sources, SmallCnn, SEED


def imported(registry: ModelRegistry, source: Path, request: ImportRequest) -> list[ModelManifest]:
    return import_model(registry, str(source), request, Progress(io.StringIO()))


def session_of(registry: ModelRegistry, manifest: ModelManifest) -> ort.InferenceSession:
    registry.verify(manifest)
    return ort.InferenceSession(str(registry.path_of(manifest, manifest.onnx_file)), providers=["CPUExecutionProvider"])


def text_feeds(registry: ModelRegistry, manifest: ModelManifest, pairs: bool) -> dict[str, np.ndarray]:
    assert manifest.tokenizer_file is not None and manifest.max_length is not None
    samples = TextSamples(registry.path_of(manifest, manifest.tokenizer_file), manifest.max_length,
                          [spec.name for spec in manifest.inputs], check_texts(pairs=pairs))
    return samples.feeds(range(samples.count))


def torch_logits(folder: Path, kind: str, feeds: dict[str, np.ndarray]) -> np.ndarray:
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

    loader = AutoModelForTokenClassification if kind == "token" else AutoModelForSequenceClassification
    model = loader.from_pretrained(str(folder), local_files_only=True, attn_implementation="eager").eval()
    with torch.inference_mode():
        return model(**{name: torch.from_numpy(array) for name, array in feeds.items()}).logits.numpy()


def test_transformers_classifier_imports_with_labels_from_its_config(registry: ModelRegistry, sources: Sources) -> None:
    (manifest,) = imported(registry, sources.classifier, ImportRequest(name="intents"))
    assert (manifest.task, manifest.labels, manifest.precision) == ("classification", INTENTS, "fp32")
    assert manifest.check.passed and manifest.check.figures["label_agreement"] == 1.0
    assert isinstance(manifest.source, ImportSource) and manifest.source.format == "transformers"
    assert manifest.source.sha256["model.safetensors"] == sha256_of(sources.classifier / "model.safetensors")
    assert [spec.name for spec in manifest.inputs] == ["input_ids", "attention_mask"]
    assert manifest.outputs[0].shape == ("batch", len(INTENTS)) and manifest.max_length == 512
    feeds = text_feeds(registry, manifest, pairs=False)
    probabilities = session_of(registry, manifest).run(None, feeds)[0]
    expected = torch.softmax(torch.from_numpy(torch_logits(sources.classifier, "sequence", feeds)), dim=-1).numpy()
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)


def test_cross_encoder_imports_as_a_reranker_scoring_pairs(registry: ModelRegistry, sources: Sources) -> None:
    (manifest,) = imported(registry, sources.cross_encoder, ImportRequest(name="reranker"))
    assert (manifest.task, manifest.labels) == ("rerank", ())
    assert "token_type_ids" in [spec.name for spec in manifest.inputs]  # a pair's segments matter
    assert manifest.outputs[0].shape == ("batch", 1)
    feeds = text_feeds(registry, manifest, pairs=True)
    scores = session_of(registry, manifest).run(None, feeds)[0]
    np.testing.assert_allclose(scores, torch_logits(sources.cross_encoder, "sequence", feeds), atol=1e-5)


def test_token_classifier_imports_per_token_logits(registry: ModelRegistry, sources: Sources) -> None:
    (manifest,) = imported(registry, sources.token_classifier, ImportRequest(name="ner"))
    assert (manifest.task, manifest.labels) == ("token-classification", ENTITIES)
    assert manifest.outputs[0].shape == ("batch", "sequence", len(ENTITIES)) and manifest.outputs[0].name == "logits"
    feeds = text_feeds(registry, manifest, pairs=False)
    logits = session_of(registry, manifest).run(None, feeds)[0]
    np.testing.assert_allclose(logits, torch_logits(sources.token_classifier, "token", feeds), atol=1e-4)


def test_sentence_transformers_folder_puts_pooling_and_normalisation_in_the_graph(
        registry: ModelRegistry, sources: Sources) -> None:
    from sentence_transformers import SentenceTransformer

    (manifest,) = imported(registry, sources.sentence_transformers, ImportRequest(name="my-embedder"))
    assert manifest.task == "embedding" and manifest.outputs[0].normalized
    assert manifest.hyperparameters["pooling"] == "mean" and manifest.max_length == 256
    texts = [str(text) for text in check_texts(pairs=False)]
    feeds = text_feeds(registry, manifest, pairs=False)
    rows = session_of(registry, manifest).run(None, feeds)[0]
    reference = SentenceTransformer(str(sources.sentence_transformers), device="cpu", local_files_only=True)
    np.testing.assert_allclose(rows, reference.encode(texts, convert_to_numpy=True), atol=1e-4)


def test_sklearn_pipeline_imports_as_a_tensor_model(registry: ModelRegistry, sources: Sources) -> None:
    (manifest,) = imported(registry, sources.sklearn_pipeline, ImportRequest(name="churn"))
    assert (manifest.task, manifest.tokenizer_file, manifest.max_length) == ("tensor", None, None)
    assert isinstance(manifest.source, ImportSource) and manifest.source.format == "sklearn"
    assert [(spec.name, spec.dtype, spec.shape) for spec in manifest.inputs] == [("X", "float32", ("batch", FEATURES))]
    label, probabilities = session_of(registry, manifest).run(["label", "probabilities"], {"X": sources.sklearn_rows})
    pipeline = joblib.load(sources.sklearn_pipeline)
    np.testing.assert_array_equal(label, pipeline.predict(sources.sklearn_rows))
    np.testing.assert_allclose(probabilities, pipeline.predict_proba(sources.sklearn_rows), atol=1e-5)


def test_cnn_onnx_file_imports_as_a_tensor_model(registry: ModelRegistry, sources: Sources) -> None:
    (manifest,) = imported(registry, sources.cnn, ImportRequest(name="digits"))
    assert manifest.task == "tensor" and manifest.source.format == "onnx"  # type: ignore[union-attr]
    assert manifest.inputs[0].shape == ("batch", 1, 8, 8) and manifest.check.name == "import-smoke-batches"
    images = np.random.default_rng(SEED).standard_normal((5, 1, 8, 8)).astype(np.float32)
    torch.manual_seed(SEED)
    expected = SmallCnn().eval()(torch.from_numpy(images)).detach().numpy()
    np.testing.assert_allclose(session_of(registry, manifest).run(None, {"image": images})[0], expected, atol=1e-5)


@pytest.mark.parametrize("kind", ["classifier", "cnn"])
def test_int8_registers_a_child_gated_on_fp32_agreement(registry: ModelRegistry, sources: Sources, kind: str) -> None:
    fp32, int8 = imported(registry, getattr(sources, kind), ImportRequest(name=f"q-{kind}", int8=True))
    assert (fp32.precision, int8.precision, int8.parent) == ("fp32", "int8", fp32.id)
    assert int8.check.name == "int8-vs-fp32-onnx" and int8.check.value >= 0.98
    assert int8.files["model.onnx"] != fp32.files["model.onnx"] or kind == "cnn"
    assert [m.id for m in registry.versions(f"q-{kind}")] == [fp32.id, int8.id]


@pytest.mark.parametrize("framework", ["xgboost", "lightgbm"])
def test_boosted_trees_import_through_onnxmltools(registry: ModelRegistry, sources: Sources, tmp_path: Path,
                                                  framework: str) -> None:
    library = pytest.importorskip(framework)
    rows = sources.sklearn_rows
    classes = (rows[:, 0] > 0).astype(int) + (rows[:, 1] > 0.5).astype(int)
    estimator = (library.XGBClassifier(n_estimators=5, max_depth=3) if framework == "xgboost"
                 else library.LGBMClassifier(n_estimators=5, num_leaves=7, verbose=-1)).fit(rows, classes)
    joblib.dump(estimator, tmp_path / "trees.pkl")
    (manifest,) = imported(registry, tmp_path / "trees.pkl", ImportRequest(name=f"trees-{framework}"))
    assert manifest.task == "tensor" and manifest.source.format == framework  # type: ignore[union-attr]
    assert manifest.inputs[0].allow_nan  # trees read NaN as a missing value
    label, probabilities = session_of(registry, manifest).run(None, {manifest.inputs[0].name: rows})
    np.testing.assert_array_equal(label, estimator.predict(rows))
    np.testing.assert_allclose(probabilities, estimator.predict_proba(rows), atol=1e-5)


def _onnx_folder(registry: ModelRegistry, manifest: ModelManifest, target: Path, edit: str) -> Path:
    """The registered graph as a team's ONNX export: its last Softmax stripped, or a Softmax added."""
    model = onnx.load(str(registry.path_of(manifest, manifest.onnx_file)))
    output = model.graph.output[0]
    if edit == "strip-softmax":
        softmax = model.graph.node[-1]
        assert softmax.op_type == "Softmax"
        model.graph.node.remove(softmax)
        output.name = softmax.input[0]
    else:
        model.graph.node.append(onnx.helper.make_node("Softmax", [output.name], ["scores"], axis=-1))
        output.name = "scores"
    target.mkdir()
    onnx.save(model, str(target / "model.onnx"))
    shutil.copyfile(registry.path_of(manifest, manifest.tokenizer_file or ""), target / "tokenizer.json")
    (target / "config.json").write_text(json.dumps({"id2label": dict(enumerate(manifest.labels))}))
    return target


def _softmax(rows: np.ndarray) -> np.ndarray:
    exp = np.exp(rows - rows.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


def test_onnx_classifier_returning_logits_gets_its_softmax(registry: ModelRegistry, sources: Sources,
                                                           tmp_path: Path) -> None:
    (original,) = imported(registry, sources.classifier, ImportRequest(name="intents-src"))
    folder = _onnx_folder(registry, original, tmp_path / "logits-export", "strip-softmax")
    (manifest,) = imported(registry, folder, ImportRequest(name="intents-onnx"))
    assert (manifest.task, manifest.labels, manifest.outputs[0].name) == ("classification", INTENTS, "probabilities")
    assert manifest.recipe["scores"].startswith("Softmax appended")
    feeds = text_feeds(registry, manifest, pairs=False)
    np.testing.assert_allclose(session_of(registry, manifest).run(None, feeds)[0],
                               session_of(registry, original).run(None, feeds)[0], atol=1e-6)


def test_onnx_token_classifier_returning_probabilities_gets_logits_back(registry: ModelRegistry, sources: Sources,
                                                                        tmp_path: Path) -> None:
    (original,) = imported(registry, sources.token_classifier, ImportRequest(name="ner-src"))
    folder = _onnx_folder(registry, original, tmp_path / "probabilities-export", "add-softmax")
    (manifest,) = imported(registry, folder, ImportRequest(name="ner-onnx"))
    assert (manifest.task, manifest.labels) == ("token-classification", ENTITIES)
    assert manifest.recipe["scores"].startswith("Log appended")
    feeds = text_feeds(registry, manifest, pairs=False)
    np.testing.assert_allclose(_softmax(session_of(registry, manifest).run(None, feeds)[0]),
                               _softmax(session_of(registry, original).run(None, feeds)[0]), atol=1e-5)


def test_a_tokenizer_folder_without_tokenizer_json_is_converted(registry: ModelRegistry, sources: Sources,
                                                                tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    from models.build.source import locate_packaged_model

    packaged = locate_packaged_model().model_dir
    folder = tmp_path / "vocab-only"
    shutil.copytree(sources.classifier, folder, ignore=shutil.ignore_patterns("tokenizer.json"))
    for name in ("vocab.txt", "special_tokens_map.json"):
        shutil.copyfile(packaged / name, folder / name)
    (manifest,) = imported(registry, folder, ImportRequest(name="vocab-only"))
    saved = Tokenizer.from_file(str(registry.path_of(manifest, "tokenizer.json")))
    shipped = Tokenizer.from_file(str(packaged / "tokenizer.json"))
    shipped.no_padding()  # the package's file pads to 128; serving pads per batch anyway
    for text in ("Hello, World!", "naïve café déjà vu", "refund #A-10293"):
        assert saved.encode(text).ids == shipped.encode(text).ids
