"""The semantic cache in the batch path: which candidate the verifier chooses, and what the
model's answers add.

One guarded FAISS index per model version (workers/cache/semantic.py), shared by every worker of
that version through a compacted topic (workers/cache/semantic_log.py). The encoder (the INT8
MiniLM by default) runs batched over a version group's texts in a worker thread; its rows are kept
on the group so the entries the model computes next are added without encoding twice. Where a
cache-verifier is registered (and `semantic_verifier` is on), FAISS proposes the nearest candidates
above the recall threshold that pass the guards, and the verifier (workers/cache/verifier.py), in
the same worker thread and in one run over the group's candidate pairs, decides which (if any) is
served: per text, its best-scored candidate at or above the verifier's threshold, unless another
candidate that the verifier finds at least as likely the same question as not holds a different
answer (`choice.py`): such a neighbourhood is ambiguous, and the model decides.
Lookups run while they pay (workers/cache/lookup_cost.py). A text with words the encoder cannot
read (unknown tokens) is neither looked up nor cached: it would look like any other such text.
"""

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer

from common.redis_cluster import AnyRedis
from schemas.names import semantic_bound_key, semantic_bounds_index_key, semantic_cache_topic
from schemas.wire import CacheTier, now_ms
from models.backends.tokenized import TokenizedBackend
from models.registry import ModelRegistry, RegistryError
from workers.cache.exact import unpack_outputs
from workers.cache.guards import meaning_conflict, verified_conflict
from workers.cache.metrics import CacheMetrics
from workers.cache.choice import agreeing, candidate_pairs, choose, outputs_agree
from workers.cache.semantic import SemanticCache, SemanticHit
from workers.cache.keys import canonical_text
from workers.cache.learned_bound import LearnedBound, SharedBound
from workers.cache.lookup_cost import LookupCost
from workers.cache.semantic_log import SemanticEntry, SemanticLog
from workers.delivery.sink import Outcome
from workers.cache.semantic_models import DEFAULT_VERIFIER
from workers.cache.verifier import CacheVerifier
from workers.settings import WorkerSettings
from workers.compute.compute import Computed
from workers.compute.prepare import Prepared, VersionGroup, drop_rows, timings_of

log = logging.getLogger(__name__)

@dataclass
class Found:
    """What one lookup found for a version group's readable texts."""

    hits: list[SemanticHit | None]
    probes: dict[int, tuple[float, bytes]] = field(default_factory=dict)  # row -> best unserved (score, outputs)
    judged: int = 0  # candidates the verifier scored
    verifier_ms: float = 0.0


# --- the tier ---

class SemanticTier:
    def __init__(self, settings: WorkerSettings, *, producer: AIOKafkaProducer, metrics: CacheMetrics,
                 load_encoder: Callable[[], TokenizedBackend], redis: AnyRedis | None = None) -> None:
        """`redis`: where the learned bound's counts are shared (`semantic_max_wrong_rate`); without
        it the bound is off."""
        self._settings = settings
        self._redis = redis
        self._bounds: dict[str, SharedBound] = {}
        self._model = settings.model
        self._producer = producer
        self._metrics = metrics
        self._load_encoder = load_encoder
        self._encoder: TokenizedBackend | None = None
        self.verifier: CacheVerifier | None = None
        self._verifier_broken = False
        self._warned_unreadable = False
        self._warned_unjudged = False
        self._versions: dict[str, tuple[SemanticCache, SemanticLog]] = {}
        self._generation = 0
        self._evictions_seen = 0
        self._ambiguous_seen = 0
        self._changes_seen: dict[tuple[str, str], int] = {}
        self.cost = LookupCost()

    async def lookup(self, prepared: Prepared) -> None:
        groups = [group for group in prepared.groups if group.ready]
        if not groups or (self._settings.semantic_only_when_paying and not self.cost.should_look_up()):
            return
        if self._encoder is None:
            self.verifier = await asyncio.to_thread(self._open_verifier)
            self._encoder = await asyncio.to_thread(self._load_encoder)
        if self._verifier_broken:
            return
        caches = [await self._cache_of(group.who.version) for group in groups]
        for group in groups:
            bound = self._bounds.get(group.who.version)
            if bound is not None:
                await bound.sync()
        await asyncio.to_thread(self._lookup_groups, prepared, groups, caches)

    def _lookup_groups(self, prepared: Prepared, groups: list[VersionGroup], caches: list[SemanticCache]) -> None:
        assert self._encoder is not None
        for group, cache in zip(groups, caches, strict=True):
            started = time.perf_counter()
            group.vectors, shares = self._encoder.infer_reading([item.text for item in group.ready])
            group.unreadable = self._unreadable(shares)
            encoder_ms = (time.perf_counter() - started) * 1000
            if not cache.enabled:
                continue
            readable = [row for row in range(len(group.ready)) if row not in group.unreadable]
            found: list[SemanticHit | None] = [None] * len(group.ready)
            candidates, verifier_ms = 0, 0.0
            if readable:
                texts = [canonical_text(group.ready[row].text) for row in readable]
                looked = self._find(cache, texts, group.vectors[readable], self._bounds.get(group.who.version))
                for row, hit in zip(readable, looked.hits, strict=True):
                    found[row] = hit
                group.probes = {readable[at]: probe for at, probe in looked.probes.items()}
                candidates, verifier_ms = looked.judged, looked.verifier_ms
            served: dict[int, SemanticHit] = {}
            for row, hit in enumerate(found):
                if hit is None:
                    continue
                self._metrics.semantic_similarity.labels(model=self._model).observe(hit.similarity)
                if hit.verify:
                    group.verifying[row] = hit
                else:
                    served[row] = hit
            self.cost.record_lookup(len(group.ready), len(served), encoder_ms, candidates=candidates,
                                    verifier_ms=verifier_ms)
            self._metrics.hits.labels(model=self._model, tier="semantic").inc(len(served))
            self._metrics.misses.labels(model=self._model, tier="semantic").inc(len(group.ready) - len(served))
            lookup_ms, finished_ms = (time.perf_counter() - started) * 1000, now_ms()
            drop_rows(group, served, lambda row, item, group=group: Outcome.of(item, group.who.result(
                item.request.id, group.who.served_status, outputs=unpack_outputs(served[row].outputs),
                cache=CacheTier.semantic, similarity=round(served[row].similarity, 4),
                timings=timings_of(prepared, item, finished_ms, cache_ms=lookup_ms))), prepared.triaged.answered)

    def _unreadable(self, shares: list[float]) -> frozenset[int]:
        """Rows with more of their tokens unknown to the encoder than `semantic_max_unknown_share`:
        never looked up, never cached."""
        assert self._encoder is not None
        rows = frozenset(row for row, share in enumerate(shares) if share > self._settings.semantic_max_unknown_share)
        if rows:
            self._metrics.semantic_unreadable.labels(model=self._model).inc(len(rows))
            if not self._warned_unreadable:
                self._warned_unreadable = True
                log.warning("semantic cache: %d of %d texts have words %s cannot read (unknown tokens); they are "
                            "computed, never looked up nor cached (an encoder that reads their language: "
                            "FLEET_SEMANTIC_ENCODER_MODEL)", len(rows), len(shares), self._encoder.manifest.name)
        return rows

    def _unjudged(self, unreadable: int, pairs: int) -> None:
        """Candidates the verifier could not read are not served: counted, and said once with the fixes."""
        if not unreadable:
            return
        self._metrics.semantic_unreadable.labels(model=self._model).inc(unreadable)
        if not self._warned_unjudged:
            self._warned_unjudged = True
            assert self.verifier is not None
            log.warning("semantic cache: %s cannot read %d of %d candidate pairs (unknown tokens); they are not "
                        "served (a verifier that reads their language, or FLEET_SEMANTIC_VERIFIER=false with "
                        "FLEET_SEMANTIC_MAX_WRONG_RATE: the learned bound over the encoder's cosine)",
                        self.verifier.manifest.id, unreadable, pairs)

    def _open_verifier(self) -> CacheVerifier | None:
        if not self._settings.semantic_verifier:
            return None
        name = self._settings.semantic_verifier_model or DEFAULT_VERIFIER
        try:
            verifier = CacheVerifier.newest(ModelRegistry(self._settings.registry_dir), name=name)
        except (RegistryError, ValueError, OSError) as error:
            # Registered but unusable (damaged artifacts, no calibration): serving without the judge
            # it was meant to have would serve traps, so the semantic tier stays off instead.
            log.error("semantic cache OFF: the verifier %s could not be loaded (%s)", name, error)
            self._verifier_broken = True
            return None
        if verifier is None:
            log.warning("no %s is registered (scripts/build-models builds it): semantic hits are decided by the "
                        "cosine threshold %.2f and the guards alone", name, self._settings.semantic_threshold)
        else:
            log.info("semantic candidates above cosine %.2f are judged by %s at threshold %.4f",
                     self._settings.semantic_recall_threshold, verifier.manifest.id, verifier.threshold)
        return verifier

    def _find(self, cache: SemanticCache, texts: list[str], vectors: Any, bound: SharedBound | None) -> Found:
        """Hits per text; with a learned bound, also the best candidate of each text not served (its
        label comes free when the model computes the text). Lookups without either count their
        ambiguous refusals in the cache (`_report` exports them)."""
        if self.verifier is None and bound is None:
            return Found(cache.lookup(texts, vectors))
        candidates = cache.candidates(texts, vectors)
        judged, verifier_ms = 0, 0.0
        if self.verifier is None:
            nearest = [agreeing(found) for found in candidates]
            best = [None if pick is None else (pick, pick.similarity) for pick in nearest]
            ambiguous = {row: found[0].similarity for row, (pick, found) in enumerate(zip(nearest, candidates, strict=True))
                         if pick is None and found}
        else:
            pairs = candidate_pairs(texts, candidates)
            if not pairs:
                return Found(cache.settle([None] * len(texts)))
            verdicts = self.verifier.score(pairs)
            best, ambiguous = choose(candidates, verdicts.scores, 0.0 if bound is not None else self.verifier.threshold)
            judged, verifier_ms = len(pairs), verdicts.elapsed_ms
            self._metrics.verifier_seconds.labels(model=self._model).observe(verdicts.elapsed_ms / 1000)
            self._unjudged(verdicts.unreadable, len(pairs))
        self._count_ambiguous(ambiguous, bound)
        if bound is None:
            chosen = best
        else:
            chosen = [pick if pick is not None and bound.threshold is not None and pick[1] >= bound.threshold else None
                      for pick in best]
        if self.verifier is not None:
            accepted = sum(pick is not None for pick in chosen)
            self._metrics.verifier_candidates.labels(model=self._model, accepted="true").inc(accepted)
            self._metrics.verifier_candidates.labels(model=self._model, accepted="false").inc(judged - accepted)
        probes = {row: (pick[1], pick[0].outputs) for row, (pick, served) in enumerate(zip(best, chosen, strict=True))
                  if bound is not None and pick is not None and served is None}
        return Found(cache.settle(chosen), probes, judged, verifier_ms)

    def _count_ambiguous(self, ambiguous: dict[int, float], bound: SharedBound | None) -> None:
        """Texts refused only for their ambiguous neighbourhood: under a learned bound, those whose best
        score it would have served (none while it is cold)."""
        if bound is None:
            refused = len(ambiguous)
        else:
            threshold = bound.threshold
            refused = 0 if threshold is None else sum(score >= threshold for score in ambiguous.values())
        if refused:
            self._metrics.semantic_ambiguous.labels(model=self._model).inc(refused)

    async def remember(self, computed: Computed) -> None:
        """Add what the model computed; score the sampled hits it computed to check them."""
        self.cost.record_model(computed.computed, computed.inference_ms)
        additions: dict[str, tuple[list[str], list[int], list[bytes], VersionGroup]] = {}
        for fresh in computed.fresh:
            group = fresh.group
            if group.vectors is None or group.who.version not in self._versions:
                continue
            cache, _ = self._versions[group.who.version]
            outputs = fresh.result.outputs or {}
            if fresh.row in group.unreadable:
                continue
            bound = self._bounds.get(group.who.version)
            hit = group.verifying.get(fresh.row)
            if hit is not None:
                agreed = outputs_agree(unpack_outputs(hit.outputs), outputs)
                cache.record_verification(hit, agreed)
                self._metrics.semantic_verifications.labels(model=self._model, agreed=str(agreed).lower()).inc()
                self._label(bound, hit.verifier_score if hit.verifier_score is not None else hit.similarity, agreed)
                continue
            probe = group.probes.get(fresh.row)
            if probe is not None:
                self._label(bound, probe[0], outputs_agree(unpack_outputs(probe[1]), outputs))
            texts, rows, packed, _ = additions.setdefault(group.who.version, ([], [], [], group))
            texts.append(canonical_text(group.ready[fresh.row].text))
            rows.append(fresh.row)
            packed.append(fresh.packed_outputs)
        for version, (texts, rows, packed, group) in additions.items():
            cache, semantic_log = self._versions[version]
            assert group.vectors is not None
            vectors = group.vectors[rows]
            cache.add(texts, vectors, packed, generation=self._generation)
            await semantic_log.publish([SemanticEntry(text, vector, outputs, self._generation, now_ms())
                                        for text, vector, outputs in zip(texts, vectors, packed, strict=True)])
        self._report()

    def _label(self, bound: SharedBound | None, score: float, right: bool) -> None:
        if bound is not None:
            bound.add([(score, right)])
            self._metrics.semantic_labels.labels(model=self._model, right=str(right).lower()).inc()

    def cache_of(self, version: str) -> SemanticCache | None:
        """The semantic cache of one version, once traffic for it has been seen."""
        entry = self._versions.get(version)
        return entry[0] if entry is not None else None

    async def set_generation(self, generation: int) -> bool:
        """Follow `fleet cache clear`: a new generation drops every entry of the old one."""
        if generation == self._generation:
            return False
        self._generation = generation
        for cache, semantic_log in self._versions.values():
            cache.clear()
            semantic_log.set_generation(generation)
        return True

    async def stop(self) -> None:
        for _, semantic_log in self._versions.values():
            await semantic_log.stop()
        self._versions.clear()

    async def _cache_of(self, version: str) -> SemanticCache:
        if version not in self._versions:
            settings = self._settings
            assert self._encoder is not None
            verified = self.verifier is not None
            cache = SemanticCache(self._encoder.manifest.embedding_dim,
                                  threshold=settings.semantic_recall_threshold if verified else settings.semantic_threshold,
                                  capacity=settings.semantic_capacity, verify_fraction=settings.semantic_verify_fraction,
                                  false_hit_budget=settings.semantic_false_hit_budget,
                                  min_verifications=settings.semantic_min_verifications,
                                  min_threshold=settings.semantic_min_threshold if verified else None,
                                  guard=verified_conflict if verified else meaning_conflict)
            semantic_log = SemanticLog(cache, settings=settings, producer=self._producer,
                                       topic=semantic_cache_topic(self._model, version), generation=self._generation)
            loaded = await semantic_log.start()
            log.info("semantic cache of %s rebuilt from its topic: %d entries", version, loaded)
            self._versions[version] = (cache, semantic_log)
            if settings.semantic_max_wrong_rate is not None and self._redis is not None:
                self._bounds[version] = self._shared_bound(version, cache)
        return self._versions[version][0]

    def _shared_bound(self, version: str, cache: SemanticCache) -> SharedBound:
        """The version's learned bound over the verifier's P(same) (not below its calibrated point) or,
        without a verifier, over cosine (not below the cache's threshold)."""
        assert self._encoder is not None and self._redis is not None
        assert self._settings.semantic_max_wrong_rate is not None
        scorer, floor = ((self.verifier.manifest.id, self.verifier.threshold) if self.verifier is not None
                         else (f"cosine-{self._encoder.manifest.id}", cache.threshold))
        bound = LearnedBound(self._settings.semantic_max_wrong_rate, self._settings.semantic_bound_confidence,
                             floor=floor)
        log.info("semantic hits of %s served under a learned bound: at most %.2f%% wrong with %.0f%% confidence, "
                 "over %s scores from %.3f up; none until the labels allow", version,
                 100 * bound.max_wrong_rate, 100 * bound.confidence, scorer, floor)
        return SharedBound(self._redis, semantic_bound_key(self._model, version, scorer), bound,
                           index=(semantic_bounds_index_key(self._model), f"{version}:{scorer}"))

    def _report(self) -> None:
        model = self._model
        for version, (cache, _) in self._versions.items():
            self._metrics.semantic_threshold.labels(model=model, version=version).set(cache.threshold)
            for direction, count in cache.threshold_changes.items():
                seen = self._changes_seen.get((version, direction), 0)
                if count > seen:
                    self._metrics.semantic_threshold_changes.labels(model=model, version=version,
                                                                    direction=direction).inc(count - seen)
                    self._changes_seen[(version, direction)] = count
            self._metrics.semantic_enabled.labels(model=model, version=version).set(1 if cache.enabled else 0)
            self._metrics.verified_false_hit_rate.labels(model=model, version=version).set(cache.false_hit_rate)
            bound = self._bounds.get(version)
            if bound is not None:
                threshold = bound.threshold
                self._metrics.semantic_bound_threshold.labels(model=model, version=version).set(
                    float("nan") if threshold is None else threshold)
                self._metrics.semantic_bound_labels.labels(model=model, version=version).set(bound.bound.labels)
                self._metrics.semantic_bound_least_rate.labels(model=model, version=version).set(bound.least_rate)
        self._metrics.semantic_paying.labels(model=model).set(1 if self.cost.paying else 0)
        caches = [cache for cache, _ in self._versions.values()]
        self._metrics.entries.labels(model=model, tier="semantic").set(sum(c.entries for c in caches))
        self._metrics.bytes.labels(model=model, tier="semantic").set(sum(c.nbytes for c in caches))
        evictions = sum(c.evictions for c in caches)
        self._metrics.evictions.labels(model=model, tier="semantic").inc(max(evictions - self._evictions_seen, 0))
        self._evictions_seen = evictions
        ambiguous = sum(c.ambiguous for c in caches)  # lookups without a verifier or a bound count them there
        self._metrics.semantic_ambiguous.labels(model=model).inc(max(ambiguous - self._ambiguous_seen, 0))
        self._ambiguous_seen = ambiguous
