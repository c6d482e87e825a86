"""Per-tenant quotas: a request rate (token bucket) and a number of requests in flight.

Beyond either, the tenant's request is 429 with Retry-After and counted in
`fleet_gateway_quota_rejections{tenant, kind}` (kind `rate` or `waits`); other tenants keep
their own budgets. Runs after `Authenticate`, on the tenant it found; with authentication
switched off there is no tenant and only the process-wide in-flight cap applies.
"""

import math
import time
from collections.abc import Callable

from prometheus_client import Counter
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.auth import Caller
from gateway.limits import send_json
from gateway.settings import TenantQuota


class TokenBucket:
    """`burst` tokens, refilled at `rate` per second; a request takes one."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.updated = now

    def take(self, now: float) -> float:
        """0 when a token was taken, else the seconds until one will be there."""
        self.tokens = min(float(self.burst), self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


class TenantQuotas:
    def __init__(self, app: ASGIApp, quota_of: Callable[[str], TenantQuota], rejections: Counter, *,
                 retry_after_s: int, prefix: str = "/v1/", clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.quota_of = quota_of
        self.rejections = rejections
        self.retry_after_s = retry_after_s
        self.prefix = prefix
        self.clock = clock
        self.buckets: dict[str, TokenBucket] = {}
        self.in_flight: dict[str, int] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        caller = scope.get("state", {}).get("caller")
        if (scope["type"] != "http" or not scope["path"].startswith(self.prefix) or not isinstance(caller, Caller)
                or caller.tenant is None):
            await self.app(scope, receive, send)
            return
        tenant = caller.tenant
        quota = self.quota_of(tenant)
        assert quota.rps is not None and quota.burst is not None and quota.max_waits is not None
        bucket = self.buckets.get(tenant)
        if bucket is None:
            bucket = self.buckets[tenant] = TokenBucket(quota.rps, quota.burst, self.clock())
        if (wait_s := bucket.take(self.clock())) > 0:
            await self._refuse(send, tenant, "rate", f"tenant {tenant} is over {quota.rps:g} requests per second",
                               max(math.ceil(wait_s), 1))
            return
        if self.in_flight.get(tenant, 0) >= quota.max_waits:
            await self._refuse(send, tenant, "waits", f"tenant {tenant} has {quota.max_waits} requests in flight "
                               "already", self.retry_after_s)
            return
        self.in_flight[tenant] = self.in_flight.get(tenant, 0) + 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight[tenant] -= 1
            if not self.in_flight[tenant]:
                del self.in_flight[tenant]

    async def _refuse(self, send: Send, tenant: str, kind: str, detail: str, retry_after_s: int) -> None:
        self.rejections.labels(tenant=tenant, kind=kind).inc()
        await send_json(send, 429, {"detail": f"{detail}; retry later", "quota": kind},
                        [(b"retry-after", str(retry_after_s).encode())])
