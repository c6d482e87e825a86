"""A dead letter the DLQ refuses as too large goes again without the record's view and bytes: the
worker never stops on one record (workers/delivery/sink.py)."""

import asyncio
from typing import Any

import msgpack
import pytest
from aiokafka.errors import MessageSizeTooLargeError
from prometheus_client import CollectorRegistry, Gauge

from schemas.names import DLQ_TOPIC
from schemas.wire import DeadLetter
from workers.delivery.dead_letters import DeadLetterPolicy
from workers.delivery.patience import Patience
from workers.delivery.sink import ResultSink

LIMIT = 2000  # a broker with a message limit far below the producer's


class SmallBroker:
    def __init__(self) -> None:
        self.accepted: list[tuple[str, bytes]] = []

    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> "asyncio.Future[object]":
        ack: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        if len(value) > LIMIT:
            ack.set_exception(MessageSizeTooLargeError(f"{len(value)} bytes"))
        else:
            self.accepted.append((topic, value))
            ack.set_result(None)
        return ack


class NoRedis:
    def register_script(self, script: str) -> Any:
        return None


def sink(broker: SmallBroker) -> ResultSink:
    waiting = Gauge("waiting_test", "", ["dependency"], registry=CollectorRegistry())
    return ResultSink(NoRedis(), broker, result_ttl_s=60, patience=Patience(waiting),  # type: ignore[arg-type]
                      dead_letters=DeadLetterPolicy(keep_original=True))


async def test_a_letter_too_large_for_the_dlq_goes_without_its_view_and_bytes() -> None:
    broker = SmallBroker()
    original = msgpack.packb({"v": 1, "params": {"notes": ["x" * 900] * 4}})
    small = DeadLetter(reason="empty message", code="empty", topic="fleet.requests.m", partition=0, offset=1)
    big = DeadLetter(reason="invalid fields: deadline_ms", topic="fleet.requests.m", partition=2, offset=7,
                     original=original, original_size=len(original))
    await sink(broker).deliver([], [small, big])
    letters = [DeadLetter.decode(value) for topic, value in broker.accepted if topic == DLQ_TOPIC]
    assert sorted((letter.partition, letter.offset) for letter in letters) == [(0, 1), (2, 7)]
    bare = next(letter for letter in letters if letter.offset == 7)
    assert bare.masked is None and bare.original is None
    assert bare.reason == "invalid fields: deadline_ms" and bare.original_size == len(original)


async def test_a_dlq_that_refuses_even_the_bare_letter_is_a_loud_failure() -> None:
    broker = SmallBroker()
    letter = DeadLetter(reason="r" * 900, topic="fleet.requests." + "m" * 200, partition=0, offset=1,
                        worker="w" * 1500)
    with pytest.raises(RuntimeError, match="refused a letter"):
        await sink(broker).deliver([], [letter])
