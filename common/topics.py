"""Creating the fleet's Kafka topics before anyone produces to or consumes from them.

Every topic the fleet creates gets `topic_replication_factor` replicas and, when set,
`topic_min_insync_replicas` (acks=all then waits for that many copies). The single-node stack
keeps 1 of each; a real cluster wants 3 and 2.
"""

from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError

from common.clients import new_admin, new_consumer
from common.settings import FleetSettings

TOPIC_ALREADY_EXISTS = TopicAlreadyExistsError.errno
BROKER_DEFAULT = -1


class TopicCreationFailed(RuntimeError):
    """The brokers refused to create a topic (e.g. more replicas than brokers)."""


async def ensure_topics(settings: FleetSettings, names: list[str], partitions: int,
                        configs: dict[str, str] | None = None) -> None:
    """Create missing topics with the settings' replication (and `configs`); existing ones are left as they are."""
    admin = new_admin(settings)
    try:
        await admin.start()  # inside the try: a start that fails or is cancelled still closes its connections
        existing = set(await admin.list_topics())
        missing = [name for name in dict.fromkeys(names) if name not in existing]
        if not missing:
            return
        replicas = await replication_factor(admin, settings)
        topic_configs = dict(configs or {})
        if settings.topic_min_insync_replicas is not None:
            topic_configs["min.insync.replicas"] = str(settings.topic_min_insync_replicas)
        try:
            response = await admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=replicas,
                                                           topic_configs=topic_configs) for name in missing])
        except TopicAlreadyExistsError:
            return  # another process created it between list and create
        _raise_refusals(response.topic_errors)
    finally:
        await admin.close()


async def replication_factor(admin: AIOKafkaAdminClient, settings: FleetSettings) -> int:
    """The settings' factor; for -1, the brokers' default.replication.factor (aiokafka speaks a
    CreateTopics version that cannot ask the broker to choose)."""
    if settings.topic_replication_factor != BROKER_DEFAULT:
        return settings.topic_replication_factor
    cluster = await admin.describe_cluster()
    broker = str(cluster["brokers"][0]["node_id"])
    [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, broker,
                                                              {"default.replication.factor": None})])
    for resource in response.resources:
        for entry in resource[4]:
            if entry[0] == "default.replication.factor":
                return int(entry[1])
    raise TopicCreationFailed(f"broker {broker} did not say its default.replication.factor")


def _raise_refusals(topic_errors: list[tuple[object, ...]]) -> None:
    refused = [f"{error[0]}: error {error[1]}" + (f" ({error[2]})" if len(error) > 2 and error[2] else "")
               for error in topic_errors if error[1] not in (0, TOPIC_ALREADY_EXISTS)]
    if refused:
        raise TopicCreationFailed(f"Kafka refused to create topics: {'; '.join(refused)}")


async def partitions_of(settings: FleetSettings, topic: str) -> list[TopicPartition]:
    """The topic's partitions, from fresh metadata (empty when the topic does not exist)."""
    admin = new_admin(settings)
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return [TopicPartition(topic, p["partition"]) for p in sorted(described.get("partitions") or [], key=lambda p: p["partition"])]


async def newest_records(settings: FleetSettings, topic: str, per_partition: int) -> list[ConsumerRecord]:
    """The last `per_partition` records of each partition as of now (later ones are left out),
    read without a consumer group; empty when the topic does not exist."""
    partitions = await partitions_of(settings, topic)
    if not partitions:
        return []
    consumer = new_consumer(settings, enable_auto_commit=False)
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
