"""What "the same answer" means, and which of a text's cached candidates is served, if any.

With a verifier: the best-scored candidate at or above its threshold (`choose`); without one, the
nearest (`agreeing`). Either way not where the neighbourhood is ambiguous: likely candidates that
answer differently. Pure functions over candidates and scores; semantic.py and semantic_tier.py
run them.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np
import numpy.typing as npt

EMBEDDING_AGREEMENT = 0.99  # cosine at which two embeddings are the same answer
VERIFIED_TOP_K = 3  # candidates judged per text: the nearest few hold the right one when any does
# A candidate the verifier finds at least this likely to be the same question speaks for the
# neighbourhood. Where such candidates answer differently, which answer is right depends on the very
# difference the verifier could not weigh (on or off, this feature or that): on the Chinese stream
# bench these were most wrong answers served (enable vs disable two-step verification), in any language.
UNDECIDED = 0.5


@dataclass(frozen=True)
class Candidate:
    """A neighbour at or above the threshold that the guard passed: the verifier's to judge."""

    outputs: bytes
    similarity: float
    matched_text: str


def outputs_agree(cached: Mapping[str, Any], computed: Mapping[str, Any]) -> bool:
    """Whether a cached answer is as good as the model's: same `label` for classifiers, cosine
    >= 0.99 for embeddings, equality otherwise."""
    if "label" in cached or "label" in computed:
        return cached.get("label") == computed.get("label")
    if "embedding" in cached and "embedding" in computed:
        a = np.asarray(cached["embedding"], dtype=np.float64)
        b = np.asarray(computed["embedding"], dtype=np.float64)
        norms = float(np.linalg.norm(a) * np.linalg.norm(b))
        return a.shape == b.shape and norms > 0 and float(a @ b) / norms >= EMBEDDING_AGREEMENT
    return dict(cached) == dict(computed)


def same_answer(a: bytes, b: bytes) -> bool:
    """`outputs_agree` over two packed answers; bytes no worker wrote agree with nothing but themselves."""
    if a == b:
        return True
    try:  # msgpack's errors derive from ValueError; numpy's on a malformed embedding are one of the two
        first, second = msgpack.unpackb(a, raw=False), msgpack.unpackb(b, raw=False)
        return isinstance(first, dict) and isinstance(second, dict) and outputs_agree(first, second)
    except (ValueError, TypeError):
        return False


def agreeing(found: Sequence[Candidate]) -> Candidate | None:
    """Without a verifier: the nearest candidate, unless another one (each is at or above the
    threshold and passed the guards) holds a different answer. Such a neighbourhood is ambiguous:
    which answer is right turns on what cosine could not weigh (on or off, this feature or that)."""
    if not found:
        return None
    return found[0] if all(same_answer(other.outputs, found[0].outputs) for other in found[1:]) else None


def candidate_pairs(texts: Sequence[str], candidates: Sequence[Sequence[Candidate]],
                    top_k: int = VERIFIED_TOP_K) -> list[tuple[str, str]]:
    """(new text, cached text) for the first `top_k` candidates of each text, in order."""
    return [(text, candidate.matched_text) for text, found in zip(texts, candidates, strict=True)
            for candidate in found[:top_k]]


def choose(candidates: Sequence[Sequence[Candidate]], scores: npt.NDArray[np.float32], threshold: float,
           top_k: int = VERIFIED_TOP_K) -> tuple[list[tuple[Candidate, float] | None], dict[int, float]]:
    """Per text: its best-scored candidate at or above `threshold`, with the score, unless the
    neighbourhood is ambiguous (`ambiguous`); and the texts refused as ambiguous, by row, with the
    score their best candidate had. `scores` are in `candidate_pairs` order."""
    expected = sum(len(found[:top_k]) for found in candidates)
    if expected != len(scores):
        raise ValueError(f"{len(scores)} scores for {expected} candidate pairs")
    chosen: list[tuple[Candidate, float] | None] = []
    refused: dict[int, float] = {}
    at = 0
    for row, found in enumerate(candidates):
        judged = list(found[:top_k])
        scored = [float(s) for s in scores[at:at + len(judged)]]
        at += len(judged)
        best = max(range(len(judged)), key=lambda i: (scored[i], judged[i].similarity), default=None)
        if best is None or scored[best] < threshold:
            chosen.append(None)
        elif ambiguous(judged, scored, best):
            chosen.append(None)
            refused[row] = scored[best]
        else:
            chosen.append((judged[best], scored[best]))
    return chosen, refused


def ambiguous(judged: Sequence[Candidate], scores: Sequence[float], best: int) -> bool:
    """Whether a candidate scored >= UNDECIDED holds an answer other than the best one's, "the same
    answer" as the task defines it (`outputs_agree`: the label for a classifier)."""
    return any(score >= UNDECIDED and not same_answer(judged[i].outputs, judged[best].outputs)
               for i, score in enumerate(scores) if i != best)
