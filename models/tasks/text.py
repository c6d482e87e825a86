"""The text tasks the fleet served first: `embedding` (a sentence embedding) and `classification`
(a probability per label). Their wire is what it always was: `inputs.text` in, `embedding` or
`label`/`score`/`top` out."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from models.manifest import ModelManifest
from models.tasks.base import Agreement, Outputs, Parsed
from schemas.task_inputs import text_of
from schemas.tasks import Task
from schemas.wire import Request

TOP_LABELS = 3
PROBE_TEXT = "health probe"


def cosine(a: Any, b: Any) -> float:
    """Cosine of two vectors (0.0 when either is all zeros); ValueError when their widths differ."""
    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"embedding widths differ: live {x.shape[0]}, shadow {y.shape[0]}")
    norms = float(np.linalg.norm(x) * np.linalg.norm(y))
    return float(np.dot(x, y) / norms) if norms > 0 else 0.0


class _TextTask:
    semantic_cache = False

    def parse(self, request: Request, manifest: ModelManifest, *, max_chars: int) -> Parsed:
        # A text is cut by characters before the tokenizer sees it: 5 MB cost what the longest input costs.
        text = text_of(request.inputs)[:max_chars]
        return Parsed(text, text, text)

    def probe(self, manifest: ModelManifest) -> Any:
        return PROBE_TEXT


class EmbeddingTask(_TextTask):
    name: Task = "embedding"

    def outputs(self, manifest: ModelManifest, answer: npt.NDArray[np.float32]) -> dict[str, Any]:
        # Kept as the float32 row it is: the result packs it from numpy (schemas/packing.py).
        return {"embedding": answer}

    def compare(self, live: Outputs, shadow: Outputs, *, threshold: float) -> Agreement:
        if "embedding" not in live or "embedding" not in shadow:
            raise ValueError(f"incomparable outputs: live has {sorted(live)}, shadow has {sorted(shadow)}")
        value = cosine(live["embedding"], shadow["embedding"])
        return Agreement(value >= threshold, value)


class ClassificationTask(_TextTask):
    """Callers get the winning label, its probability and the runners-up, never a bare vector."""

    name: Task = "classification"
    semantic_cache = True

    def outputs(self, manifest: ModelManifest, answer: npt.NDArray[np.float32]) -> dict[str, Any]:
        order = np.argsort(answer)[::-1][:TOP_LABELS]
        return {
            "label": manifest.labels[int(order[0])],
            "score": float(answer[order[0]]),
            "top": [[manifest.labels[int(i)], float(answer[i])] for i in order],
        }

    def compare(self, live: Outputs, shadow: Outputs, *, threshold: float) -> Agreement:
        if "label" not in live or "label" not in shadow:
            raise ValueError(f"incomparable outputs: live has {sorted(live)}, shadow has {sorted(shadow)}")
        live_label, shadow_label = str(live["label"]), str(shadow["label"])
        agreed = live_label == shadow_label
        return Agreement(agreed, 1.0 if agreed else 0.0, live_label, shadow_label)
