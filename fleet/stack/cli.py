"""The local stack: a real single-node Kafka (KRaft) and a real Redis, no Docker needed.

    python -m fleet.stack up            # fetch jars / install redis-server when missing, start, wait
    python -m fleet.stack status        # running (pid) or not, and whether each answers
    python -m fleet.stack down [--wipe] # stop what `up` started; --wipe also deletes the data

Ports come from the shared settings (FLEET_KAFKA_BOOTSTRAP, FLEET_REDIS_URL); everything the
stack writes lives under <home>/stack/ (FLEET_HOME, default .fleet in the working directory):
kafka-libs/ (jars), data/ (Kafka log dirs, Redis dir), logs/, run/ (pid files), conf/.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import redis.asyncio as aioredis
from aiokafka.admin import AIOKafkaAdminClient
from pydantic import Field
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    RetryError,
    retry_if_not_exception_type,
    stop_after_delay,
    wait_fixed,
)

from fleet.stack import kafka_server as stack_kafka, redis_server as stack_redis
from common.settings import FleetSettings
from fleet.stack.proc import Endpoint, Managed, StackError, port_open

Echo = Callable[[str], None]


class StackSettings(FleetSettings):
    kafka_controller_port: int = Field(
        default=9093, gt=0, lt=65536, description="KRaft controller listener port (loopback)"
    )
    partitions: int = Field(default=4, ge=1, description="num.partitions: partitions of auto-created topics")
    kafka_heap_min: str = Field(default="256m", description="JVM -Xms of the broker")
    kafka_heap_max: str = Field(default="768m", description="JVM -Xmx of the broker")
    redis_maxmemory: str = Field(default="256mb", description="Redis maxmemory")
    redis_maxmemory_policy: str = Field(default="volatile-lru", description="Redis eviction policy: volatile-lru "
                                        "evicts only keys with a TTL (results, cache entries, replies), never the "
                                        "version pointers, audit log or cache generation")
    stack_start_timeout_s: float = Field(
        default=90.0, gt=0, description="How long `up` waits for both servers to answer"
    )
    stack_stop_timeout_s: float = Field(default=30.0, gt=0, description="SIGTERM grace period before SIGKILL")


class ProcessExited(StackError):
    """The server process died while we waited for it to answer."""


# --- readiness --------------------------------------------------------------------------------


async def wait_for_kafka(
    bootstrap: str, timeout_s: float, *, alive: Callable[[], bool] | None = None, progress: Echo | None = None
) -> None:
    """Return once Kafka at `bootstrap` answers a metadata request naming a broker; StackError on timeout."""
    await _until_answers(lambda: _kafka_answers(bootstrap), f"kafka at {bootstrap}", timeout_s, alive, progress)


async def wait_for_redis(
    url: str, timeout_s: float, *, alive: Callable[[], bool] | None = None, progress: Echo | None = None
) -> None:
    """Return once Redis at `url` answers PING; StackError on timeout."""
    await _until_answers(lambda: _redis_answers(url), f"redis at {url}", timeout_s, alive, progress)


async def _kafka_answers(bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        await admin.start()
        cluster = await admin.describe_cluster()
        if not cluster.get("brokers"):
            raise ConnectionError("metadata names no broker yet")
    finally:
        await admin.close()


async def _redis_answers(url: str) -> None:
    client = aioredis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        if not await client.ping():
            raise ConnectionError("PING was not answered")
    finally:
        await client.aclose()


async def _until_answers(
    check: Callable[[], Awaitable[None]],
    what: str,
    timeout_s: float,
    alive: Callable[[], bool] | None,
    progress: Echo | None,
) -> None:
    started = time.monotonic()
    last_report = [started]

    def report(state: RetryCallState) -> None:
        now = time.monotonic()
        if progress is not None and now - last_report[0] >= 5:
            last_report[0] = now
            progress(f"  waiting for {what} ({now - started:.0f}s)")

    retrying = AsyncRetrying(
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(0.5),
        retry=retry_if_not_exception_type(ProcessExited),
        before_sleep=report,
    )
    try:
        async for attempt in retrying:
            with attempt:
                if alive is not None and not alive():
                    raise ProcessExited(f"{what}: the process exited")
                remaining = max(timeout_s - (time.monotonic() - started), 0.5)
                await asyncio.wait_for(check(), timeout=min(10.0, remaining))
    except RetryError as exc:
        last = exc.last_attempt.exception()
        raise StackError(f"{what} did not answer within {timeout_s:.0f}s: {last!r}") from last


async def _answers(check: Awaitable[None]) -> bool:
    try:
        await check
    except StackError:
        return False
    return True


# --- layout -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stack:
    settings: StackSettings
    root: Path
    kafka_at: Endpoint
    redis_at: Endpoint

    @classmethod
    def of(cls, settings: StackSettings) -> Stack:
        return cls(
            settings,
            settings.home.resolve() / "stack",
            stack_kafka.parse_bootstrap(settings.kafka_bootstrap),
            stack_redis.parse_redis_url(settings.redis_url),
        )

    @property
    def libs(self) -> Path:
        return self.root / "kafka-libs"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def conf(self) -> Path:
        return self.root / "conf"

    @property
    def kafka_data(self) -> Path:
        return self.data / "kafka"

    @property
    def redis_data(self) -> Path:
        return self.data / "redis"

    @property
    def server_properties(self) -> Path:
        return self.conf / "server.properties"

    @property
    def log4j(self) -> Path:
        return self.conf / "log4j.properties"

    @property
    def kafka(self) -> Managed:
        markers = (stack_kafka.KAFKA_MAIN, str(self.server_properties))
        return Managed("kafka", self.root / "run" / "kafka.pid", self.logs / "kafka.out", markers)

    @property
    def redis(self) -> Managed:
        markers = ("redis-server", str(self.redis_at.port))
        return Managed("redis", self.root / "run" / "redis.pid", self.logs / "redis.log", markers)


# --- commands -----------------------------------------------------------------------------------


def up(settings: StackSettings, echo: Echo = print) -> None:
    """Start Kafka and Redis unless they run already, then wait until both answer."""
    stack = Stack.of(settings)
    alive = {"kafka": _start_kafka(stack, echo), "redis": _start_redis(stack, echo)}
    timeout = settings.stack_start_timeout_s
    echo(f"waiting for kafka ({stack.kafka_at}) and redis ({stack.redis_at}) to answer (up to {timeout:.0f}s)")

    async def wait_both() -> None:
        await asyncio.gather(
            wait_for_kafka(settings.kafka_bootstrap, timeout, alive=alive["kafka"], progress=echo),
            wait_for_redis(settings.redis_url, timeout, alive=alive["redis"], progress=echo),
        )

    try:
        asyncio.run(wait_both())
    except StackError as exc:
        for proc in (stack.kafka, stack.redis):
            echo(f"--- last lines of {proc.log_file} ---\n{proc.log_tail()}")
        if stack.kafka.log_file.exists():
            echo(f"(kafka's own log: {stack.logs / 'kafka' / 'server.log'})")
        raise StackError(f"{exc}\nthe stack is not ready; `scripts/stack down` stops what was started") from exc
    echo(f"kafka  {stack.kafka_at}  pid {stack.kafka.pid()}  ready")
    echo(f"redis  {stack.redis_at}  pid {stack.redis.pid()}  ready")
    echo(f"logs: {stack.logs}   data: {stack.data}   jars: {stack.libs}")


def _start_kafka(stack: Stack, echo: Echo) -> Callable[[], bool]:
    proc = stack.kafka
    running = proc.pid()
    if running is not None:
        echo(f"kafka already running (pid {running})")
        return lambda: proc.pid() is not None
    settings = stack.settings
    for port in (stack.kafka_at.port, settings.kafka_controller_port):
        if port_open(stack.kafka_at.host, port):
            raise StackError(
                f"something that is not ours already listens on {stack.kafka_at.host}:{port}; stop it first"
            )
    if not stack_kafka.jars_ready(stack.libs):
        stack_kafka.fetch_jars(stack.libs, echo)
    for folder in (stack.conf, stack.kafka_data, stack.logs / "kafka"):
        folder.mkdir(parents=True, exist_ok=True)
    stack.server_properties.write_text(
        stack_kafka.render_server_properties(
            stack.kafka_at, settings.kafka_controller_port, stack.kafka_data, settings.partitions
        )
    )
    stack.log4j.write_text(stack_kafka.render_log4j(stack.logs / "kafka"))
    if not stack_kafka.is_formatted(stack.kafka_data):
        cluster_id = stack_kafka.format_storage(stack.libs, stack.log4j, stack.server_properties, proc.log_file)
        echo(f"formatted kafka storage in {stack.kafka_data} (cluster id {cluster_id})")
    argv = stack_kafka.java_argv(
        stack.libs,
        stack.log4j,
        stack_kafka.KAFKA_MAIN,
        str(stack.server_properties),
        heap=(settings.kafka_heap_min, settings.kafka_heap_max),
    )
    popen = proc.start(argv, cwd=stack.root)
    echo(f"started kafka {stack_kafka.kafka_version(stack.libs)} (pid {popen.pid}), log {proc.log_file}")
    return lambda: popen.poll() is None


def _start_redis(stack: Stack, echo: Echo) -> Callable[[], bool]:
    proc = stack.redis
    running = proc.pid()
    if running is not None:
        echo(f"redis already running (pid {running})")
        return lambda: proc.pid() is not None
    server = stack_redis.ensure_redis_server(echo)
    if port_open(stack.redis_at.host, stack.redis_at.port):
        raise StackError(
            f"something that is not ours already listens on {stack.redis_at} "
            "(a system redis? `service redis-server stop`); stop it first"
        )
    stack.redis_data.mkdir(parents=True, exist_ok=True)
    settings = stack.settings
    argv = stack_redis.redis_argv(
        server, stack.redis_at, stack.redis_data, settings.redis_maxmemory, settings.redis_maxmemory_policy
    )
    popen = proc.start(argv, cwd=stack.root)
    echo(f"started redis-server (pid {popen.pid}), log {proc.log_file}")
    return lambda: popen.poll() is None


def down(settings: StackSettings, wipe: bool = False, echo: Echo = print) -> None:
    """Stop the servers `up` started (by their pid files); `wipe` also deletes the data folder."""
    stack = Stack.of(settings)
    for proc in (stack.kafka, stack.redis):
        pid = proc.stop(settings.stack_stop_timeout_s)
        echo(f"{proc.name}: stopped (pid {pid})" if pid is not None else f"{proc.name}: not running")
    if wipe and stack.data.exists():
        shutil.rmtree(stack.data)
        echo(f"wiped {stack.data}")


def status(settings: StackSettings, echo: Echo = print) -> bool:
    """Print each server's state; True when both run (ours) and answer."""
    stack = Stack.of(settings)

    async def probe() -> tuple[bool, bool]:
        kafka, redis_ok = await asyncio.gather(
            _answers(wait_for_kafka(settings.kafka_bootstrap, 3.0)), _answers(wait_for_redis(settings.redis_url, 3.0))
        )
        return kafka, redis_ok

    answers = asyncio.run(probe())
    healthy = True
    for proc, endpoint, answer in zip(
        (stack.kafka, stack.redis), (stack.kafka_at, stack.redis_at), answers, strict=True
    ):
        pid = proc.pid()
        state = f"running (pid {pid})" if pid is not None else "not running"
        echo(f"{proc.name:6} {str(endpoint):16} {state:22} {'answers' if answer else 'does not answer'}")
        healthy = healthy and pid is not None and answer
    echo(f"logs: {stack.logs}   data: {stack.data}")
    return healthy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fleet.stack", description="The local stack: single-node Kafka (KRaft) and Redis."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("up", help="start Kafka and Redis (idempotent) and wait until they answer")
    wipe = commands.add_parser("down", help="stop the Kafka and Redis this stack started")
    wipe.add_argument("--wipe", action="store_true", help="also delete the data folder")
    commands.add_parser("status", help="show whether each server runs and answers")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # connection refusals while waiting are expected
    echo: Echo = lambda line: print(line, flush=True)  # noqa: E731
    try:
        settings = StackSettings()
        if args.command == "up":
            up(settings, echo)
        elif args.command == "down":
            down(settings, args.wipe, echo)
        else:
            return 0 if status(settings, echo) else 1
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
