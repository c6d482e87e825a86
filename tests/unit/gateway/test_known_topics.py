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


class Lookups:
    """Whether one topic exists, as Kafka's metadata for that name says; counted."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.asked: list[str] = []

    async def __call__(self, name: str) -> bool:
        self.asked.append(name)
        await asyncio.sleep(0.01)
        return name in self.cluster.topics


async def test_a_topic_created_a_moment_ago_is_usable_at_once_with_one_lookup() -> None:
    cluster = Cluster("fleet.results")
    lookups = Lookups(cluster)
    known = KnownTopics(cluster.fetch, lookups, refresh_s=60)
    assert await known.exists("fleet.results")  # the list is fresh now: no full fetch for a minute
    cluster.topics.add("fleet.results.new")
    answers = await asyncio.gather(*(known.exists("fleet.results.new") for _ in range(50)))
    assert all(answers)
    assert lookups.asked == ["fleet.results.new"], "one look-up, shared by the 50 callers"
    assert await known.exists("fleet.results.new") and len(lookups.asked) == 1 and cluster.fetches == 1


async def test_lookups_of_made_up_names_are_bounded_in_rate_and_per_name() -> None:
    cluster = Cluster("fleet.results")
    lookups = Lookups(cluster)
    known = KnownTopics(cluster.fetch, lookups, refresh_s=60, lookups_per_s=5, recheck_s=60,
                        clock=lambda: 1000.0)  # time stands still: the bucket does not refill
    await known.exists("fleet.results")
    names = [f"fleet.results.made-up-{i}" for i in range(100)]
    assert not any(await asyncio.gather(*(known.exists(name) for name in names)))
    assert len(lookups.asked) == 5, "the bucket holds five"
    assert not await known.exists(lookups.asked[0]) and len(lookups.asked) == 5, "a miss is remembered"


async def test_a_failed_lookup_is_an_outage() -> None:
    cluster = Cluster("fleet.results")

    async def down(name: str) -> bool:
        raise KafkaConnectionError("no broker")

    known = KnownTopics(cluster.fetch, down, refresh_s=60)
    await known.exists("fleet.results")
    with pytest.raises(FleetUnavailable):
        await known.exists("fleet.results.new")
