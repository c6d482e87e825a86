"""Creating the fleet's Kafka topics before anyone produces to or consumes from them."""

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError


async def ensure_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    """Create missing topics; existing ones are left as they are."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        await admin.start()  # inside the try: a start that fails or is cancelled still closes its connections
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


async def newest_records(bootstrap: str, topic: str, per_partition: int) -> list[ConsumerRecord]:
    """The last `per_partition` records of each partition as of now (later ones are left out),
    read without a consumer group; empty when the topic does not exist."""
    partitions = await partitions_of(bootstrap, topic)
    if not partitions:
        return []
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    found: list[ConsumerRecord] = []
    try:
        consumer.assign(partitions)
        starts = await consumer.beginning_offsets(partitions)
        ends = await consumer.end_offsets(partitions)
        remaining: dict[TopicPartition, int] = {}
        for tp in partitions:
            first = max(starts[tp], ends[tp] - per_partition)
            if first < ends[tp]:
                consumer.seek(tp, first)
                remaining[tp] = ends[tp]
        while remaining:
            for tp, records in (await consumer.getmany(*remaining, timeout_ms=1000)).items():
                found += [record for record in records if record.offset < remaining[tp]]
            # Positions, not record offsets: transaction markers take offsets no record has.
            remaining = {tp: end for tp, end in remaining.items() if await consumer.position(tp) < end}
    finally:
        await consumer.stop()
    return found
