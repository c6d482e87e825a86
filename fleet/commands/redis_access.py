"""Running an operator command against Redis: one client, closed afterwards, and a clear
message (not a traceback) when Redis cannot be reached."""

import sys
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from common.redis_cluster import AnyRedis
from common.clients import redis_client
from common.settings import FleetSettings
from fleet.exits import Exit
from fleet.unreachable import unreachable


async def with_redis(settings: FleetSettings, action: Callable[[AnyRedis], Awaitable[int]]) -> int:
    """`action`'s exit status, or Exit.UNAVAILABLE after saying why Redis did not answer."""
    redis = redis_client(settings, socket_connect_timeout=3, socket_timeout=10)
    try:
        return await action(redis)
    except (RedisError, OSError) as exc:
        print(unreachable("Redis", settings.redis_url_redacted, exc), file=sys.stderr)
        return Exit.UNAVAILABLE
    finally:
        await redis.aclose()
