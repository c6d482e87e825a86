"""INT8 version of an FP32 graph via ONNX Runtime quantisation: dynamic for the encoders, static
with shipped activation ranges for the cache verifier.

Dynamic quantisation picks each MatMul input's scale from the batch it is given, so a row's
output moves with its batch-mates: a verifier score moved by up to 0.5 (2.6 in logits) between a
pair scored alone and the same pair in a batch of 64, a thousand times the FP32 graph's noise.
A verifier's threshold cannot hold across that. Static quantisation fixes every scale from
activation ranges measured once on training pairs, so a pair's score no longer depends on what
else is in its batch. The ranges are measured on the maintainer's machine and shipped with the
trained weights (ONNX Runtime's calibration cache), so every build makes the same graph.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process

# Only the weight matmuls: LayerNorm, Softmax, GELU and the embedding table stay FP32,
# which is where quantisation error hurts sentence embeddings most. (Activation x
# activation MatMuls in attention have no weight and are left FP32 by quantize_dynamic.)
OP_TYPES = ("MatMul", "Gemm")
# Per-tensor scales lose too much on MiniLM (mean cosine ~0.945 on the check set, with
# outlier columns in the FFN output projections); per-channel brings it to ~0.99.
PER_CHANNEL = True
WEIGHT_TYPE = QuantType.QInt8


def quantize_int8(fp32_path: Path, int8_path: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="fleet-quant-") as scratch:
        prepared = Path(scratch) / "prepared.onnx"
        # ORT's recommended pre-pass (graph clean-up + shape inference). Its symbolic shape
        # inference cannot merge the position-table slice Min(512, sequence) with the
        # sequence axis and gives up, so only that part is skipped.
        quant_pre_process(str(fp32_path), str(prepared), skip_symbolic_shape=True)
        quantize_dynamic(
            prepared,
            int8_path,
            op_types_to_quantize=list(OP_TYPES),
            per_channel=PER_CHANNEL,
            weight_type=WEIGHT_TYPE,
        )


# The FFN output projections stay FP32: their inputs have outlier columns that one static per-tensor
# scale cannot hold (with them quantised, the verifier served 36% of held-out should-hit pairs at 1%
# traps instead of FP32's 50%; without, 48%, at 6.2 ms a pair against FP32's 9.4 on one core).
STATIC_KEEP_FP32 = re.compile(r"/layer\.\d+/output/dense/MatMul$")
# 7-bit weights: without VNNI, x86 multiplies u8 x s8 with an instruction that saturates its int16
# sums, with VNNI it does not; 7 bits keep every sum in range, so both give the same integers
# (ONNX Runtime's own advice for per-channel weights on CPUs without VNNI).
STATIC_REDUCE_RANGE = True


class _Feeds(CalibrationDataReader):
    def __init__(self, feeds: Iterable[dict[str, npt.NDArray[np.int64]]]) -> None:
        self._feeds = iter(feeds)

    def get_next(self) -> dict[str, npt.NDArray[np.int64]] | None:
        return next(self._feeds, None)


def quantize_static_int8(fp32_path: Path, int8_path: Path, ranges_file: Path,
                         calibration_feeds: Iterable[dict[str, npt.NDArray[np.int64]]] | None = None) -> None:
    """Static INT8 (QDQ, per-channel weights, uint8 activations) with the activation ranges in
    `ranges_file`. With `calibration_feeds` the ranges are measured on them first and written there
    (the training command); without, they must exist (the build)."""
    if calibration_feeds is None and not ranges_file.is_file():
        raise FileNotFoundError(f"{ranges_file}: the INT8 activation ranges the verifier ships with are missing")
    if calibration_feeds is not None:
        ranges_file.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="fleet-quant-") as scratch:
        prepared = Path(scratch) / "prepared.onnx"
        quant_pre_process(str(fp32_path), str(prepared), skip_symbolic_shape=True)
        kept = [node.name for node in onnx.load(str(prepared)).graph.node if STATIC_KEEP_FP32.search(node.name)]
        quantize_static(
            prepared,
            int8_path,
            None if calibration_feeds is None else _Feeds(calibration_feeds),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=list(OP_TYPES),
            per_channel=PER_CHANNEL,
            reduce_range=STATIC_REDUCE_RANGE,
            activation_type=QuantType.QUInt8,
            weight_type=WEIGHT_TYPE,
            calibrate_method=CalibrationMethod.MinMax,
            nodes_to_exclude=kept,
            calibration_cache_path=ranges_file,
        )


def static_hyperparameters() -> dict[str, int | float | str]:
    return {**hyperparameters(), "quantization": "static-qdq", "activation_type": QuantType.QUInt8.name,
            "reduce_range": str(STATIC_REDUCE_RANGE).lower(), "calibration": "minmax, shipped ranges",
            "kept_fp32": STATIC_KEEP_FP32.pattern}


def hyperparameters() -> dict[str, int | float | str]:
    """Settings of the quantisation (nothing is trained): what a rebuild must repeat to match."""
    return {"weight_type": WEIGHT_TYPE.name, "per_channel": str(PER_CHANNEL).lower(), "op_types": ",".join(OP_TYPES)}


def recipe(*, static: bool = False) -> dict[str, str]:
    if static:
        return {
            "quantization": "onnxruntime.quantization.quantize_static (QDQ, uint8 activations, 7-bit weights, FFN "
                            "output projections kept FP32) after quant_pre_process(skip_symbolic_shape), activation "
                            "ranges from the shipped calibration cache",
            "weight_type": WEIGHT_TYPE.name,
            "per_channel": str(PER_CHANNEL).lower(),
            "op_types": ",".join(OP_TYPES),
            "onnxruntime": onnxruntime.__version__,
        }
    return {
        "quantization": "onnxruntime.quantization.quantize_dynamic after quant_pre_process(skip_symbolic_shape)",
        "weight_type": WEIGHT_TYPE.name,
        "per_channel": str(PER_CHANNEL).lower(),
        "op_types": ",".join(OP_TYPES),
        "onnxruntime": onnxruntime.__version__,
    }
