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
