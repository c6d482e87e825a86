"""The Redis client and Kafka producer a worker process needs (live or shadow): the injected
ones (tests share theirs), else new ones that `exit_stack` closes."""

from contextlib import AsyncExitStack

from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis

from common.settings import FleetSettings
from common.topics import ensure_topics


async def open_clients(settings: FleetSettings, exit_stack: AsyncExitStack, redis: Redis | None,
                       producer: AIOKafkaProducer | None, *, topics: list[str], partitions: int,
                       linger_ms: int) -> tuple[Redis, AIOKafkaProducer]:
    """Create `topics` if missing, then the clients; acks=all and idempotence, so a producer retry
    never duplicates a result or a comparison."""
    await ensure_topics(settings.kafka_bootstrap, topics, partitions)
    if redis is None:
        redis = Redis.from_url(settings.redis_url)
        exit_stack.push_async_callback(redis.aclose)
    if producer is None:
        producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all", linger_ms=linger_ms,
                                    enable_idempotence=True)
        await producer.start()
        exit_stack.push_async_callback(producer.stop)
    return redis, producer
