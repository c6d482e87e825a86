"""Clients of Kafka and Redis, built from the shared settings in one place.

Every producer, consumer and admin client the fleet makes takes its connection options from
`kafka_options`, and every Redis client comes from `redis_client`, so how the fleet connects
is decided here and nowhere else.
"""

from contextlib import AsyncExitStack
from typing import Any

from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis

from common.settings import FleetSettings
from common.topics import ensure_topics


def kafka_options(settings: FleetSettings) -> dict[str, Any]:
    """Connection options of every aiokafka client (producer, consumer, admin)."""
    return {"bootstrap_servers": settings.kafka_bootstrap}


def redis_client(settings: FleetSettings) -> Redis:
    return Redis.from_url(settings.redis_url, socket_connect_timeout=settings.redis_connect_timeout_s,
                          socket_timeout=settings.redis_socket_timeout_s)


def new_producer(settings: FleetSettings, *, linger_ms: int) -> AIOKafkaProducer:
    """acks=all and idempotence, so a producer retry never duplicates a result or a comparison."""
    return AIOKafkaProducer(**kafka_options(settings), acks="all", linger_ms=linger_ms, enable_idempotence=True)


async def open_clients(settings: FleetSettings, exit_stack: AsyncExitStack, redis: Redis | None,
                       producer: AIOKafkaProducer | None, *, topics: list[str], partitions: int,
                       linger_ms: int) -> tuple[Redis, AIOKafkaProducer]:
    """Create `topics` if missing, then the clients: the injected ones (tests share theirs), else
    new ones that `exit_stack` closes."""
    await ensure_topics(settings.kafka_bootstrap, topics, partitions)
    if redis is None:
        redis = redis_client(settings)
        exit_stack.push_async_callback(redis.aclose)
    if producer is None:
        producer = new_producer(settings, linger_ms=linger_ms)
        await producer.start()
        exit_stack.push_async_callback(producer.stop)
    return redis, producer
