"""Hard traps for the multilingual verifier, labelled by the fleet's own classifier: two questions
of the training sets that e5-embed puts close and faq-intent-multilingual answers differently.

Why: e5's cosine puts any two customer-service questions at 0.85-0.95, so the verifier judges
questions that are not edits of one another ("下单后还可以修改收货地址吗" / "怎么取消已下单的商品").
Its written traps change a word or two and its unrelated pairs share nothing, so a first
multilingual verifier scored such pairs 0.99 "same": on the Chinese cache bench's stream 83 of
its 494 semantic hits were another intent's answer. The English verifier learned the same lesson
from its FAQ data (models/build/verifier_faq_pairs.py); here the labels come from the model the
cache serves, as a worker's recomputation does, and the texts from the written training sets
(already kept apart from every text that judges the verifier).

A pair is kept when each text's intent is held with at least MIN_CONFIDENCE and gives the other's
intent under MAX_CROSS (off-domain texts, which the classifier spreads thin, give no pairs); each
text keeps its most alike such partner, and a seeded draw takes COUNTS of them per language.

    python -m fleet_dev.intent_negatives   writes MINED_FILE from the built FP32 e5-embed and
                                           faq-intent-multilingual (scripts/build-models)
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from models.build.written_pairs import WRITTEN_DIR

MINED_FILE = WRITTEN_DIR / "mined" / "other-intent.json"
KIND = "other_intent"
MIN_COSINE = 0.87
MIN_CONFIDENCE = 0.30
MAX_CROSS = 0.10
COUNTS = {"zh": 500, "en": 250}
_CHUNK = 1024


@dataclass(frozen=True)
class OtherIntentPair:
    a: str
    b: str
    cosine: float
    intents: tuple[str, str]


def other_intent_pairs(texts: Sequence[str], vectors: npt.NDArray[np.float32], probabilities: npt.NDArray[np.float32],
                       labels: Sequence[str], count: int, seed: int = 0) -> list[OtherIntentPair]:
    """`count` pairs (fewer if there are not as many): per text, its most alike other-intent partner
    at cosine MIN_COSINE or more, each unordered pair once, then a seeded draw; `vectors` are unit rows."""
    intent = probabilities.argmax(axis=1)
    confident = probabilities.max(axis=1) >= MIN_CONFIDENCE
    best: dict[tuple[int, int], float] = {}
    for start in range(0, len(texts), _CHUNK):
        rows = np.arange(start, min(start + _CHUNK, len(texts)))
        cosines = vectors[rows] @ vectors.T
        apart = ((intent[rows, None] != intent[None, :])
                 & (probabilities[rows][:, intent] < MAX_CROSS)
                 & (probabilities[:, intent[rows]].T < MAX_CROSS)
                 & confident[rows, None] & confident[None, :] & (cosines >= MIN_COSINE))
        cosines = np.where(apart, cosines, -np.inf)
        for row, partner in zip(rows, cosines.argmax(axis=1), strict=True):
            if np.isfinite(cosines[row - start, partner]):
                best[(min(row, partner), max(row, partner))] = float(cosines[row - start, partner])
    pairs = [OtherIntentPair(texts[i], texts[j], round(cosine, 4), (labels[intent[i]], labels[intent[j]]))
             for (i, j), cosine in sorted(best.items())]
    return sorted(random.Random(seed).sample(pairs, min(count, len(pairs))), key=lambda p: (p.a, p.b))


def mined_document(per_language: dict[str, list[OtherIntentPair]], provenance: str) -> dict[str, object]:
    return {"about": __doc__.splitlines()[0] if __doc__ else "", "made_with": provenance, "paraphrases": [],
            "near_misses": [{"a": p.a, "b": p.b, "kind": KIND, "cosine": p.cosine, "intents": list(p.intents),
                             "language": language}
                            for language, pairs in per_language.items() for p in pairs]}
