"""The semantic tier reads the served model's languages: the encoder that shares its tokenizer, and
that encoder's verifier, unless the settings name them."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from models.registry import (
    AccuracyCheck,
    ModelManifest,
    ModelRegistry,
    ModelSource,
    OutputSpec,
    TensorSpec,
    hash_files,
)
from workers import WorkerSettings
from workers.cache.semantic_models import semantic_models

DAY = date(2026, 12, 7)


def _register(registry: ModelRegistry, name: str, tokenizer: str) -> ModelManifest:
    version_id = registry.next_version_id(name, DAY)
    folder = registry.version_dir(name, version_id)
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(b"not really onnx " + version_id.encode())
    (folder / "tokenizer.json").write_text(tokenizer)
    return registry.register(ModelManifest(
        id=version_id, name=name, created=datetime(2026, 12, 7, 12, tzinfo=UTC), precision="fp32", parent=None,
        source=ModelSource(package="fake-package", package_version="0.0.1", base_model="fake/base"),
        files=hash_files(folder, ["model.onnx", "tokenizer.json"]), onnx_file="model.onnx",
        tokenizer_file="tokenizer.json", max_length=16,
        inputs=(TensorSpec(name="input_ids", dtype="int64", shape=("batch", "sequence")),),
        outputs=(OutputSpec(name="embedding", dtype="float32", shape=("batch", 4), normalized=True),),
        check=AccuracyCheck.evaluate(name="fake-check", metric="mean_cosine", value=0.99, threshold=0.98,
                                     comparison=">=", figures={})))


@pytest.fixture
def registry(tmp_path: Path) -> ModelRegistry:
    registry = ModelRegistry(tmp_path / "models")
    _register(registry, "minilm-embed", '{"vocab": "wordpiece, English"}')
    _register(registry, "e5-embed", '{"vocab": "sentencepiece, 100 languages"}')
    return registry


def _settings(registry: ModelRegistry, **changes: object) -> WorkerSettings:
    return WorkerSettings(model="served", model_dir=registry.root, **changes)  # type: ignore[arg-type]


def test_a_model_that_reads_like_e5_gets_e5_and_the_multilingual_verifier(registry: ModelRegistry) -> None:
    served = _register(registry, "faq-intent-multilingual", '{"vocab": "sentencepiece, 100 languages"}')
    chosen = semantic_models(_settings(registry), registry, served)
    assert (chosen.encoder, chosen.verifier) == ("e5-embed", "cache-verifier-multilingual")
    assert "faq-intent-multilingual" in chosen.why
    applied = chosen.applied(_settings(registry))
    assert (applied.semantic_encoder_model, applied.semantic_verifier_model) == ("e5-embed", "cache-verifier-multilingual")


def test_minilm_readers_and_strangers_get_minilm_and_the_english_verifier(registry: ModelRegistry) -> None:
    english = _register(registry, "faq-intent", '{"vocab": "wordpiece, English"}')
    stranger = _register(registry, "imported-model", '{"vocab": "its own"}')
    for served in (english, stranger, None):
        chosen = semantic_models(_settings(registry), registry, served)
        assert (chosen.encoder, chosen.verifier) == ("minilm-embed", "cache-verifier")


def test_the_settings_win_and_the_verifier_follows_a_named_encoder(registry: ModelRegistry) -> None:
    served = _register(registry, "faq-intent-multilingual", '{"vocab": "sentencepiece, 100 languages"}')
    named = semantic_models(_settings(registry, semantic_encoder_model="minilm-embed"), registry, served)
    assert (named.encoder, named.verifier, named.why) == ("minilm-embed", "cache-verifier", "FLEET_SEMANTIC_ENCODER_MODEL")
    follows = semantic_models(_settings(registry, semantic_encoder_model="e5-embed"), registry, None)
    assert follows.verifier == "cache-verifier-multilingual"
    both = semantic_models(_settings(registry, semantic_encoder_model="e5-embed", semantic_verifier_model="cache-verifier"),
                           registry, served)
    assert (both.encoder, both.verifier) == ("e5-embed", "cache-verifier")
    imported = semantic_models(_settings(registry, semantic_encoder_model="my-embedder"), registry, served)
    assert imported.verifier == "cache-verifier"
