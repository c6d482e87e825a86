"""One set of self-made source models for every import test (made once per session, seconds)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from models.registry import ModelRegistry
from tests.integration.models.importing.sources import Sources, make_sources


@pytest.fixture(scope="session")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Sources:
    with warnings.catch_warnings():
        # torch's legacy exporter announces its own deprecation; the import silences it the same way.
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        return make_sources(tmp_path_factory.mktemp("import-sources"))


@pytest.fixture
def registry(tmp_path: Path) -> ModelRegistry:
    return ModelRegistry(tmp_path / "models")
