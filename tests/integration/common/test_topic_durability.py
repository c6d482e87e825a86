"""Topics the fleet creates carry the durability settings, and a broker's refusal is an error,
not a silently missing topic."""

import uuid

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from common.clients import new_admin
from common.settings import FleetSettings
from common.topics import TopicCreationFailed, ensure_topics, partitions_of


async def _topic_config(settings: FleetSettings, topic: str, name: str) -> str:
    admin = new_admin(settings)
    await admin.start()
    try:
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {name: None})])
    finally:
        await admin.close()
    [entry] = [entry for resource in response.resources for entry in resource[4] if entry[0] == name]
    return str(entry[1])


async def _replicas(settings: FleetSettings, topic: str) -> int:
    admin = new_admin(settings)
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return len(described["partitions"][0]["replicas"])


async def test_min_insync_replicas_and_the_brokers_default_factor(stack: FleetSettings) -> None:
    topic = f"fleet.test.durable-{uuid.uuid4().hex[:8]}"
    settings = stack.model_copy(update={"topic_replication_factor": -1, "topic_min_insync_replicas": 1})
    await ensure_topics(settings, [topic], 2)
    assert len(await partitions_of(settings, topic)) == 2
    assert await _topic_config(settings, topic, "min.insync.replicas") == "1"
    assert await _replicas(settings, topic) == 1  # the single-node stack's default.replication.factor


async def test_more_replicas_than_brokers_is_refused_loudly(stack: FleetSettings) -> None:
    topic = f"fleet.test.overreplicated-{uuid.uuid4().hex[:8]}"
    with pytest.raises(TopicCreationFailed, match=f"{topic}: error 38"):
        await ensure_topics(stack.model_copy(update={"topic_replication_factor": 3}), [topic], 1)
    assert await partitions_of(stack, topic) == []
