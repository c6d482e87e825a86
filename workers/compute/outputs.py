"""What a model's answer for one request means to a caller: the `outputs` map of a result, as
the version's task (models/tasks) says."""

from typing import Any

from models.registry import ModelManifest
from models.tasks import task_of


def outputs_of(manifest: ModelManifest, answer: Any) -> dict[str, Any]:
    return task_of(manifest).outputs(manifest, answer)
