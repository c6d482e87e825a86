"""The semantic cache of one model version: answers an input whose embedding is close to one
already computed, when the guards find no meaning-critical difference between the two texts.

Index: FAISS inner product over L2-normalised float32 rows (= cosine similarity). Entries
live in up to `segments` FIFO segments of `capacity / segments` rows each; when the cache is
full, the oldest segment is dropped whole. That bounds the vectors held at `capacity` with
no per-entry removal, which matters because HNSW (used when `capacity > hnsw_above`, where
a flat scan per lookup costs too much) cannot remove vectors: dropping a segment frees its
graph at once, and a replaced entry is only a tombstone until its segment goes. Below that
size each segment is an exact IndexFlatIP.

`lookup` serves the nearest neighbour the guard passes, unless those above the threshold answer
differently (`agreeing`); `candidates` + `settle` leave the choice among them to a verifier
(workers/cache/choice.py, `choose`). Correctness is measured, not assumed:
`verify` marks a sampled share of hits that the caller also computes; `record_verification`
feeds the comparison into a sliding window; a verified false-hit rate above the budget raises
the threshold one step (off past `max_threshold`), a full window within half of it lowers it
one step (not below `min_threshold`). Each change is logged as a WARNING.

Thread-safety: one lock around every method, since worker threads look up and add while
the log follower adds from the event loop thread.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from models.backends.flavour import FIX
from workers.cache.choice import Candidate, agreeing
from workers.cache.guards import meaning_conflict

try:
    import faiss
except ImportError as missing:
    raise ImportError(f"faiss is not installed: {FIX}") from missing

log = logging.getLogger(__name__)

DEFAULT_THRESHOLD = 0.90  # `fleet cache-eval`: the seed's 0.95 serves too few paraphrases; see its table
TOP_K = 4

Guard = Callable[[str, str], "str | None"]


def entry_key(text: str) -> bytes:
    """Digest of a canonical text: the dedupe key in the cache and the record key on the log."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


@dataclass(frozen=True)
class SemanticHit:
    outputs: bytes  # msgpack of the cached result's outputs
    similarity: float
    matched_text: str
    verify: bool  # sampled: the caller should also compute this input and call record_verification
    threshold: float  # the threshold the hit passed
    verifier_score: float | None = None  # the verifier's P(same), where a verifier decided


@dataclass
class _Entry:
    key: bytes
    text: str
    outputs: bytes
    generation: int


@dataclass
class _Segment:
    index: faiss.Index
    ids: list[int] = field(default_factory=list)


class SemanticCache:
    """Near-duplicate answers for one model version (see the module docstring)."""

    def __init__(self, dim: int, *, threshold: float = DEFAULT_THRESHOLD, capacity: int = 100_000,
                 verify_fraction: float = 0.05, false_hit_budget: float = 0.01, min_verifications: int = 100,
                 window: int = 1000, threshold_step: float = 0.01, max_threshold: float = 0.99,
                 segments: int = 4, hnsw_above: int = 20_000, guard: Guard | None = meaning_conflict,
                 min_threshold: float | None = None, seed: int = 0) -> None:
        """`min_threshold`: lowest the threshold may descend to while verified hits stay well within the
        budget (None: it never descends; set where a verifier guards the hits)."""
        if dim < 1 or capacity < 1 or segments < 1:
            raise ValueError("dim, capacity and segments must be positive")
        if not 0 < threshold <= 1 or not 0 <= verify_fraction <= 1 or min_verifications < 1:
            raise ValueError("threshold in (0, 1], verify_fraction in [0, 1], min_verifications >= 1")
        self.dim = dim
        self.capacity = capacity
        self.verify_fraction = verify_fraction
        self.false_hit_budget = false_hit_budget
        self.min_verifications = min_verifications
        self.threshold_step = threshold_step
        self.max_threshold = max_threshold
        self.min_threshold = threshold if min_threshold is None else min(min_threshold, threshold)
        self.threshold_changes = {"raised": 0, "lowered": 0}
        self.guard = guard
        self.hnsw = capacity > hnsw_above
        self._segment_rows = max(1, -(-capacity // segments))
        self._threshold = threshold
        self._enabled = True
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()
        self._window: deque[bool] = deque(maxlen=window)  # True = the verified hit was false
        self._segments: list[_Segment] = []
        self._entries: dict[int, _Entry] = {}
        self._by_key: dict[bytes, int] = {}
        self._next_id = 0
        self._vectors = 0
        self._counts = {"hits": 0, "misses": 0, "verified": 0, "false_hits": 0, "evictions": 0, "blocked": 0,
                        "ambiguous": 0}

    # --- state ---------------------------------------------------------------------------

    @property
    def threshold(self) -> float:
        return self._threshold

    @property
    def enabled(self) -> bool:
        return self._enabled

    @property
    def entries(self) -> int:
        """Live entries (replaced ones excluded)."""
        return len(self._entries)

    @property
    def vectors(self) -> int:
        """Rows held by the index, tombstones included: never above `capacity`."""
        return self._vectors

    @property
    def nbytes(self) -> int:
        """Rough memory of the vectors (HNSW links excluded) plus the stored texts and outputs."""
        with self._lock:
            stored = sum(len(e.text) + len(e.outputs) + 64 for e in self._entries.values())
        return self._vectors * self.dim * 4 + stored

    @property
    def hits(self) -> int:
        """Lookups answered since start."""
        return self._counts["hits"]

    @property
    def misses(self) -> int:
        """Lookups not answered while the cache was enabled."""
        return self._counts["misses"]

    @property
    def blocked(self) -> int:
        """Misses where a neighbour passed the threshold but the guard refused every one."""
        return self._counts["blocked"]

    @property
    def ambiguous(self) -> int:
        """Misses where passing neighbours answered differently (`agreeing`)."""
        return self._counts["ambiguous"]

    @property
    def evictions(self) -> int:
        """Live entries dropped to stay within capacity."""
        return self._counts["evictions"]

    @property
    def verified(self) -> int:
        """Hits checked against the model."""
        return self._counts["verified"]

    @property
    def false_hits(self) -> int:
        """Verified hits the model disagreed with."""
        return self._counts["false_hits"]

    @property
    def false_hit_rate(self) -> float:
        """Share of disagreements among the verifications in the window at the current threshold."""
        with self._lock:
            return sum(self._window) / len(self._window) if self._window else 0.0

    # --- lookups and adds ----------------------------------------------------------------

    def lookup(self, texts: Sequence[str], vectors: npt.ArrayLike) -> list[SemanticHit | None]:
        """Per text: the best of its TOP_K neighbours at or above the threshold that the guard passes,
        unless those answer differently (`agreeing`)."""
        if not texts:
            return []
        queries = self._rows(vectors, len(texts))
        with self._lock:
            if not self._enabled:
                return [None] * len(texts)
            candidates = self._search(queries)
            found = [self._best(text, row) for text, row in zip(texts, candidates)]
            hits = sum(hit is not None for hit in found)
            self._counts["hits"] += hits
            self._counts["misses"] += len(found) - hits
            return found

    def candidates(self, texts: Sequence[str], vectors: npt.ArrayLike) -> list[list[Candidate]]:
        """Per text, best first: up to TOP_K neighbours at or above the threshold that the guard passes
        (none while the cache is off). `settle` then counts what the verifier made of them."""
        if not texts:
            return []
        queries = self._rows(vectors, len(texts))
        with self._lock:
            if not self._enabled:
                return [[] for _ in texts]
            found = []
            for text, row in zip(texts, self._search(queries)):
                passing = self._passing(text, row)
                found.append([Candidate(self._entries[i].outputs, min(1.0, float(sim)), self._entries[i].text)
                              for sim, i in passing])
            return found

    def settle(self, chosen: Sequence[tuple[Candidate, float] | None]) -> list[SemanticHit | None]:
        """Hits from the candidates a verifier accepted (with its score), counted like `lookup`'s."""
        with self._lock:
            hits = [None if pick is None else SemanticHit(
                outputs=pick[0].outputs, similarity=pick[0].similarity, matched_text=pick[0].matched_text,
                verify=self._sample_verify(), threshold=self._threshold, verifier_score=pick[1]) for pick in chosen]
            served = sum(hit is not None for hit in hits)
            self._counts["hits"] += served
            self._counts["misses"] += len(hits) - served
            return hits

    def add(self, texts: Sequence[str], vectors: npt.ArrayLike, outputs: Sequence[bytes], generation: int = 0) -> int:
        """Store computed answers; a text already held keeps its entry unless this generation is newer.
        Returns how many entries were stored."""
        if len(texts) != len(outputs):
            raise ValueError(f"{len(texts)} texts but {len(outputs)} outputs")
        if not texts:
            return 0
        rows = self._rows(vectors, len(texts))
        with self._lock:
            keep: list[int] = []
            batch_keys: set[bytes] = set()
            for i, text in enumerate(texts):
                key = entry_key(text)
                held = self._by_key.get(key)
                if key in batch_keys or (held is not None and self._entries[held].generation >= generation):
                    continue
                if held is not None:
                    del self._entries[held]  # tombstone: its vector goes with its segment
                batch_keys.add(key)
                keep.append(i)
            for i in keep:
                self._append(rows[i], _Entry(entry_key(texts[i]), texts[i], outputs[i], generation))
            return len(keep)

    def clear(self) -> None:
        """Drop every entry (a generation bump or `fleet cache clear`); threshold and counters stay."""
        with self._lock:
            self._segments.clear()
            self._entries.clear()
            self._by_key.clear()
            self._vectors = 0

    # --- self-measurement ----------------------------------------------------------------

    def record_verification(self, hit: SemanticHit, agreed: bool) -> None:
        """Count a verified hit; past the false-hit budget raise the threshold or switch off."""
        with self._lock:
            self._counts["verified"] += 1
            self._counts["false_hits"] += not agreed
            if not self._enabled or hit.threshold < self._threshold:
                return  # served under an older threshold: says nothing about the current one
            self._window.append(not agreed)
            if len(self._window) < self.min_verifications:
                return
            rate = sum(self._window) / len(self._window)
            if rate <= self.false_hit_budget:
                self._maybe_lower(rate)
                return
            self._window.clear()
            self.threshold_changes["raised"] += 1
            raised = round(self._threshold + self.threshold_step, 6)
            if raised > self.max_threshold + 1e-9:
                self._enabled = False
                log.warning("semantic cache switched OFF: verified false-hit rate %.2f%% is above the budget of "
                            "%.2f%% at threshold %.3f, and raising it would pass the maximum %.3f",
                            100 * rate, 100 * self.false_hit_budget, self._threshold, self.max_threshold)
            else:
                log.warning("semantic cache threshold raised %.3f -> %.3f: verified false-hit rate %.2f%% is above "
                            "the budget of %.2f%%", self._threshold, raised, 100 * rate, 100 * self.false_hit_budget)
                self._threshold = raised

    def _maybe_lower(self, rate: float) -> None:
        """Lower the threshold one step when a full window of verified hits stays within half the budget:
        recall is left on the table while the verifier (and the guards) keep the false hits that low."""
        if len(self._window) < (self._window.maxlen or 0) or rate > self.false_hit_budget / 2:
            return
        lowered = round(self._threshold - self.threshold_step, 6)
        if lowered < self.min_threshold - 1e-9:
            return
        self._window.clear()
        self.threshold_changes["lowered"] += 1
        log.warning("semantic cache threshold lowered %.3f -> %.3f: verified false-hit rate %.2f%% is within half "
                    "the budget of %.2f%% (floor %.3f)", self._threshold, lowered, 100 * rate,
                    100 * self.false_hit_budget, self.min_threshold)
        self._threshold = lowered

    def _sample_verify(self) -> bool:
        return bool(self._rng.random() < self.verify_fraction)

    # --- internals (lock held) -----------------------------------------------------------

    def _rows(self, vectors: npt.ArrayLike, count: int) -> npt.NDArray[np.float32]:
        rows = np.array(vectors, dtype=np.float32, order="C", copy=True)
        if rows.ndim != 2 or rows.shape != (count, self.dim):
            raise ValueError(f"expected vectors of shape ({count}, {self.dim}), got {rows.shape}")
        faiss.normalize_L2(rows)
        return rows

    def _search(self, queries: npt.NDArray[np.float32]) -> list[list[tuple[float, int]]]:
        merged: list[list[tuple[float, int]]] = [[] for _ in range(len(queries))]
        for segment in self._segments:
            # Tombstones can crowd out live rows: ask for a few more than TOP_K.
            scores, ids = segment.index.search(queries, min(2 * TOP_K, len(segment.ids)))
            for row, (row_scores, row_ids) in enumerate(zip(scores.tolist(), ids.tolist())):
                merged[row] += [(s, i) for s, i in zip(row_scores, row_ids) if i in self._entries]
        return [sorted(row, reverse=True)[:TOP_K] for row in merged]

    def _best(self, text: str, candidates: list[tuple[float, int]]) -> SemanticHit | None:
        """The nearest passing neighbour, unless the neighbourhood is ambiguous (`agreeing`)."""
        passing = [Candidate(self._entries[i].outputs, min(1.0, float(similarity)), self._entries[i].text)
                   for similarity, i in self._passing(text, candidates)]
        best = agreeing(passing)
        self._counts["ambiguous"] += best is None and bool(passing)
        if best is None:
            return None
        return SemanticHit(outputs=best.outputs, similarity=best.similarity, matched_text=best.matched_text,
                           verify=self._sample_verify(), threshold=self._threshold)

    def _passing(self, text: str, candidates: list[tuple[float, int]]) -> list[tuple[float, int]]:
        """The neighbours at or above the threshold that the guard passes; `blocked` counts a text whose
        every such neighbour the guard refused."""
        passing: list[tuple[float, int]] = []
        refused = False
        for similarity, entry_id in candidates:
            if similarity < self._threshold:
                break
            entry = self._entries[entry_id]
            if self.guard is not None and entry.text != text and self.guard(text, entry.text) is not None:
                refused = True
                continue
            passing.append((similarity, entry_id))
        self._counts["blocked"] += refused and not passing
        return passing

    def _append(self, row: npt.NDArray[np.float32], entry: _Entry) -> None:
        if self._vectors >= self.capacity:
            self._drop_oldest_segment()
        if not self._segments or len(self._segments[-1].ids) >= self._segment_rows:
            self._segments.append(_Segment(self._new_index()))
        segment = self._segments[-1]
        entry_id = self._next_id
        self._next_id += 1
        segment.index.add_with_ids(row[None, :], np.array([entry_id], dtype=np.int64))
        segment.ids.append(entry_id)
        self._entries[entry_id] = entry
        self._by_key[entry.key] = entry_id
        self._vectors += 1

    def _drop_oldest_segment(self) -> None:
        oldest = self._segments.pop(0)
        self._vectors -= len(oldest.ids)
        for entry_id in oldest.ids:
            entry = self._entries.pop(entry_id, None)
            if entry is not None:
                self._counts["evictions"] += 1
                if self._by_key.get(entry.key) == entry_id:
                    del self._by_key[entry.key]

    def _new_index(self) -> faiss.Index:
        if self.hnsw:
            inner = faiss.IndexHNSWFlat(self.dim, 32, faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efSearch = 64
        else:
            inner = faiss.IndexFlatIP(self.dim)
        return faiss.IndexIDMap(inner)
