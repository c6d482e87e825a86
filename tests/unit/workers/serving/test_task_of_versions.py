"""A model keeps its task across versions: the serving set refuses to load a version of another task."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from versions.pointers import ServingPointers
from workers.serving.model_set import ModelSet


def _backend(version: str, task: str) -> Any:
    return SimpleNamespace(manifest=SimpleNamespace(id=version, task=task), device="cpu")


async def test_a_version_of_another_task_is_refused_and_the_serving_set_stays() -> None:
    versions = {"m-20260101-002": _backend("m-20260101-002", "classification"),
                "m-20260101-003": _backend("m-20260101-003", "tensor")}
    models = ModelSet(_backend("m-20260101-001", "classification"), versions.__getitem__, budget_bytes=1 << 30,
                      size_of=lambda _: 1)
    assert await models.apply(ServingPointers("m-20260101-001", "m-20260101-002", 10.0))
    with pytest.raises(ValueError, match="m-20260101-003 is a tensor model and this worker serves classification"):
        await models.apply(ServingPointers("m-20260101-001", "m-20260101-003", 10.0))
    assert models.pointers == ServingPointers("m-20260101-001", "m-20260101-002", 10.0)
    assert "m-20260101-003" not in models.resident
