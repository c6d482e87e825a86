"""The rerank backend cuts a batch's (query, passage) pairs into runs by length and by a padded-token
budget: whatever the cut, each request gets its own passages' scores, in its passages' order, equal
to ONNX Runtime run on one pair at a time."""

from __future__ import annotations

import random

import numpy as np
import onnxruntime as ort
import pytest
from tokenizers import Tokenizer

from models.backends.options import RuntimeOptions
from models.backends.text_tasks import CPU_TOKENS_PER_RUN, OnnxRerankBackend, tokens_per_run
from models.registry import ModelManifest, ModelRegistry
from schemas.task_inputs import RerankInput
from tests.built_models import built_registry, resolve_or_skip
from tests.task_models import RERANK_MODEL, register_text_task_models

WORDS = ["where", "is", "my", "parcel", "refund", "paris", "france", "the", "tower", "yellow", "bananas", "password"]
BUDGET = 48  # small enough that the batch below is cut into many runs of a few pairs each


@pytest.fixture(scope="module")
def reranker(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModelRegistry, ModelManifest]:
    built = built_registry()
    encoder = resolve_or_skip(built, "fp32")
    assert encoder.tokenizer_file is not None
    registry = ModelRegistry(tmp_path_factory.mktemp("registry") / "models")
    rerank, _ = register_text_task_models(registry, built.path_of(encoder, encoder.tokenizer_file))
    return registry, rerank


def _requests(count: int, seed: int) -> list[RerankInput]:
    rng = random.Random(seed)

    def text(low: int, high: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))

    return [RerankInput(text(1, 6), tuple(text(1, 30) for _ in range(rng.randint(1, 9)))) for _ in range(count)]


def _one_pair_at_a_time(registry: ModelRegistry, manifest: ModelManifest,
                        items: list[RerankInput]) -> list[np.ndarray]:
    """ONNX Runtime on each (query, passage) pair alone, tokenised by the version's tokenizer: no padding at all."""
    assert manifest.tokenizer_file is not None
    tokenizer = Tokenizer.from_file(str(registry.path_of(manifest, manifest.tokenizer_file)))
    tokenizer.no_padding()
    session = ort.InferenceSession(str(registry.path_of(manifest, manifest.onnx_file)),
                                   providers=["CPUExecutionProvider"])
    answers = []
    for item in items:
        scores = []
        for passage in item.passages:
            encoding = tokenizer.encode(item.query, passage)
            feeds = {"input_ids": encoding.ids, "attention_mask": encoding.attention_mask,
                     "token_type_ids": encoding.type_ids}
            (score,) = session.run(["score"], {name: np.asarray([v], np.int64) for name, v in feeds.items()})
            scores.append(float(score[0, 0]))
        answers.append(np.asarray(scores, np.float32))
    return answers


def test_a_cpu_bounds_its_runs_and_a_gpu_does_not() -> None:
    assert tokens_per_run("cpu") == CPU_TOKENS_PER_RUN > 0
    assert tokens_per_run("cuda") == 0


@pytest.mark.models
def test_runs_within_the_budget_answer_each_request_in_its_passages_order(
        reranker: tuple[ModelRegistry, ModelManifest]) -> None:
    registry, manifest = reranker
    backend = OnnxRerankBackend.load(registry, manifest, RuntimeOptions(intra_op_threads=1))
    assert backend.tokens_per_run == CPU_TOKENS_PER_RUN
    backend.tokens_per_run = BUDGET
    items = _requests(32, seed=3)
    encoded = backend.encode(items)
    assert len(encoded.chunks) > 8
    assert all(chunk.feeds["input_ids"].size <= BUDGET or len(chunk.rows) == 1 for chunk in encoded.chunks)
    batched = backend.run(encoded)
    alone = [backend.infer([item])[0] for item in items]
    direct = _one_pair_at_a_time(registry, manifest, items)
    for item, scores, single, pairs in zip(items, batched, alone, direct, strict=True):
        assert scores.shape == (len(item.passages),)
        np.testing.assert_allclose(scores, single, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(scores, pairs, rtol=1e-5, atol=1e-5)


@pytest.mark.models
def test_without_a_budget_the_scores_are_the_same(reranker: tuple[ModelRegistry, ModelManifest]) -> None:
    registry, manifest = reranker
    bounded = OnnxRerankBackend.load(registry, manifest, RuntimeOptions(intra_op_threads=1))
    unbounded = OnnxRerankBackend.load(registry, manifest, RuntimeOptions(intra_op_threads=1))
    unbounded.tokens_per_run = 0
    items = _requests(32, seed=4)
    assert len(unbounded.encode(items).chunks) < len(bounded.encode(items).chunks)
    for a, b in zip(bounded.infer(items), unbounded.infer(items), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)

