"""The semantic cache in the batch path: whether a lookup pays, which candidate the verifier
chooses, and what the model's answers add.

One guarded FAISS index per model version (workers/cache/semantic.py), shared by every worker of
that version through a compacted topic (workers/cache/semantic_log.py). The encoder (the INT8
MiniLM by default) runs batched over a version group's texts in a worker thread; its rows are kept
on the group so the entries the model computes next are added without encoding twice. Where a
cache-verifier is registered (and `semantic_verifier` is on), FAISS proposes the nearest candidates
above the recall threshold that pass the guards, and the verifier (workers/cache/verifier.py), in
the same worker thread and in one run over the group's candidate pairs, decides which (if any) is
served: per text, its best-scored candidate at or above the verifier's threshold (`choose`).

Whether lookups pay (`LookupCost`): a lookup costs an encoder pass per row the exact cache missed
plus the verifier's run over each candidate; a hit saves one model row. Lookups run while
`hit rate x model ms per row` exceeds that cost, with a cold cache credited `cold_hit_rate` for
its first `warmup_rows` rows (a cache switched off cold would stay cold), and one batch in
`probe_every` looked up regardless. The reasoning and the figures behind each choice are in
docs/concepts/semantic-cache.md ("It pays or it stays off").
"""

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from aiokafka import AIOKafkaProducer

from schemas.names import semantic_cache_topic
from schemas.wire import CacheTier, now_ms
from models.backends.base import Backend
from models.registry import ModelRegistry, RegistryError
from workers.cache.exact import unpack_outputs
from workers.cache.metrics import CacheMetrics
from workers.cache.semantic import Candidate, SemanticCache, SemanticHit, outputs_agree
from workers.cache.keys import canonical_text
from workers.cache.semantic_log import SemanticEntry, SemanticLog
from workers.delivery.sink import Outcome
from workers.cache.verifier import CacheVerifier
from workers.settings import WorkerSettings
from workers.compute.compute import Computed
from workers.compute.prepare import Prepared, VersionGroup, drop_rows, timings_of

log = logging.getLogger(__name__)

# --- whether lookups pay ---
@dataclass
class MarginalCost:
    """ms one more row adds to a model run: the slope of run time over rows, fitted over recent
    runs with exponential forgetting. A hit saves that, not the run's average per row, which
    is inflated by the fixed cost of a run when hits leave small batches.

    The slope is capped at the average per row (a run's fixed cost is never negative). The fit
    alone goes wild where it matters most: with lookups on and most rows hits, runs are a few
    rows each and timed while the next batch's lookups take the same cores, so one slow small
    run made the slope (and what a hit seemed to save) many times the model's cost, and lookups
    that cost 40% of the throughput looked as if they paid."""

    alpha: float
    _n: float = 0.0
    _x: float = 0.0
    _y: float = 0.0
    _xx: float = 0.0
    _xy: float = 0.0

    def add(self, rows: int, ms: float) -> None:
        keep = 1 - self.alpha
        self._n, self._x, self._y = keep * self._n + 1, keep * self._x + rows, keep * self._y + ms
        self._xx, self._xy = keep * self._xx + rows * rows, keep * self._xy + rows * ms

    @property
    def value(self) -> float | None:
        if not self._x:
            return None
        average = self._y / self._x
        spread = self._n * self._xx - self._x * self._x
        if self._n < 2 or spread <= 1e-9 * max(self._n * self._xx, 1.0):
            return average  # one batch size so far
        slope = (self._n * self._xy - self._x * self._y) / spread
        # A slope at or below zero (a slow small run: the worker's first, or one beside a lookup)
        # is noise, not rows that cost nothing: it stopped lookups on a model 25x the encoder.
        return average if slope <= 0 else min(slope, average)


@dataclass
class Ewma:
    alpha: float
    value: float | None = None

    def add(self, sample: float) -> None:
        self.value = sample if self.value is None else self.value + self.alpha * (sample - self.value)


@dataclass
class HitRate:
    """Hits over rows looked up, both sums forgetting `alpha` per batch; at least `prior` until
    `warmup_rows` rows were looked up in all."""

    alpha: float
    warmup_rows: int
    prior: float
    rows_seen: int = 0
    _hits: float = 0.0
    _rows: float = 0.0

    def add(self, rows: int, hits: int) -> None:
        keep = 1 - self.alpha
        self._hits, self._rows = keep * self._hits + hits, keep * self._rows + rows
        self.rows_seen += rows

    @property
    def value(self) -> float:
        measured = self._hits / self._rows if self._rows > 0 else 0.0
        if self.rows_seen < self.warmup_rows:
            # A floor, not a cap: probes of a dear model that find 80% hits must switch lookups on,
            # and at a fixed 40% they never saw enough rows to leave the warm-up (the bench's dear
            # model stayed off at 0.97x while always-on ran at 1.20x).
            return max(self.prior, measured)
        return measured


class LookupCost:
    def __init__(self, *, probe_every: int = 50, alpha: float = 0.2, warmup_rows: int = 2000,
                 cold_hit_rate: float = 0.4) -> None:
        self.probe_every = probe_every
        self.encoder_ms_per_row = Ewma(alpha)
        self.model_ms_per_row = MarginalCost(alpha)
        self.hit_rate = HitRate(alpha, warmup_rows, cold_hit_rate)
        self.verifier_ms_per_candidate = Ewma(alpha)
        self.candidates_per_row = Ewma(alpha)  # from its first sample: starting at 0 hid the verifier's cost
        self.paying: bool | None = None  # None until both a lookup and a model run were measured
        self._batches = 0

    def should_look_up(self) -> bool:
        """Every batch while lookups pay; otherwise one in `probe_every`. Until the first verdict,
        only the first batch: it prices the lookup, and the model's first runs price a hit."""
        self._batches += 1
        first = self.paying is None and self._batches == 1
        return bool(self.paying) or first or self._batches % self.probe_every == 0

    def record_lookup(self, rows: int, hits: int, encoder_ms: float, *, candidates: int = 0,
                      verifier_ms: float = 0.0) -> None:
        if rows == 0:
            return
        self.encoder_ms_per_row.add(encoder_ms / rows)
        self.hit_rate.add(rows, hits)
        self.candidates_per_row.add(candidates / rows)
        if candidates:
            self.verifier_ms_per_candidate.add(verifier_ms / candidates)
        self._judge()

    @property
    def verifier_ms_per_row(self) -> float:
        """What the verifier adds to a lookup, per row looked up."""
        per_candidate = self.verifier_ms_per_candidate.value
        return 0.0 if per_candidate is None else per_candidate * (self.candidates_per_row.value or 0.0)

    @property
    def cost_ms_per_row(self) -> float | None:
        encoder = self.encoder_ms_per_row.value
        return None if encoder is None else encoder + self.verifier_ms_per_row

    def record_model(self, rows: int, inference_ms: float) -> None:
        if rows:
            self.model_ms_per_row.add(rows, inference_ms)
            self._judge()

    @property
    def saved_ms_per_row(self) -> float | None:
        if self.model_ms_per_row.value is None:
            return None
        return self.hit_rate.value * self.model_ms_per_row.value

    def _judge(self) -> None:
        saved, cost = self.saved_ms_per_row, self.cost_ms_per_row
        if saved is None or cost is None:
            return
        paying = saved >= cost
        if paying != self.paying:
            self.paying = paying
            log.warning("semantic lookups %s: hits save %.3f ms of model time per row, the encoder and verifier cost %.3f ms "
                        "(hit rate %.1f%%)%s", "pay" if paying else "do not pay", saved, cost,
                        100 * self.hit_rate.value,
                        "" if paying else f"; looking up 1 batch in {self.probe_every} until they do")


# --- the verifier's choice among a batch's candidates ---

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


# --- the tier ---

class SemanticTier:
    def __init__(self, settings: WorkerSettings, *, producer: AIOKafkaProducer, metrics: CacheMetrics,
                 load_encoder: Callable[[], Backend]) -> None:
        self._settings = settings
        self._model = settings.model
        self._producer = producer
        self._metrics = metrics
        self._load_encoder = load_encoder
        self._encoder: Backend | None = None
        self.verifier: CacheVerifier | None = None
        self._verifier_broken = False
        self._versions: dict[str, tuple[SemanticCache, SemanticLog]] = {}
        self._generation = 0
        self._evictions_seen = 0
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
        await asyncio.to_thread(self._lookup_groups, prepared, groups, caches)

    def _lookup_groups(self, prepared: Prepared, groups: list[VersionGroup], caches: list[SemanticCache]) -> None:
        assert self._encoder is not None
        for group, cache in zip(groups, caches, strict=True):
            started = time.perf_counter()
            group.vectors = self._encoder.infer([item.text for item in group.ready])
            encoder_ms = (time.perf_counter() - started) * 1000
            if not cache.enabled:
                continue
            texts = [canonical_text(item.text) for item in group.ready]
            found, candidates, verifier_ms = self._find(cache, texts, group.vectors)
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

    def _open_verifier(self) -> CacheVerifier | None:
        if not self._settings.semantic_verifier:
            return None
        try:
            verifier = CacheVerifier.newest(ModelRegistry(self._settings.registry_dir))
        except (RegistryError, ValueError, OSError) as error:
            # Registered but unusable (damaged artifacts, no calibration): serving without the judge
            # it was meant to have would serve traps, so the semantic tier stays off instead.
            log.error("semantic cache OFF: the cache-verifier could not be loaded (%s)", error)
            self._verifier_broken = True
            return None
        if verifier is None:
            log.warning("no cache-verifier is registered (scripts/build-models builds one): semantic hits are "
                        "decided by the cosine threshold %.2f and the guards alone", self._settings.semantic_threshold)
        else:
            log.info("semantic candidates above cosine %.2f are judged by %s at threshold %.4f",
                     self._settings.semantic_recall_threshold, verifier.manifest.id, verifier.threshold)
        return verifier

    def _find(self, cache: SemanticCache, texts: list[str], vectors: Any) -> tuple[list[SemanticHit | None], int, float]:
        """Hits per text, how many candidates the verifier judged and its ms (0 and 0.0 without one)."""
        if self.verifier is None:
            return cache.lookup(texts, vectors), 0, 0.0
        candidates = cache.candidates(texts, vectors)
        pairs = candidate_pairs(texts, candidates)
        if not pairs:
            return cache.settle([None] * len(texts)), 0, 0.0
        verdicts = self.verifier.score(pairs)
        chosen = choose(candidates, verdicts.scores, self.verifier.threshold)
        self._metrics.verifier_seconds.labels(model=self._model).observe(verdicts.elapsed_ms / 1000)
        accepted = sum(pick is not None for pick in chosen)
        self._metrics.verifier_candidates.labels(model=self._model, accepted="true").inc(accepted)
        self._metrics.verifier_candidates.labels(model=self._model, accepted="false").inc(len(pairs) - accepted)
        return cache.settle(chosen), len(pairs), verdicts.elapsed_ms

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
            hit = group.verifying.get(fresh.row)
            if hit is not None:
                agreed = outputs_agree(unpack_outputs(hit.outputs), outputs)
                cache.record_verification(hit, agreed)
                self._metrics.semantic_verifications.labels(model=self._model, agreed=str(agreed).lower()).inc()
                continue
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
                                  min_threshold=settings.semantic_min_threshold if verified else None)
            semantic_log = SemanticLog(cache, settings=settings, producer=self._producer,
                                       topic=semantic_cache_topic(self._model, version), generation=self._generation)
            loaded = await semantic_log.start()
            log.info("semantic cache of %s rebuilt from its topic: %d entries", version, loaded)
            self._versions[version] = (cache, semantic_log)
        return self._versions[version][0]

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
        self._metrics.semantic_paying.labels(model=model).set(1 if self.cost.paying else 0)
        caches = [cache for cache, _ in self._versions.values()]
        self._metrics.entries.labels(model=model, tier="semantic").set(sum(c.entries for c in caches))
        self._metrics.bytes.labels(model=model, tier="semantic").set(sum(c.nbytes for c in caches))
        evictions = sum(c.evictions for c in caches)
        self._metrics.evictions.labels(model=model, tier="semantic").inc(max(evictions - self._evictions_seen, 0))
        self._evictions_seen = evictions
