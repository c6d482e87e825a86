"""Per-tenant request and refusal counts, shared by every gateway process through Redis, so the
console can show quota use and refusals per tenant.

Each gateway counts in memory and adds its counts once a second, in one pipeline, to the hash
of the current minute (`tenant_usage_key`): fields `<tenant>|admitted`, `<tenant>|rate` and
`<tenant>|waits` (the two kinds of 429, as in `fleet_gateway_quota_rejections`), and
`<tenant>|rps`, the tenant's rate limit in one gateway process. A minute's hash expires after
USAGE_TTL_S, so at most a little over two hours of minutes exist at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from common.redis_cluster import AnyRedis
from schemas.names import tenant_usage_key

USAGE_TTL_S = 2 * 3600
WINDOW_MINUTES = 60
ADMITTED, RATE, WAITS, RPS = "admitted", "rate", "waits", "rps"
COUNTED_KINDS = (ADMITTED, RATE, WAITS)


def usage_field(tenant: str, kind: str) -> str:
    return f"{tenant}|{kind}"


def minute_of(now_s: float) -> int:
    return int(now_s // 60)


async def add_usage(redis: AnyRedis, counts: Mapping[str, Mapping[str, int]], rps_limits: Mapping[str, float],
                    now_s: float) -> None:
    """Add one flush of counts (tenant -> kind -> count) to the current minute, in one round trip."""
    key = tenant_usage_key(minute_of(now_s))
    async with redis.pipeline(transaction=False) as pipe:
        for tenant, kinds in counts.items():
            for kind, count in kinds.items():
                if count:
                    pipe.hincrby(key, usage_field(tenant, kind), count)
            if tenant in rps_limits:
                pipe.hset(key, usage_field(tenant, RPS), f"{rps_limits[tenant]:g}")
        pipe.expire(key, USAGE_TTL_S)
        await pipe.execute()


@dataclass
class TenantUsage:
    tenant: str
    this_minute: Counter[str] = field(default_factory=Counter)
    last_hour: Counter[str] = field(default_factory=Counter)
    busiest_minute: int = 0  # admitted requests in the hour's busiest minute
    rps_limit: float | None = None  # as the gateway last reported it

    @property
    def busiest_use(self) -> float | None:
        """The busiest minute's mean request rate as a share of the rate limit (of one gateway process)."""
        if not self.rps_limit:
            return None
        return self.busiest_minute / 60 / self.rps_limit


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def read_usage(redis: AnyRedis, now_s: float, minutes: int = WINDOW_MINUTES) -> dict[str, TenantUsage]:
    """Each tenant's counts over the current minute and the last `minutes` (the current one included)."""
    current = minute_of(now_s)
    async with redis.pipeline(transaction=False) as pipe:
        for minute in range(current - minutes + 1, current + 1):
            pipe.hgetall(tenant_usage_key(minute))
        hashes: list[dict[bytes | str, bytes | str]] = await pipe.execute()
    found: dict[str, TenantUsage] = {}
    for age, raw in enumerate(reversed(hashes)):
        admitted: Counter[str] = Counter()
        for name, value in raw.items():
            tenant, _, kind = _text(name).rpartition("|")
            usage = found.setdefault(tenant, TenantUsage(tenant))
            if kind == RPS:
                usage.rps_limit = usage.rps_limit if usage.rps_limit is not None else float(_text(value))
            elif kind in COUNTED_KINDS:
                count = int(_text(value))
                usage.last_hour[kind] += count
                if age == 0:
                    usage.this_minute[kind] += count
                if kind == ADMITTED:
                    admitted[tenant] += count
        for tenant, count in admitted.items():
            found[tenant].busiest_minute = max(found[tenant].busiest_minute, count)
    return found
