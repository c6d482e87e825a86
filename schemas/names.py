"""Every Kafka topic and Redis key name the fleet uses, in one place.

Non-Python producers and consumers follow the same names; schemas/README.md lists them.
"""

TOPIC_PREFIX = "fleet"
DLQ_TOPIC = f"{TOPIC_PREFIX}.dlq"
DEFAULT_RESULTS_TOPIC = f"{TOPIC_PREFIX}.results"


def requests_topic(model: str) -> str:
    """Primary request topic of a model; its consumer group is the model name."""
    return f"{TOPIC_PREFIX}.requests.{model}"


FALLBACK_SUFFIX = ".cpu"


def fallback_topic(model: str) -> str:
    """Requests for the CPU fallback workers of a model (of its first lane; schemas/lanes.py has the others)."""
    return requests_topic(model) + FALLBACK_SUFFIX


def consumer_group(model: str, role: str = "primary") -> str:
    return model if role == "primary" else f"{model}.{role}"


def result_key(request_id: str) -> str:
    """Redis string holding the msgpack result of a request, with a TTL."""
    return f"{TOPIC_PREFIX}:result:{request_id}"


def reply_stream(waiter_id: str) -> str:
    """Redis stream a waiter (a gateway or client process) reads its replies from."""
    return f"{TOPIC_PREFIX}:reply:{waiter_id}"

def batch_results_topic(job: str) -> str:
    """A batch job's own results topic, created with the job's retention (gateway/batch_jobs.py)."""
    return f"{DEFAULT_RESULTS_TOPIC}.batch.{job}"


def batch_key(job: str, part: str = "") -> str:
    """Redis keys of a batch job: its hash, and `<part>` keys beside it; all expire with the job."""
    return f"{TOPIC_PREFIX}:batch:{job}" + (f":{part}" if part else "")


def batch_file_key(tenant: str, model: str, sha256: str) -> str:
    """Redis string: the job a CLI submit of this file started, so running it again resumes that job."""
    return f"{TOPIC_PREFIX}:batchfile:{tenant}:{model}:{sha256}"


def tenant_batches_key(tenant: str) -> str:
    """Redis sorted set of a tenant's batch job ids scored by creation (epoch ms)."""
    return f"{TOPIC_PREFIX}:batches:{tenant}"


# Redis sorted set: cancelled batch job id -> epoch ms its cancellation expires. Workers answer the
# requests of these jobs `cancelled` instead of computing them.
CANCELLED_BATCHES_KEY = f"{TOPIC_PREFIX}:batches:cancelled"

TRACE_TOPIC = f"{TOPIC_PREFIX}.trace"


def debug_key(model: str, tenant: str | None = None) -> str:
    """Redis key that switches debug tracing on for a model (or one tenant of it) until it expires."""
    return f"{TOPIC_PREFIX}:debug:{model}" + (f":tenant:{tenant}" if tenant else "")

# Gateway API keys: field sha256(key) hex -> JSON {tenant, key_id, created_ms, revoked_ms}; never the key itself.
API_KEYS_KEY = f"{TOPIC_PREFIX}:apikeys"

WORKER_KEY_PREFIX = f"{TOPIC_PREFIX}:worker:"


def worker_key(model: str, worker_id: str) -> str:
    """Redis hash holding a worker's latest heartbeat (role, device, state, lag); expires when the beats stop."""
    return f"{WORKER_KEY_PREFIX}{model}:{worker_id}"


WORKER_MODELS_KEY = f"{TOPIC_PREFIX}:workers"


def workers_index_key(model: str) -> str:
    """Redis sorted set of a model's worker ids scored by heartbeat expiry (epoch ms): how workers
    are found without a SCAN over a keyspace full of cache entries and results."""
    return f"{TOPIC_PREFIX}:workers:{model}"


def drain_key(worker_id: str) -> str:
    """Redis key whose presence tells a worker to hand its traffic over and stop taking work."""
    return f"{TOPIC_PREFIX}:drain:{worker_id}"


# --- the model catalogue (issue 41): common/catalog.py ---

# Redis hash: model -> JSON entry (served or retired, retired versions, who and why): the models the fleet serves.
CATALOG_KEY = f"{TOPIC_PREFIX}:catalog"
# Redis sorted set of gateway ids (host:pid) scored by the expiry of their beat (epoch ms).
GATEWAYS_KEY = f"{TOPIC_PREFIX}:gateways"


def gateway_key(gateway: str) -> str:
    """Redis string (JSON, with a TTL the gateway refreshes): the models one gateway process serves now."""
    return f"{TOPIC_PREFIX}:gateway:{gateway}"


# --- model cards (issue 23) ---

def card_key(model: str, version: str | None = None) -> str:
    """Redis string (JSON schemas.model_card.ModelCard, with a TTL the serving workers refresh): the card of
    one version of a model, or with no version the card of the version a model's primary workers serve."""
    return f"{TOPIC_PREFIX}:card:{model}" + (f":{version}" if version is not None else "")


# --- result caches (issue 4) ---

def exact_cache_key(model: str, version: str, digest: str) -> str:
    """Redis string holding the msgpack outputs for one canonical input of one model version."""
    return f"{TOPIC_PREFIX}:cache:{model}:{version}:{digest}"


def exact_cache_pattern(model: str, version: str | None = None) -> str:
    """SCAN pattern matching every exact-cache entry of a model (or of one version of it)."""
    return f"{TOPIC_PREFIX}:cache:{model}:{version or '*'}:*"


def semantic_bound_key(model: str, version: str, scorer: str) -> str:
    """Redis hash of the semantic tier's learned-bound label counts for one version and scorer."""
    return f"{TOPIC_PREFIX}:semantic-bound:{model}:{version}:{scorer}"


def semantic_bounds_index_key(model: str) -> str:
    """Redis set of the "<version>:<scorer>" a model's learned bounds are kept for (what the console reads)."""
    return f"{TOPIC_PREFIX}:semantic-bounds:{model}"


def cache_generation_key(model: str) -> str:
    """Redis counter bumped by `fleet cache clear`: workers drop their in-process tiers when it changes."""
    return f"{TOPIC_PREFIX}:cachegen:{model}"


def semantic_cache_topic(model: str, version: str) -> str:
    """Compacted topic of semantic-cache entries of one model version; workers rebuild their index from it."""
    return f"{TOPIC_PREFIX}.cache.{model}.{version}"


# --- model versions, rollout and shadow (issue 6) ---

def versions_key(model: str) -> str:
    """Redis hash of a model's version pointers and rollout state (stable, candidate, percent, stage, ...)."""
    return f"{TOPIC_PREFIX}:versions:{model}"


def versions_audit_stream(model: str) -> str:
    """Redis stream logging every pointer and rollout change: who, when, what, why."""
    return f"{TOPIC_PREFIX}:versions:{model}:audit"


def version_stats_key(model: str, version: str) -> str:
    """Redis hash of live counters per version (requests, errors, latency buckets) that rollout gates read."""
    return f"{TOPIC_PREFIX}:stats:{model}:{version}"


def shadow_stats_key(model: str, version: str) -> str:
    """Redis hash of shadow comparison counters of a candidate version against stable."""
    return f"{TOPIC_PREFIX}:shadow:{model}:{version}"


def comparisons_topic(model: str) -> str:
    """Shadow comparisons of a model: one record per compared request."""
    return f"{TOPIC_PREFIX}.shadow.{model}"


def rollout_report_key(model: str) -> str:
    """Redis string (JSON, short TTL) with the rollout controller's latest gate evaluation, for `fleet rollout status`."""
    return f"{TOPIC_PREFIX}:rollout:{model}:report"


def tenant_usage_key(minute: int) -> str:
    """One minute's per-tenant request and refusal counts from the gateways (`minute` = Unix seconds // 60);
    fields `<tenant>|<kind>`. Written by gateway/tenant_usage.py, read by the console (common/tenant_usage.py)."""
    return f"{TOPIC_PREFIX}:tenant_usage:{minute}"
