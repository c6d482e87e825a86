"""Which records go in which partition's transaction, and which lanes are delivered in transactions."""

import asyncio
import logging
from typing import Any

import pytest
from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry, Gauge
from pydantic import ValidationError

from workers.delivery import transactions
from workers.delivery.patience import Patience
from workers.delivery.transactions import PartitionChunk, PartitionTransactions, chunks_of
from workers.settings import WorkerSettings

BULK, TOP = "fleet.requests.m.bulk", "fleet.requests.m"


def test_each_partition_of_a_covered_topic_commits_past_its_last_record_with_the_sends_of_its_records() -> None:
    offsets = [(BULK, 0, 7), (BULK, 0, 9), (BULK, 1, 3), (TOP, 0, 40)]
    sends = [((BULK, 0, 9), ("results", b"r9", b"9")), ((TOP, 0, 40), ("results", b"r40", b"40")),
             ((BULK, 1, 3), ("fleet.dlq", b"letter", None))]
    chunks = chunks_of(offsets, sends, lambda topic: topic == BULK)
    assert set(chunks) == {TopicPartition(BULK, 0), TopicPartition(BULK, 1)}
    first = chunks[TopicPartition(BULK, 0)]
    assert first.next_offset == 10 and first.first_offset == 7 and first.sends == [(9, ("results", b"r9", b"9"))]
    assert chunks[TopicPartition(BULK, 1)].next_offset == 4
    assert chunks[TopicPartition(BULK, 1)].sends == [(3, ("fleet.dlq", b"letter", None))]


@pytest.mark.parametrize(("value", "lanes"), [("", set()), ("off", set()), ("all", {"interactive", "bulk"}),
                                              ("bulk", {"bulk"}), (" bulk , interactive ", {"interactive", "bulk"})])
def test_exactly_once_names_lanes(value: str, lanes: set[str]) -> None:
    settings = WorkerSettings(model="m", exactly_once=value)
    assert settings.exactly_once_lanes == lanes
    expected = {topic for lane in lanes for topic in (TOP if lane == "interactive" else BULK,)}
    assert settings.exactly_once_topics() == expected | {f"{topic}.cpu" for topic in expected}


def test_an_unknown_lane_is_refused_with_the_lanes_there_are() -> None:
    with pytest.raises(ValidationError, match="batch is not a lane; the lanes are interactive, bulk"):
        WorkerSettings(model="m", exactly_once="batch")


class _Producer:
    """Starts only from its `fail_first`-th instance on; the earlier ones hang in start() for good."""

    made = 0

    def __init__(self, fail_first: int) -> None:
        _Producer.made += 1
        self.hangs = _Producer.made <= fail_first
        self.stopped = False

    async def start(self) -> None:
        if self.hangs:
            await asyncio.Event().wait()

    async def begin_transaction(self) -> None:
        pass

    async def abort_transaction(self) -> None:
        pass

    async def stop(self) -> None:
        self.stopped = True


class _Consumer:
    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition(BULK, 0)}

    async def committed(self, tp: TopicPartition) -> int:
        return 5


async def test_a_producer_that_never_starts_is_replaced_and_the_wait_is_said(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(transactions, "READY_TIMEOUT_S", 0.05)
    _Producer.made = 0
    made: list[_Producer] = []

    def make(transactional_id: str) -> Any:
        made.append(_Producer(fail_first=2))
        return made[-1]

    consumer = _Consumer()
    parts = PartitionTransactions("g", frozenset({BULK}), make, lambda: consumer,  # type: ignore[arg-type,return-value]
                                  Patience(Gauge("waiting_test", "", ["dependency"], registry=CollectorRegistry()),
                                           max_backoff_s=0.01))
    with caplog.at_level(logging.WARNING):
        # A chunk below the committed offset (5): the producer is made ready, then nothing is sent.
        assert not await parts.commit(PartitionChunk(TopicPartition(BULK, 0), next_offset=3))
    assert len(made) == 3
    assert made[0].stopped and made[1].stopped and not made[2].stopped
    assert sum("was not ready within" in r.getMessage() for r in caplog.records) == 2
    assert any("delivery waits for kafka" in r.getMessage() for r in caplog.records)


class _Transaction:
    async def __aenter__(self) -> None:
        pass

    async def __aexit__(self, *exc_info: object) -> None:
        pass


class _FencedProducer(_Producer):
    """Starts at once; its transaction's offset commit is fenced while `fenced` says so."""

    def __init__(self, fenced: bool) -> None:
        super().__init__(fail_first=0)
        self.fenced = fenced
        self.committed: list[dict[TopicPartition, int]] = []
        self._sender = type("Sender", (), {"sender_task": None})()

    def transaction(self) -> _Transaction:
        return _Transaction()

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, int], group: str) -> None:
        if self.fenced:
            raise transactions.ProducerFenced()
        self.committed.append(offsets)


class _Owner(_Consumer):
    """Serves BULK[0] until `lose` is set."""

    def __init__(self) -> None:
        self.lose = False

    def assignment(self) -> set[TopicPartition]:
        return set() if self.lose else super().assignment()


def _fenced_parts(monkeypatch: pytest.MonkeyPatch, fenced_producers: int, consumer: _Owner,
                  lose_after_fence: bool = False) -> tuple[PartitionTransactions, list[_FencedProducer]]:
    monkeypatch.setattr(transactions, "FENCE_RETRY_S", 0.01)
    made: list[_FencedProducer] = []

    def make(transactional_id: str) -> Any:
        made.append(_FencedProducer(fenced=len(made) < fenced_producers))
        if lose_after_fence and len(made) > 1:
            raise AssertionError("a worker that lost the partition started another producer (a fence)")
        return made[-1]

    parts = PartitionTransactions("g", frozenset({BULK}), make, lambda: consumer,  # type: ignore[arg-type,return-value]
                                  Patience(Gauge("waiting_test", "", ["dependency"], registry=CollectorRegistry()),
                                           max_backoff_s=0.01),
                                  counted=lambda outcome: setattr(consumer, "lose", lose_after_fence or consumer.lose))
    return parts, made


async def test_a_worker_fenced_on_a_partition_it_still_serves_tries_again_with_a_new_producer_not_leaving(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    parts, made = _fenced_parts(monkeypatch, fenced_producers=2, consumer=_Owner())
    with caplog.at_level(logging.WARNING):
        assert await parts.commit(PartitionChunk(TopicPartition(BULK, 0), next_offset=10))
    assert len(made) == 3 and made[0].stopped and made[1].stopped and not made[2].stopped
    assert made[2].committed == [{TopicPartition(BULK, 0): 10}]
    assert sum("still serves it" in r.getMessage() for r in caplog.records) == 2


async def test_fenced_again_and_again_the_worker_ends_its_session(monkeypatch: pytest.MonkeyPatch) -> None:
    parts, made = _fenced_parts(monkeypatch, fenced_producers=99, consumer=_Owner())
    with pytest.raises(transactions.Fenced, match="3 times in a row"):
        await parts.commit(PartitionChunk(TopicPartition(BULK, 0), next_offset=10))
    assert len(made) == transactions.FENCES_BEFORE_LEAVING


async def test_a_worker_fenced_after_it_lost_the_partition_drops_the_batch_without_another_fence(
        monkeypatch: pytest.MonkeyPatch) -> None:
    parts, made = _fenced_parts(monkeypatch, fenced_producers=1, consumer=_Owner(), lose_after_fence=True)
    assert not await parts.commit(PartitionChunk(TopicPartition(BULK, 0), next_offset=10))
    assert len(made) == 1 and made[0].committed == []
