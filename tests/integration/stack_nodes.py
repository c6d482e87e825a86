"""Stopping and starting the test run's own Kafka and Redis (the stack FLEET_* names, never
another's), for tests of what the fleet does while one of them is away. Each `*_stopped()`
context starts the server again on the way out, whatever the test did."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fleet_dev.stack.launch import start_kafka_node, start_redis_node
from fleet_dev.stack.layout import Stack, StackSettings
from fleet_dev.stack.proc import stop_all
from fleet_dev.stack.readiness import wait_for_kafka, wait_for_redis

STOP_TIMEOUT_S = 30.0
START_TIMEOUT_S = 90.0


def _stack() -> Stack:
    return Stack.recorded(StackSettings())


async def start_kafka() -> None:
    stack = _stack()
    for node in stack.kafka_nodes:
        start_kafka_node(stack, node, lambda line: None)
    await wait_for_kafka(StackSettings(), START_TIMEOUT_S, brokers=len(stack.kafka_nodes))


async def start_redis() -> None:
    stack = _stack()
    for node in stack.redis_nodes:
        start_redis_node(stack, node, lambda line: None)
    await wait_for_redis(StackSettings(), START_TIMEOUT_S)


@asynccontextmanager
async def kafka_stopped() -> AsyncIterator[None]:
    """Kafka stopped (SIGTERM, a controlled shutdown) until the block ends or `start_kafka()`."""
    stop_all([node.proc for node in _stack().kafka_nodes], STOP_TIMEOUT_S)
    try:
        yield
    finally:
        await start_kafka()


@asynccontextmanager
async def redis_stopped() -> AsyncIterator[None]:
    """Redis stopped (its AOF keeps what it held) until the block ends or `start_redis()`."""
    for node in _stack().redis_nodes:
        node.proc.stop(STOP_TIMEOUT_S)
    try:
        yield
    finally:
        await start_redis()
