"""How often the semantic cache serves a pair that should hit, and how often a trap: the
measurement `fleet cache-eval` prints (fleet/commands/cache_eval.py), `--by-guard` weighs
(guard_ablation.py) and scripts/train-models gates on.

For each pair (a, b), a's answer is cached alone and b is looked up through the real
`SemanticCache`, the real encoder and, where one is registered, the real verifier, with the
guards a worker runs at that operating point.
"""


from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from workers import (
    DEFAULT_ENCODER,
    SEMANTIC_THRESHOLD,
    VERIFIER_OF_ENCODER,
    CacheVerifier,
    SemanticCache,
    WorkerSettings,
    meaning_conflict,
    semantic_models,
    verified_conflict,
)

if TYPE_CHECKING:
    from models import TokenizedBackend

PAIRS_PATH = Path(__file__).resolve().parents[2] / "workers" / "cache" / "data" / "semantic_pairs.json"
THRESHOLDS = (0.55, 0.60, 0.65, 0.70, 0.75, 0.80, 0.85, 0.90, 0.95)
MIN_SHOULD_HIT = 0.40
MAX_TRAPS = 0.01
SHIPPED_RECALL_THRESHOLD: float = WorkerSettings.model_fields["semantic_recall_threshold"].default

Vectors = dict[str, npt.NDArray[np.float32]]


@dataclass(frozen=True)
class Pair:
    a: str
    b: str
    kind: str
    should_hit: bool
    split: str = "dev"  # "holdout": written after the guard's word lists, never used to train or tune


@dataclass(frozen=True)
class Row:
    threshold: float
    guards: bool
    verifier: bool
    should_hit: float  # share of should-hit pairs served
    traps: float  # share of traps served (every kind)
    by_kind: dict[str, float]

    @property
    def meets_targets(self) -> bool:
        return self.should_hit >= MIN_SHOULD_HIT and self.traps <= MAX_TRAPS


def load_pairs(path: Path = PAIRS_PATH) -> list[Pair]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return [Pair(p["a"], p["b"], p.get("kind", "paraphrase"), True, p.get("split", "dev"))
            for p in data.get("paraphrases", [])] + \
        [Pair(p["a"], p["b"], p.get("kind", "near_miss"), False, p.get("split", "dev"))
         for p in data.get("near_misses", [])]


def served(pairs: list[Pair], vectors: Vectors, threshold: float, guards: bool,
           verdicts: npt.NDArray[np.float32] | None = None, verifier_threshold: float = 0.0,
           unreadable: frozenset[str] = frozenset(), *, every_check: bool = False) -> list[bool]:
    """Per pair: whether b is answered from a cache holding only a's answer; with `verdicts` (the
    verifier's P(same) of (b, a) per pair), only when the verifier accepts it too. The guards are
    a worker's: with a verifier, only the checks that run before it (unless `every_check`). A pair
    with a text in `unreadable` (too many tokens unknown to the encoder) is never served, as in a worker."""
    dim = len(next(iter(vectors.values())))
    guard = verified_conflict if verdicts is not None and not every_check else meaning_conflict
    cache = SemanticCache(dim, threshold=threshold, capacity=16, verify_fraction=0.0,
                          guard=guard if guards else None)
    out: list[bool] = []
    for i, pair in enumerate(pairs):
        if pair.a in unreadable or pair.b in unreadable:
            out.append(False)
            continue
        cache.clear()
        cache.add([pair.a], vectors[pair.a][None, :], [b"a"])
        found = bool(cache.candidates([pair.b], vectors[pair.b][None, :])[0])
        out.append(found and (verdicts is None or float(verdicts[i]) >= verifier_threshold))
    return out


def evaluate(pairs: list[Pair], vectors: Vectors, threshold: float, guards: bool,
             verdicts: npt.NDArray[np.float32] | None = None, verifier_threshold: float = 0.0,
             unreadable: frozenset[str] = frozenset()) -> Row:
    hits = served(pairs, vectors, threshold, guards, verdicts, verifier_threshold, unreadable)

    def rate(chosen: list[bool]) -> float:
        return sum(chosen) / len(chosen) if chosen else 0.0

    kinds = sorted({pair.kind for pair in pairs})
    return Row(threshold, guards, verdicts is not None,
               rate([hit for hit, pair in zip(hits, pairs) if pair.should_hit]),
               rate([hit for hit, pair in zip(hits, pairs) if not pair.should_hit]),
               {kind: rate([hit for hit, pair in zip(hits, pairs) if pair.kind == kind]) for kind in kinds})


@dataclass(frozen=True)
class Embedded:
    encoder: str  # the encoder's version id
    vectors: Vectors
    unreadable: frozenset[str]  # texts a worker would neither look up nor cache
    encoder_name: str = DEFAULT_ENCODER
    why: str = ""  # why this encoder, where the settings named none


def embed_all(texts: list[str], registry_dir: Path | None = None, encoder_model: str | None = None) -> Embedded:
    """Every text through the semantic cache's encoder, as a worker's settings name it (or
    `encoder_model`). Named by neither, it is the shipped encoder that reads the texts, as a worker
    takes the one that reads its model's languages (workers/cache/semantic_models.py): minilm-embed,
    unless it cannot read most of them and another shipped encoder can."""
    from models import ModelLoader, ModelNotFound, infer_in_chunks

    where = {} if registry_dir is None else {"model_dir": registry_dir}
    if encoder_model is not None:
        where["semantic_encoder_model"] = encoder_model
    settings = WorkerSettings(model="minilm-embed", precision="int8", warmup=False, **where)
    loader = ModelLoader(settings.runtime())
    first = semantic_models(settings, loader.registry).encoder
    others = [] if settings.semantic_encoder_model else [name for name in VERIFIER_OF_ENCODER if name != first]
    unique = list(dict.fromkeys(texts))
    chosen: tuple[str, TokenizedBackend, frozenset[str]] | None = None
    for name in (first, *others):
        try:
            encoder = loader.load_encoder(name, settings.semantic_encoder_precision)
        except ModelNotFound:
            if name == first:
                raise
            continue
        shares = encoder.unknown_shares(unique)
        unreadable = frozenset(text for text, share in zip(unique, shares) if share > settings.semantic_max_unknown_share)
        if chosen is None or len(unreadable) < len(chosen[2]):
            chosen = (name, encoder, unreadable)
        if 2 * len(unreadable) <= len(unique):
            break
    assert chosen is not None
    name, encoder, unreadable = chosen
    why = "" if name == first else f"{first} cannot read most of these texts; {name} reads them"
    return Embedded(encoder.manifest.id, dict(zip(unique, infer_in_chunks(encoder, unique))), unreadable, name, why)


def open_verifier(encoder_name: str | None = None) -> CacheVerifier | None:
    """The verifier a worker would load beside `encoder_name` (the settings' encoder if None), or
    None where the settings turn it off."""
    from models import ModelRegistry

    settings = WorkerSettings(model="minilm-embed")
    if not settings.semantic_verifier:
        return None  # FLEET_SEMANTIC_VERIFIER=false: the cosine threshold and every guard check decide
    if encoder_name is not None and settings.semantic_encoder_model is None:
        settings = settings.model_copy(update={"semantic_encoder_model": encoder_name})
    registry = ModelRegistry(settings.registry_dir)
    return CacheVerifier.newest(registry, name=semantic_models(settings, registry).verifier)


@dataclass(frozen=True)
class Report:
    encoder: str
    verifier: str | None
    verifier_threshold: float | None
    shipped: Row
    rows: list[Row]
    served_traps: list[Pair]
    unreadable_pairs: int = 0  # pairs with a text the encoder cannot read: never served
    unjudged_pairs: int = 0  # pairs with a token the verifier cannot read: never served where it decides
    encoder_why: str = ""  # why this encoder, where the settings named none


@dataclass(frozen=True)
class Scored:
    """The pairs through the encoder and, where one is registered, the verifier: what every
    operating point is measured on."""

    embedded: Embedded
    verifier: CacheVerifier | None
    verdicts: npt.NDArray[np.float32] | None  # the verifier's P(same) of (b, a), per pair
    unjudged_pairs: int  # pairs with a token the verifier cannot read

    @property
    def shipped_threshold(self) -> float:
        return SHIPPED_RECALL_THRESHOLD if self.verifier is not None else SEMANTIC_THRESHOLD

    @property
    def verifier_threshold(self) -> float:
        return self.verifier.threshold if self.verifier is not None else 0.0

    def served_at_shipped(self, pairs: list[Pair], guards: bool, *, every_check: bool = False) -> list[bool]:
        return served(pairs, self.embedded.vectors, self.shipped_threshold, guards, self.verdicts,
                      self.verifier_threshold, self.embedded.unreadable, every_check=every_check)


def score(pairs: list[Pair]) -> Scored:
    embedded = embed_all([text for pair in pairs for text in (pair.a, pair.b)])
    verifier = open_verifier(embedded.encoder_name)
    judged = verifier.score([(pair.b, pair.a) for pair in pairs]) if verifier is not None else None
    return Scored(embedded, verifier, judged.scores if judged is not None else None,
                  judged.unreadable if judged is not None else 0)


def measure(pairs: list[Pair], scored: Scored | None = None) -> Report:
    scored = scored if scored is not None else score(pairs)
    vectors, unreadable = scored.embedded.vectors, scored.embedded.unreadable
    verifier, verdicts, v_threshold = scored.verifier, scored.verdicts, scored.verifier_threshold
    rows = [evaluate(pairs, vectors, t, guards, unreadable=unreadable) for t in THRESHOLDS for guards in (True, False)]
    if verdicts is not None:
        rows += [evaluate(pairs, vectors, t, True, verdicts, v_threshold, unreadable) for t in THRESHOLDS]
    shipped = evaluate(pairs, vectors, scored.shipped_threshold, True, verdicts, v_threshold, unreadable)
    hits = scored.served_at_shipped(pairs, guards=True)
    wrong = [pair for pair, hit in zip(pairs, hits) if hit and not pair.should_hit]
    unread = sum(pair.a in unreadable or pair.b in unreadable for pair in pairs)
    return Report(scored.embedded.encoder, verifier.manifest.id if verifier is not None else None,
                  verifier.threshold if verifier is not None else None, shipped, rows, wrong, unread,
                  scored.unjudged_pairs, scored.embedded.why)


