"""ONNX Runtime backend for registered embedding models (FP32 or INT8).

The graph already does mean pooling and L2 normalisation, so a row out of the session is
the final embedding; this module only tokenizes, runs, and checks the shape. A classification
version (task "classification", e.g. faq-intent) is served unchanged: its graph ends in a
softmax head, so its rows are class probabilities, one column per `manifest.labels` entry.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import numpy.typing as npt

from models.backends.flavour import FIX, GPU_FIX

try:
    import onnxruntime as ort
except ImportError as missing:
    raise ImportError(f"ONNX Runtime is not installed: {FIX}") from missing

from models.backends.base import Encoded, check_rows
from models.backends.errors import DeviceUnavailable
from models.backends.memory import cuda_total_bytes, memory_limit
from models.backends.options import RuntimeOptions
from models.backends.tokenized import BatchTokenizer, TokenizedBackend
from models.registry import ModelManifest, ModelRegistry

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
SUPPORTED_DEVICES = ("cpu", "cuda")

GRAPH_OPTIMIZATION = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def session_options(intra_op_threads: int, graph_optimization: str = "all", spinning: bool = True) -> ort.SessionOptions:
    if graph_optimization not in GRAPH_OPTIMIZATION:
        raise ValueError(f"graph_optimization {graph_optimization!r}; expected one of {sorted(GRAPH_OPTIMIZATION)}")
    options = ort.SessionOptions()
    options.graph_optimization_level = GRAPH_OPTIMIZATION[graph_optimization]
    # 0 lets ONNX Runtime use one thread per physical core.
    options.intra_op_num_threads = intra_op_threads
    if not spinning:
        # Idle ORT threads otherwise busy-wait for the next batch, taking CPU from the event
        # loop, Kafka and Redis on small machines.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def providers_for(device: str) -> list[str]:
    """Execution providers for `device`, or DeviceUnavailable when this install cannot serve it."""
    if device == "cpu":
        return [CPU_PROVIDER]
    if device == "cuda":
        available = ort.get_available_providers()
        if CUDA_PROVIDER not in available:
            raise DeviceUnavailable(
                f"device 'cuda' requested but this ONNX Runtime ({ort.__version__}) only has {available}; {GPU_FIX}"
            )
        return [CUDA_PROVIDER, CPU_PROVIDER]
    raise ValueError(f"unknown device {device!r}; expected one of {SUPPORTED_DEVICES}")


@functools.cache
def load_cuda_libraries() -> None:
    """Load the CUDA and cuDNN libraries of the nvidia-* wheels the GPU flavour installs, once.

    ONNX Runtime's CUDA provider finds them only once they are loaded: without this, on the GPU
    flavour, loading the provider failed on libcublasLt.so.13 and the session ran on CPU. torch
    loads them when imported, but a worker on ONNX Runtime alone never imports torch."""
    preload = getattr(ort, "preload_dlls", None)  # onnxruntime-gpu >= 1.21
    if preload is not None:
        preload()


def open_session(model_file: Path, *, device: str, intra_op_threads: int,
                 graph_optimization: str = "all", memory_headroom: float = 0.0,
                 spinning: bool = True) -> ort.InferenceSession:
    providers = providers_for(device)
    if providers[0] == CUDA_PROVIDER:
        load_cuda_libraries()
    options = session_options(intra_op_threads, graph_optimization, spinning)
    provider_options: list[dict[str, str]] = [{} for _ in providers]
    total = cuda_total_bytes() if providers[0] == CUDA_PROVIDER and memory_headroom > 0 else None
    if total is not None:
        provider_options[0]["gpu_mem_limit"] = str(memory_limit(total, memory_headroom))
    session = ort.InferenceSession(str(model_file), options, providers=providers, provider_options=provider_options)
    # ONNX Runtime quietly drops CUDA when its libraries fail to load; a GPU worker that
    # runs on CPU would look healthy while being slow, so refuse instead.
    if session.get_providers()[0] != providers[0]:
        raise DeviceUnavailable(
            f"device {device!r}: ONNX Runtime could not start {providers[0]} "
            f"(session runs on {session.get_providers()}); check the NVIDIA driver (libcuda.so.1), that a GPU is "
            "visible, and the CUDA/cuDNN libraries (`fleet doctor --device cuda` shows what this install sees)"
        )
    return session


def open_version_session(registry: ModelRegistry, manifest: ModelManifest,
                         options: RuntimeOptions) -> ort.InferenceSession:
    """A session on a registered version's graph, once its files match their hashes and the graph's
    inputs are the ones its manifest declares."""
    providers_for(options.device)  # an impossible device fails before hashing ~100 MB
    # Hashes before the session: a tampered or half-copied model must never be run.
    registry.verify(manifest)
    session = open_session(registry.path_of(manifest, manifest.onnx_file), device=options.device,
                           intra_op_threads=options.intra_op_threads,
                           graph_optimization=options.graph_optimization,
                           memory_headroom=options.memory_headroom, spinning=options.spinning)
    declared = sorted(spec.name for spec in manifest.inputs)
    actual = sorted(node.name for node in session.get_inputs())
    if declared != actual:
        raise ValueError(f"{manifest.id}: manifest declares inputs {declared}, graph has {actual}")
    return session


class OnnxEmbeddingBackend(TokenizedBackend):
    """A registered embedding model version served by ONNX Runtime.

    `encode` (tokenise, group rows of similar length) and `run` (the model) are separate so
    the worker can tokenise the next batch while this one runs; both release the GIL.
    """

    def __init__(self, manifest: ModelManifest, session: ort.InferenceSession, tokenizer: BatchTokenizer,
                 device: str, *, length_bucket_size: int = 16) -> None:
        super().__init__(manifest, tokenizer, device, length_bucket_size=length_bucket_size)
        self._session = session
        self._output_name = manifest.outputs[0].name

    @classmethod
    def load(cls, registry: ModelRegistry, manifest: ModelManifest,
             options: RuntimeOptions = RuntimeOptions()) -> OnnxEmbeddingBackend:
        session = open_version_session(registry, manifest, options)
        # The graph's position table ends at the manifest's max_length; never feed more.
        tokenizer = BatchTokenizer.of(registry, manifest, options.max_input_tokens)
        backend = cls(manifest, session, tokenizer, options.device, length_bucket_size=options.length_bucket_size)
        if options.warmup:
            backend.warm_up()
        return backend

    def warm_up(self) -> None:
        """Run the common shapes once, so the first real batches do not pay for ORT's first-run setup."""
        for feeds in self.warm_up_feeds():
            self._session.run([self._output_name], feeds)

    def run(self, encoded: Encoded) -> npt.NDArray[np.float32]:
        """One row per encoded text, in the order the texts were given."""
        out = np.empty((encoded.count, self.embedding_dim), dtype=np.float32)
        for chunk in encoded.chunks:
            (result,) = self._session.run([self._output_name], chunk.feeds)
            out[chunk.rows] = check_rows(np.asarray(result, dtype=np.float32), len(chunk.rows),
                                         f"{self.manifest.id} on {self.device}")
        return out
