"""An imported model answers through a real worker (real Kafka and Redis) exactly what ONNX Runtime
answers when run directly on its registered graph: a transformers classifier, a cross-encoder and
a token classifier through FleetClient, a scikit-learn pipeline and XGBoost / LightGBM booster files
through a raw request carrying tensors."""

from __future__ import annotations

import io
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from tokenizers import Tokenizer

from gateway.client import FleetClient
from models.build.progress import Progress
from models.importing.converted import ImportRequest
from models.importing.pipeline import import_model
from models.importing.samples import TextSamples
from models.loading import ModelLoader
from models.registry import ModelManifest, ModelRegistry
from models.tasks.token_classification import TokenScores, spans
from schemas.tensors import decode_tensor, encode_tensor
from schemas.wire import ReplyTo, Result
from tests.integration.conftest import serving
from tests.integration.models.importing.boosters import (booster_predict, lightgbm_booster, with_missing_values,
                                                         xgboost_booster)
from tests.integration.models.importing.sources import ENTITIES, INTENTS, Sources
from workers.settings import WorkerSettings

TEXTS = ("where is my parcel", "I was charged twice this month", "can I send it back?")


def register(tmp_path: Path, source: Path, prefix: str) -> tuple[ModelRegistry, ModelManifest]:
    # A fresh name per run: topics and version pointers of earlier runs stay on the stack.
    registry = ModelRegistry(tmp_path / "models")
    name = f"{prefix}-{secrets.token_hex(4)}"
    (manifest,) = import_model(registry, str(source), ImportRequest(name=name), Progress(io.StringIO()))
    return registry, manifest


def worker_settings(registry: ModelRegistry, manifest: ModelManifest) -> WorkerSettings:
    return WorkerSettings(model=manifest.name, model_dir=registry.root, max_batch_size=8, max_queue_delay_ms=10,
                          session_timeout_ms=6000, exact_cache=False)


def direct(registry: ModelRegistry, manifest: ModelManifest, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(registry.path_of(manifest, manifest.onnx_file)), providers=["CPUExecutionProvider"])
    return [np.asarray(value) for value in session.run(None, feeds)]


async def answers(client: FleetClient, registry: ModelRegistry, manifest: ModelManifest,
                  requests: Sequence[str | Mapping[str, Any]]) -> list[Result]:
    """Serve the version with a real worker and send it each request through the client, in turn."""
    settings = worker_settings(registry, manifest)
    async with serving(settings, ModelLoader(settings.runtime()).load()):
        return [await client.infer(manifest.name, request, timeout=30) for request in requests]


@pytest.mark.usefixtures("stack")
async def test_imported_classifier_answers_through_the_client(tmp_path: Path, sources: Sources,
                                                              client: FleetClient) -> None:
    registry, manifest = register(tmp_path, sources.classifier, "imp-intents")
    results = await answers(client, registry, manifest, TEXTS)
    assert manifest.tokenizer_file is not None and manifest.max_length is not None
    samples = TextSamples(registry.path_of(manifest, manifest.tokenizer_file), manifest.max_length,
                          [spec.name for spec in manifest.inputs], TEXTS)
    for row, result in enumerate(results):
        (expected,) = direct(registry, manifest, samples.feeds([row]))
        assert result.status == "ok" and result.version == manifest.id, result
        assert result.outputs is not None
        assert result.outputs["label"] == INTENTS[int(expected[0].argmax())]
        assert result.outputs["score"] == pytest.approx(float(expected[0].max()), abs=1e-5)


async def infer_tensors(client: FleetClient, registry: ModelRegistry, manifest: ModelManifest,
                        inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Serve the version with a real worker and send it one raw request carrying tensors (as a pipeline
    producing to Kafka would); the output tensors of its result."""
    settings = worker_settings(registry, manifest)
    async with serving(settings, ModelLoader(settings.runtime()).load()):
        waiter = client.waiter
        request = client.build_request(manifest.name, "", timeout=30, reply=ReplyTo(redis=waiter.waiter_id))
        request = request.model_copy(update={"inputs": {name: encode_tensor(rows) for name, rows in inputs.items()}})
        reply = waiter.expect(request.id)
        try:
            await client.publish(request)
            result = await waiter.wait(reply, 30)
        finally:
            waiter.forget(request.id)
    assert result.status == "ok" and result.version == manifest.id and result.outputs is not None, result
    return {name: decode_tensor(tensor) for name, tensor in result.outputs["tensors"].items()}


@pytest.mark.usefixtures("stack")
async def test_imported_sklearn_pipeline_answers_a_raw_tensor_request(tmp_path: Path, sources: Sources,
                                                                      client: FleetClient) -> None:
    registry, manifest = register(tmp_path, sources.sklearn_pipeline, "imp-churn")
    rows = sources.sklearn_rows[:5]
    tensors = await infer_tensors(client, registry, manifest, {"X": rows})
    label, probabilities = direct(registry, manifest, {"X": rows})
    np.testing.assert_array_equal(tensors["label"], label)
    np.testing.assert_allclose(tensors["probabilities"], probabilities, atol=1e-6)


@pytest.mark.usefixtures("stack")
@pytest.mark.parametrize(("framework", "objective", "filename"), [("xgboost", "multi:softprob", "churn.json"),
                                                                  ("lightgbm", "regression", "spend.txt")])
async def test_an_imported_booster_file_answers_what_its_framework_predicts(
        tmp_path: Path, sources: Sources, client: FleetClient, framework: str, objective: str, filename: str) -> None:
    make = xgboost_booster if framework == "xgboost" else lightgbm_booster
    path = make(sources.sklearn_rows, objective, tmp_path / filename)
    registry, manifest = register(tmp_path, path, f"imp-{framework}")
    rows = with_missing_values(sources.sklearn_rows[:6])  # NaN: a missing value, which trees take
    (spec,) = manifest.inputs
    tensors = await infer_tensors(client, registry, manifest, {spec.name: rows})
    for name, answer in zip([out.name for out in manifest.outputs], direct(registry, manifest, {spec.name: rows})):
        np.testing.assert_array_equal(tensors[name], answer)  # the worker runs exactly the registered graph
    expected = booster_predict(path, rows)
    if framework == "xgboost":
        np.testing.assert_allclose(tensors["probabilities"], expected, atol=1e-5)
        np.testing.assert_array_equal(tensors["label"], expected.argmax(axis=1))
    else:
        np.testing.assert_allclose(tensors["variable"][:, 0], expected, rtol=1e-5, atol=1e-5)


QUERY = "how do I get a refund?"
PASSAGES = ["Refunds take five days.", "Our office is in Berlin.", "Send the parcel back within a month."]


@pytest.mark.usefixtures("stack")
async def test_imported_cross_encoder_reranks_through_the_client(tmp_path: Path, sources: Sources,
                                                                 client: FleetClient) -> None:
    registry, manifest = register(tmp_path, sources.cross_encoder, "imp-ranker")
    (result,) = await answers(client, registry, manifest, [{"query": QUERY, "passages": PASSAGES}])
    assert result.status == "ok" and result.version == manifest.id and result.outputs is not None, result
    tokenizer = Tokenizer.from_file(str(registry.path_of(manifest, manifest.tokenizer_file or "")))
    want = []
    for passage in PASSAGES:  # one pair at a time: no padding
        encoding = tokenizer.encode(QUERY, passage)
        feeds = {"input_ids": [encoding.ids], "attention_mask": [encoding.attention_mask],
                 "token_type_ids": [encoding.type_ids]}
        (score,) = direct(registry, manifest, {name: np.asarray(value, np.int64) for name, value in feeds.items()})
        want.append(float(score[0, 0]))
    np.testing.assert_allclose(result.outputs["scores"], want, rtol=1e-5, atol=1e-5)
    assert result.outputs["ranking"] == [int(i) for i in np.argsort(-np.asarray(want), kind="stable")]


@pytest.mark.usefixtures("stack")
async def test_imported_token_classifier_gives_the_spans_of_its_graph(tmp_path: Path, sources: Sources,
                                                                      client: FleetClient) -> None:
    registry, manifest = register(tmp_path, sources.token_classifier, "imp-ner")
    text = "Ada Lovelace met Charles Babbage in London"
    (result,) = await answers(client, registry, manifest, [text])
    assert result.status == "ok" and result.version == manifest.id and result.outputs is not None, result
    encoding = Tokenizer.from_file(str(registry.path_of(manifest, manifest.tokenizer_file or ""))).encode(text)
    (logits,) = direct(registry, manifest, {"input_ids": np.asarray([encoding.ids], np.int64),
                                            "attention_mask": np.asarray([encoding.attention_mask], np.int64)})
    real = [i for i, special in enumerate(encoding.special_tokens_mask) if not special]
    exp = np.exp(logits[0] - logits[0].max(axis=-1, keepdims=True))
    probabilities = (exp / exp.sum(axis=-1, keepdims=True))[real].astype(np.float32)
    want = spans(ENTITIES, TokenScores(probabilities, tuple(encoding.offsets[i] for i in real)))
    got = result.outputs["entities"]
    assert [(e["label"], e["start"], e["end"]) for e in got] == [(e["label"], e["start"], e["end"]) for e in want]
    np.testing.assert_allclose([e["score"] for e in got], [e["score"] for e in want], rtol=1e-5)
