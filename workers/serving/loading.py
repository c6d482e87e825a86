"""Loading further versions of a worker's model while it serves (hot swap, rollback, canary)."""

from collections.abc import Callable

from models.backends.base import Backend
from models.backends.loader import load_backend_for
from workers.health.faults import FaultInjector
from models.registry import ModelRegistry
from workers.settings import WorkerSettings


def version_loader(settings: WorkerSettings, faults: FaultInjector) -> Callable[[str], Backend]:
    """Load (verify, warm) one registered version with the worker's device and runtime settings."""
    registry = ModelRegistry(settings.registry_dir)

    def load(version: str) -> Backend:
        manifest = registry.resolve(settings.model, version)
        pinned = settings.model_copy(update={"model_version": version, "precision": manifest.precision})
        return faults.wrap(load_backend_for(pinned))

    return load


def encoder_loader(settings: WorkerSettings) -> Callable[[], Backend]:
    """The semantic cache's encoder: a small embedding model on the worker's device."""
    # No spinning: the encoder and the served model are two ONNX Runtime sessions in one process,
    # and idle threads busy-waiting for the next run would starve the other session.
    encoder = settings.model_copy(update={"model": settings.semantic_encoder_model, "model_version": None,
                                          "precision": settings.semantic_encoder_precision, "backend": "onnxruntime",
                                          "intra_op_spinning": False, "intra_op_threads": 1})
    return lambda: load_backend_for(encoder)


def resident_size(settings: WorkerSettings) -> Callable[[Backend], int]:
    """Bytes a resident version takes, estimated by its artifacts on disk (weights dominate)."""
    registry = ModelRegistry(settings.registry_dir)
    sizes: dict[str, int] = {}

    def size(backend: Backend) -> int:
        manifest = backend.manifest
        if manifest.id not in sizes:
            folder = registry.root / manifest.name / manifest.id
            sizes[manifest.id] = sum((folder / name).stat().st_size for name in manifest.files
                                     if (folder / name).is_file())
        return sizes[manifest.id]

    return size
