"""The `token-classification` task (named entities, say): labelled spans of a text.

inputs `{"text": str}` -> outputs `{"entities": [{"label", "score", "start", "end"}, ...]}`:
character offsets into the text (end exclusive), the label without its B-/I- prefix, the mean
probability of the span's tokens. Tokens are grouped the usual way ("simple" aggregation): a
token starts a new span unless it continues the previous one's label (an I- tag, or the same
plain label). Label `O` is outside any span. Two versions agree when their spans' F1 reaches
the threshold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from models.manifest import ModelManifest
from models.tasks.base import Agreement, Outputs
from models.tasks.text import PROBE_TEXT, _TextTask
from schemas.tasks import Task

OUTSIDE = "O"


@dataclass(frozen=True)
class TokenScores:
    """A backend's answer for one text: per token, its label probabilities and character span."""

    probabilities: npt.NDArray[np.float32]  # (tokens, labels), special tokens left out
    offsets: tuple[tuple[int, int], ...]


def _entity_of(label: str) -> tuple[str, bool]:
    """(entity type, whether this tag may continue a span)."""
    if label.startswith(("B-", "I-")):
        return label[2:], label.startswith("I-")
    return label, True


def spans(labels: tuple[str, ...], answer: TokenScores) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    scores: list[float] = []
    best = answer.probabilities.argmax(axis=-1) if len(answer.offsets) else np.zeros(0, np.intp)
    for token, label_index in enumerate(best.tolist()):
        label = labels[label_index]
        start, end = answer.offsets[token]
        if label == OUTSIDE:
            continue
        entity, continues = _entity_of(label)
        score = float(answer.probabilities[token, label_index])
        if found and continues and found[-1]["label"] == entity and found[-1]["_last"] == token - 1:
            found[-1].update(end=end, _last=token)
            scores.append(score)
            found[-1]["score"] = float(np.mean(scores))
            continue
        scores = [score]
        found.append({"label": entity, "score": score, "start": start, "end": end, "_last": token})
    for span in found:
        del span["_last"]
    return found


def span_f1(live: list[dict[str, Any]], shadow: list[dict[str, Any]]) -> float:
    """F1 of exact (label, start, end) matches; 1.0 when neither found anything."""
    a = {(s["label"], s["start"], s["end"]) for s in live}
    b = {(s["label"], s["start"], s["end"]) for s in shadow}
    if not a and not b:
        return 1.0
    both = len(a & b)
    return 2 * both / (len(a) + len(b))


class TokenClassificationTask(_TextTask):
    name: Task = "token-classification"

    def outputs(self, manifest: ModelManifest, answer: TokenScores) -> dict[str, Any]:
        return {"entities": spans(manifest.labels, answer)}

    def compare(self, live: Outputs, shadow: Outputs, *, threshold: float) -> Agreement:
        if "entities" not in live or "entities" not in shadow:
            raise ValueError(f"incomparable outputs: live has {sorted(live)}, shadow has {sorted(shadow)}")
        f1 = span_f1(list(live["entities"]), list(shadow["entities"]))
        return Agreement(f1 >= threshold, f1)

    def probe(self, manifest: ModelManifest) -> Any:
        return PROBE_TEXT
