"""Creating the fleet's Kafka topics before anyone produces to or consumes from them."""

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError


async def ensure_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    """Create missing topics; existing ones are left as they are."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [name for name in dict.fromkeys(names) if name not in existing]
        if not missing:
            return
        try:
            await admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1) for name in missing])
        except TopicAlreadyExistsError:
            pass  # another process created it between list and create
    finally:
        await admin.close()
