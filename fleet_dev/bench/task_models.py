"""The models `scripts/bench tasks` measures, made on the spot from what the build made:

- `bench-rerank`: a cross-encoder as heavy as MiniLM (the built FP32 graph, a pair's tokens in,
  a linear head on its pooled embedding: one score per (query, passage) pair);
- `bench-cnn`: an image classifier, ResNet-18 as it is trained on CIFAR-10 (3 x 32 x 32 float32
  images, a 3x3 stem, four stages of two basic blocks from 64 to 512 channels, batch norm folded
  into the convolutions as at inference, 10 classes), about 0.56 G multiply-adds an image: 10.7
  ms of one core at batch 1 and 8.2 ms at batch 32 here. The first tensor model, a 256 -> 2048 ->
  2048 -> 16 MLP, cost less than a request's trip through Kafka and Redis (about 1 ms of CPU),
  so its row measured the transport rather than batching.

Weights are seeded random: the bench measures throughput, not relevance.
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
TENSOR_MODEL = "bench-cnn"
ENCODER = "minilm-embed"
IMAGE_SHAPE = (3, 32, 32)
STAGES = (64, 128, 256, 512)  # channels of ResNet-18's four stages of two blocks
CLASSES = 10
# Named in each version's recipe: a bench registry holding an older graph under a name gets a new version.
RERANK_GRAPH, TENSOR_GRAPH = "minilm-cross-encoder", "resnet18-cifar"
ONNX_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"


def _register(registry: ModelRegistry, name: str, model: onnx.ModelProto, *, task: str, graph: str,
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
        check=check, task=task, recipe={"made_by": "fleet_dev.bench.task_models", "graph": graph}, **fields)  # type: ignore[arg-type]
    return registry.register(manifest)


class _Graph:
    """Nodes and He-initialised weights of a convolutional network being built."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def conv(self, source: str, name: str, channels: tuple[int, int], kernel: int = 3, stride: int = 1,
             relu: bool = True) -> str:
        """A same-padded convolution (batch norm folded into it, as at inference) and its ReLU."""
        channels_in, channels_out = channels
        weight = self.rng.normal(size=(channels_out, channels_in, kernel, kernel)) * np.sqrt(2 / (channels_in * kernel ** 2))
        self.initializers += [numpy_helper.from_array(weight.astype(np.float32), f"{name}_w"),
                              numpy_helper.from_array(np.zeros(channels_out, np.float32), f"{name}_b")]
        pad = kernel // 2
        self.nodes.append(helper.make_node("Conv", [source, f"{name}_w", f"{name}_b"], [f"{name}_z"],
                                           pads=[pad] * 4, strides=[stride, stride]))
        if not relu:
            return f"{name}_z"
        self.nodes.append(helper.make_node("Relu", [f"{name}_z"], [name]))
        return name

    def basic_block(self, source: str, name: str, channels: tuple[int, int], stride: int) -> str:
        """ResNet's two 3x3 convolutions and the shortcut (a strided 1x1 convolution where the shape changes)."""
        middle = self.conv(source, f"{name}a", channels, stride=stride)
        body = self.conv(middle, f"{name}b", (channels[1], channels[1]), relu=False)
        shortcut = source if stride == 1 and channels[0] == channels[1] else \
            self.conv(source, f"{name}s", channels, kernel=1, stride=stride, relu=False)
        self.nodes += [helper.make_node("Add", [body, shortcut], [f"{name}_sum"]),
                       helper.make_node("Relu", [f"{name}_sum"], [name])]
        return name


def tensor_graph(seed: int = 11, image_shape: tuple[int, int, int] = IMAGE_SHAPE,
                 stages: tuple[int, ...] = STAGES) -> onnx.ModelProto:
    """x float32 [n, *image_shape] -> y float32 [n, 10]: the ResNet-18 the module docstring describes."""
    graph = _Graph(seed)
    current = graph.conv("x", "stem", (image_shape[0], stages[0]))
    channels = stages[0]
    for stage, width in enumerate(stages):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            current = graph.basic_block(current, f"s{stage}b{block}", (channels, width), stride)
            channels = width
    head = (graph.rng.normal(size=(channels, CLASSES)) / np.sqrt(channels)).astype(np.float32)
    graph.initializers += [numpy_helper.from_array(head, "head_w"),
                           numpy_helper.from_array(np.zeros(CLASSES, np.float32), "head_b")]
    graph.nodes += [helper.make_node("GlobalAveragePool", [current], ["pooled"]),
                    helper.make_node("Flatten", ["pooled"], ["features"]),
                    helper.make_node("Gemm", ["features", "head_w", "head_b"], ["y"])]
    body = helper.make_graph(graph.nodes, "bench_resnet18", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", *image_shape])],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", CLASSES])], graph.initializers)
    model = helper.make_model(body, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
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
    """The newest bench reranker and tensor model in `bench`, each made once (the reranker from the built encoder)."""
    return _rerank(built, bench), _tensor(bench)


def _current(bench: ModelRegistry, name: str, graph: str) -> ModelManifest | None:
    try:
        newest = bench.resolve(name)
    except ModelNotFound:
        return None
    return newest if newest.recipe.get("graph") == graph else None


def _rerank(built: ModelRegistry, bench: ModelRegistry) -> ModelManifest:
    if (current := _current(bench, RERANK_MODEL, RERANK_GRAPH)) is not None:
        return current
    encoder = built.resolve(ENCODER, precision="fp32")
    assert encoder.tokenizer_file is not None and encoder.max_length is not None
    return _register(bench, RERANK_MODEL, rerank_graph(built.path_of(encoder, encoder.onnx_file), encoder.embedding_dim),
                     task="rerank", graph=RERANK_GRAPH, files={TOKENIZER_FILE: built.path_of(encoder, encoder.tokenizer_file)},
                     tokenizer_file=TOKENIZER_FILE, max_length=encoder.max_length)


def _tensor(bench: ModelRegistry) -> ModelManifest:
    current = _current(bench, TENSOR_MODEL, TENSOR_GRAPH)
    return current if current is not None else _register(bench, TENSOR_MODEL, tensor_graph(), task="tensor",
                                                          graph=TENSOR_GRAPH)
