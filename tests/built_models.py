"""The model registry that `scripts/build-models` fills, for backend tests that need real models."""

import pytest

from common.settings import FleetSettings
from models.registry import ModelManifest, ModelNotFound, ModelRegistry
from tests.paths import REPO_ROOT

MODEL_NAME = "minilm-embed"


def built_registry() -> ModelRegistry:
    root = FleetSettings().registry_dir
    return ModelRegistry(root if root.is_absolute() else REPO_ROOT / root)


def resolve_or_skip(registry: ModelRegistry, precision: str, model: str = MODEL_NAME) -> ModelManifest:
    try:
        return registry.resolve(model, precision=precision)
    except ModelNotFound as error:
        pytest.skip(f"no built {precision} {model} in {registry.root}; run scripts/build-models first ({error})")
