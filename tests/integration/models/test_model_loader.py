"""The one loader: the configured version, a named version of another precision, the cache encoder, sizes."""

from __future__ import annotations

import pytest

from models.backends.onnx import OnnxEmbeddingBackend
from models.loading import ModelLoader, RuntimeSpec
from models.registry import ModelNotFound, ModelRegistry
from tests.built_models import MODEL_NAME, built_registry, resolve_or_skip
from workers.settings import WorkerSettings


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return built_registry()


def fp32_worker(registry: ModelRegistry, **extra: object) -> ModelLoader:
    settings = WorkerSettings(model_dir=registry.root, model=MODEL_NAME, precision="fp32", warmup=False,
                              **extra)  # type: ignore[arg-type]
    return ModelLoader(settings.runtime())


def test_the_settings_spec_carries_every_runtime_option(registry: ModelRegistry) -> None:
    spec = WorkerSettings(model_dir=registry.root, model_version="v", intra_op_threads=3, intra_op_spinning=False,
                          graph_optimization="basic", max_input_tokens=64, length_bucket_size=4,
                          device_memory_headroom=0.2).runtime()
    assert (spec.registry_dir, spec.version, spec.precision, spec.backend) == (registry.root, "v", "fp32", "onnxruntime")
    options = spec.options
    assert (options.intra_op_threads, options.spinning, options.graph_optimization, options.max_input_tokens,
            options.length_bucket_size, options.memory_headroom, options.warmup) == (3, False, "basic", 64, 4, 0.2, True)


def test_an_fp32_worker_loads_its_int8_candidate_by_name(registry: ModelRegistry) -> None:
    int8 = resolve_or_skip(registry, "int8")
    loader = fp32_worker(registry)
    assert loader.load().manifest.precision == "fp32"
    candidate = loader.load_version(int8.id)
    assert candidate.manifest.id == int8.id and candidate.manifest.precision == "int8"


def test_a_pin_of_the_other_precision_is_refused_as_the_configured_version(registry: ModelRegistry) -> None:
    int8 = resolve_or_skip(registry, "int8")
    with pytest.raises(ModelNotFound, match=rf"{int8.id}.* is int8, not fp32"):
        fp32_worker(registry, model_version=int8.id).load()


def test_the_encoder_runs_on_onnx_runtime_with_one_quiet_thread(registry: ModelRegistry) -> None:
    int8 = resolve_or_skip(registry, "int8")
    resolve_or_skip(registry, "fp32")
    loader = fp32_worker(registry, backend="torch")
    encoder = loader.load_encoder(MODEL_NAME, "int8")
    assert isinstance(encoder, OnnxEmbeddingBackend) and encoder.manifest.id == int8.id
    options = encoder._session.get_session_options()  # noqa: SLF001: what the loader asked ORT for
    assert options.intra_op_num_threads == 1
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_the_resident_size_is_the_size_of_the_artifacts(registry: ModelRegistry) -> None:
    manifest = resolve_or_skip(registry, "int8")
    loader = ModelLoader(RuntimeSpec(registry.root, MODEL_NAME, precision="int8"))
    backend = loader.load()
    expected = sum(registry.path_of(manifest, name).stat().st_size for name in manifest.files)
    assert loader.resident_size(backend) == expected > 10_000_000
