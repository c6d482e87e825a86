"""Opening a process's shared clients at start: topics created, clients built.

Check the credentials (common/credentials.py) before this, first thing at start, so a wrong
password fails the process before it spends seconds loading a model."""

from contextlib import AsyncExitStack

from aiokafka import AIOKafkaProducer

from common.redis_cluster import AnyRedis
from common.clients import new_producer, redis_client
from common.settings import FleetSettings
from common.topics import ensure_topics


async def open_clients(settings: FleetSettings, exit_stack: AsyncExitStack, redis: AnyRedis | None,
                       producer: AIOKafkaProducer | None, *, topics: list[str], partitions: int,
                       linger_ms: int) -> tuple[AnyRedis, AIOKafkaProducer]:
    """Create `topics` if missing, then the clients: the injected ones (tests share theirs), else
    new ones that `exit_stack` closes."""
    await ensure_topics(settings, topics, partitions)
    if redis is None:
        redis = redis_client(settings)
        exit_stack.push_async_callback(redis.aclose)
    if producer is None:
        producer = new_producer(settings, linger_ms=linger_ms)
        await producer.start()
        exit_stack.push_async_callback(producer.stop)
    return redis, producer
