"""The `rerank` task: a cross-encoder scores a query against each of its passages (the usual
reranking step of retrieval-augmented generation).

inputs `{"query": str, "passages": [str, ...]}` -> outputs `{"scores": [float, ...]}` (one per
passage, in the passages' order; the model's raw score, higher is more relevant) and
`{"ranking": [int, ...]}` (passage indices, best first). Two versions agree on a request when
no passage's score moved by more than the threshold.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import numpy.typing as npt

from models.manifest import ModelManifest
from models.tasks.base import Agreement, Outputs, Parsed
from schemas.task_inputs import RerankInput, rerank_of
from schemas.tasks import Task
from schemas.wire import Request


class RerankTask:
    name: Task = "rerank"
    semantic_cache = False

    def parse(self, request: Request, manifest: ModelManifest, *, max_chars: int) -> Parsed:
        given = rerank_of(request.inputs)
        item = RerankInput(given.query[:max_chars], tuple(passage[:max_chars] for passage in given.passages))
        key = json.dumps([item.query, list(item.passages)], ensure_ascii=False, separators=(",", ":"))
        return Parsed(item.query, item, "rerank:" + key)

    def outputs(self, manifest: ModelManifest, answer: npt.NDArray[np.float32]) -> dict[str, Any]:
        scores = np.asarray(answer, dtype=np.float32)
        return {"scores": [float(score) for score in scores],
                "ranking": [int(i) for i in np.argsort(-scores, kind="stable")]}

    def compare(self, live: Outputs, shadow: Outputs, *, threshold: float) -> Agreement:
        if "scores" not in live or "scores" not in shadow or len(live["scores"]) != len(shadow["scores"]):
            raise ValueError(f"incomparable outputs: live has {sorted(live)}, shadow has {sorted(shadow)}")
        difference = float(np.max(np.abs(np.asarray(live["scores"], np.float64)
                                          - np.asarray(shadow["scores"], np.float64))))
        return Agreement(difference <= threshold, difference)

    def probe(self, manifest: ModelManifest) -> Any:
        return RerankInput("health probe", ("a passage",))
