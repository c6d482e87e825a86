"""Tracing a PyTorch text model to ONNX the way the build exports MiniLM: the TorchScript exporter
at the build's opset, dynamic batch (and sequence) axes, the output width stated in the graph."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import torch

from models.build import export as build_export
from models.importing.samples import Arrays


def export_text_graph(module: torch.nn.Module, feeds: Arrays, onnx_path: Path, output_name: str, *,
                      per_token: bool, width: int | None) -> None:
    """Write `module` (called with the feeds' tensors in order) with dynamic batch and sequence axes."""
    names = list(feeds)
    arguments = tuple(torch.from_numpy(np.ascontiguousarray(feeds[name])) for name in names)
    dynamic_axes: dict[str, dict[int, str]] = {name: {0: "batch", 1: "sequence"} for name in names}
    dynamic_axes[output_name] = {0: "batch", 1: "sequence"} if per_token else {0: "batch"}
    with warnings.catch_warnings(), torch.no_grad():
        build_export._silence_known_export_warnings()
        torch.onnx.export(module.eval(), arguments, str(onnx_path), input_names=names, output_names=[output_name],
                          dynamic_axes=dynamic_axes, opset_version=build_export.OPSET, do_constant_folding=True,
                          external_data=False, dynamo=False)
    if width is not None:
        declare_last_axis(onnx_path, width)


def declare_last_axis(onnx_path: Path, width: int) -> None:
    # The tracer names a computed width ("Softmaxprobabilities_dim_1"); the manifest needs the number.
    model = onnx.load(str(onnx_path))
    (output,) = model.graph.output
    last = output.type.tensor_type.shape.dim[-1]
    last.Clear()
    last.dim_value = width
    onnx.checker.check_model(model)
    onnx.save(model, str(onnx_path))


def run_torch(module: torch.nn.Module, feeds: Arrays, input_names: Sequence[str]) -> np.ndarray:
    """The module's output on the feeds, in FP32 on CPU: the reference the graph is checked against."""
    with torch.inference_mode():
        result = module.eval()(*(torch.from_numpy(np.ascontiguousarray(feeds[name])) for name in input_names))
    return np.asarray(result.detach().numpy(), dtype=np.float32)
