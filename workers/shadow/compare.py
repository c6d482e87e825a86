"""Pure logic of shadow comparison: who is sampled, what "agree" means, and the stats counters.

No clients here: the shadow worker and the replay feed these functions and write what they
return, so the rules are unit-tested without Kafka or Redis.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from models.tasks import task_named
from models.tasks.text import cosine
from schemas.shadow import Comparison, ComparisonKind, LiveSource, excerpt
from schemas.wire import CacheTier, Request, Result, Status

# Salted so shadow sampling does not pick the same requests as the rollout's canary routing,
# which hashes the same ids against the rollout percentage.
_SAMPLE_SALT = b"fleet-shadow-sample:"
_HASH_SPACE = float(1 << 64)

Outputs = Mapping[str, Any]


def sampled(request_id: str, fraction: float) -> bool:
    """Whether a request is compared at this sampling fraction; the same id always gets the same answer.

    A request sampled at fraction f is also sampled at every f' > f, so raising the fraction
    only adds requests.
    """
    if fraction >= 1.0:
        return True
    if fraction <= 0.0:
        return False
    digest = hashlib.blake2b(_SAMPLE_SALT + request_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _HASH_SPACE < fraction


@dataclass(frozen=True)
class Verdict:
    kind: ComparisonKind
    agreed: bool
    cosine: float | None = None
    live_label: str | None = None
    shadow_label: str | None = None
    score: float | None = None


# What agreeing means for the tasks whose threshold is not the shadow's cosine setting: the
# largest rerank score difference, the least span F1, the largest tensor element difference.
AGREE_THRESHOLDS = {"rerank": 0.1, "token-classification": 0.9, "tensor": 1e-3}


def judge(live: Outputs, shadow: Outputs, *, agree_cosine: float, task: str | None = None) -> Verdict:
    """Compare two model outputs the way their task does (models/tasks: embeddings by cosine,
    classifier labels by equality, rerank scores by their largest difference, spans by F1,
    tensors by their largest difference). Without `task`, an embedding or a label is recognised
    by its outputs. ValueError when the two are not the same kind of output."""
    if task is None:
        task = "embedding" if "embedding" in live else "classification"
    kind = ComparisonKind(task)
    agreement = task_named(task).compare(live, shadow, threshold=AGREE_THRESHOLDS.get(task, agree_cosine))
    if kind is ComparisonKind.embedding:
        return Verdict(kind, agreement.agreed, cosine=agreement.score)
    if kind is ComparisonKind.classification:
        return Verdict(kind, agreement.agreed, live_label=agreement.live_label, shadow_label=agreement.shadow_label)
    return Verdict(kind, agreement.agreed, score=agreement.score)


def live_answer(result: Result | None, candidate: str) -> Result | None:
    """The live result to compare against, or None when the shadow must compute stable itself:
    no result yet, an error or expired result (nothing computed), or one the candidate itself
    served during a canary (comparing the candidate with itself would only inflate agreement)."""
    if result is None or result.status not in (Status.ok, Status.degraded) or not result.outputs:
        return None
    if result.version is None or result.version == candidate:
        return None
    return result


def live_timing(result: Result) -> tuple[float | None, int | None]:
    """(inference ms, batch size) of a live answer; None for a cache hit, which ran no model."""
    if result.cache is not CacheTier.miss or "inference_ms" not in result.timings:
        return None, None
    return float(result.timings["inference_ms"]), result.batch_size or None


@dataclass(frozen=True)
class Side:
    """One side of a comparison: what a version answered and what it cost."""

    version: str
    outputs: Outputs
    ms: float | None
    batch: int | None


def make_comparison(request: Request, text: str, live: Side, shadow: Side, source: LiveSource, *,
                    agree_cosine: float, task: str | None = None) -> Comparison:
    verdict = judge(live.outputs, shadow.outputs, agree_cosine=agree_cosine, task=task)
    return Comparison(id=request.id, model=request.model, live_version=live.version, shadow_version=shadow.version,
                      kind=verdict.kind, cosine=verdict.cosine, score=verdict.score, live_label=verdict.live_label,
                      shadow_label=verdict.shadow_label, agreed=verdict.agreed, live_ms=live.ms,
                      shadow_ms=shadow.ms or 0.0, live_batch=live.batch, shadow_batch=shadow.batch or 1,
                      live_source=source, input=excerpt(text))


@dataclass
class StatsDelta:
    """Increments to the shadow stats hash (`shadow_stats_key(model, candidate)`) from one batch.

    The rollout controller reads the totals: agreement = agreed / compared, mean cosine =
    cosine_sum / (compared embeddings), mean live ms = live_ms_sum / live_timed (cache hits
    have no live timing), mean shadow ms = shadow_ms_sum / compared.
    """

    compared: int = 0
    agreed: int = 0
    cosine_sum: float = 0.0
    label_agreed: int = 0
    live_ms_sum: float = 0.0
    live_timed: int = 0
    shadow_ms_sum: float = 0.0
    recomputed: int = 0
    errors: int = 0

    def add(self, comparison: Comparison) -> None:
        self.compared += 1
        self.agreed += comparison.agreed
        if comparison.cosine is not None:
            self.cosine_sum += comparison.cosine
        if comparison.kind is ComparisonKind.classification and comparison.agreed:
            self.label_agreed += 1
        if comparison.live_ms is not None:
            self.live_ms_sum += comparison.live_ms
            self.live_timed += 1
        self.shadow_ms_sum += comparison.shadow_ms
        self.recomputed += comparison.live_source is LiveSource.recomputed

    def increments(self) -> tuple[dict[str, int], dict[str, float]]:
        """(HINCRBY fields, HINCRBYFLOAT fields), leaving out zeros so an idle batch writes nothing."""
        ints: dict[str, int] = {}
        floats: dict[str, float] = {}
        for spec in fields(self):
            value = getattr(self, spec.name)
            if value:
                (floats if isinstance(value, float) else ints)[spec.name] = value
        return ints, floats


class Pipeline(Protocol):
    def hincrby(self, name: str, key: str, amount: int = 1) -> Any: ...

    def hincrbyfloat(self, name: str, key: str, amount: float = 1.0) -> Any: ...


def queue_increments(pipe: Pipeline, key: str, delta: StatsDelta) -> list[str]:
    """Queue the delta's increments on a Redis pipeline; returns the field names in queue order."""
    ints, floats = delta.increments()
    for name, amount in ints.items():
        pipe.hincrby(key, name, amount)
    for name, value in floats.items():
        pipe.hincrbyfloat(key, name, value)
    return [*ints, *floats]
