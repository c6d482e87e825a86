"""Loading registered model versions: the one loader every process uses.

`RuntimeSpec` is what loading needs (registry, model, version or precision, backend and how it
runs); a worker's settings produce one (`WorkerSettings.runtime()`), and a bench or a test can
build one directly. `ModelLoader` turns it into loaded, hash-verified backends: the configured
version, any named version (with that version's own precision, so an FP32 worker can load its
INT8 candidate), the semantic cache's encoder, and the resident size of what it loaded.

Each backend module is imported only when chosen, so an ONNX Runtime worker never pays for
importing torch and transformers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from models.backends.base import Backend
from models.backends.options import Device, GraphOptimization, RuntimeOptions
from models.backends.sim import SimBackend, SimDevice
from models.backends.tokenized import TokenizedBackend
from models.registry import ModelManifest, ModelRegistry, Precision

# sim: a simulated device for benchmarks (models/backends/sim.py), never a serving mode.
BackendName = Literal["onnxruntime", "torch", "sim"]
BACKENDS: tuple[str, ...] = get_args(BackendName)

__all__ = ["BACKENDS", "BackendName", "Device", "GraphOptimization", "ModelLoader", "Precision", "RuntimeOptions",
           "RuntimeSpec", "SimDevice"]


@dataclass(frozen=True)
class RuntimeSpec:
    """Which version to load (the pinned `version`, else the newest of `precision`) and how to run it."""

    registry_dir: Path
    model: str
    version: str | None = None
    precision: Precision = "fp32"
    backend: BackendName = "onnxruntime"
    options: RuntimeOptions = field(default_factory=RuntimeOptions)
    sim: SimDevice | None = None  # the simulated device of backend "sim"


class ModelLoader:
    """Loads versions of `spec.model` (and the cache encoder) the way `spec` says; hashes verified."""

    def __init__(self, spec: RuntimeSpec) -> None:
        if spec.backend not in BACKENDS:
            raise ValueError(f"unknown backend {spec.backend!r}; expected one of {BACKENDS}")
        if spec.backend == "sim" and spec.sim is None:
            raise ValueError("backend 'sim' needs a simulated device: a preset or its a, b, c times")
        self.spec = spec
        self.registry = ModelRegistry(spec.registry_dir)
        self._sizes: dict[str, int] = {}

    def load(self) -> Backend:
        """The configured version: the pin (which must be of `precision`), else the newest of `precision`."""
        spec = self.spec
        return self._open(self.registry.resolve(spec.model, spec.version, spec.precision), spec.backend, spec.options)

    def load_version(self, version: str) -> Backend:
        """A named version of the model, whatever its precision (hot swap, rollback, canary, shadow)."""
        return self._open(self.registry.resolve(self.spec.model, version), self.spec.backend, self.spec.options)

    def load_encoder(self, model: str, precision: Precision) -> TokenizedBackend:
        """The semantic cache's encoder: the newest `precision` version of `model`, on ONNX Runtime, on
        the worker's device, with one thread that never spins. It must embed text."""
        # The encoder and the served model are two sessions in one process: idle threads busy-waiting
        # for the next run would starve the other session.
        options = dataclasses.replace(self.spec.options, spinning=False, intra_op_threads=1)
        encoder = self._open(self.registry.resolve(model, None, precision), "onnxruntime", options)
        if not isinstance(encoder, TokenizedBackend):
            raise ValueError(f"{model} is a {encoder.manifest.task} model: the semantic cache's encoder must "
                             "embed text (FLEET_SEMANTIC_ENCODER_MODEL)")
        return encoder

    def resident_size(self, backend: Backend) -> int:
        """Bytes a resident version takes, estimated by its artifacts on disk (weights dominate)."""
        manifest = backend.manifest
        if manifest.id not in self._sizes:
            folder = self.registry.version_dir(manifest.name, manifest.id)
            self._sizes[manifest.id] = sum((folder / name).stat().st_size for name in manifest.files
                                           if (folder / name).is_file())
        return self._sizes[manifest.id]

    def _open(self, manifest: ModelManifest, backend: str, options: RuntimeOptions) -> Backend:
        if backend == "torch":
            return _open_torch(self.registry, manifest, options)
        if backend == "sim" and self.spec.sim is not None:
            return SimBackend.load(self.registry, manifest, self.spec.sim, options)
        if manifest.task == "tensor":
            from models.backends.tensor import OnnxTensorBackend

            return OnnxTensorBackend.load(self.registry, manifest, options)  # type: ignore[return-value]
        if manifest.task in ("rerank", "token-classification"):
            from models.backends.text_tasks import OnnxRerankBackend, OnnxTokenClassificationBackend

            backend_class = OnnxRerankBackend if manifest.task == "rerank" else OnnxTokenClassificationBackend
            return backend_class.load(self.registry, manifest, options)  # type: ignore[return-value]
        from models.backends.onnx import OnnxEmbeddingBackend

        return OnnxEmbeddingBackend.load(self.registry, manifest, options)


def _open_torch(registry: ModelRegistry, manifest: ModelManifest, options: RuntimeOptions) -> Backend:
    """The torch backend refuses a version without PyTorch artifacts (e.g. INT8) or one that is not
    an embedding model (e.g. faq-intent) instead of serving something else."""
    from models.backends.memory import reserve_torch_headroom
    from models.backends.torch_backend import NoTorchArtifacts, TorchEmbeddingBackend

    if manifest.task != "embedding":
        # The torch backend computes pooled embeddings only; a classifier's head lives in its graph.
        raise NoTorchArtifacts(
            f"{manifest.id} is a {manifest.task} model whose head exists only in its ONNX graph; the torch "
            "backend serves embedding models only, so serve it with backend=onnxruntime"
        )
    if options.device == "cuda":
        reserve_torch_headroom(options.memory_headroom)
    return TorchEmbeddingBackend.load(registry, manifest, options)
