"""Load the backend a worker's settings ask for: ONNX Runtime or PyTorch, same registered version.

Each backend module is imported only when chosen, so an ONNX Runtime worker never pays for
importing torch and transformers.
"""

from __future__ import annotations

from models.backends.base import Backend
from models.registry import ModelRegistry
from workers.settings import WorkerSettings

BACKENDS = ("onnxruntime", "torch")


def load_backend_for(settings: WorkerSettings) -> Backend:
    """The model version the settings resolve to, loaded (hashes verified) on their device and backend.

    The version is resolved the same way for both backends: the pinned `model_version`, else
    the newest registered version of `precision`. The torch backend refuses a version
    without PyTorch artifacts (e.g. INT8) or one that is not an embedding model (e.g.
    faq-intent) instead of serving something else.
    """
    if settings.backend not in BACKENDS:
        raise ValueError(f"unknown backend {settings.backend!r}; expected one of {BACKENDS}")
    registry = ModelRegistry(settings.registry_dir)
    manifest = registry.resolve(settings.model, settings.model_version, settings.precision)
    if settings.backend == "torch":
        from models.backends.memory import reserve_torch_headroom
        from models.backends.torch_backend import NoTorchArtifacts, TorchEmbeddingBackend

        if manifest.task != "embedding":
            # The torch backend computes pooled embeddings only; a classifier's head lives in its graph.
            raise NoTorchArtifacts(
                f"{manifest.id} is a {manifest.task} model whose head exists only in its ONNX graph; the torch "
                "backend serves embedding models only, so serve it with backend=onnxruntime"
            )
        if settings.device == "cuda":
            reserve_torch_headroom(settings.device_memory_headroom)
        return TorchEmbeddingBackend.load(
            registry,
            manifest,
            device=settings.device,
            max_input_tokens=settings.max_input_tokens,
            length_bucket_size=settings.length_bucket_size,
            # 0 leaves torch's default (one thread per physical core); N > 0 is process-wide.
            intra_op_threads=settings.intra_op_threads,
            warmup=settings.warmup,
        )
    from models.backends.onnx import OnnxEmbeddingBackend

    return OnnxEmbeddingBackend.load(
        registry,
        manifest,
        device=settings.device,
        intra_op_threads=settings.intra_op_threads,
        max_input_tokens=settings.max_input_tokens,
        length_bucket_size=settings.length_bucket_size,
        graph_optimization=settings.graph_optimization,
        warmup=settings.warmup,
        memory_headroom=settings.device_memory_headroom,
        spinning=settings.intra_op_spinning,
    )
