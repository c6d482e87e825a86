"""Per-tenant quotas: a request rate (token bucket) and a number of requests in flight.

Beyond either, the tenant's request is refused `over_quota` (429 with Retry-After, gateway/refusals.py)
and counted in `fleet_gateway_quota_rejections{tenant, kind}` (kind `rate` or `waits`); other
tenants keep their own budgets. The book is one step of gateway/admission.py, after the tenant is
known; with authentication switched off there is no tenant and only the process-wide in-flight
bound applies.
"""

import math
import time
from collections.abc import Callable

from prometheus_client import Counter

from gateway.metrics import Children
from gateway.refusals import Kind, Refusal
from gateway.settings import TenantQuota
from gateway.tenant_usage import UsageTally


class TokenBucket:
    """`burst` tokens, refilled at `rate` per second; a request takes one."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.updated = now

    def wait_for(self, now: float, count: int = 1) -> float:
        """0 when `count` tokens are there (nothing is taken yet), else the seconds until they will be."""
        self.tokens = min(float(self.burst), self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        return 0.0 if self.tokens >= count else (count - self.tokens) / self.rate

    def take(self, now: float, count: int = 1) -> float:
        """0 when `count` tokens were taken, else the seconds until they will be there (none is taken)."""
        if (wait_s := self.wait_for(now, count)) == 0:
            self.tokens -= count
        return wait_s


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

    def enter(self, tenant: str, rows: int = 1) -> Refusal | None:
        """None when the tenant's `rows` requests may go on (call `leave(tenant, rows)` once they are
        answered), else the refusal; all of them or none."""
        budget = self._budgets.get(tenant)
        if budget is None:
            budget = self._budgets[tenant] = _Budget(self._quota_of(tenant), self._clock())
        bucket = budget.bucket
        if (wait_s := bucket.wait_for(self._clock(), rows)) > 0:
            detail = f"tenant {tenant} is over {bucket.rate:g} requests per second"
            if rows > bucket.burst:
                detail = f"a call of {rows} rows is over tenant {tenant}'s burst of {bucket.burst} requests"
            return self._refuse(tenant, "rate", detail, max(math.ceil(wait_s), 1))
        if budget.in_flight + rows > budget.max_waits:
            return self._refuse(tenant, "waits", f"tenant {tenant} has {budget.max_waits} requests in flight already",
                                self._retry_after_s)
        bucket.tokens -= rows  # only now: a call refused for its waits spends none of the rate
        budget.in_flight += rows
        self.usage.count(tenant, count=rows)
        return None

    def leave(self, tenant: str, rows: int = 1) -> None:
        self._budgets[tenant].in_flight -= rows

    def _refuse(self, tenant: str, kind: str, detail: str, retry_after_s: int) -> Refusal:
        self._rejections(tenant, kind).inc()
        self.usage.count(tenant, kind)
        return Refusal(Kind.over_quota, f"{detail}; retry later", retry_after_s, (("quota", kind),))
