"""Settings of one worker process: one model, one role, one device, one backend."""

import re
from enum import StrEnum

from pydantic import Field, model_validator

from common.settings import FleetSettings
from models.backends.sim import PRESETS, sim_device
from models.loading import BackendName, Device, GraphOptimization, Precision, RuntimeOptions, RuntimeSpec
from workers.compute.triage import TriageRules


class Role(StrEnum):
    primary = "primary"
    fallback = "fallback"
    shadow = "shadow"


class OverlongInputs(StrEnum):
    truncate = "truncate"
    reject = "reject"


class BatchPolicyName(StrEnum):
    adaptive = "adaptive"
    fixed = "fixed"


PRODUCTION_NAMES = ("production", "prod")


class WorkerSettings(FleetSettings):
    model: str = Field("minilm-embed", description="Model this worker serves")
    model_version: str | None = Field(None, description="Pin a registered version; default the newest of `precision`")
    precision: Precision = Field("fp32", description="Precision to pick when no version is pinned: fp32 | int8")
    role: Role = Role.primary
    device: Device = Field("cpu", description="cpu | cuda")
    backend: BackendName = Field("onnxruntime", description="onnxruntime | torch | sim (a simulated device for "
                                 "benchmarks and capacity planning, refused in production)")
    worker_id: str | None = Field(None, description="Stable id for logs, heartbeats and results; default host-pid")
    max_batch_size: int = Field(32, ge=1, le=4096)
    max_queue_delay_ms: float = Field(20.0, ge=0, description="Longest a record waits for its batch to fill, "
                                      "counted from its Kafka timestamp")
    batch_policy: BatchPolicyName = Field(BatchPolicyName.adaptive, description="adaptive: size batches by the "
                                          "visible backlog, never wait for records that are not there; fixed: "
                                          "wait up to max_queue_delay_ms for a full batch")
    preferred_batch_sizes: list[int] = Field(default_factory=list, description="Cut batches to these sizes when "
                                             "more is in hand, e.g. [8, 16, 32]")
    length_bucket_size: int = Field(16, ge=0, description="Sort a batch by token length and run it in sub-batches "
                                    "of at most this many rows; 0 runs it as one padded batch")
    intra_op_threads: int = Field(0, ge=0, description="Intra-op threads of ONNX Runtime or torch; 0 lets the runtime decide")
    intra_op_spinning: bool = Field(True, description="Let idle ONNX Runtime threads busy-wait for the next "
                                    "batch (ORT's default); off leaves the CPU to the event loop, Kafka and Redis")
    graph_optimization: GraphOptimization = Field("all", description="ONNX Runtime graph optimisation: disable | basic | extended | all")
    warmup: bool = Field(True, description="Run the common shapes once at load so the first batches are not slow")
    max_input_tokens: int = Field(256, ge=8, description="Longest input in tokens (also capped by the model)")
    max_input_chars: int | None = Field(None, ge=16, description="Texts are cut to this many characters before "
                                        "tokenizing, so a huge text costs what the longest input costs; default "
                                        "16 x max_input_tokens")
    overlong_inputs: OverlongInputs = Field(OverlongInputs.truncate, description="truncate: cut inputs at "
                                            "max_input_tokens; reject: answer them with error input_too_long")
    device_memory_headroom: float = Field(0.15, ge=0, lt=1, description="Fraction of device memory kept free "
                                          "(seed §4.3: 10-20%); CUDA only")
    result_ttl_s: int = Field(3600, ge=1, description="How long a result stays readable in Redis")
    delivery_max_backoff_s: float = Field(5.0, gt=0, description="Longest pause between delivery attempts while Redis "
                                          "or Kafka is away (delivery retries until it succeeds, never skips)")
    reply_stream_maxlen: int = Field(100_000, ge=100, description="Approximate cap on a waiter's reply stream "
                                     "(entries), so a waiter that stopped reading cannot grow it without bound")
    metrics_port: int | None = Field(None, description="Serve Prometheus metrics (/metrics) and the health "
                                     "endpoints (/livez, /healthz, /readyz) on this port")
    redact_patterns: list[str] = Field(default_factory=list, description="Extra regular expressions masked in "
                                       "debug traces, on top of e-mails, phone and card numbers")
    metrics_host: str = Field("127.0.0.1", description="Address the metrics server binds; 0.0.0.0 in containers")
    partitions: int = Field(4, ge=1, description="Partitions of a request topic when the worker creates it")
    static_membership: bool = Field(False, description="Join with group.instance.id = worker id, so a restart "
                                    "within the session timeout keeps its partitions without a rebalance")
    oom_clean_period_s: float = Field(30.0, gt=0, description="After an out-of-memory, the effective max batch "
                                      "grows back one step per this many seconds without another")
    takeover_after_s: float = Field(3.0, ge=0, description="Fallback workers serve the primary topic once no "
                                    "healthy primary has heartbeated for this long (plus the heartbeat TTL)")
    environment: str = Field("development", description="development | staging | production; production "
                             "refuses every fault-injection setting")
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
    session_timeout_ms: int = Field(10_000, ge=1000, description="Kafka group session timeout: how soon a dead worker's partitions move")
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
    semantic_encoder_model: str = Field("minilm-embed", description="Encoder of the semantic cache")
    semantic_encoder_precision: Precision = Field("int8", description="Precision of the semantic cache's encoder")
    sim_preset: str | None = Field(None, description=f"backend=sim: the simulated device, one of {sorted(PRESETS)}")
    sim_a_ms: float | None = Field(None, ge=0, description="backend=sim: ms per batch (replaces the preset's)")
    sim_b_ms: float | None = Field(None, ge=0, description="backend=sim: ms per row (replaces the preset's)")
    sim_c_ms: float | None = Field(None, ge=0, description="backend=sim: ms per padded token (replaces the preset's)")

    @model_validator(mode="after")
    def _no_simulated_device_in_production(self) -> "WorkerSettings":
        # The sim backend answers with made-up rows: a stray FLEET_BACKEND=sim must never serve users.
        if self.backend == "sim" and self.environment.strip().lower() in PRODUCTION_NAMES:
            raise ValueError(f"backend=sim is a simulated device for benchmarks and capacity planning; it is "
                             f"refused in production (environment={self.environment!r})")
        return self

    def runtime(self) -> RuntimeSpec:
        """What loading this worker's model needs (see models/loading.py)."""
        return RuntimeSpec(
            registry_dir=self.registry_dir, model=self.model, version=self.model_version,
            precision=self.precision, backend=self.backend,
            sim=sim_device(self.sim_preset, self.sim_a_ms, self.sim_b_ms, self.sim_c_ms) if self.backend == "sim" else None,
            options=RuntimeOptions(device=self.device, intra_op_threads=self.intra_op_threads,
                                   spinning=self.intra_op_spinning, graph_optimization=self.graph_optimization,
                                   warmup=self.warmup, max_input_tokens=self.max_input_tokens,
                                   length_bucket_size=self.length_bucket_size,
                                   memory_headroom=self.device_memory_headroom))

    @property
    def triage_rules(self) -> TriageRules:
        limit = self.max_input_chars if self.max_input_chars is not None else 16 * self.max_input_tokens
        return TriageRules(results_topics=re.compile(self.results_topic_pattern), max_input_chars=limit)
