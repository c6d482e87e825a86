"""Tiny models for the task tests, made by the test itself (onnx.helper, no network) and registered
in a throwaway registry with a manifest made the way the registry checks it."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from models.build.graph import describe_io
from models.registry import AccuracyCheck, ImportSource, ModelManifest, ModelRegistry, hash_files, sha256_of

TENSOR_MODEL = "tiny-tensor"
ONNX_FILE = "model.onnx"
# The weights of the tensor model: y = (x @ W) * scale, total = sum(x, axis 1).
WEIGHTS = np.arange(8, dtype=np.float32).reshape(4, 2) / 8 - 0.3


def tensor_graph() -> onnx.ModelProto:
    """Inputs x float32 [n, 4], scale float32 [n, 1]; outputs y float32 [n, 2], total float32 [n]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    scale = helper.make_tensor_value_info("scale", TensorProto.FLOAT, ["n", 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2])
    total = helper.make_tensor_value_info("total", TensorProto.FLOAT, ["n"])
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("Mul", ["xw", "scale"], ["y"]),
        helper.make_node("ReduceSum", ["x", "axes"], ["total"], keepdims=0),
    ]
    initializers = [numpy_helper.from_array(WEIGHTS, "W"), numpy_helper.from_array(np.array([1], np.int64), "axes")]
    graph = helper.make_graph(nodes, "tiny_tensor", [x, scale], [y, total], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _check() -> AccuracyCheck:
    return AccuracyCheck.evaluate(name="made-by-the-test", metric="max_abs_diff", value=0.0, threshold=1e-5,
                                  comparison="<=")


def register_onnx(registry: ModelRegistry, name: str, model: onnx.ModelProto, *, task: str = "tensor",
                  day: date = date(2026, 1, 2), extra_files: dict[str, Path] | None = None,
                  **fields: object) -> ModelManifest:
    """Write `model` (and `extra_files`, e.g. a tokenizer) into the next version of `name`; register it."""
    version = registry.next_version_id(name, day)
    folder = registry.version_dir(name, version)
    folder.mkdir(parents=True)
    onnx.save(model, str(folder / ONNX_FILE))
    for filename, source in (extra_files or {}).items():
        (folder / filename).write_bytes(source.read_bytes())
    inputs, outputs = describe_io(folder / ONNX_FILE, normalized_outputs=False)
    manifest = ModelManifest(
        id=version, name=name, created=datetime(day.year, day.month, day.day, tzinfo=UTC), precision="fp32",
        parent=None, source=ImportSource(format="onnx", uri=str(folder / ONNX_FILE),
                                         sha256={ONNX_FILE: sha256_of(folder / ONNX_FILE)}),
        files=hash_files(folder, [ONNX_FILE, *(extra_files or {})]), onnx_file=ONNX_FILE, inputs=inputs,
        outputs=outputs, check=_check(), task=task, **fields)  # type: ignore[arg-type]
    return registry.register(manifest)


RERANK_MODEL = "tiny-rerank"
TOKENS_MODEL = "tiny-entities"
TOKEN_LABELS = ("O", "B-PLACE", "I-PLACE")
PLACE_WORDS = {"paris": 1, "london": 1, "new": 1, "york": 2}  # word -> label index of its token


def _token_inputs(*names: str) -> list[onnx.ValueInfoProto]:
    return [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"]) for name in names]


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def rerank_graph(vocab_size: int) -> onnx.ModelProto:
    """A cross-encoder in miniature: score [batch, 1] = sum over tokens of weight[id] * mask * (1 + type)."""
    weights = np.random.default_rng(5).normal(size=vocab_size).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["weights", "input_ids"], ["token_scores"]),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["token_type_ids"], ["types"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["types", "one"], ["second_weight"]),
        helper.make_node("Mul", ["mask", "second_weight"], ["token_weight"]),
        helper.make_node("Mul", ["token_scores", "token_weight"], ["weighted"]),
        helper.make_node("ReduceSum", ["weighted", "axes"], ["score"], keepdims=1),
    ]
    initializers = [numpy_helper.from_array(weights, "weights"), numpy_helper.from_array(np.float32(1.0), "one"),
                    numpy_helper.from_array(np.array([1], np.int64), "axes")]
    score = helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch", 1])
    inputs = _token_inputs("input_ids", "attention_mask", "token_type_ids")
    return _model(helper.make_graph(nodes, "tiny_rerank", inputs, [score], initializers))


def token_graph(vocab_size: int, place_ids: dict[int, int]) -> onnx.ModelProto:
    """logits [batch, sequence, 3] looked up per token id: `O` but for the ids of place words."""
    table = np.tile(np.array([3.0, 0.0, 0.0], np.float32), (vocab_size, 1))
    for token_id, label in place_ids.items():
        table[token_id] = np.roll(np.array([3.0, 0.5, 0.0], np.float32), label)
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["logits"]),
             helper.make_node("Identity", ["attention_mask"], ["unused_mask"])]
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "sequence", 3])
    graph = helper.make_graph(nodes, "tiny_entities", _token_inputs("input_ids", "attention_mask"), [logits],
                              [numpy_helper.from_array(table, "table")])
    return _model(graph)


def register_text_task_models(registry: ModelRegistry, tokenizer_file: Path) -> tuple[ModelManifest, ModelManifest]:
    """The tiny reranker and token classifier over the bundled MiniLM tokenizer."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    vocab = tokenizer.get_vocab_size()
    place_ids = {int(tokenizer.token_to_id(word)): label for word, label in PLACE_WORDS.items()}
    files = {"tokenizer.json": tokenizer_file}
    rerank = register_onnx(registry, RERANK_MODEL, rerank_graph(vocab), task="rerank", extra_files=files,
                           tokenizer_file="tokenizer.json", max_length=64)
    tokens = register_onnx(registry, TOKENS_MODEL, token_graph(vocab, place_ids), task="token-classification",
                           extra_files=files, tokenizer_file="tokenizer.json", max_length=64, labels=TOKEN_LABELS)
    return rerank, tokens
