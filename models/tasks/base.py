"""What a task is to the fleet: one small interface, one module per task (as MLServer's runtimes).

A `TaskKind` says what a request's inputs are and how they are checked (`parse`, built on the
wire-level readers of schemas/task_inputs.py that the gateway uses too), what the exact cache
keys an input by (`cache_key`), whether the semantic cache may answer (`semantic_cache`), how a
model's answer for one request becomes its result's `outputs` (`outputs`), and how a shadow or a
rollout compares two versions' outputs (`compare`). How rows become a batch is the backend's
`encode` that the loader picks for the task (models/loading.py): tokenised length groups for
text tasks, stacking along the first axis in shape groups for tensors.

The worker loop, the caches and the shadow know a task only through this interface.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from models.manifest import ModelManifest
from schemas.tasks import Task
from schemas.wire import Request

Outputs = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Parsed:
    """One request's input as its task reads it."""

    text: str  # what traces, dead letters and the semantic cache see (a text task's text; a summary otherwise)
    payload: Any  # what the backend's `encode` takes
    key: str  # what the exact cache hashes (with the params): the text, or a canonical form of the input


@dataclass(frozen=True, slots=True)
class Agreement:
    """How two versions' outputs for one request compare: `score` on the task's own scale (cosine,
    1.0/0.0 label agreement, score difference, span F1, max abs difference) and whether it agrees."""

    agreed: bool
    score: float
    live_label: str | None = None
    shadow_label: str | None = None


class TaskKind(Protocol):
    name: Task
    # A near input's cached answer may serve this task (the semantic cache): only where a close
    # paraphrase has the same answer, i.e. a classifier's label.
    semantic_cache: bool

    def parse(self, request: Request, manifest: ModelManifest, *, max_chars: int) -> Parsed:
        """The request's input, checked; a WireError (naming the field) otherwise."""
        ...

    def outputs(self, manifest: ModelManifest, answer: Any) -> dict[str, Any]:
        """The result's `outputs` for the backend's answer to one request."""
        ...

    def compare(self, live: Outputs, shadow: Outputs, *, threshold: float) -> Agreement:
        """Two versions' outputs for the same request; ValueError when they are not this task's."""
        ...

    def probe(self, manifest: ModelManifest) -> Any:
        """A payload the health probe runs through the model."""
        ...
