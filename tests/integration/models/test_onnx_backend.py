"""The ONNX Runtime backend against the real registry built by scripts/build-models."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest

from models.backends import Backend
from models.backends.errors import DeviceUnavailable
from models.backends.onnx import CUDA_PROVIDER, OnnxEmbeddingBackend
from models.backends.options import RuntimeOptions
from tests.built_models import MODEL_NAME, built_registry, resolve_or_skip
from models.registry import ModelIntegrityError, ModelRegistry

DIM = 384

QUERIES = (
    "how do I reset my password",
    "What's the weather like in Berlin tomorrow?",
    "Order #A-10293-XZ shipped on 2024-03-15 at 14:07 UTC.",
    "Le chat est sur la table.",
    "The mitochondria is the powerhouse of the cell, producing most of the chemical energy in the cell.",
)


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return built_registry()


@pytest.fixture(scope="module")
def fp32(registry: ModelRegistry) -> OnnxEmbeddingBackend:
    return OnnxEmbeddingBackend.load(registry, resolve_or_skip(registry, "fp32"))


@pytest.fixture(scope="module")
def int8(registry: ModelRegistry) -> OnnxEmbeddingBackend:
    return OnnxEmbeddingBackend.load(registry, resolve_or_skip(registry, "int8"))


@pytest.fixture(params=["fp32", "int8"])
def backend(request: pytest.FixtureRequest) -> OnnxEmbeddingBackend:
    loaded: OnnxEmbeddingBackend = request.getfixturevalue(request.param)
    return loaded


def _cosine(left: npt.NDArray[np.float32], right: npt.NDArray[np.float32]) -> float:
    return float(np.dot(left, right) / (np.linalg.norm(left) * np.linalg.norm(right)))


def test_satisfies_the_backend_protocol(backend: OnnxEmbeddingBackend) -> None:
    assert isinstance(backend, Backend)
    assert backend.device == "cpu"
    assert backend.manifest.outputs[0].normalized


def test_one_normalised_row_per_input(backend: OnnxEmbeddingBackend) -> None:
    rows = backend.infer(list(QUERIES))
    assert rows.shape == (len(QUERIES), DIM)
    assert rows.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)


def test_empty_input_gives_an_empty_matrix(backend: OnnxEmbeddingBackend) -> None:
    rows = backend.infer([])
    assert rows.shape == (0, DIM)
    assert rows.dtype == np.float32


def test_rows_keep_input_order_and_ignore_padding(fp32: OnnxEmbeddingBackend) -> None:
    # In a batch, short inputs are padded to the longest; pooling must ignore the padding.
    batched = fp32.infer(list(QUERIES))
    one_by_one = np.concatenate([fp32.infer([text]) for text in QUERIES])
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)


def test_a_bare_string_is_refused(fp32: OnnxEmbeddingBackend) -> None:
    with pytest.raises(TypeError, match="not a single string"):
        fp32.infer("one text")


def test_paraphrases_are_closer_than_unrelated_texts(backend: OnnxEmbeddingBackend) -> None:
    question, paraphrase, unrelated = backend.infer(
        ["How can I reset my password?", "I forgot my password, how do I change it?", "The cat sat on the mat."]
    )
    assert _cosine(question, paraphrase) > _cosine(question, unrelated) + 0.3


def test_int8_stays_close_to_its_fp32_parent(registry: ModelRegistry, int8: OnnxEmbeddingBackend) -> None:
    assert int8.manifest.parent is not None
    parent = OnnxEmbeddingBackend.load(registry, registry.resolve(MODEL_NAME, version=int8.manifest.parent))
    assert parent.manifest.precision == "fp32"
    cosines = [_cosine(a, b) for a, b in zip(parent.infer(list(QUERIES)), int8.infer(list(QUERIES)), strict=True)]
    assert float(np.mean(cosines)) >= 0.98


def test_concurrent_calls_give_the_serial_answers(fp32: OnnxEmbeddingBackend) -> None:
    batches = [list(QUERIES[i:]) for i in range(len(QUERIES))] * 2
    serial = [fp32.infer(batch) for batch in batches]
    with ThreadPoolExecutor(max_workers=4) as pool:
        concurrent = list(pool.map(fp32.infer, batches))
    for expected, actual in zip(serial, concurrent, strict=True):
        np.testing.assert_allclose(actual, expected, atol=1e-6)


def test_truncates_to_max_input_tokens(registry: ModelRegistry, fp32: OnnxEmbeddingBackend) -> None:
    short = OnnxEmbeddingBackend.load(registry, fp32.manifest, RuntimeOptions(max_input_tokens=8))
    assert short.max_input_tokens == 8
    long_text = "word " * 1000
    # Beyond the position table (512) the graph would fail; truncation keeps it valid.
    assert fp32.infer([long_text]).shape == (1, DIM)
    assert not np.allclose(short.infer([long_text]), fp32.infer([long_text]), atol=1e-3)


def test_a_tampered_model_is_refused(registry: ModelRegistry, fp32: OnnxEmbeddingBackend, tmp_path: Path) -> None:
    manifest = fp32.manifest
    copy = ModelRegistry(tmp_path)
    shutil.copytree(registry.version_dir(MODEL_NAME, manifest.id), copy.version_dir(MODEL_NAME, manifest.id))
    copied = copy.resolve(MODEL_NAME, version=manifest.id)
    model_file = copy.path_of(copied, copied.onnx_file)
    with model_file.open("r+b") as stream:
        stream.seek(model_file.stat().st_size // 2)
        byte = stream.read(1)
        stream.seek(-1, 1)
        stream.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ModelIntegrityError, match=r"model\.onnx has sha256"):
        OnnxEmbeddingBackend.load(copy, copied)


@pytest.mark.skipif(CUDA_PROVIDER in ort.get_available_providers(), reason="this machine can run CUDA")
def test_cuda_without_a_cuda_runtime_is_a_clear_error(registry: ModelRegistry, fp32: OnnxEmbeddingBackend) -> None:
    with pytest.raises(DeviceUnavailable, match=r"device 'cuda' requested.*onnxruntime-gpu"):
        OnnxEmbeddingBackend.load(registry, fp32.manifest, RuntimeOptions(device="cuda"))


def test_an_unknown_device_is_refused(registry: ModelRegistry, fp32: OnnxEmbeddingBackend) -> None:
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        OnnxEmbeddingBackend.load(registry, fp32.manifest, RuntimeOptions(device="tpu"))  # type: ignore[arg-type]
