"""PyTorch backend: the same registered model version, run by PyTorch instead of ONNX Runtime.

An FP32 version built by `models.build` stores, next to its ONNX graph, the PyTorch
weights and config the graph was exported from (`manifest.torch_dir`, hashed like every
artifact). This backend rebuilds that BertModel from those files only (never a hub), and
computes what the graph computes: mean pooling over attention_mask, then L2 normalisation.
Tokenisation and length-aware sub-batches are shared with the ONNX backend (`TokenizedBackend`,
`Encoded.group`), so both backends see identical token ids and padding.

On CUDA the model runs in FP16 (weights and activations); pooling and normalisation run in
FP32 and rows come back as float32. CPU runs FP32. Asking for CUDA where torch sees none is
DeviceUnavailable, never a quiet CPU run.

Thread safety: after `load` the module is only read; `run` may be called from several
threads at once (the worker runs it through `asyncio.to_thread`). `torch.inference_mode` is
entered per call, it is thread-local. Importing this module changes no global torch state;
`load` with `intra_op_threads` N > 0 calls `torch.set_num_threads(N)`, which is process-wide.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModel, PreTrainedModel

from models.backends.base import Encoded, Feeds, check_rows
from models.backends.errors import DeviceError, DeviceOutOfMemory, DeviceUnavailable
from models.backends.options import RuntimeOptions
from models.backends.tokenized import BatchTokenizer, TokenizedBackend
from models.registry import ModelManifest, ModelRegistry, RegistryError

SUPPORTED_DEVICES = ("cpu", "cuda")
# SDPA: fused attention kernels on CUDA (FP16) and CPU; it agrees with the eager attention
# the ONNX graph was traced with to ~1e-7 in FP32.
ATTENTION = "sdpa"
CUDA_DTYPE = torch.float16
# Buffers older transformers versions saved into checkpoints; current BertModel rebuilds them.
_IGNORABLE_UNEXPECTED_KEYS = frozenset({"embeddings.position_ids"})
_REQUIRED_INPUTS = ("input_ids", "attention_mask")


class NoTorchArtifacts(RegistryError):
    """The version has no PyTorch weights (e.g. an INT8 ONNX-only version)."""


def torch_device_for(device: str) -> torch.device:
    """The torch device for `device`, or DeviceUnavailable when this machine cannot serve it."""
    if device == "cpu":
        return torch.device("cpu")
    if device == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailable(
                f"device 'cuda' requested but PyTorch {torch.__version__} (CUDA build: {torch.version.cuda}) "
                "sees no CUDA device; check the NVIDIA driver and CUDA_VISIBLE_DEVICES, or run with device=cpu"
            )
        return torch.device("cuda")
    raise ValueError(f"unknown device {device!r}; expected one of {SUPPORTED_DEVICES}")


def mean_pool_normalize(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean over real (unmasked) tokens, then L2 normalisation: the head of the exported graph.

    `models.build.export` traces this very function into the ONNX graph, so both
    backends pool the same way.
    """
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    summed = (hidden * mask).sum(dim=1)
    counts = mask.sum(dim=1).clamp(min=1e-9)
    return torch.nn.functional.normalize(summed / counts, p=2.0, dim=1)


def load_encoder(config_file: Path, weights_file: Path, *, device: torch.device, dtype: torch.dtype) -> PreTrainedModel:
    """The transformers model described by `config_file` with exactly the weights in `weights_file`.

    Built from the config and loaded with our own key accounting (not `from_pretrained`), so
    nothing is looked up anywhere else and a weight that does not fit is an error, not a log line.
    """
    config = AutoConfig.from_pretrained(str(config_file.parent), local_files_only=True)
    model: PreTrainedModel = AutoModel.from_config(config, attn_implementation=ATTENTION)
    state = load_file(str(weights_file))
    missing, unexpected = model.load_state_dict(state, strict=False)
    unexpected = [key for key in unexpected if key not in _IGNORABLE_UNEXPECTED_KEYS]
    if missing or unexpected:
        raise ValueError(
            f"{weights_file} does not fit {type(model).__name__} from {config_file}: "
            f"missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}"
        )
    # from_config builds in training mode: eval() turns dropout off.
    return model.to(device=device, dtype=dtype).eval()


class TorchEmbeddingBackend(TokenizedBackend):
    """A registered FP32 embedding model version served by PyTorch (CPU FP32, CUDA FP16)."""

    def __init__(self, manifest: ModelManifest, model: PreTrainedModel, tokenizer: BatchTokenizer, device: str,
                 *, length_bucket_size: int = 16) -> None:
        super().__init__(manifest, tokenizer, device, length_bucket_size=length_bucket_size)
        self._model = model
        self._torch_device = next(model.parameters()).device
        self._what = f"{manifest.id} on {device} (torch)"

    @classmethod
    def load(cls, registry: ModelRegistry, manifest: ModelManifest,
             options: RuntimeOptions = RuntimeOptions()) -> TorchEmbeddingBackend:
        """`options.intra_op_threads` N > 0 calls `torch.set_num_threads(N)`, which is process-wide;
        spinning, graph_optimization and memory_headroom are ONNX Runtime's and not read here."""
        torch_device = torch_device_for(options.device)  # an impossible device fails before hashing ~180 MB
        if manifest.torch_dir is None or manifest.torch_config_file is None or manifest.torch_weights_file is None:
            raise NoTorchArtifacts(
                f"{manifest.id} ({manifest.precision}) has no PyTorch artifacts (its manifest has no torch_dir), so "
                "the torch backend cannot serve it; serve it with backend=onnxruntime, or pick an FP32 version "
                "built with PyTorch weights (scripts/build-models)"
            )
        declared = [spec.name for spec in manifest.inputs]
        absent = [name for name in _REQUIRED_INPUTS if name not in declared]
        if absent:
            raise ValueError(f"{manifest.id}: the torch backend needs inputs {list(_REQUIRED_INPUTS)}, "
                             f"the manifest declares {declared}")
        # Hashes before anything is read: tampered or half-copied weights must never be run.
        registry.verify(manifest)
        if options.intra_op_threads > 0:
            torch.set_num_threads(options.intra_op_threads)
        dtype = CUDA_DTYPE if torch_device.type == "cuda" else torch.float32
        model = load_encoder(registry.path_of(manifest, manifest.torch_config_file),
                             registry.path_of(manifest, manifest.torch_weights_file), device=torch_device, dtype=dtype)
        if model.config.hidden_size != manifest.embedding_dim:
            raise ValueError(f"{manifest.id}: torch model width {model.config.hidden_size}, "
                             f"manifest output width {manifest.embedding_dim}")
        tokenizer = BatchTokenizer.of(registry, manifest,
                                      min(options.max_input_tokens, model.config.max_position_embeddings))
        backend = cls(manifest, model, tokenizer, options.device, length_bucket_size=options.length_bucket_size)
        if options.warmup:
            backend.warm_up()
        return backend

    @property
    def dtype(self) -> str:
        """Compute precision of the weights and activations: float32 (CPU) or float16 (CUDA)."""
        return str(next(self._model.parameters()).dtype).removeprefix("torch.")

    def warm_up(self) -> None:
        """Run the common shapes once (kernel selection, CUDA context and allocator pools)."""
        with torch.inference_mode():
            for feeds in self.warm_up_feeds():
                self._embed(feeds)

    def run(self, encoded: Encoded) -> npt.NDArray[np.float32]:
        """One row per encoded text, in the order the texts were given.

        CUDA out of memory is DeviceOutOfMemory (after the cache is emptied, so a smaller
        batch can fit); other CUDA runtime failures are DeviceError.
        """
        out = np.empty((encoded.count, self.embedding_dim), dtype=np.float32)
        shape = (0, 0)
        try:
            with torch.inference_mode():
                for chunk in encoded.chunks:
                    shape = chunk.feeds["input_ids"].shape
                    out[chunk.rows] = check_rows(self._embed(chunk.feeds), len(chunk.rows), self._what)
            return out
        except torch.cuda.OutOfMemoryError as error:
            detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        except torch.AcceleratorError as error:
            raise DeviceError(f"{self._what}: device failure on a sub-batch of {shape[0]} x {shape[1]} tokens: "
                              f"{error}") from error
        # Out here the exception and its traceback are gone, so the activations they held
        # are free and empty_cache can hand the memory back before the caller retries smaller.
        torch.cuda.empty_cache()
        raise DeviceOutOfMemory(f"{self._what}: out of memory on a sub-batch of {shape[0]} rows x {shape[1]} tokens "
                                f"(batch of {encoded.count}): {detail}")

    def _embed(self, feeds: Feeds) -> npt.NDArray[np.float32]:
        tensors = {name: torch.from_numpy(array).to(self._torch_device) for name, array in feeds.items()}
        hidden = self._model(**tensors).last_hidden_state
        # FP16 activations on CUDA; pooling and normalisation in FP32, as the graph does.
        pooled = mean_pool_normalize(hidden.float(), tensors["attention_mask"])
        return np.asarray(pooled.cpu().numpy(), dtype=np.float32)
