"""The tasks a model can do: what its requests hold and how its results look.

One name per task, shared by the manifest (models/), the model card the gateway reads, and
the wire. Text tasks take texts through the version's own tokenizer; `tensor` takes named
tensors as they are.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

Task = Literal["embedding", "classification", "rerank", "token-classification", "tensor"]
TASKS: Final[tuple[Task, ...]] = get_args(Task)
TEXT_TASKS: Final[frozenset[Task]] = frozenset({"embedding", "classification", "rerank", "token-classification"})


def is_text_task(task: str) -> bool:
    return task in TEXT_TASKS
