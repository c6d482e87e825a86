"""Shadow comparisons of the tasks beyond embeddings and labels: each judged its own way and
recorded with its kind and score."""

from __future__ import annotations

import numpy as np
import pytest

from schemas.shadow import Comparison, ComparisonKind, LiveSource
from schemas.tensors import encode_tensor
from schemas.wire import Request, new_request_id, now_ms
from workers.shadow.compare import Side, judge, make_comparison

SPAN = {"label": "PLACE", "score": 0.9, "start": 0, "end": 5}


@pytest.mark.parametrize(("task", "live", "shadow", "agreed", "score"), [
    ("rerank", {"scores": [1.0, 2.0]}, {"scores": [1.05, 2.0]}, True, 0.05),
    ("rerank", {"scores": [1.0, 2.0]}, {"scores": [1.0, 2.5]}, False, 0.5),
    ("token-classification", {"entities": [SPAN]}, {"entities": [SPAN]}, True, 1.0),
    ("token-classification", {"entities": [SPAN]}, {"entities": [{**SPAN, "end": 6}]}, False, 0.0),
    ("token-classification", {"entities": []}, {"entities": []}, True, 1.0),
    ("tensor", {"tensors": {"y": encode_tensor(np.ones((1, 2), np.float32))}},
     {"tensors": {"y": encode_tensor(np.full((1, 2), 1.0005, np.float32))}}, True, 5e-4),
    ("tensor", {"tensors": {"y": encode_tensor(np.ones((1, 2), np.float32))}},
     {"tensors": {"y": encode_tensor(np.full((1, 2), 1.1, np.float32))}}, False, 0.1),
])
def test_each_task_is_judged_by_its_own_measure(task: str, live: dict[str, object], shadow: dict[str, object],
                                                agreed: bool, score: float) -> None:
    verdict = judge(live, shadow, agree_cosine=0.99, task=task)
    assert verdict.kind is ComparisonKind(task) and verdict.agreed is agreed and verdict.cosine is None
    assert verdict.score == pytest.approx(score, abs=1e-4)


def test_a_comparison_record_carries_the_task_and_its_score() -> None:
    request = Request(id=new_request_id(), model="m", inputs={"query": "q", "passages": ["a"]},
                      deadline_ms=now_ms() + 1000, submitted_ms=now_ms())
    comparison = make_comparison(request, "q", Side("m-20260101-001", {"scores": [1.0]}, 1.0, 1),
                                 Side("m-20260101-002", {"scores": [1.2]}, 1.0, 1), LiveSource.recomputed,
                                 agree_cosine=0.99, task="rerank")
    decoded = Comparison.decode(comparison.encode())
    assert (decoded.kind, decoded.agreed) == (ComparisonKind.rerank, False)
    assert decoded.score == pytest.approx(0.2, abs=1e-6)


def test_outputs_of_another_task_are_incomparable() -> None:
    with pytest.raises(ValueError, match="incomparable"):
        judge({"scores": [1.0]}, {"entities": []}, agree_cosine=0.99, task="rerank")
