"""The faq-intent classifier: its data, head and provenance logic, and the versions scripts/build-models built."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tests.built_models import built_registry, resolve_or_skip
from models.loading import ModelLoader
from models.backends.onnx import OnnxEmbeddingBackend
from models.build.faq import FAQ_MODEL_NAME, HELDOUT_MIN_ACCURACY, check_heldout_accuracy
from models.build.faq_data import load_faq_dataset
from models.build.head import PROBABILITIES, HeadHyperparameters, append_head, train_head
from models.build.provenance import code_commit
from models.registry import ModelManifest, ModelRegistry, RegistryError
from workers.settings import WorkerSettings

# Paraphrases written for this test, plus one held-out example; none is a training example.
QUERIES = {
    "how do I reset my password": "reset_password",
    "please switch off two-factor auth, I keep losing the codes": "disable_2fa",
    "I'd like to turn on 2-step verification for more security": "enable_2fa",
    "where exactly is my package right now": "track_order",
    "can I download last month's invoice as a PDF": "invoice_download",
    "stop renewing my plan, I want to cancel": "cancel_subscription",
}


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return built_registry()


@pytest.fixture(scope="module")
def fp32(registry: ModelRegistry) -> ModelManifest:
    return resolve_or_skip(registry, "fp32", FAQ_MODEL_NAME)


@pytest.fixture(scope="module")
def int8(registry: ModelRegistry) -> ModelManifest:
    return resolve_or_skip(registry, "int8", FAQ_MODEL_NAME)


# --- the data set and the pure build logic -------------------------------------------------


def test_the_shipped_data_set_has_enough_intents_and_a_held_out_split() -> None:
    dataset = load_faq_dataset()
    assert dataset.version.startswith("faq-intents-v1 sha256:") and len(dataset.version.split(":")[1]) == 12
    assert len(dataset.labels) >= 15
    assert {"enable_2fa", "disable_2fa", "reset_password"} <= set(dataset.labels)
    for label in range(len(dataset.labels)):
        assert 15 <= sum(example.label == label for example in dataset.train) <= 25
        assert sum(example.label == label for example in dataset.test) >= 5
    queries = {query.lower() for query in QUERIES}
    assert not queries & {example.text.lower() for example in dataset.train}
    assert queries & {example.text.lower() for example in dataset.test} == {"how do i reset my password"}


def test_a_sentence_in_two_intents_is_refused(tmp_path: Path) -> None:
    data = {"version": "tiny", "intents": [
        {"name": "a", "train": ["hello there"], "test": ["hi"]},
        {"name": "b", "train": ["Hello  there"], "test": ["bye"]},
    ]}
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match=r"appears in a/train and in b/train"):
        load_faq_dataset(path)


def test_head_training_is_deterministic_and_the_onnx_head_matches_numpy(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    centres = np.eye(3, 4, dtype=np.float32)
    labels = np.repeat(np.arange(3), 20)
    rows = centres[labels] + rng.normal(scale=0.1, size=(60, 4)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    hyper = HeadHyperparameters(epochs=50)
    head = train_head(rows, labels, 3, hyper)
    assert np.array_equal(head.weight, train_head(rows, labels, 3, hyper).weight)
    assert np.mean(head.probabilities(rows).argmax(axis=1) == labels) == 1.0

    # A stand-in encoder: the embedding is the input, passed through.
    encoder = helper.make_model(helper.make_graph(
        [helper.make_node("Identity", ["x"], ["embedding"])], "encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", 4])],
    ), opset_imports=[helper.make_opsetid("", 17)])
    encoder.ir_version = 8  # as the built models; onnx's default (14) is newer than the GPU flavour's ONNX Runtime reads
    onnx.save(encoder, str(tmp_path / "encoder.onnx"))
    append_head(tmp_path / "encoder.onnx", head, tmp_path / "classifier.onnx")
    session = ort.InferenceSession(str(tmp_path / "classifier.onnx"), providers=["CPUExecutionProvider"])
    assert [output.name for output in session.get_outputs()] == [PROBABILITIES]
    (probabilities,) = session.run(None, {"x": rows})
    np.testing.assert_allclose(probabilities, head.probabilities(rows), atol=1e-5)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)


def test_the_accuracy_check_fails_below_its_threshold() -> None:
    labels = np.array([0, 1, 1, 1], dtype=np.int64)
    probabilities = np.eye(2, dtype=np.float32)[[0, 0, 0, 1]]
    check = check_heldout_accuracy(probabilities, labels, 2)
    assert (check.value, check.passed, check.figures["min_intent_accuracy"]) == (0.5, False, pytest.approx(1 / 3))
    assert HELDOUT_MIN_ACCURACY == check.threshold


def test_code_commit_names_head_and_marks_a_dirty_tree(tmp_path: Path) -> None:
    assert code_commit(tmp_path) is None  # not a repository
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "a.txt").write_text("a", encoding="utf-8")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    assert code_commit(tmp_path) == head
    (tmp_path / "b.txt").write_text("new, untracked", encoding="utf-8")
    assert code_commit(tmp_path) == f"{head}-dirty"


# --- the versions scripts/build-models registered ---------------------------------------


@pytest.mark.models
def test_the_built_fp32_version_is_a_checked_classifier_on_the_minilm_graph(
    registry: ModelRegistry, fp32: ModelManifest
) -> None:
    assert fp32.task == "classification"
    assert len(fp32.labels) >= 15 and fp32.embedding_dim == len(fp32.labels)
    assert fp32.outputs[0].name == PROBABILITIES and not fp32.outputs[0].normalized
    assert fp32.check.passed and fp32.check.metric == "heldout_accuracy"
    assert fp32.check.value >= HELDOUT_MIN_ACCURACY
    assert fp32.torch_dir is None
    assert fp32.training_data == load_faq_dataset().version
    assert {"lr", "epochs", "l2", "seed"} <= set(fp32.hyperparameters)
    assert fp32.parent is not None
    encoder = registry.resolve("minilm-embed", version=fp32.parent)
    assert encoder.precision == "fp32" and encoder.task == "embedding"
    assert [spec.name for spec in fp32.inputs] == [spec.name for spec in encoder.inputs]


@pytest.mark.models
def test_the_int8_version_derives_from_the_fp32_one(fp32: ModelManifest, int8: ModelManifest) -> None:
    assert int8.parent == fp32.id
    assert int8.labels == fp32.labels and int8.task == "classification"
    assert int8.check.passed and int8.check.metric == "label_agreement" and int8.check.value >= 0.97
    assert int8.training_data == fp32.training_data


@pytest.mark.models
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_queries_classify_through_the_serving_loader(registry: ModelRegistry, precision: str) -> None:
    resolve_or_skip(registry, precision, FAQ_MODEL_NAME)
    settings = WorkerSettings(model=FAQ_MODEL_NAME, precision=precision, model_dir=registry.root)  # type: ignore[arg-type]
    backend = ModelLoader(settings.runtime()).load()
    assert isinstance(backend, OnnxEmbeddingBackend)
    rows = backend.infer(list(QUERIES))
    labels = backend.manifest.labels
    assert rows.shape == (len(QUERIES), len(labels))
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=1e-4)
    assert [labels[index] for index in rows.argmax(axis=1)] == list(QUERIES.values())


@pytest.mark.models
def test_the_torch_backend_refuses_a_classifier(registry: ModelRegistry, fp32: ModelManifest) -> None:
    settings = WorkerSettings(model=FAQ_MODEL_NAME, backend="torch", model_dir=registry.root)
    with pytest.raises(RegistryError, match=r"classification model.*backend=onnxruntime"):
        ModelLoader(settings.runtime()).load()
