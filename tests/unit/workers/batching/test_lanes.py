"""The lane gate: which partitions the next batch is fetched from (pause/resume), decided afresh
before every batch from what the consumer owns right now."""

from aiokafka import TopicPartition

from schemas.lanes import Lanes
from workers.batching.lanes import LaneGate

LANES = Lanes.parse("interactive=5,bulk=0")
TOP = [TopicPartition("fleet.requests.m", p) for p in range(2)]
BULK = [TopicPartition("fleet.requests.m.bulk", p) for p in range(2)]


class PausingConsumer:
    """What the gate uses of an aiokafka consumer: its assignment and pause state."""

    def __init__(self, owned: list[TopicPartition]) -> None:
        self.owned = set(owned)
        self._paused: set[TopicPartition] = set()

    def assignment(self) -> set[TopicPartition]:
        return set(self.owned)

    def paused(self) -> set[TopicPartition]:
        return self._paused & self.owned

    def pause(self, *partitions: TopicPartition) -> None:
        self._paused |= set(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._paused -= set(partitions)

    def rebalance(self, owned: list[TopicPartition]) -> None:
        """A partition assigned anew is fetchable (aiokafka's state is per assignment)."""
        self.owned = set(owned)
        self._paused &= self.owned


def gate(consumer: PausingConsumer, *, min_share: float = 0.1, enabled: bool = True) -> LaneGate:
    return LaneGate(consumer, LANES, "m", min_share=min_share, lower_batch_ms=250, enabled=enabled)  # type: ignore[arg-type]


async def test_bulk_is_paused_while_interactive_records_wait_and_resumed_when_they_are_gone() -> None:
    consumer = PausingConsumer(TOP + BULK)
    lanes = gate(consumer)
    choice = await lanes.choose({TOP[0]: 3, BULK[0]: 5000, BULK[1]: 5000})
    assert choice.lane.name == "interactive" and consumer.paused() == set(BULK)
    choice = await lanes.choose({BULK[0]: 4990, BULK[1]: 5000})
    assert choice.lane.name == "bulk" and consumer.paused() == set()


async def test_bulk_gets_one_batch_in_ten_while_interactive_never_runs_dry() -> None:
    consumer = PausingConsumer(TOP + BULK)
    lanes = gate(consumer, min_share=0.1)
    turns = []
    for _ in range(30):
        choice = await lanes.choose({TOP[0]: 50, BULK[0]: 5000})
        lanes.collected(choice)
        turns.append(choice.lane.name)
        if choice.share_turn:
            assert consumer.paused() == set(TOP)  # the bulk turn takes bulk records only
    assert turns.count("bulk") == 3 and turns[9] == turns[19] == turns[29] == "bulk"
    assert lanes.counts.batches == {"interactive": 27, "bulk": 3} and lanes.counts.share_turns == 3


async def test_no_share_means_bulk_waits_for_an_empty_interactive_lane() -> None:
    consumer = PausingConsumer(TOP + BULK)
    lanes = gate(consumer, min_share=0)
    assert all([(await lanes.choose({TOP[1]: 9, BULK[1]: 9})).lane.name == "interactive" for _ in range(50)])


async def test_a_rebalance_leaves_nothing_paused_for_good() -> None:
    consumer = PausingConsumer(TOP + BULK)
    lanes = gate(consumer)
    await lanes.choose({TOP[0]: 1, BULK[0]: 100, BULK[1]: 100})
    assert consumer.paused() == set(BULK)
    consumer.rebalance([TOP[1], BULK[1]])  # a worker joined and took half
    assert consumer.paused() == {BULK[1]}
    await lanes.choose({BULK[1]: 100})  # the interactive lane ran dry: bulk is fetched again
    assert consumer.paused() == set()
    consumer.rebalance(TOP + BULK)  # the worker left again: its partitions come back fetchable
    await lanes.choose({TOP[0]: 2, BULK[0]: 100})
    assert consumer.paused() == set(BULK)


async def test_a_bulk_batch_holds_the_model_for_at_most_its_budget_once_a_run_was_timed() -> None:
    consumer = PausingConsumer(TOP + BULK)
    lanes = gate(consumer)
    assert (await lanes.choose({BULK[0]: 100})).max_records is None  # nothing measured yet
    lanes.observe_run(rows=32, inference_ms=32 * 25.0)  # 25 ms a row
    assert (await lanes.choose({BULK[0]: 100})).max_records == 10  # 250 ms / 25 ms
    assert (await lanes.choose({TOP[0]: 1, BULK[0]: 100})).max_records is None  # interactive is never capped


async def test_lanes_off_fetches_every_lane_alike() -> None:
    consumer = PausingConsumer(TOP + BULK)
    consumer.pause(*BULK)
    lanes = gate(consumer, enabled=False)
    choice = await lanes.choose({TOP[0]: 1, BULK[0]: 100})
    assert consumer.paused() == set() and choice.max_records is None


async def test_a_topic_that_is_no_lane_of_the_model_is_served_as_the_lowest_lane() -> None:
    lanes = gate(PausingConsumer(TOP))
    assert lanes.lane_of("fleet.requests.m.retired").name == "bulk"
