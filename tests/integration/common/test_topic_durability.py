"""Topics the fleet creates carry the durability settings, and a broker's refusal is an error,
not a silently missing topic."""

import uuid

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from common.clients import new_admin
from common.settings import FleetSettings
from common.topics import TopicCreationFailed, ensure_topics, partitions_of


async def _durability(settings: FleetSettings, topic: str) -> tuple[str, int]:
    """The topic's min.insync.replicas and the replica count of its first partition, as the broker says."""
    admin = new_admin(settings)
    await admin.start()
    try:
        wanted = ConfigResource(ConfigResourceType.TOPIC, topic, {"min.insync.replicas": None})
        [response] = await admin.describe_configs([wanted])
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    [min_isr] = [entry[1] for resource in response.resources for entry in resource[4]]
    return str(min_isr), len(described["partitions"][0]["replicas"])


async def test_min_insync_replicas_and_the_brokers_default_factor(stack: FleetSettings) -> None:
    topic = f"fleet.test.durable-{uuid.uuid4().hex[:8]}"
    settings = stack.model_copy(update={"topic_replication_factor": -1, "topic_min_insync_replicas": 2})
    await ensure_topics(settings, [topic], 2)
    assert len(await partitions_of(settings, topic)) == 2
    # Min ISR 2 over 1 replica (the single-node stack's default factor) is accepted at creation, and
    # differs from the broker's own default of 1, so the setting is what put it there.
    assert await _durability(settings, topic) == ("2", 1)


async def test_more_replicas_than_brokers_is_refused_loudly(stack: FleetSettings) -> None:
    topic = f"fleet.test.overreplicated-{uuid.uuid4().hex[:8]}"
    with pytest.raises(TopicCreationFailed, match=f"{topic}: error 38"):
        await ensure_topics(stack.model_copy(update={"topic_replication_factor": 3}), [topic], 1)
    assert await partitions_of(stack, topic) == []
