"""A command whose Kafka or Redis does not answer ends with one line saying so, not a traceback;
so do Ctrl-C and a closed pipe. A command that may be run again (`wait_s` > 0) first waits out
the outage for up to `wait_s` (FLEET_STARTUP_TIMEOUT_S), saying every few seconds what it waits for."""

import os
import sys
import time
from collections.abc import Callable

from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, NoBrokersAvailable
from redis.exceptions import (
    AuthenticationError as RedisAuthenticationError,
    ConnectionError as RedisConnectionError,
    TimeoutError as RedisTimeoutError,
)

from common.settings import FleetSettings
from common.startup import FIRST_BACKOFF_S, LOG_EVERY_S, MAX_BACKOFF_S, StartupTimedOut
from fleet.exits import Exit

KAFKA_UNREACHABLE = (KafkaConnectionError, KafkaTimeoutError, NoBrokersAvailable)
REDIS_UNREACHABLE = (RedisConnectionError, RedisTimeoutError)


def unreachable(server: str, address: str, exc: BaseException) -> str:
    if isinstance(exc, RedisAuthenticationError):  # answered, and said no: the stack is up
        return (f"{server} at {address} refused authentication: {exc}; check FLEET_REDIS_USERNAME / "
                "FLEET_REDIS_PASSWORD (`source <home>/stack/secure.env` for `scripts/stack up --secure`)")
    return f"cannot reach {server} at {address}: {exc}; is it running (the local stack: `scripts/stack up`)?"


def run_command(name: str, entry: Callable[[], object], *, wait_s: float = 0.0) -> int:
    """`entry`'s exit status (0 when it returns no int); Exit.UNAVAILABLE after saying which
    server did not answer (`entry` is run again while one does not, for up to `wait_s`);
    Exit.INTERRUPTED on Ctrl-C."""
    try:
        result = _waiting_out_outages(name, entry, wait_s)
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
    except StartupTimedOut as exc:  # a process the command runs (`fleet shadow run`) waited in vain
        print(f"fleet {name}: {exc}", file=sys.stderr)
        return Exit.UNAVAILABLE
    return result if isinstance(result, int) else Exit.OK


def _waiting_out_outages(name: str, entry: Callable[[], object], wait_s: float) -> object:
    """`entry()`, run again after a backoff while Kafka or Redis does not answer (never after a
    refused password), until `wait_s` has passed; then the last error is raised."""
    give_up = time.monotonic() + wait_s
    backoff_s = FIRST_BACKOFF_S
    said_at: float | None = None
    while True:
        try:
            return entry()
        except (*KAFKA_UNREACHABLE, *REDIS_UNREACHABLE) as exc:
            now = time.monotonic()
            if isinstance(exc, RedisAuthenticationError) or now + backoff_s > give_up:
                raise
            if said_at is None or now - said_at >= LOG_EVERY_S:
                said_at = now
                server = "Kafka" if isinstance(exc, KAFKA_UNREACHABLE) else "Redis"
                print(f"fleet {name}: waiting for {server} ({type(exc).__name__}); {give_up - now:.0f} s left",
                      file=sys.stderr, flush=True)
            time.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, MAX_BACKOFF_S)
