"""INT8 version of an FP32 graph via ONNX Runtime dynamic quantisation."""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnxruntime
from onnxruntime.quantization import QuantType, quantize_dynamic
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


def hyperparameters() -> dict[str, int | float | str]:
    """Settings of the quantisation (nothing is trained): what a rebuild must repeat to match."""
    return {"weight_type": WEIGHT_TYPE.name, "per_channel": str(PER_CHANNEL).lower(), "op_types": ",".join(OP_TYPES)}


def recipe() -> dict[str, str]:
    return {
        "quantization": "onnxruntime.quantization.quantize_dynamic after quant_pre_process(skip_symbolic_shape)",
        "weight_type": WEIGHT_TYPE.name,
        "per_channel": str(PER_CHANNEL).lower(),
        "op_types": ",".join(OP_TYPES),
        "onnxruntime": onnxruntime.__version__,
    }
