"""The models `scripts/bench tasks` measures, made on the spot from what the build made:

- `bench-rerank`: a cross-encoder as heavy as MiniLM (the built FP32 graph, a pair's tokens in,
  a linear head on its pooled embedding: one score per (query, passage) pair);
- `bench-tensor`: a tabular MLP (256 features -> 2048 -> 2048 -> 16), float32, about 9 M
  multiply-adds a row.

The heads' weights are seeded random: the bench measures throughput, not relevance.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from models.build.graph import describe_io
from models.registry import (AccuracyCheck, ImportSource, ModelManifest, ModelNotFound, ModelRegistry, hash_files,
                             sha256_of)

RERANK_MODEL = "bench-rerank"
TENSOR_MODEL = "bench-tensor"
ENCODER = "minilm-embed"
FEATURES, HIDDEN, OUTPUTS = 256, 2048, 16
ONNX_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"


def _register(registry: ModelRegistry, name: str, model: onnx.ModelProto, *, task: str,
              files: dict[str, Path] | None = None, **fields: object) -> ModelManifest:
    now = datetime.now(UTC)
    version = registry.next_version_id(name, now.date())
    folder = registry.version_dir(name, version)
    folder.mkdir(parents=True)
    onnx.save(model, str(folder / ONNX_FILE))
    for filename, source in (files or {}).items():
        (folder / filename).write_bytes(source.read_bytes())
    inputs, outputs = describe_io(folder / ONNX_FILE, normalized_outputs=False)
    check = AccuracyCheck.evaluate(name="bench-made", metric="none", value=0.0, threshold=0.0, comparison="<=")
    manifest = ModelManifest(
        id=version, name=name, created=now, precision="fp32", parent=None,
        source=ImportSource(format="onnx", uri=str(folder / ONNX_FILE), sha256={ONNX_FILE: sha256_of(folder / ONNX_FILE)}),
        files=hash_files(folder, [ONNX_FILE, *(files or {})]), onnx_file=ONNX_FILE, inputs=inputs, outputs=outputs,
        check=check, task=task, recipe={"made_by": "fleet.bench.task_models"}, **fields)  # type: ignore[arg-type]
    return registry.register(manifest)


def tensor_graph(seed: int = 11) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    sizes = (FEATURES, HIDDEN, HIDDEN, OUTPUTS)
    nodes, initializers, current = [], [], "x"
    for layer, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:], strict=False)):
        weight = (rng.normal(size=(fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
        initializers += [numpy_helper.from_array(weight, f"w{layer}"),
                         numpy_helper.from_array(np.zeros(fan_out, np.float32), f"b{layer}")]
        out = "y" if layer == len(sizes) - 2 else f"h{layer}"
        nodes.append(helper.make_node("Gemm", [current, f"w{layer}", f"b{layer}"], [out if out == "y" else f"z{layer}"]))
        if out != "y":
            nodes.append(helper.make_node("Relu", [f"z{layer}"], [out]))
        current = out
    graph = helper.make_graph(nodes, "bench_tensor", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", FEATURES])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", OUTPUTS])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def rerank_graph(encoder_file: Path, width: int, seed: int = 13) -> onnx.ModelProto:
    """The encoder graph with a linear head: `score` [batch, 1] from its first output."""
    model = onnx.load(str(encoder_file))
    graph = model.graph
    embedding = graph.output[0].name
    head = (np.random.default_rng(seed).normal(size=(width, 1)) / np.sqrt(width)).astype(np.float32)
    graph.initializer.append(numpy_helper.from_array(head, "rerank_head"))
    graph.node.append(helper.make_node("MatMul", [embedding, "rerank_head"], ["score"]))
    del graph.output[:]
    batch = model.graph.input[0].type.tensor_type.shape.dim[0].dim_param or "batch"
    graph.output.append(helper.make_tensor_value_info("score", TensorProto.FLOAT, [batch, 1]))
    return model


def bench_models(built: ModelRegistry, bench: ModelRegistry) -> tuple[ModelManifest, ModelManifest]:
    """The newest bench reranker and tensor model in `bench`, made once from the built encoder."""
    try:
        return bench.resolve(RERANK_MODEL), bench.resolve(TENSOR_MODEL)
    except ModelNotFound:
        pass
    encoder = built.resolve(ENCODER, precision="fp32")
    assert encoder.tokenizer_file is not None and encoder.max_length is not None
    rerank = _register(bench, RERANK_MODEL, rerank_graph(built.path_of(encoder, encoder.onnx_file), encoder.embedding_dim),
                       task="rerank", files={TOKENIZER_FILE: built.path_of(encoder, encoder.tokenizer_file)},
                       tokenizer_file=TOKENIZER_FILE, max_length=encoder.max_length)
    return rerank, _register(bench, TENSOR_MODEL, tensor_graph(), task="tensor")
