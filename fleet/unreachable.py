"""A command whose Kafka or Redis does not answer ends with one line saying so, not a traceback;
so do Ctrl-C and a closed pipe."""

import os
import sys
from collections.abc import Callable

from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, NoBrokersAvailable
from redis.exceptions import (
    AuthenticationError as RedisAuthenticationError,
    ConnectionError as RedisConnectionError,
    TimeoutError as RedisTimeoutError,
)

from common.settings import FleetSettings
from fleet.exits import Exit

KAFKA_UNREACHABLE = (KafkaConnectionError, KafkaTimeoutError, NoBrokersAvailable)
REDIS_UNREACHABLE = (RedisConnectionError, RedisTimeoutError)


def unreachable(server: str, address: str, exc: BaseException) -> str:
    if isinstance(exc, RedisAuthenticationError):  # answered, and said no: the stack is up
        return (f"{server} at {address} refused authentication: {exc}; check FLEET_REDIS_USERNAME / "
                "FLEET_REDIS_PASSWORD (`source <home>/stack/secure.env` for `stack up --secure`)")
    return f"cannot reach {server} at {address}: {exc}; is the stack up (`fleet stack up`)?"


def run_command(name: str, entry: Callable[[], object]) -> int:
    """`entry`'s exit status (0 when it returns no int); Exit.UNAVAILABLE after saying which
    server did not answer; Exit.INTERRUPTED on Ctrl-C."""
    try:
        result = entry()
    except KeyboardInterrupt:
        print(f"fleet {name}: interrupted", file=sys.stderr)
        return Exit.INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`fleet lag | head`): nothing is wrong. Python flushes stdout once
        # more at exit, so it must point somewhere that cannot break again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return Exit.OK
    except KAFKA_UNREACHABLE as exc:
        print(f"fleet {name}: {unreachable('Kafka', FleetSettings().kafka_bootstrap, exc)}", file=sys.stderr)
        return Exit.UNAVAILABLE
    except REDIS_UNREACHABLE as exc:
        print(f"fleet {name}: {unreachable('Redis', FleetSettings().redis_url_redacted, exc)}", file=sys.stderr)
        return Exit.UNAVAILABLE
    return result if isinstance(result, int) else Exit.OK
