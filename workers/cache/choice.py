"""Which of a text's cached candidates the verifier's scores serve, if any: the best-scored one at
or above the threshold, unless the neighbourhood is ambiguous (likely candidates that answer
differently). Pure functions over the candidates and their scores; `semantic_tier.py` runs them.
"""

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from workers.cache.exact import unpack_outputs
from workers.cache.semantic import Candidate, outputs_agree

VERIFIED_TOP_K = 3  # candidates judged per text: the nearest few hold the right one when any does


def candidate_pairs(texts: Sequence[str], candidates: Sequence[Sequence[Candidate]],
                    top_k: int = VERIFIED_TOP_K) -> list[tuple[str, str]]:
    """(new text, cached text) for the first `top_k` candidates of each text, in order."""
    return [(text, candidate.matched_text) for text, found in zip(texts, candidates, strict=True)
            for candidate in found[:top_k]]


def choose(candidates: Sequence[Sequence[Candidate]], scores: npt.NDArray[np.float32], threshold: float,
           top_k: int = VERIFIED_TOP_K) -> tuple[list[tuple[Candidate, float] | None], int]:
    """Per text: its best-scored candidate at or above `threshold`, with the score, unless the
    neighbourhood is ambiguous (`ambiguous`); and how many texts were refused as ambiguous. `scores`
    are in `candidate_pairs` order."""
    expected = sum(len(found[:top_k]) for found in candidates)
    if expected != len(scores):
        raise ValueError(f"{len(scores)} scores for {expected} candidate pairs")
    chosen: list[tuple[Candidate, float] | None] = []
    refused, at = 0, 0
    for found in candidates:
        judged = list(found[:top_k])
        row = [float(s) for s in scores[at:at + len(judged)]]
        at += len(judged)
        best = max(range(len(judged)), key=lambda i: (row[i], judged[i].similarity), default=None)
        if best is None or row[best] < threshold:
            chosen.append(None)
        elif ambiguous(judged, row, best):
            chosen.append(None)
            refused += 1
        else:
            chosen.append((judged[best], row[best]))
    return chosen, refused


# A candidate the verifier finds at least this likely to be the same question speaks for the
# neighbourhood. Where such candidates answer differently, which answer is right depends on the very
# difference the verifier could not weigh (on or off, this feature or that): on the Chinese stream
# bench these were most wrong answers served (enable vs disable two-step verification), in any language.
UNDECIDED = 0.5


def ambiguous(judged: Sequence[Candidate], scores: Sequence[float], best: int) -> bool:
    """Whether a candidate scored >= UNDECIDED holds an answer other than the best one's, "the same
    answer" as the task defines it (`outputs_agree`: the label for a classifier)."""
    return any(score >= UNDECIDED and not same_answer(judged[i].outputs, judged[best].outputs)
               for i, score in enumerate(scores) if i != best)


def same_answer(a: bytes, b: bytes) -> bool:
    if a == b:
        return True
    try:
        first, second = unpack_outputs(a), unpack_outputs(b)
    except ValueError:  # msgpack's errors derive from it; not an answer a worker wrote
        return False
    return isinstance(first, dict) and isinstance(second, dict) and outputs_agree(first, second)
