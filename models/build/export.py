"""PyTorch side of the build: load MiniLM from the package and export the FP32 ONNX graph.

Only this module (and the torch parts of `checks`) imports torch, and only when a build
actually has to run, so a run that finds everything already built stays fast. The pooling
head is `models.backends.torch_backend.mean_pool_normalize`, the very function the torch
backend serves with, so the graph and the torch backend cannot drift apart.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import torch
import transformers
from transformers import AutoModel, PreTrainedModel

from models.backends.torch_backend import mean_pool_normalize

OPSET = 17
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAME = "embedding"


class MeanPooledEmbedder(torch.nn.Module):
    """BERT -> mean over real (unmasked) tokens -> L2 normalisation.

    This is what sentence-transformers does for all-MiniLM-L6-v2; baking it into the graph
    means the worker gets final embeddings straight out of the session. token_type_ids are
    not an input: single-segment text always has zeros, which BertModel fills in itself.
    """

    def __init__(self, encoder: PreTrainedModel) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return mean_pool_normalize(hidden, attention_mask)


def load_encoder(model_dir: Path) -> PreTrainedModel:
    """BertModel from the package folder, with eager attention (from_pretrained returns it in eval mode).

    Eager attention traces to plain MatMul/Softmax ops, which every ONNX Runtime provider
    and the INT8 quantiser handle; SDPA would trace to a less portable pattern.
    """
    # Our progress lines replace transformers' per-weight progress bar.
    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    encoder: PreTrainedModel = AutoModel.from_pretrained(
        str(model_dir), local_files_only=True, attn_implementation="eager"
    )
    return encoder


def export_fp32(encoder: PreTrainedModel, onnx_path: Path) -> None:
    """Write the normalised-embedding graph with dynamic batch and sequence axes."""
    # eval() recurses into the encoder: no dropout in the traced graph.
    embedder = MeanPooledEmbedder(encoder).eval()
    # Trace with a padded row so every mask-dependent branch is taken the padded way.
    input_ids = torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]], dtype=torch.long)
    attention_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.long)
    dynamic_axes = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
    dynamic_axes[OUTPUT_NAME] = {0: "batch"}
    with warnings.catch_warnings(), torch.no_grad():
        _silence_known_export_warnings()
        # The TorchScript exporter: the torch.export-based one needs onnxscript, which this
        # project does not depend on, and the traced graph is what we check anyway.
        torch.onnx.export(
            embedder,
            (input_ids, attention_mask),
            str(onnx_path),
            input_names=list(INPUT_NAMES),
            output_names=[OUTPUT_NAME],
            dynamic_axes=dynamic_axes,
            opset_version=OPSET,
            do_constant_folding=True,
            external_data=False,
            dynamo=False,
        )
    _declare_embedding_width(onnx_path, width=int(encoder.config.hidden_size))


def _declare_embedding_width(onnx_path: Path, width: int) -> None:
    # The tracer cannot see through the L2 normalisation and names the width axis
    # "Divembedding_dim_1"; state the real width so the graph (and the manifest read from
    # it) says [batch, 384]. ONNX Runtime checks outputs against it when the check runs.
    model = onnx.load(str(onnx_path))
    (output,) = model.graph.output
    width_axis = output.type.tensor_type.shape.dim[1]
    width_axis.Clear()
    width_axis.dim_value = width
    onnx.checker.check_model(model)
    onnx.save(model, str(onnx_path))


def _silence_known_export_warnings() -> None:
    # Each is understood and harmless for this graph; anything else still shows.
    # The legacy exporter announces its own deprecation (twice).
    warnings.filterwarnings("ignore", message=r".*legacy TorchScript-based ONNX export", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message=r"The feature will be removed", category=DeprecationWarning)
    # transformers' mask builder compares kv length with the mask length in Python; for
    # self-attention they are always equal, so the traced constant is right for every shape.
    warnings.filterwarnings(
        "ignore", message=r"Converting a tensor to a Python boolean", module=r"transformers\.masking_utils"
    )
    # Index ops in the mask builder use non-negative arange indices only.
    warnings.filterwarnings("ignore", message=r"Exporting aten::index operator", category=UserWarning)


def hyperparameters(max_length: int) -> dict[str, int | float | str]:
    """Settings of the conversion (nothing is trained): what a rebuild must repeat to match."""
    return {"opset": OPSET, "max_length": max_length, "attention": "eager", "pooling": "mean", "normalize": "l2"}


def recipe() -> dict[str, str]:
    return {
        "graph": "BertModel (eager attention) -> mean pooling over attention_mask -> L2 normalisation",
        "exporter": f"torch.onnx.export TorchScript, opset {OPSET}",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
