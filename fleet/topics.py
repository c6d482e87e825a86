"""Creating the fleet's Kafka topics before anyone produces to or consumes from them."""

from aiokafka import TopicPartition
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


async def partitions_of(bootstrap: str, topic: str) -> list[TopicPartition]:
    """The topic's partitions, from fresh metadata (empty when the topic does not exist)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return [TopicPartition(topic, p["partition"]) for p in sorted(described.get("partitions") or [], key=lambda p: p["partition"])]
