"""The tasks a model can do, one module each (models/tasks/base.py says what a task decides)."""

from __future__ import annotations

from models.manifest import ModelManifest
from models.tasks.base import Agreement, Outputs, Parsed, TaskKind
from models.tasks.rerank import RerankTask
from models.tasks.tensor import TensorTask
from models.tasks.text import ClassificationTask, EmbeddingTask
from models.tasks.token_classification import TokenClassificationTask

__all__ = ["Agreement", "Outputs", "Parsed", "TaskKind", "task_named", "task_of"]

_TASKS: dict[str, TaskKind] = {task.name: task for task in (EmbeddingTask(), ClassificationTask(), RerankTask(),
                                                            TokenClassificationTask(), TensorTask())}


def task_named(name: str) -> TaskKind:
    try:
        return _TASKS[name]
    except KeyError:
        raise ValueError(f"task {name!r} is not served by this fleet; it serves {sorted(_TASKS)}") from None


def task_of(manifest: ModelManifest) -> TaskKind:
    return task_named(manifest.task)
