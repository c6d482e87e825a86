"""The verifier's decision among a batch's semantic candidates.

FAISS proposes, per text, the neighbours at or above the (recall-oriented) threshold that the
guards pass; the verifier scores every (text, candidate) pair of the batch in one run, and a
text is served the candidate with the highest score at or above the verifier's calibrated
threshold (none: a miss). Pure logic: the scores come in as an array.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from workers.cache.semantic import Candidate

VERIFIED_TOP_K = 3  # candidates judged per text: the nearest few hold the right one when any does


def candidate_pairs(texts: Sequence[str], candidates: Sequence[Sequence[Candidate]],
                    top_k: int = VERIFIED_TOP_K) -> list[tuple[str, str]]:
    """(new text, cached text) for the first `top_k` candidates of each text, in order."""
    return [(text, candidate.matched_text) for text, found in zip(texts, candidates, strict=True)
            for candidate in found[:top_k]]


def choose(candidates: Sequence[Sequence[Candidate]], scores: npt.NDArray[np.float32], threshold: float,
           top_k: int = VERIFIED_TOP_K) -> list[tuple[Candidate, float] | None]:
    """Per text: its best-scored candidate at or above `threshold`, with the score; `scores` are in
    `candidate_pairs` order."""
    expected = sum(len(found[:top_k]) for found in candidates)
    if expected != len(scores):
        raise ValueError(f"{len(scores)} scores for {expected} candidate pairs")
    chosen: list[tuple[Candidate, float] | None] = []
    at = 0
    for found in candidates:
        judged = list(found[:top_k])
        row = [float(s) for s in scores[at:at + len(judged)]]
        at += len(judged)
        best = max(range(len(judged)), key=lambda i: (row[i], judged[i].similarity), default=None)
        chosen.append(None if best is None or row[best] < threshold else (judged[best], row[best]))
    return chosen
