"""What every fleet process does at its edges: fail fast and loud at start, and end within its
grace period once told to stop, whatever Kafka and Redis do meanwhile."""

import asyncio
import ctypes
import ctypes.util
import logging
import os
import threading
from enum import IntEnum

from common.clients import new_admin, redis_client
from common.credentials import CredentialsRejected, verify_credentials
from common.settings import FleetSettings

log = logging.getLogger(__name__)


class ExitCode(IntEnum):
    OK = 0
    CANNOT_BIND = 2
    DEPENDENCIES = 3
    GRACE_EXCEEDED = 4


async def dependencies_answer(settings: FleetSettings) -> None:
    """Kafka lists its topics and Redis answers PING, or the first error is raised (CredentialsRejected
    when either refuses this process's credentials)."""
    await verify_credentials(settings)
    admin = new_admin(settings)
    try:
        await admin.start()
        await admin.list_topics()
    finally:
        await admin.close()
    redis = redis_client(settings)
    try:
        await redis.ping()
    finally:
        await redis.aclose()


async def wait_for_dependencies(settings: FleetSettings, timeout_s: float, what: str) -> bool:
    """True once Kafka and Redis answer; False (after one clear log line) when they did not within
    `timeout_s`, or at once when they refuse the credentials: waiting does not heal a wrong password."""
    last: BaseException | None = None
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                try:
                    await dependencies_answer(settings)
                    return True
                except CredentialsRejected as exc:
                    log.error("%s cannot start: %s", what, exc)
                    return False
                except Exception as exc:  # retried until the deadline; the last one is reported
                    last = exc
                    await asyncio.sleep(0.5)
    except TimeoutError:
        reason = f"{type(last).__name__}: {last}" if last is not None else "no answer"
        log.error("%s cannot start: Kafka (%s) or Redis did not answer within %.0f s; last error: %s", what,
                  settings.kafka_bootstrap, timeout_s, reason)
        return False


def arm_watchdog(grace_s: float) -> None:
    """From now on the process has `grace_s` to end by itself; after that it is ended here."""
    def give_up() -> None:
        log.error("shutdown took longer than %.1f s; exiting now", grace_s)
        logging.shutdown()
        os._exit(ExitCode.GRACE_EXCEEDED)

    watchdog = threading.Timer(grace_s, give_up)
    watchdog.daemon = True
    watchdog.start()


def return_memory() -> bool:
    """Ask glibc to hand freed heap back to the OS (malloc_trim); False where there is no glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        return bool(ctypes.CDLL(name).malloc_trim(0))
    except (OSError, AttributeError):
        return False
