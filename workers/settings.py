"""Settings of one worker process: one model, one role, one device, one backend.

Which model versions it loads and how, and what it needs as a member of the model's consumer group,
it shares with the shadow (workers/runtime_settings.py); the rest is the batch path's own.
"""

import re
from enum import StrEnum

from pydantic import Field, model_validator

from models.loading import Precision
from workers.compute.triage import TriageRules
from workers.runtime_settings import PRODUCTION_NAMES, ModelMemberSettings, Role


class OverlongInputs(StrEnum):
    truncate = "truncate"
    reject = "reject"


class BatchPolicyName(StrEnum):
    adaptive = "adaptive"
    fixed = "fixed"


class WorkerSettings(ModelMemberSettings):
    role: Role = Role.primary
    max_queue_delay_ms: float = Field(20.0, ge=0, description="Longest a record waits for its batch to fill, "
                                      "counted from its Kafka timestamp")
    batch_policy: BatchPolicyName = Field(BatchPolicyName.adaptive, description="adaptive: size batches by the "
                                          "visible backlog, never wait for records that are not there; fixed: "
                                          "wait up to max_queue_delay_ms for a full batch")
    bulk_min_share: float = Field(0.1, ge=0, le=0.5, description="Share of batches a lower lane gets while a "
                                  "higher lane has records waiting (0.1: at least 1 batch in 10), so a bulk backlog "
                                  "is never starved by interactive traffic; 0 serves lower lanes only when the "
                                  "higher ones are empty")
    bulk_batch_ms: float = Field(250.0, gt=0, description="Longest a lower lane's batch may hold the model, from "
                                 "its measured time per row: what an interactive request arriving behind a bulk "
                                 "batch waits for the model at most")
    preferred_batch_sizes: list[int] = Field(default_factory=list, description="Cut batches to these sizes when "
                                             "more is in hand, e.g. [8, 16, 32]")
    max_input_chars: int | None = Field(None, ge=16, description="Texts are cut to this many characters before "
                                        "tokenizing, so a huge text costs what the longest input costs; default "
                                        "16 x max_input_tokens")
    overlong_inputs: OverlongInputs = Field(OverlongInputs.truncate, description="truncate: cut inputs at "
                                            "max_input_tokens; reject: answer them with error input_too_long")
    result_ttl_s: int = Field(3600, ge=1, description="How long a result stays readable in Redis")
    delivery_max_backoff_s: float = Field(5.0, gt=0, description="Longest pause between delivery attempts while Redis "
                                          "or Kafka is away (delivery retries until it succeeds, never skips)")
    redis_wait_replicas: int = Field(0, ge=0, le=8, description="Replicas that must hold a batch's results (Redis "
                                     "WAIT on each master written) before its offsets may be committed: 1 on a "
                                     "replicated Redis or Redis Cluster, so a master's death loses no result; 0: off")
    redis_wait_timeout_ms: int = Field(200, ge=1, le=10_000, description="How long a batch waits for its replicas; "
                                       "a shard without one (mid-failover) is written without and logged")
    reply_stream_maxlen: int = Field(100_000, ge=100, description="Approximate cap on a waiter's reply stream "
                                     "(entries), so a waiter that stopped reading cannot grow it without bound")
    redact_patterns: list[str] = Field(default_factory=list, description="Extra regular expressions masked in "
                                       "debug traces, on top of e-mails, phone and card numbers")
    dlq_keep_original: bool = Field(False, description="Put the original bytes of a rejected record in its dead "
                                    "letter; off, a dead letter carries only a masked view (texts redacted), "
                                    "because the DLQ is usually read by more people than the request topics")
    debug_switch_refresh_s: float = Field(1.0, gt=0, description="How often the worker re-reads the `fleet debug` "
                                          "switches (a switch turned off is obeyed within this)")
    static_membership: bool = Field(False, description="Join with group.instance.id = worker id, so a restart "
                                    "within the session timeout keeps its partitions without a rebalance")
    oom_clean_period_s: float = Field(30.0, gt=0, description="After an out-of-memory, the effective max batch "
                                      "grows back one step per this many seconds without another")
    takeover_after_s: float = Field(3.0, ge=0, description="Fallback workers serve the primary topic once no "
                                    "healthy primary has heartbeated for this long (plus the heartbeat TTL)")
    allow_fault_injection: bool = Field(False, description="FLEET_ALLOW_FAULT_INJECTION=1 lets fault_* settings "
                                        "take effect (tests and drills); without it a worker with any of them "
                                        "refuses to start, whatever the environment is called (production "
                                        "refuses them even then)")
    fault_injection: bool = Field(False, description="Master switch for the fault_* settings (tests and drills)")
    fault_error_rate: float = Field(0.0, ge=0, le=1, description="Fraction of batches that raise a device error")
    fault_oom_above_batch: int | None = Field(None, ge=1, description="Batches larger than this raise out-of-memory")
    fault_fail_after_records: int | None = Field(None, ge=0, description="After this many computed records every "
                                                 "batch raises a device error (a device that dies mid-load)")
    fault_inference_error_rate: float = Field(0.0, ge=0, le=1, description="Fraction of model runs that raise a "
                                              "(non-device) inference error: requests get error results")
    fault_versions: list[str] = Field(default_factory=list, description="Inject faults only into these versions "
                                      "(e.g. a canary candidate); empty: every version")
    fault_probe_fails: bool = Field(False, description="Make the health probe fail")
    health_probe_interval_s: float = Field(2.0, gt=0, description="How often the health probe runs a tiny inference")
    health_batch_timeout_s: float = Field(30.0, gt=0, description="A batch in the model longer than this counts as "
                                          "a device timeout (probes pause while a batch runs: its outcome is the "
                                          "device's signal)")
    health_probe_timeout_s: float = Field(2.0, gt=0, description="A probe slower than this counts as a failure")
    health_max_consecutive_errors: int = Field(3, ge=1, description="Consecutive device errors that mark the "
                                               "worker failed")
    heartbeat_interval_s: float = Field(1.0, gt=0, description="How often the worker writes its heartbeat to Redis")
    heartbeat_ttl_s: float = Field(5.0, gt=0, description="A heartbeat older than this is gone: the worker is dead")
    model_memory_budget_mb: float = Field(2048.0, gt=0, description="Resident model versions of this worker may "
                                          "take this much memory; the least recently used non-live versions "
                                          "are unloaded beyond it (stable and candidate always stay)")
    pointer_poll_s: float = Field(0.5, gt=0, description="How often the worker reads its model's version pointers")
    exact_cache: bool = Field(True, description="Answer repeated inputs from the exact cache (in-process + Redis)")
    exact_cache_local_mb: float = Field(64.0, ge=0, description="Byte bound of the in-process exact cache")
    exact_cache_ttl_s: int = Field(86_400, ge=1, description="TTL of exact-cache entries in Redis")
    exact_cache_redis: bool = Field(True, description="Share exact-cache entries through Redis")
    cache_refresh_s: float = Field(1.0, gt=0, description="How often the worker checks for `fleet cache clear`")
    semantic_cache: bool = Field(False, description="Answer near-identical inputs from the semantic cache; off "
                                 "for embedding models, where a near answer is a wrong answer")
    semantic_threshold: float = Field(0.90, gt=0, le=1, description="Least cosine similarity of a semantic hit; "
                                      "0.90 with the meaning guards is the highest that serves >= 30% of paraphrases "
                                      "(the seed's 0.95 serves 16%; see `fleet cache-eval`)")
    semantic_capacity: int = Field(100_000, ge=1, description="Most entries in a version's semantic index")
    semantic_verify_fraction: float = Field(0.05, ge=0, le=1, description="Fraction of semantic hits also "
                                            "computed by the model to measure the false-hit rate")
    semantic_false_hit_budget: float = Field(0.01, ge=0, le=1, description="Verified false-hit rate above which "
                                             "the semantic cache raises its threshold, then switches off")
    semantic_min_verifications: int = Field(100, ge=1, description="Verified hits needed before the false-hit "
                                            "budget is judged")
    semantic_only_when_paying: bool = Field(True, description="Look up every batch only while hits save more "
                                            "model time than the encoder costs; otherwise one batch in 50")
    semantic_verifier: bool = Field(True, description="Let the registered cache-verifier (a cross-encoder built by "
                                    "scripts/build-models) decide among the nearest candidates; without one built, "
                                    "the cosine threshold and the guards decide alone")
    semantic_verifier_model: str | None = Field(None, description="The registered cache verifier to load; unset: "
                                                "the one trained through the encoder (cache-verifier-multilingual "
                                                "with e5-embed, else cache-verifier)")
    semantic_recall_threshold: float = Field(0.55, gt=0, le=1, description="Least cosine similarity of a candidate "
                                             "the verifier judges (replaces semantic_threshold while a verifier is "
                                             "loaded); see `fleet cache-eval`")
    semantic_min_threshold: float = Field(0.50, gt=0, le=1, description="Floor the recall threshold may descend "
                                          "to while verified hits stay within half the false-hit budget")
    semantic_encoder_model: str | None = Field(None, description="Encoder of the semantic cache; unset: the shipped "
                                               "encoder that reads with the served model's tokenizer (e5-embed for "
                                               "faq-intent-multilingual), else minilm-embed")
    semantic_encoder_precision: Precision = Field("int8", description="Precision of the semantic cache's encoder")
    semantic_max_wrong_rate: float | None = Field(None, gt=0, lt=1, description="δ of the learned bound: serve a "
                                                  "semantic candidate only at scores where recomputed answers show "
                                                  "at most this share wrong, with semantic_bound_confidence; a cold "
                                                  "cache serves nothing until they do. None: off")
    semantic_bound_confidence: float = Field(0.95, gt=0, lt=1, description="Confidence of the learned bound")
    semantic_max_unknown_share: float = Field(0.0, ge=0, le=1, description="Most of a text's tokens that may be "
                                              "unknown to the encoder (\"[UNK]\") for it to be looked up or cached: "
                                              "an unknown token hides a word, so two texts that differ only there "
                                              "look alike (MiniLM reads most Chinese as [UNK])")

    exactly_once: str = Field("", description="Lanes whose results-topic records, dead letters and fallback "
                              "forwards are written in Kafka transactions together with the offsets they answer, "
                              "so that readers with isolation_level=read_committed see each result once even "
                              "through worker kills, broker restarts and fenced zombies: 'all', lane names "
                              "separated by commas (e.g. 'bulk'), or empty for none (at least once). See "
                              "workers/delivery/transactions.py; costs a transaction per partition and batch")

    @model_validator(mode="after")
    def _exactly_once_names_lanes(self) -> "WorkerSettings":
        _ = self.exactly_once_lanes
        return self

    @property
    def exactly_once_lanes(self) -> frozenset[str]:
        """The lanes delivered in transactions (FLEET_EXACTLY_ONCE)."""
        text = self.exactly_once.strip()
        if text in ("", "off", "none"):
            return frozenset()
        names = [lane.name for lane in self.lane_plan.lanes]
        if text == "all":
            return frozenset(names)
        chosen = frozenset(part.strip() for part in text.split(",") if part.strip())
        unknown = sorted(chosen - set(names))
        if unknown:
            raise ValueError(f"exactly_once: {', '.join(unknown)} is not a lane; the lanes are {', '.join(names)} "
                             f"(or 'all', or empty for none)")
        return chosen

    def exactly_once_topics(self) -> frozenset[str]:
        """Request topics (primary and fallback) of the lanes delivered in transactions."""
        plan = self.lane_plan
        lanes = [plan.named(name) for name in self.exactly_once_lanes]
        return frozenset(plan.topic(self.model, lane, fallback=fallback) for lane in lanes for fallback in (False, True))

    @model_validator(mode="after")
    def _faults_only_when_allowed(self) -> "WorkerSettings":
        refusal = self.fault_refusal()
        if refusal is not None:
            raise ValueError(refusal)
        return self

    def fault_settings(self) -> list[str]:
        """The fault_* settings that ask for a fault, as `name=value`."""
        asked = {"fault_injection": self.fault_injection, "fault_error_rate": self.fault_error_rate > 0,
                 "fault_oom_above_batch": self.fault_oom_above_batch is not None,
                 "fault_fail_after_records": self.fault_fail_after_records is not None,
                 "fault_inference_error_rate": self.fault_inference_error_rate > 0,
                 "fault_probe_fails": self.fault_probe_fails}
        return [f"{name}={getattr(self, name)}" for name, on in asked.items() if on]

    def fault_refusal(self) -> str | None:
        """Why these fault settings must not take effect, or None when they may (or there are none)."""
        faults = self.fault_settings()
        if not faults:
            return None
        if self.environment.strip().lower() in PRODUCTION_NAMES:
            return (f"fault injection is refused in production (environment={self.environment!r}); "
                    f"unset {', '.join(faults)}")
        if not self.allow_fault_injection:
            return (f"fault settings {', '.join(faults)} need FLEET_ALLOW_FAULT_INJECTION=1 (tests and drills "
                    "only); unset them or allow fault injection explicitly")
        return None

    @property
    def triage_rules(self) -> TriageRules:
        limit = self.max_input_chars if self.max_input_chars is not None else 16 * self.max_input_tokens
        return TriageRules(results_topics=re.compile(self.results_topic_pattern), max_input_chars=limit)
