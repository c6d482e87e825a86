"""Prometheus metrics of the result caches (exact and semantic), on the worker's registry.

Every name starts with `fleet_cache_`. Tiers: `local` (in-process LRU), `redis` (shared exact
tier), `semantic` (FAISS index). prometheus_client appends `_total` to counters, so the
exported names are e.g. `fleet_cache_hits_total{model,tier}`.
"""

from collections import Counter as Tally

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX = "fleet_cache"
# Semantic hits live above the threshold (default 0.95, never below 0.80); fine buckets near 1.0
# show how close to the threshold the served hits sit, which is where false hits come from.
SIMILARITY_BUCKETS = (0.80, 0.82, 0.84, 0.86, 0.88, 0.90, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96,
                      0.97, 0.98, 0.99, 1.0)
TIERS = ("local", "redis", "semantic")


class CacheMetrics:
    """The cache metrics of one worker process; one instance per registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        reg = self.registry = registry
        # The same lookups as plain totals (`<tier>_hits`, `<tier>_misses`, at most 6 keys), for the heartbeat.
        self.totals: Tally[str] = Tally()
        tiered = ["model", "tier"]
        self.hits = Counter(f"{PREFIX}_hits", "Lookups answered by a cache tier", tiered, registry=reg)
        self.misses = Counter(f"{PREFIX}_misses", "Lookups a cache tier could not answer (errors count as misses)",
                              tiered, registry=reg)
        self.semantic_similarity = Histogram(f"{PREFIX}_semantic_similarity", "Cosine similarity of served "
                                             "semantic hits", ["model"], buckets=SIMILARITY_BUCKETS, registry=reg)
        self.verified_false_hit_rate = Gauge(f"{PREFIX}_verified_false_hit_rate", "Share of verified semantic hits "
                                             "whose recomputed answer disagreed (sliding window)", ["model", "version"],
                                             registry=reg)
        self.semantic_threshold = Gauge(f"{PREFIX}_semantic_threshold", "Similarity a semantic hit needs now "
                                        "(raised by the false-hit budget)", ["model", "version"], registry=reg)
        self.semantic_enabled = Gauge(f"{PREFIX}_semantic_enabled", "1 while the semantic cache serves hits, 0 when "
                                      "off by setting or switched off by its false-hit budget", ["model", "version"],
                                      registry=reg)
        self.semantic_paying = Gauge(f"{PREFIX}_semantic_paying", "1 while semantic lookups save more model time "
                                     "than the encoder costs; 0 while they run on 1 batch in 50 only", ["model"],
                                     registry=reg)
        self.semantic_verifications = Counter(f"{PREFIX}_semantic_verifications", "Semantic hits also computed by the "
                                              "model, by whether the answers agreed", ["model", "agreed"],
                                              registry=reg)
        self.semantic_threshold_changes = Counter(f"{PREFIX}_semantic_threshold_changes", "Self-tuning steps of the "
                                                  "semantic threshold: raised (false hits over budget) or lowered "
                                                  "(well within it, down to the floor)", ["model", "version", "direction"],
                                                  registry=reg)
        self.semantic_unreadable = Counter(f"{PREFIX}_semantic_unreadable", "Texts the semantic tier neither looked "
                                           "up nor cached (too many of their tokens unknown to its encoder), and "
                                           "candidates it did not serve (a token unknown to its verifier)",
                                           ["model"], registry=reg)
        self.semantic_labels = Counter(f"{PREFIX}_semantic_labels", "Semantic candidates whose cached answer was "
                                       "compared with the model's (free on a miss, sampled on a hit), by whether it "
                                       "was right", ["model", "right"], registry=reg)
        self.semantic_bound_threshold = Gauge(f"{PREFIX}_semantic_bound_threshold", "Least score the learned bound "
                                              "serves at (NaN while the labels allow none)", ["model", "version"],
                                              registry=reg)
        self.semantic_bound_least_rate = Gauge(f"{PREFIX}_semantic_bound_least_rate", "Least δ the learned bound's "
                                               "labels allow now (it serves once this is under δ)", ["model", "version"],
                                               registry=reg)
        self.semantic_bound_labels = Gauge(f"{PREFIX}_semantic_bound_labels", "Labels the learned bound holds, "
                                           "shared by the version's workers", ["model", "version"], registry=reg)
        self.verifier_candidates = Counter(f"{PREFIX}_verifier_candidates", "Semantic candidates the verifier "
                                           "judged, by whether it accepted one for its text", ["model", "accepted"],
                                           registry=reg)
        self.semantic_ambiguous = Counter(f"{PREFIX}_semantic_ambiguous", "Texts not served only because likely "
                                          "candidates (P(same) >= 0.5, or any above the threshold) answer differently",
                                          ["model"], registry=reg)
        self.verifier_seconds = Histogram(f"{PREFIX}_verifier_seconds", "Time of one verifier run over a batch's "
                                          "candidates", ["model"], registry=reg)
        self.bytes = Gauge(f"{PREFIX}_bytes", "Bytes a cache tier holds (its own accounting, toward its bound)",
                           tiered, registry=reg)
        self.entries = Gauge(f"{PREFIX}_entries", "Entries a cache tier holds", tiered, registry=reg)
        self.evictions = Counter(f"{PREFIX}_evictions", "Entries a cache tier dropped to stay within its bound",
                                 tiered, registry=reg)
        self.dedupe = Counter(f"{PREFIX}_dedupe", "Requests answered from an identical input computed in the same "
                              "micro-batch", ["model"], registry=reg)
        self.cleared = Counter(f"{PREFIX}_cleared", "Times this worker dropped its in-process tiers (explicit clear "
                               "or a `fleet cache clear` generation bump)", ["model"], registry=reg)

    def lookups(self, model: str, tier: str, hits: int, misses: int) -> None:
        """Count one batch of lookups against a tier."""
        self.totals[f"{tier}_hits"] += hits
        self.totals[f"{tier}_misses"] += misses
        if hits:
            self.hits.labels(model=model, tier=tier).inc(hits)
        if misses:
            self.misses.labels(model=model, tier=tier).inc(misses)

    def occupancy(self, model: str, tier: str, size_bytes: int, entries: int) -> None:
        self.bytes.labels(model=model, tier=tier).set(size_bytes)
        self.entries.labels(model=model, tier=tier).set(entries)
