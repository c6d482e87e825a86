"""The rerank and token-classification tasks end to end on the real Kafka and Redis, with tiny ONNX
graphs made by the test over the bundled MiniLM tokenizer: FleetClient, a raw Kafka producer and
the gateway get what ONNX Runtime gives when run directly on the same tokens."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgpack
import numpy as np
import onnxruntime as ort
import pytest
from aiokafka import AIOKafkaProducer
from tokenizers import Tokenizer

from common.settings import FleetSettings
from gateway.client import FleetClient
from gateway.settings import GatewaySettings
from models.loading import ModelLoader
from models.registry import ModelManifest, ModelRegistry
from schemas.names import DLQ_TOPIC, requests_topic
from schemas.wire import DeadLetter, Status, new_request_id, now_ms
from tests.built_models import built_registry, resolve_or_skip
from tests.integration.conftest import end_offsets, read_from, serving
from tests.integration.gateway.gateway_harness import GatewayHttp, in_process
from tests.task_models import RERANK_MODEL, TOKENS_MODEL, register_text_task_models
from workers.settings import WorkerSettings
from workers.worker import Worker

pytestmark = pytest.mark.models
QUERY = "where is paris"
PASSAGES = ["Paris is the capital of France.", "Bananas are yellow.", "The Eiffel tower stands in Paris, France.",
            "paris"]
TEXT = "I flew from Paris to New York yesterday"


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModelRegistry, ModelManifest, ModelManifest]:
    built = built_registry()
    encoder = resolve_or_skip(built, "fp32")
    assert encoder.tokenizer_file is not None
    registry = ModelRegistry(tmp_path_factory.mktemp("registry") / "models")
    rerank, tokens = register_text_task_models(registry, built.path_of(encoder, encoder.tokenizer_file))
    return registry, rerank, tokens


def _settings(registry: ModelRegistry, model: str) -> WorkerSettings:
    return WorkerSettings(model=model, model_dir=registry.root, max_batch_size=32, max_queue_delay_ms=10,
                          session_timeout_ms=6000, exact_cache=True, exact_cache_redis=False)


@pytest.fixture(scope="module")
async def workers(registered: tuple[ModelRegistry, ModelManifest, ModelManifest],
                  stack: FleetSettings) -> AsyncIterator[tuple[Worker, Worker]]:
    registry = registered[0]
    rerank_settings, token_settings = _settings(registry, RERANK_MODEL), _settings(registry, TOKENS_MODEL)
    async with serving(rerank_settings, ModelLoader(rerank_settings.runtime()).load()) as rerank, \
            serving(token_settings, ModelLoader(token_settings.runtime()).load()) as tokens:
        yield rerank, tokens


def _session(registry: ModelRegistry, manifest: ModelManifest) -> tuple[ort.InferenceSession, Tokenizer]:
    assert manifest.tokenizer_file is not None
    tokenizer = Tokenizer.from_file(str(registry.path_of(manifest, manifest.tokenizer_file)))
    tokenizer.no_padding()
    session = ort.InferenceSession(str(registry.path_of(manifest, manifest.onnx_file)),
                                   providers=["CPUExecutionProvider"])
    return session, tokenizer


def direct_scores(registry: ModelRegistry, manifest: ModelManifest, query: str, passages: list[str]) -> np.ndarray:
    session, tokenizer = _session(registry, manifest)
    scores = []
    for passage in passages:  # one pair at a time: no padding at all
        encoding = tokenizer.encode(query, passage)
        feeds = {"input_ids": [encoding.ids], "attention_mask": [encoding.attention_mask],
                 "token_type_ids": [encoding.type_ids]}
        (score,) = session.run(["score"], {name: np.asarray(v, np.int64) for name, v in feeds.items()})
        scores.append(float(score[0, 0]))
    return np.asarray(scores, np.float32)


def direct_place_probability(registry: ModelRegistry, manifest: ModelManifest, text: str, word: str) -> float:
    session, tokenizer = _session(registry, manifest)
    encoding = tokenizer.encode(text)
    (logits,) = session.run(["logits"], {"input_ids": np.asarray([encoding.ids], np.int64),
                                         "attention_mask": np.asarray([encoding.attention_mask], np.int64)})
    token = encoding.tokens.index(word)
    row = np.exp(logits[0, token] - logits[0, token].max())
    return float((row / row.sum()).max())


async def test_rerank_through_the_client_and_a_raw_producer(
        workers: tuple[Worker, Worker], registered: tuple[ModelRegistry, ModelManifest, ModelManifest],
        client: FleetClient, producer: AIOKafkaProducer) -> None:
    registry, rerank, _ = registered
    want = direct_scores(registry, rerank, QUERY, PASSAGES)
    result = await client.infer(RERANK_MODEL, {"query": QUERY, "passages": PASSAGES})
    assert result.status is Status.ok and result.outputs is not None
    np.testing.assert_allclose(result.outputs["scores"], want, rtol=1e-5, atol=1e-5)
    assert result.outputs["ranking"] == [int(i) for i in np.argsort(-want, kind="stable")]
    request_id = new_request_id()
    await producer.send_and_wait(requests_topic(RERANK_MODEL), msgpack.packb(
        {"v": 1, "id": request_id, "model": RERANK_MODEL, "inputs": {"query": QUERY, "passages": PASSAGES[:2]},
         "deadline_ms": now_ms() + 30_000, "submitted_ms": now_ms()}))
    raw = await _result_of(client, request_id)
    assert raw is not None and raw.outputs is not None
    np.testing.assert_allclose(raw.outputs["scores"], want[:2], rtol=1e-5, atol=1e-5)
    again = await client.infer(RERANK_MODEL, {"query": QUERY, "passages": PASSAGES})
    assert again.cache == "exact" and again.outputs == result.outputs


async def test_rerank_batches_requests_of_many_passages_and_each_gets_its_own(
        registered: tuple[ModelRegistry, ModelManifest, ModelManifest], client: FleetClient) -> None:
    registry, rerank, _ = registered
    settings = _settings(registry, RERANK_MODEL).model_copy(update={"exact_cache": False})
    asked = [(f"{QUERY} {i}", PASSAGES[: 1 + i % len(PASSAGES)]) for i in range(12)]
    async with Worker(settings, backend=ModelLoader(settings.runtime()).load()) as worker:
        ids = [await client.submit(RERANK_MODEL, {"query": q, "passages": p}) for q, p in asked]
        await worker.run(burst=True)
    results = [await client.result(request_id) for request_id in ids]
    for (query, passages), result in zip(asked, results, strict=True):
        assert result is not None and result.outputs is not None
        np.testing.assert_allclose(result.outputs["scores"], direct_scores(registry, rerank, query, passages),
                                   rtol=1e-5, atol=1e-5)
    assert max(r.batch_size for r in results if r is not None) > 1


async def test_token_classification_gives_spans_with_character_offsets(
        workers: tuple[Worker, Worker], registered: tuple[ModelRegistry, ModelManifest, ModelManifest],
        client: FleetClient) -> None:
    registry, _, tokens = registered
    result = await client.infer(TOKENS_MODEL, TEXT)
    assert result.status is Status.ok and result.outputs is not None
    entities = result.outputs["entities"]
    assert [(e["label"], TEXT[e["start"]:e["end"]]) for e in entities] == [("PLACE", "Paris"), ("PLACE", "New York")]
    assert entities[0]["score"] == pytest.approx(direct_place_probability(registry, tokens, TEXT, "paris"), rel=1e-5)
    empty = await client.infer(TOKENS_MODEL, "nothing to see")
    assert empty.outputs == {"entities": []}


async def test_bad_rerank_requests_are_dead_letters(workers: tuple[Worker, Worker], producer: AIOKafkaProducer,
                                                    client: FleetClient, stack: FleetSettings) -> None:
    before = await end_offsets(stack, DLQ_TOPIC)
    bad = {"no passages": {"query": "q", "passages": []}, "not a string": {"query": "q", "passages": ["a", 3]},
           "no query": {"passages": ["a"]}}
    for inputs in bad.values():
        await producer.send_and_wait(requests_topic(RERANK_MODEL), msgpack.packb(
            {"v": 1, "id": new_request_id(), "model": RERANK_MODEL, "inputs": inputs,
             "deadline_ms": now_ms() + 30_000, "submitted_ms": now_ms()}))
    letters = [DeadLetter.decode(v) for v in await read_from(stack, before, until=lambda v: len(v) >= 3)]
    reasons = sorted(letter.reason for letter in letters)
    assert any("inputs.passages: a list of 1 to 64 strings" in r for r in reasons), reasons
    assert any("inputs.passages.1: a string is required" in r for r in reasons), reasons
    assert any("inputs.query: a string is required" in r for r in reasons), reasons
    ok = await client.infer(RERANK_MODEL, {"query": "q", "passages": ["a"]})
    assert ok.status is Status.ok


@pytest.fixture(scope="module")
async def gateway(workers: tuple[Worker, Worker]) -> AsyncIterator[GatewayHttp]:
    async with in_process(GatewaySettings(models=[RERANK_MODEL, TOKENS_MODEL], default_timeout_s=30)) as http:
        yield http


async def test_the_gateway_serves_both_tasks_and_refuses_what_they_do_not_take(
        gateway: GatewayHttp, registered: tuple[ModelRegistry, ModelManifest, ModelManifest]) -> None:
    registry, rerank, _ = registered
    answer = await gateway.post(f"/v1/models/{RERANK_MODEL}/infer", json={"query": QUERY, "passages": PASSAGES})
    assert answer.status_code == 200, answer.text
    np.testing.assert_allclose(answer.json()["outputs"]["scores"], direct_scores(registry, rerank, QUERY, PASSAGES),
                               rtol=1e-5, atol=1e-5)
    spans = await gateway.post(f"/v1/models/{TOKENS_MODEL}/requests", json={"text": TEXT})
    assert spans.status_code == 202
    for _ in range(300):
        fetched = await gateway.get(spans.json()["result_url"])
        if fetched.status_code == 200:
            break
        await asyncio.sleep(0.1)
    assert [e["label"] for e in fetched.json()["outputs"]["entities"]] == ["PLACE", "PLACE"]
    for body, field in (({"text": "a text"}, "inputs.query"), ({"query": "q", "passages": []}, "inputs.passages"),
                        ({"query": "q", "passages": ["p"] * 65}, "inputs.passages")):
        refused = await gateway.post(f"/v1/models/{RERANK_MODEL}/infer", json=body)
        assert refused.status_code == 422 and field in refused.text, refused.text
    refused = await gateway.post(f"/v1/models/{TOKENS_MODEL}/infer", json={"query": "q", "passages": ["p"]})
    assert refused.status_code == 422 and "a string is required" in refused.text


async def _result_of(client: FleetClient, request_id: str):  # type: ignore[no-untyped-def]
    for _ in range(300):
        if (result := await client.result(request_id)) is not None:
            return result
        await asyncio.sleep(0.1)
    return None
