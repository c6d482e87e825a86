"""Per-tenant quotas: a request rate (token bucket) and a number of requests in flight.

Beyond either, the tenant's request is 429 with Retry-After and counted in
`fleet_gateway_quota_rejections{tenant, kind}` (kind `rate` or `waits`); other tenants keep
their own budgets. They apply after authentication, to the tenant it found; with
authentication switched off there is no tenant and only the process-wide in-flight cap applies.

`QuotaBook` keeps the budgets; `TenantQuotas` is the ASGI middleware that consults it for the
FastAPI routes, and the fast path (gateway/fast_routes.py) consults the same book.
"""

import math
import time
from collections.abc import Callable

from prometheus_client import Counter
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.answers import Refusal, retry_after
from gateway.auth import Caller
from gateway.limits import PREFIX
from gateway.metrics import Children
from gateway.settings import TenantQuota
from gateway.tenant_usage import UsageTally


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


class _Budget:
    """One tenant's limits, its bucket and its requests in flight."""

    __slots__ = ("bucket", "max_waits", "in_flight")

    def __init__(self, quota: TenantQuota, now: float) -> None:
        assert quota.rps is not None and quota.burst is not None and quota.max_waits is not None
        self.bucket = TokenBucket(quota.rps, quota.burst, now)
        self.max_waits = quota.max_waits
        self.in_flight = 0


class QuotaBook:
    def __init__(self, quota_of: Callable[[str], TenantQuota], rejections: Counter, *, retry_after_s: int,
                 clock: Callable[[], float] = time.monotonic, usage: UsageTally | None = None) -> None:
        self._quota_of = quota_of
        self.usage = usage if usage is not None else UsageTally()  # what gateway/tenant_usage.py publishes
        self._rejections = Children(rejections)
        self._retry_after_s = retry_after_s
        self._clock = clock
        # One entry per tenant that has called: tenants come from API keys, so there are as many
        # as the fleet has issued, as in the rejections metric itself.
        self._budgets: dict[str, _Budget] = {}

    def enter(self, tenant: str) -> Refusal | None:
        """None when the tenant's request may go on (call `leave(tenant)` once it is answered), else the 429."""
        budget = self._budgets.get(tenant)
        if budget is None:
            budget = self._budgets[tenant] = _Budget(self._quota_of(tenant), self._clock())
        if (wait_s := budget.bucket.take(self._clock())) > 0:
            return self._refuse(tenant, "rate", f"tenant {tenant} is over {budget.bucket.rate:g} requests per second",
                                max(math.ceil(wait_s), 1))
        if budget.in_flight >= budget.max_waits:
            return self._refuse(tenant, "waits", f"tenant {tenant} has {budget.max_waits} requests in flight already",
                                self._retry_after_s)
        budget.in_flight += 1
        self.usage.count(tenant)
        return None

    def leave(self, tenant: str) -> None:
        self._budgets[tenant].in_flight -= 1

    def _refuse(self, tenant: str, kind: str, detail: str, retry_after_s: int) -> Refusal:
        self._rejections(tenant, kind).inc()
        self.usage.count(tenant, kind)
        return Refusal(429, {"detail": f"{detail}; retry later", "quota": kind}, retry_after(retry_after_s))


class TenantQuotas:
    """Runs the `QuotaBook` for every request under `prefix` that `Authenticate` found a tenant for."""

    def __init__(self, app: ASGIApp, book: QuotaBook, prefix: str = PREFIX) -> None:
        self.app = app
        self.book = book
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        caller = scope.get("state", {}).get("caller")
        if (scope["type"] != "http" or not scope["path"].startswith(self.prefix) or not isinstance(caller, Caller)
                or caller.tenant is None):
            await self.app(scope, receive, send)
            return
        tenant = caller.tenant
        if (refusal := self.book.enter(tenant)) is not None:
            await refusal.send(send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.book.leave(tenant)
