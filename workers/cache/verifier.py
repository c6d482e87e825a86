"""The semantic cache's verifier at serving time: a registered cross-encoder that reads a new
text and a cached one together and says whether the cached answer fits: cache-verifier (MiniLM,
English), or another named by FLEET_SEMANTIC_VERIFIER_MODEL.

It runs on ONNX Runtime on CPU (INT8 when registered), one thread that does not spin, over all
the candidate pairs of a batch at once (the caller runs it off the event loop). Its operating
threshold is the one the build calibrated on held-out pairs and recorded in the manifest's
check figures; a manifest without one is refused.

A verifier calibrated per language (such as cache-verifier-multilingual: Chinese and English each at the
lowest threshold that holds the target on its own held-out traps) records each language's
threshold beside the highest, `threshold`; its scores for a language with a lower threshold are
shifted on the logit scale onto `threshold`, so a score meets `threshold` exactly when the raw
score met its language's. Every consumer (the choice among candidates, the learned bound's bins,
`fleet cache-eval`) then reads one scale.

A pair with a token the verifier's vocabulary does not hold is not judged: it scores 0 and is
counted as unreadable. A judge that cannot see a word cannot say the word changes nothing (the
English-trained verifier reads "今天天气怎么样" as a row of [UNK], and two questions that differ
in one unknown character look the same to it).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from models.backends.onnx import open_session
from models.backends.tokenized import unknown_token_id
from models.pair_feeds import encode_pairs, pair_tokenizer
from models.pair_language import LANGUAGES, pair_language
from models.registry import ModelManifest, ModelNotFound, ModelRegistry
from models.same_question import same_question

log = logging.getLogger(__name__)

VERIFIER_MODEL_NAME = "cache-verifier"
THRESHOLD_FIGURE = "operating_threshold"
_CLIP = 1e-7
_SUB_BATCH = 64


@dataclass(frozen=True)
class Verdicts:
    scores: npt.NDArray[np.float32]  # P(same) per pair
    elapsed_ms: float
    unreadable: int = 0  # pairs not judged (scored 0): a token of theirs is unknown to the verifier


class CacheVerifier:
    def __init__(self, manifest: ModelManifest, registry: ModelRegistry) -> None:
        threshold = manifest.check.figures.get(THRESHOLD_FIGURE)
        if threshold is None or manifest.labels != ("different", "same"):
            raise ValueError(f"{manifest.id} is not a calibrated cache verifier (no {THRESHOLD_FIGURE} in its check)")
        registry.verify(manifest)
        self.manifest = manifest
        self.threshold = float(threshold)
        # logit(threshold) - logit(its own threshold), per language calibrated below `threshold`
        self._shifts = {language: _logit(self.threshold) - _logit(float(own)) for language in LANGUAGES
                        if (own := manifest.check.figures.get(f"{THRESHOLD_FIGURE}_{language}")) is not None
                        and float(own) < self.threshold}
        self._session = open_session(registry.path_of(manifest, manifest.onnx_file), device="cpu",
                                     intra_op_threads=1, spinning=False)
        self._tokenizer = pair_tokenizer(registry.path_of(manifest, manifest.tokenizer_file), manifest.max_length)
        self._unknown_id = unknown_token_id(self._tokenizer)
        self._lock = threading.Lock()  # the Rust tokenizer is shared state

    @classmethod
    def newest(cls, registry: ModelRegistry, precision: str = "int8",
               name: str = VERIFIER_MODEL_NAME) -> CacheVerifier | None:
        """The newest registered verifier `name` of `precision` (else of any precision); None when none is built."""
        for wanted in (precision, None):
            try:
                return cls(registry.resolve(name, None, wanted), registry)
            except ModelNotFound:
                continue
        return None

    def score(self, pairs: Sequence[tuple[str, str]]) -> Verdicts:
        """P(same) for each (new text, cached text); one question written twice is 1.0 without
        running the model (`same_question`); a pair the verifier cannot read is 0.0."""
        started = time.perf_counter()
        scores = np.ones(len(pairs), dtype=np.float32)
        judged = [i for i, (text, cached) in enumerate(pairs) if not same_question(text, cached)]
        unreadable = 0
        for start in range(0, len(judged), _SUB_BATCH):
            rows = np.asarray(judged[start:start + _SUB_BATCH], dtype=np.intp)
            with self._lock:
                feeds = encode_pairs(self._tokenizer, [pairs[i] for i in rows])
            scores[rows] = onto_one_scale(np.asarray(self._session.run(None, feeds)[0], dtype=np.float32)[:, 1],
                                          [pairs[i] for i in rows], self._shifts)
            if self._unknown_id is not None:
                blind = np.any(feeds["input_ids"] == self._unknown_id, axis=1)
                scores[rows[blind]] = 0.0
                unreadable += int(blind.sum())
        return Verdicts(scores, (time.perf_counter() - started) * 1000, unreadable)


def onto_one_scale(scores: npt.NDArray[np.float32], pairs: Sequence[tuple[str, str]],
                   shifts: dict[str, float]) -> npt.NDArray[np.float32]:
    """Each pair's P(same) moved by its language's shift on the logit scale (unshifted languages as they are)."""
    if not shifts:
        return scores
    by_pair = np.array([shifts.get(pair_language(a, b), 0.0) for a, b in pairs])
    clipped = np.clip(scores.astype(np.float64), _CLIP, 1 - _CLIP)
    shifted = 1.0 / (1.0 + np.exp(-(np.log(clipped / (1 - clipped)) + by_pair)))
    return np.where(by_pair != 0.0, shifted, scores).astype(np.float32)


def _logit(p: float) -> float:
    clipped = min(max(p, _CLIP), 1 - _CLIP)
    return math.log(clipped / (1 - clipped))
