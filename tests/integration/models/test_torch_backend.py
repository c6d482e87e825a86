"""The PyTorch backend against the real registry built by scripts/build-models.

It must serve the same registered version as ONNX Runtime and agree with it (cosine >=
0.999 per row in FP32), tokenise and sub-batch exactly like it, and refuse what it cannot
serve honestly: no CUDA, no PyTorch artifacts, tampered weights.
"""

from __future__ import annotations

import copy
import random
import shutil
from dataclasses import replace
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import torch
from pydantic import ValidationError

from models.backends import Backend
from models.backends.errors import DeviceError, DeviceOutOfMemory
from models.loading import ModelLoader
from models.backends.errors import DeviceUnavailable
from models.backends.onnx import OnnxEmbeddingBackend
from models.backends.options import RuntimeOptions
from models.backends.torch_backend import NoTorchArtifacts, TorchEmbeddingBackend
from models.build.sentences import SERVING_SENTENCES
from tests.built_models import MODEL_NAME, built_registry, resolve_or_skip
from models.registry import ModelIntegrityError, ModelManifest, ModelRegistry
from workers.settings import WorkerSettings

DIM = 384
MIN_COSINE = 0.999

# The build's check set (short, long, over-long, numbers, code, emoji, non-Latin scripts)
# plus a lone letter, digits only, and long non-English text.
SENTENCES = SERVING_SENTENCES


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return built_registry()


@pytest.fixture(scope="module")
def manifest(registry: ModelRegistry) -> ModelManifest:
    fp32 = resolve_or_skip(registry, "fp32")
    if fp32.torch_dir is None:
        pytest.skip(f"the newest FP32 version {fp32.id} in {registry.root} has no PyTorch artifacts "
                    "(built before the torch backend); run scripts/build-models to build one")
    return fp32


@pytest.fixture(scope="module")
def cpu(registry: ModelRegistry, manifest: ModelManifest) -> TorchEmbeddingBackend:
    return TorchEmbeddingBackend.load(registry, manifest)


@pytest.fixture(scope="module")
def onnx(registry: ModelRegistry, manifest: ModelManifest) -> OnnxEmbeddingBackend:
    return OnnxEmbeddingBackend.load(registry, manifest)


def _row_cosines(left: npt.NDArray[np.float32], right: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    left64, right64 = left.astype(np.float64), right.astype(np.float64)
    norms = np.linalg.norm(left64, axis=1) * np.linalg.norm(right64, axis=1)
    return np.asarray((left64 * right64).sum(axis=1) / norms)


def test_satisfies_the_backend_protocol(cpu: TorchEmbeddingBackend, manifest: ModelManifest) -> None:
    assert isinstance(cpu, Backend)
    assert cpu.device == "cpu"
    assert cpu.dtype == "float32"
    assert cpu.manifest == manifest
    assert cpu.max_input_tokens == min(256, manifest.max_length)


def test_agrees_with_onnx_runtime_on_the_same_version(cpu: TorchEmbeddingBackend, onnx: OnnxEmbeddingBackend) -> None:
    assert cpu.manifest.id == onnx.manifest.id
    cosines = _row_cosines(cpu.infer(list(SENTENCES)), onnx.infer(list(SENTENCES)))
    worst = int(np.argmin(cosines))
    assert cosines.min() >= MIN_COSINE, f"cosine {cosines[worst]:.6f} on {SENTENCES[worst]!r}"


def test_the_build_checked_the_stored_torch_weights(manifest: ModelManifest) -> None:
    assert manifest.check.passed
    assert manifest.check.figures["max_abs_diff_torch_artifacts"] <= manifest.check.threshold
    assert manifest.torch_config_file in manifest.files
    assert manifest.torch_weights_file in manifest.files


def test_one_normalised_float32_row_per_input(cpu: TorchEmbeddingBackend) -> None:
    rows = cpu.infer(list(SENTENCES))
    assert rows.shape == (len(SENTENCES), DIM)
    assert rows.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)


def test_empty_input_gives_an_empty_matrix(cpu: TorchEmbeddingBackend) -> None:
    rows = cpu.infer([])
    assert rows.shape == (0, DIM)
    assert rows.dtype == np.float32


def test_a_bare_string_is_refused(cpu: TorchEmbeddingBackend) -> None:
    with pytest.raises(TypeError, match="not a single string"):
        cpu.infer("one text")


def test_tokenises_and_sub_batches_like_the_onnx_backend(cpu: TorchEmbeddingBackend,
                                                         onnx: OnnxEmbeddingBackend) -> None:
    ours, theirs = cpu.encode(list(SENTENCES)), onnx.encode(list(SENTENCES))
    assert ours.lengths == theirs.lengths
    assert len(ours.chunks) == len(theirs.chunks) > 1
    for mine, other in zip(ours.chunks, theirs.chunks, strict=True):
        np.testing.assert_array_equal(mine.rows, other.rows)
        assert mine.feeds.keys() == other.feeds.keys()
        for name in mine.feeds:
            np.testing.assert_array_equal(mine.feeds[name], other.feeds[name])


def _with_buckets(backend: TorchEmbeddingBackend, size: int) -> TorchEmbeddingBackend:
    other = copy.copy(backend)  # shares the loaded module; only the sub-batch size differs
    other.length_bucket_size = size
    return other


def test_rows_keep_input_order_across_length_sub_batches(cpu: TorchEmbeddingBackend) -> None:
    texts = list(SENTENCES)
    random.Random(7).shuffle(texts)
    small_buckets = _with_buckets(cpu, 3)
    encoded = small_buckets.encode(texts)
    assert len(encoded.chunks) >= len(texts) // 3
    # Sorting by length reorders rows inside the run; the answer must not be reordered.
    assert any(not np.array_equal(chunk.rows, np.sort(chunk.rows)) or chunk.rows[0] != 0 for chunk in encoded.chunks)
    bucketed = small_buckets.run(encoded)
    one_by_one = np.concatenate([cpu.infer([text]) for text in texts])
    np.testing.assert_allclose(bucketed, one_by_one, atol=1e-5)
    padded_together = _with_buckets(cpu, 0).infer(texts)
    np.testing.assert_allclose(bucketed, padded_together, atol=1e-5)


def test_concurrent_calls_give_the_serial_answers(cpu: TorchEmbeddingBackend) -> None:
    texts = list(SENTENCES[:8])
    batches = [texts[i:] for i in range(len(texts))]
    serial = [cpu.infer(batch) for batch in batches]
    with ThreadPoolExecutor(max_workers=4) as pool:
        concurrent = list(pool.map(cpu.infer, batches))
    for expected, actual in zip(serial, concurrent, strict=True):
        np.testing.assert_allclose(actual, expected, atol=1e-5)


def test_warm_up_and_truncation(registry: ModelRegistry, manifest: ModelManifest, cpu: TorchEmbeddingBackend) -> None:
    short = TorchEmbeddingBackend.load(registry, manifest, RuntimeOptions(max_input_tokens=8, warmup=True))
    assert short.max_input_tokens == 8
    long_text = "word " * 1000
    assert cpu.infer([long_text]).shape == (1, DIM)  # beyond 512 positions BERT would fail
    assert not np.allclose(short.infer([long_text]), cpu.infer([long_text]), atol=1e-3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_cuda_without_a_device_is_refused_not_run_on_cpu(registry: ModelRegistry, manifest: ModelManifest) -> None:
    with pytest.raises(DeviceUnavailable, match=r"device 'cuda' requested but PyTorch .* sees no CUDA device"):
        TorchEmbeddingBackend.load(registry, manifest, RuntimeOptions(device="cuda"))


def test_an_unknown_device_is_refused(registry: ModelRegistry, manifest: ModelManifest) -> None:
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        TorchEmbeddingBackend.load(registry, manifest, RuntimeOptions(device="tpu"))  # type: ignore[arg-type]


def test_a_version_without_torch_artifacts_is_refused(registry: ModelRegistry) -> None:
    int8 = resolve_or_skip(registry, "int8")
    assert int8.torch_dir is None
    with pytest.raises(NoTorchArtifacts, match=rf"{int8.id} \(int8\) has no PyTorch artifacts.*backend=onnxruntime"):
        TorchEmbeddingBackend.load(registry, int8)


def test_tampered_torch_weights_are_refused(registry: ModelRegistry, manifest: ModelManifest, tmp_path: Path) -> None:
    copy = ModelRegistry(tmp_path)
    shutil.copytree(registry.version_dir(MODEL_NAME, manifest.id), copy.version_dir(MODEL_NAME, manifest.id))
    copied = copy.resolve(MODEL_NAME, version=manifest.id)
    assert copied.torch_weights_file is not None
    weights = copy.path_of(copied, copied.torch_weights_file)
    with weights.open("r+b") as stream:
        stream.seek(weights.stat().st_size // 2)
        byte = stream.read(1)
        stream.seek(-1, 1)
        stream.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ModelIntegrityError, match=r"torch/model\.safetensors has sha256"):
        TorchEmbeddingBackend.load(copy, copied)


def test_old_manifests_without_torch_dir_still_load(manifest: ModelManifest) -> None:
    data = manifest.model_dump(mode="json")
    del data["torch_dir"]
    data["files"] = {name: digest for name, digest in data["files"].items() if not name.startswith("torch/")}
    old = ModelManifest.model_validate(data)
    assert old.torch_dir is None and old.torch_weights_file is None


def test_a_torch_dir_must_list_its_artifacts(manifest: ModelManifest) -> None:
    data = manifest.model_dump(mode="json")
    del data["files"]["torch/model.safetensors"]
    with pytest.raises(ValueError, match=r"torch_dir artifact 'torch/model\.safetensors' is not listed"):
        ModelManifest.model_validate(data)
    data = manifest.model_dump(mode="json")
    data["torch_dir"] = "../elsewhere"
    with pytest.raises(ValueError, match="must be relative, inside the version folder"):
        ModelManifest.model_validate(data)


# Device failures are translated into the backend-neutral errors the worker acts on. A CPU
# machine cannot run out of CUDA memory for real (scripts/gpu-check does that on a GPU), so
# these stand in the library's exception for the model call.

def _failing_copy(cpu: TorchEmbeddingBackend, error: Exception,
                  monkeypatch: pytest.MonkeyPatch) -> TorchEmbeddingBackend:
    backend = TorchEmbeddingBackend(cpu.manifest, cpu._model, cpu._tokenizer, cpu.device)

    def fail(feeds: object) -> None:
        raise error

    monkeypatch.setattr(backend, "_embed", fail)
    return backend


def test_cuda_out_of_memory_becomes_device_out_of_memory(cpu: TorchEmbeddingBackend,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    emptied: list[bool] = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    backend = _failing_copy(cpu, torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
                            monkeypatch)
    with pytest.raises(DeviceOutOfMemory, match=r"out of memory on a sub-batch of \d+ rows x \d+ tokens") as caught:
        backend.infer(["hello", "world"])
    assert isinstance(caught.value, DeviceError)
    assert emptied == [True]


def test_other_device_failures_become_device_error(cpu: TorchEmbeddingBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _failing_copy(cpu, torch.AcceleratorError("CUDA error: an illegal memory access was encountered"),
                            monkeypatch)
    with pytest.raises(DeviceError, match="illegal memory access") as caught:
        backend.infer(["hello"])
    assert not isinstance(caught.value, DeviceOutOfMemory)


def test_input_errors_are_not_device_errors(cpu: TorchEmbeddingBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _failing_copy(cpu, ValueError("bad row"), monkeypatch)
    with pytest.raises(ValueError, match="bad row"):
        backend.infer(["hello"])


@pytest.mark.parametrize(("backend", "expected"), [("onnxruntime", OnnxEmbeddingBackend),
                                                   ("torch", TorchEmbeddingBackend)])
def test_loader_picks_the_backend_the_settings_name(registry: ModelRegistry, manifest: ModelManifest, backend: str,
                                                    expected: type) -> None:
    settings = WorkerSettings(model_dir=registry.root, model=MODEL_NAME, model_version=None, precision="fp32",
                              backend=backend, device="cpu", warmup=False, length_bucket_size=5, max_input_tokens=64)
    loaded = ModelLoader(settings.runtime()).load()
    assert type(loaded) is expected
    assert loaded.manifest.id == manifest.id
    assert loaded.device == "cpu"
    assert loaded.length_bucket_size == 5  # type: ignore[attr-defined]
    assert loaded.max_input_tokens == 64  # type: ignore[attr-defined]


def test_an_unknown_backend_is_refused_by_the_settings_and_the_loader(registry: ModelRegistry) -> None:
    with pytest.raises(ValidationError, match=r"backend\n  Input should be 'onnxruntime', 'torch' or 'sim'"):
        WorkerSettings(model_dir=registry.root, backend="tensorrt")  # type: ignore[arg-type]
    spec = replace(WorkerSettings(model_dir=registry.root).runtime(), backend="tensorrt")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"unknown backend 'tensorrt'; expected one of \('onnxruntime', 'torch', 'sim'\)"):
        ModelLoader(spec)


def test_loader_with_torch_refuses_int8(registry: ModelRegistry) -> None:
    int8 = resolve_or_skip(registry, "int8")
    settings = WorkerSettings(model_dir=registry.root, model=MODEL_NAME, model_version=None, precision="int8",
                              backend="torch", device="cpu", warmup=False)
    with pytest.raises(NoTorchArtifacts, match=int8.id):
        ModelLoader(settings.runtime()).load()
