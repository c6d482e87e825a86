"""The gateway's view of which topics exist: fetched only for names it has not seen, once per interval."""

import asyncio

import pytest
from aiokafka.errors import KafkaConnectionError

from gateway.errors import FleetUnavailable
from gateway.known_topics import KnownTopics


class Cluster:
    def __init__(self, *topics: str) -> None:
        self.topics = set(topics)
        self.fetches = 0
        self.down = False

    async def fetch(self) -> set[str]:
        self.fetches += 1
        await asyncio.sleep(0.01)
        if self.down:
            raise KafkaConnectionError("no broker")
        return set(self.topics)


async def test_made_up_names_cost_one_fetch_per_interval() -> None:
    cluster = Cluster("fleet.results")
    known = KnownTopics(cluster.fetch, refresh_s=60)
    answers = await asyncio.gather(*(known.exists(f"fleet.results.made-up-{i}") for i in range(200)))
    assert not any(answers)
    assert await known.exists("fleet.results") and cluster.fetches == 1


async def test_a_topic_created_later_is_seen_after_the_interval() -> None:
    cluster = Cluster()
    known = KnownTopics(cluster.fetch, refresh_s=0.05)
    assert not await known.exists("fleet.results.new")
    cluster.topics.add("fleet.results.new")
    await asyncio.sleep(0.06)
    assert await known.exists("fleet.results.new")


async def test_kafka_down_is_an_outage_not_a_missing_topic() -> None:
    cluster = Cluster("fleet.results")
    cluster.down = True
    known = KnownTopics(cluster.fetch, refresh_s=60)
    with pytest.raises(FleetUnavailable):
        await known.exists("fleet.results")
    cluster.down = False
    assert await known.exists("fleet.results")  # a failed fetch did not count as this interval's answer
