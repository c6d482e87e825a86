"""The shadow comparison record: one per request a shadow worker compared (topic `fleet.shadow.<model>`).

A msgpack map like every other record of the wire contract (schema version field `v`),
keyed by the request id on the topic. Fields:

| field          | type          | meaning                                                                  |
|----------------|---------------|--------------------------------------------------------------------------|
| v              | int           | schema version (1)                                                       |
| id             | str (hex)     | the compared request's id                                                |
| model          | str           | model name                                                               |
| live_version   | str           | version whose answer was compared against (stable, or what live served)  |
| shadow_version | str           | the candidate version the shadow ran                                     |
| kind           | str           | the model's task: `embedding`, `classification`, `rerank`, `token-classification`, `tensor` |
| cosine         | float or nil  | cosine of live and shadow embeddings (embeddings only)                   |
| score          | float or nil  | the task's own measure: rerank max score difference, token-classification span F1, tensor max abs difference |
| live_label     | str or nil    | live label (classifiers only)                                            |
| shadow_label   | str or nil    | shadow label (classifiers only)                                          |
| agreed         | bool          | cosine >= threshold (embeddings), equal labels (classifiers), score within the task's threshold (others) |
| live_ms        | float or nil  | inference ms of the live answer's batch (nil: a cache hit, not timed)    |
| shadow_ms      | float         | inference ms of the shadow's candidate batch                             |
| live_batch     | int or nil    | rows in the batch that computed the live answer                          |
| shadow_batch   | int           | rows in the shadow's candidate batch                                     |
| live_source    | str           | `live_result` (read from Redis) or `recomputed` (the shadow ran stable)  |
| input          | str           | the first 80 characters of the input text, for reports                   |
| time_ms        | int           | epoch ms the comparison was made                                         |

Both latencies are "inference time of the batch the request was in", the same meaning as
a result's `timings.inference_ms`; divide by the batch size for the cost per row.
"""

from enum import StrEnum

import msgpack
from pydantic import Field

from schemas.wire import RequestId, _Wire, now_ms

INPUT_EXCERPT_CHARS = 80


class ComparisonKind(StrEnum):
    """The compared model's task (schemas/tasks.py)."""

    embedding = "embedding"
    classification = "classification"
    rerank = "rerank"
    token_classification = "token-classification"
    tensor = "tensor"


class LiveSource(StrEnum):
    live_result = "live_result"
    recomputed = "recomputed"


class Comparison(_Wire):
    id: RequestId
    model: str
    live_version: str
    shadow_version: str
    kind: ComparisonKind
    cosine: float | None = None
    score: float | None = None
    live_label: str | None = None
    shadow_label: str | None = None
    agreed: bool
    live_ms: float | None = None
    shadow_ms: float = Field(ge=0)
    live_batch: int | None = None
    shadow_batch: int = Field(1, ge=1)
    live_source: LiveSource
    input: str = Field("", max_length=INPUT_EXCERPT_CHARS)
    time_ms: int = Field(default_factory=now_ms)

    def encode(self) -> bytes:
        return msgpack.packb(self.model_dump(mode="python", exclude_none=True), use_bin_type=True)


def excerpt(text: str) -> str:
    """The input as a report shows it: whitespace collapsed, cut to INPUT_EXCERPT_CHARS."""
    return " ".join(text.split())[:INPUT_EXCERPT_CHARS]
