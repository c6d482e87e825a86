"""The model registry that `scripts/build-models` fills, for backend tests that need real models."""

from pathlib import Path

import pytest

from common.settings import FleetSettings
from models.registry import ModelManifest, ModelNotFound, ModelRegistry

MODEL_NAME = "minilm-embed"
REPO_ROOT = Path(__file__).resolve().parents[2]


def built_registry() -> ModelRegistry:
    root = FleetSettings().registry_dir
    return ModelRegistry(root if root.is_absolute() else REPO_ROOT / root)


def resolve_or_skip(registry: ModelRegistry, precision: str) -> ModelManifest:
    try:
        return registry.resolve(MODEL_NAME, precision=precision)
    except ModelNotFound as error:
        pytest.skip(f"no built {precision} model in {registry.root}; run scripts/build-models first ({error})")
