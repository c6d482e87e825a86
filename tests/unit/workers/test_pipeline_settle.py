"""Settling delivered batches: in delivery order, batches that queued up meanwhile under one
commit, and only what reached the settler is ever committed (pure logic, stand-in clients)."""

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition

from workers.compute.compute import Computed
from workers.pipeline import Delivered, Settler

TOPIC = "fleet.requests.m"


@dataclass
class Record:
    topic: str
    partition: int
    offset: int
    value: bytes = b"x"


@dataclass
class Consumer:
    owned: set[TopicPartition] = field(default_factory=lambda: {TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)})
    commits: list[dict[TopicPartition, int]] = field(default_factory=list)
    release: asyncio.Event | None = None  # while set and clear, a commit waits (a slow broker)

    def assignment(self) -> set[TopicPartition]:
        return self.owned

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        if self.release is not None:
            await self.release.wait()
        self.commits.append(dict(offsets))


class Quiet:
    """Caches, tracer and version stats that only count what they are told."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def remember(self, _batch: Any) -> None:
        self.calls.append("remember")

    async def record(self, *_args: Any) -> bool:
        self.calls.append("record")
        return True


def delivered(partition: int, *offsets: int, owned: bool = True, transacted: bool = False) -> Delivered:
    here = frozenset({(TOPIC, partition)})
    return Delivered(Computed(records=[Record(TOPIC, partition, o) for o in offsets], outcomes=[], dead_letters=[]),
                     outcomes=[], owned=here if owned else frozenset(), transacted=here if transacted else frozenset())


def settler_for(consumer: Consumer, settled: list[Computed]) -> Settler:
    quiet = Quiet()
    return Settler(lambda: consumer, quiet, quiet, quiet, settled.append)  # type: ignore[arg-type]


async def test_batches_that_queued_up_share_one_commit_and_settle_in_order() -> None:
    consumer, settled = Consumer(), []
    inbox: asyncio.Queue[Delivered | None] = asyncio.Queue()
    batches = [delivered(0, 10, 11), delivered(1, 5), delivered(0, 12)]
    for item in [*batches, None]:
        inbox.put_nowait(item)
    await asyncio.wait_for(settler_for(consumer, settled).run(inbox), 5)
    assert consumer.commits == [{TopicPartition(TOPIC, 0): 13, TopicPartition(TOPIC, 1): 6}]
    assert settled == [item.batch for item in batches]


async def test_a_slow_commit_holds_back_only_the_next_commit_and_nothing_is_committed_unseen() -> None:
    release = asyncio.Event()
    consumer, settled = Consumer(release=release), []
    inbox: asyncio.Queue[Delivered | None] = asyncio.Queue(maxsize=8)
    running = asyncio.create_task(settler_for(consumer, settled).run(inbox))
    await inbox.put(delivered(0, 1))
    await asyncio.sleep(0.01)  # the settler took batch 1 and waits on its commit
    await inbox.put(delivered(0, 2))
    await inbox.put(delivered(1, 7))
    assert consumer.commits == [] and settled == []
    release.set()
    await inbox.put(None)
    await asyncio.wait_for(running, 5)
    assert consumer.commits == [{TopicPartition(TOPIC, 0): 2},
                                {TopicPartition(TOPIC, 0): 3, TopicPartition(TOPIC, 1): 8}]
    assert [item.records[0].offset for item in settled] == [1, 2, 7]


async def test_a_revoked_partition_is_left_out_of_the_commit() -> None:
    consumer, settled = Consumer(owned={TopicPartition(TOPIC, 1)}), []
    inbox: asyncio.Queue[Delivered | None] = asyncio.Queue()
    for item in (delivered(0, 4), delivered(1, 9), None):
        inbox.put_nowait(item)
    await asyncio.wait_for(settler_for(consumer, settled).run(inbox), 5)
    assert consumer.commits == [{TopicPartition(TOPIC, 1): 10}]


async def test_partitions_not_owned_at_delivery_or_committed_by_a_transaction_are_left_to_others() -> None:
    consumer, settled = Consumer(owned={TopicPartition(TOPIC, p) for p in range(3)}), []
    inbox: asyncio.Queue[Delivered | None] = asyncio.Queue()
    # Partition 0 was not owned when its batch was delivered (nothing answered): owned again by now, it must
    # still not be committed past records its interim owner may not have answered. Partition 1's offset went
    # with its results in a transaction.
    for item in (delivered(0, 4, owned=False), delivered(1, 9, transacted=True), delivered(2, 3), None):
        inbox.put_nowait(item)
    await asyncio.wait_for(settler_for(consumer, settled).run(inbox), 5)
    assert consumer.commits == [{TopicPartition(TOPIC, 2): 4}]
    assert len(settled) == 3
