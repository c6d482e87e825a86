"""Models nobody here wrote go live on a fleet whose gateway was already running: a scikit-learn
pipeline converted with skl2onnx (`fleet models import --task tensor --stable`), and a text export
shaped as the paraphrase-MiniLM file of the public package (inputs `ids`/`mask`; outputs `output`
[batch, seq], `461` [batch, width], `last_hidden_state` [batch, seq, width]), imported once with its
pooled output named and once mean-pooled from its token output. A worker is started for each, and
tritonclient (HTTP binary and JSON, gRPC) and /v1 get what ONNX Runtime gives run directly on the
file, with no gateway restart. Only documented commands and routes are used."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from skl2onnx import to_onnx
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from tokenizers import Tokenizer

from common.settings import FleetSettings
from tests.integration.conftest import ROOT, Process
from tests.integration.gateway.gateway_harness import free_port, issue_key
from tests.unit.models.importing.onnx_exports import messy_export, vocabulary_size, write_tokenizer

ATOL = 1e-5
ROWS = np.random.default_rng(41).standard_normal((5, 4)).astype(np.float32)


def skl2onnx_file(path: Path) -> Path:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((300, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(int) + (x[:, 1] > 0.5).astype(int)
    graph = to_onnx(make_pipeline(StandardScaler(), LogisticRegression()).fit(x, y), x[:1],
                    options={"zipmap": False}, target_opset=17)
    path.write_bytes(graph.SerializeToString())
    return path


def fleet(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-m", "fleet.cli", *args], cwd=ROOT, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    folder = tmp_path / "logs"
    folder.mkdir()
    return folder


def started_gateway(logs: Path) -> tuple[Process, int, int]:
    """A gateway following the catalogue (no FLEET_MODELS), started before any import."""
    port, grpc_port = free_port(), free_port()
    gateway = Process(["-m", "gateway.main"], {"FLEET_PORT": str(port), "FLEET_GRPC_PORT": str(grpc_port),
                                               "FLEET_CATALOG_POLL_S": "0.5"},
                      "GRPCInferenceService) listening", logs / "gateway.log")
    return gateway, port, grpc_port


def started_worker(model: str, env: dict[str, str], logs: Path) -> Process:
    return Process(["-m", "workers.main"], {**env, "FLEET_MODEL": model, "FLEET_WORKER_ID": f"{model}-1",
                                            "FLEET_SESSION_TIMEOUT_MS": "6000"}, "ready:", logs / f"{model}.log")


async def test_an_imported_skl2onnx_model_is_served_by_a_gateway_started_before_it(stack: FleetSettings,
                                                                                   tmp_path: Path,
                                                                                   logs: Path) -> None:
    model = f"churn-{uuid.uuid4().hex[:8]}"
    env = {"FLEET_MODEL_DIR": str(tmp_path / "models")}
    key = await issue_key(stack.redis_url, "import-tests")
    gateway, port, grpc_port = started_gateway(logs)
    worker: Process | None = None
    try:
        source = skl2onnx_file(tmp_path / "pipeline.onnx")
        imported = fleet("models", "import", str(source), "--name", model, "--task", "tensor", "--stable", env=env)
        assert f"{model}: stable is {model}-" in imported, imported
        worker = started_worker(model, env, logs)
        want = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(
            ["probabilities", "label"], {"X": ROWS})
        headers = {"Authorization": f"Bearer {key}"}
        await asyncio.to_thread(_tritonclient_http, f"127.0.0.1:{port}", model, headers, want)
        await asyncio.to_thread(_tritonclient_grpc, f"127.0.0.1:{grpc_port}", model, key, want)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30) as http:
            answer = await http.post(f"/v1/models/{model}/infer", json={"inputs": {"X": ROWS[:1].tolist()}})
            assert answer.status_code == 200, answer.text
            probabilities = answer.json()["outputs"]["tensors"]["probabilities"]
            got = np.asarray(probabilities["data"], dtype=np.float32).reshape(probabilities["shape"])
            np.testing.assert_allclose(got, want[0][:1], atol=ATOL)
    finally:
        if worker is not None:
            worker.stop(signal.SIGTERM)
        gateway.stop(signal.SIGTERM)


TEXTS = ["How do I reset my password?", "Where is my order ?"]


def file_rows(export: Path, tokenizer: Path, output: str, *, mean: bool) -> np.ndarray:
    """ONNX Runtime on the file as given, one text at a time (no padding); mean-pooled when asked."""
    session = ort.InferenceSession(str(export), providers=["CPUExecutionProvider"])
    rows = []
    for text in TEXTS:
        ids = np.asarray([Tokenizer.from_file(str(tokenizer)).encode(text).ids], dtype=np.int64)
        (values,) = session.run([output], {"ids": ids, "mask": np.ones_like(ids)})
        rows.append(values[0].mean(axis=0) if mean else values[0])
    return np.stack(rows).astype(np.float32)


async def test_a_messy_text_export_is_served_by_its_named_output_and_pooled_from_its_tokens(
        stack: FleetSettings, tmp_path: Path, logs: Path) -> None:
    tokenizer = write_tokenizer(tmp_path / "tokenizer")  # kept apart from the graph: --tokenizer
    export = messy_export(tmp_path / "export" / "model.onnx", vocabulary_size(tokenizer))
    env = {"FLEET_MODEL_DIR": str(tmp_path / "models")}
    suffix = uuid.uuid4().hex[:8]
    imports = {f"paraphrase-pooled-{suffix}": (["--output", "461"], file_rows(export, tokenizer, "461", mean=False)),
               f"paraphrase-mean-{suffix}": (["--output", "last_hidden_state", "--pooling", "mean"],
                                             file_rows(export, tokenizer, "last_hidden_state", mean=True))}
    key = await issue_key(stack.redis_url, "import-tests")
    headers = {"Authorization": f"Bearer {key}"}
    gateway, port, _ = started_gateway(logs)
    workers: list[Process] = []
    try:
        for model, (flags, _) in imports.items():
            fleet("models", "import", str(export), "--name", model, "--input", "input_ids=ids", "--input",
                  "attention_mask=mask", "--tokenizer", str(tokenizer), *flags, "--stable", env=env)
            workers.append(started_worker(model, env, logs))
        for model, (_, want) in imports.items():
            await asyncio.to_thread(_embeddings_over_tritonclient, f"127.0.0.1:{port}", model, headers, want)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30) as http:
                answer = await http.post(f"/v1/models/{model}/infer", json={"text": TEXTS[1]})
                assert answer.status_code == 200, answer.text
                np.testing.assert_allclose(np.asarray(answer.json()["outputs"]["embedding"], dtype=np.float32),
                                           want[1], atol=ATOL)
    finally:
        for worker in workers:
            worker.stop(signal.SIGTERM)
        gateway.stop(signal.SIGTERM)


def _embeddings_over_tritonclient(address: str, model: str, headers: dict[str, str], want: np.ndarray) -> None:
    client = httpclient.InferenceServerClient(address)  # gevent inside: created and used on one thread
    _until_ready(client, model, headers)
    for binary in (True, False):
        tensor = httpclient.InferInput("text", [len(TEXTS)], "BYTES")
        tensor.set_data_from_numpy(np.asarray(TEXTS, dtype=object), binary_data=binary)
        result = client.infer(model, [tensor], headers=dict(headers),
                              outputs=[httpclient.InferRequestedOutput("embedding", binary_data=binary)])
        np.testing.assert_allclose(result.as_numpy("embedding"), want, atol=ATOL)


def _until_ready(client: httpclient.InferenceServerClient, model: str, headers: dict[str, str]) -> None:
    give_up = time.monotonic() + 60
    while not client.is_model_ready(model, headers=dict(headers)):  # a live worker serves the stable version
        assert time.monotonic() < give_up, "the model never became ready"
        time.sleep(0.2)


def _tritonclient_http(address: str, model: str, headers: dict[str, str], want: list[np.ndarray]) -> None:
    client = httpclient.InferenceServerClient(address)
    _until_ready(client, model, headers)
    metadata = client.get_model_metadata(model, headers=dict(headers))
    assert metadata["parameters"] == {"task": "tensor"}, metadata  # its own card, not an embedding's
    assert [spec["name"] for spec in metadata["inputs"]] == ["X"]
    for binary in (True, False):
        tensor = httpclient.InferInput("X", list(ROWS.shape), "FP32")
        tensor.set_data_from_numpy(ROWS, binary_data=binary)
        outputs = [httpclient.InferRequestedOutput(name, binary_data=binary) for name in ("probabilities", "label")]
        result = client.infer(model, [tensor], outputs=outputs, headers=dict(headers))
        np.testing.assert_allclose(result.as_numpy("probabilities"), want[0], atol=ATOL)
        np.testing.assert_array_equal(result.as_numpy("label"), want[1])


def _tritonclient_grpc(address: str, model: str, key: str, want: list[np.ndarray]) -> None:
    client = grpcclient.InferenceServerClient(address)
    headers = {"authorization": f"Bearer {key}"}
    assert client.is_model_ready(model, headers=headers)
    metadata = client.get_model_metadata(model, headers=headers, as_json=True)
    assert json.loads(json.dumps(metadata))["inputs"][0]["name"] == "X"
    tensor = grpcclient.InferInput("X", list(ROWS.shape), "FP32")
    tensor.set_data_from_numpy(ROWS)
    result = client.infer(model, [tensor], headers=headers)
    np.testing.assert_allclose(result.as_numpy("probabilities"), want[0], atol=ATOL)
    np.testing.assert_array_equal(result.as_numpy("label"), want[1])
