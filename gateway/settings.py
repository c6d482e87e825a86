"""Settings of the gateway process and of the Python client for services."""

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from common.settings import FleetSettings
from gateway.oip.settings import OipSettings


MAX_BATCH_LINES = 0xFFFFFFFF  # a job's request ids hold its line numbers in 32 bits


class ClientSettings(FleetSettings):
    default_timeout_s: float = Field(10.0, gt=0, description="Deadline of a request when the caller names none")
    partitions: int = Field(4, ge=1, description="Partitions of a request topic when the client creates it")
    max_waits: int = Field(10_000, ge=1, description="Concurrent infer() waits per process; more are refused "
                           "(Overloaded) instead of growing the pending map without bound")
    reader_max_backoff_s: float = Field(1.0, gt=0, le=30, description="Longest pause between the reply reader's "
                                        "reconnection attempts while Redis is away")
    log_every_s: float = Field(10.0, gt=0, description="Repeated errors about one dependency are logged once per "
                               "this interval, with a count")


class BatchSettings(FleetSettings):
    """Batch jobs (gateway/batch_jobs.py): limits, retention, and the resume points of a submit."""

    batch_max_file_bytes: int = Field(1 << 30, ge=1024, description="A batch file larger than this is refused "
                                      "before any line is sent")
    batch_max_lines: int = Field(1_000_000, ge=1, le=MAX_BATCH_LINES, description="Lines a batch file may hold")
    batch_max_line_bytes: int = Field(64 * 1024, ge=256, description="A longer line goes to the errors file")
    batch_chunk_lines: int = Field(500, ge=1, le=10_000, description="Lines produced between two resume points")
    batch_retention_s: int = Field(7 * 86_400, ge=60, description="How long a job, its state and its results "
                                   "topic are kept")
    batch_completion_window_s: int = Field(86_400, ge=60, description="A request of a job not computed within "
                                           "this after it was sent expires (the errors file says so)")
    batch_max_jobs_per_tenant: int = Field(100, ge=1, description="Jobs a tenant may keep; more are refused "
                                           "until old ones expire or are deleted")
    batch_max_doubt_scan: int = Field(2_000_000, ge=0, description="Records of the lane read back to check an "
                                      "unacknowledged chunk after a crash; past it the chunk is sent again")


class TenantQuota(BaseModel):
    """One tenant's own limits; a field left out takes the gateway-wide default."""

    rps: float | None = Field(None, gt=0)
    burst: int | None = Field(None, ge=1)
    max_waits: int | None = Field(None, ge=1)


class GatewaySettings(ClientSettings, OipSettings, BatchSettings):
    host: str = "127.0.0.1"
    port: int = 8080
    models: list[str] | None = Field(None, description="An allow-list: the models this gateway serves, accepted "
                                     "even before a worker serves them; others are 404. Unset (the default): the "
                                     "models the fleet serves, followed live (gateway/catalog.py)")
    catalog_poll_s: float = Field(2.0, gt=0, le=60, description="How often the gateway reads the model catalogue "
                                  "(a model made stable is served within this) and renews its beat")
    max_body_bytes: int = Field(64 * 1024, ge=1024, description="Larger request bodies are 413")
    max_header_bytes: int = Field(16 * 1024, ge=1024, description="A longer request line and headers is 431, and "
                                  "the connection is closed")
    request_read_timeout_s: float = Field(10.0, gt=0, le=300, description="A request (line, headers, body) not "
                                          "received within this is 408, and the connection is closed")
    idle_timeout_s: int = Field(5, ge=1, le=300, description="A connection that sends nothing this long, before "
                                "its first request or between two, is closed")
    max_text_chars: int = Field(8192, ge=1, description="Longer texts are 422")
    max_params_depth: int = Field(8, ge=1, le=64, description="`params` nested deeper than this is 422")
    max_params_bytes: int = Field(16 * 1024, ge=16, description="`params` larger than this, packed, is 422")
    max_timeout_ms: int = Field(60_000, gt=0, le=600_000, description="A longer `timeout_ms` is 422")
    gateway_workers: int = Field(1, ge=1, le=64, description="Gateway processes on the one port (`fleet-gateway "
                                 "--workers N` sets it too); each has its own reply stream and 1/N of every quota")
    max_in_flight: int = Field(1000, ge=1, description="Requests in flight per process, every entry point together "
                               "(/v1, /v2, gRPC); more are refused `busy` (429)")
    fast_routes: bool = Field(True, description="Serve POST /v1/models/{model}/infer and /requests by the gateway's "
                              "own fast path (gateway/fast_routes.py); false sends them through FastAPI like the "
                              "other routes: the same answers at several times the CPU")
    retry_after_s: int = Field(1, ge=1, description="Retry-After of 429 and 503 answers")
    rule_fallbacks: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Per model, a safe answer "
                                                      "(outputs) given when no worker of any kind is alive and the "
                                                      "deadline is near, marked degraded")
    rule_fallback_enabled: bool = Field(True, description="Switch the rule-based answers off without removing them")
    rule_fallback_margin: float = Field(0.1, gt=0, lt=1, description="Answer from the rule when this fraction of "
                                        "the deadline is left and nothing is alive")
    auth_required: bool = Field(True, description="Every route but /healthz and /readyz needs an API key. Only "
                                "an explicit false turns this off (the gateway then warns at start, /readyz says so)")
    auth_keys_file: Path | None = Field(None, description="Also accept the keys in this file: lines of "
                                        "'<sha256 hex of the key> <tenant>'; re-read when it changes")
    auth_cache_s: float = Field(0.5, ge=0, le=1.0, description="How long a key lookup is reused: a revoked key is "
                                "refused within this")
    auth_lookup_timeout_s: float = Field(2.0, gt=0, description="A key lookup Redis does not answer within this is "
                                         "503 with Retry-After")
    auth_outage_grace_s: float = Field(30.0, ge=0, le=300, description="While Redis does not answer, a key Redis "
                                       "verified as active within this many seconds is let in (0: never); a key "
                                       "revoked that recently may work during the outage (threat model: "
                                       "docs/operations/resilience.md)")
    metrics_tenants: list[str] = Field(["metrics"], description="Tenants whose keys may read /metrics; their keys "
                                       "may do nothing else")
    tenant_rps: float = Field(200.0, gt=0, description="Requests per second per tenant (token bucket refill)")
    tenant_burst: int = Field(400, ge=1, description="Requests a tenant may send at once above its rate")
    tenant_max_waits: int = Field(500, ge=1, description="Requests of one tenant in flight at once (a sync infer "
                                  "holds its place while it waits); more are 429")
    tenant_quotas: dict[str, TenantQuota] = Field(default_factory=dict, description="Per-tenant overrides, e.g. "
                                                  '{"acme": {"rps": 50, "max_waits": 20}}')

    def quota_of(self, tenant: str) -> TenantQuota:
        """The tenant's limits, its overrides over the defaults."""
        own = self.tenant_quotas.get(tenant, TenantQuota())
        return TenantQuota(rps=own.rps or self.tenant_rps, burst=own.burst or self.tenant_burst,
                           max_waits=own.max_waits or self.tenant_max_waits)
