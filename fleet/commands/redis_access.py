"""Running an operator command against Redis: one client, closed afterwards, and a clear
message (not a traceback) when Redis cannot be reached."""

import sys
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from common.settings import FleetSettings

EXIT_REDIS_DOWN = 2


async def with_redis(settings: FleetSettings, action: Callable[[Redis], Awaitable[int]]) -> int:
    """`action`'s exit code, or EXIT_REDIS_DOWN after saying why Redis did not answer."""
    redis = Redis.from_url(settings.redis_url, socket_connect_timeout=3, socket_timeout=10)
    try:
        return await action(redis)
    except (RedisError, OSError) as exc:
        print(f"cannot reach Redis at {settings.redis_url}: {exc}; is the stack up (`fleet stack up`)?",
              file=sys.stderr)
        return EXIT_REDIS_DOWN
    finally:
        await redis.aclose()
