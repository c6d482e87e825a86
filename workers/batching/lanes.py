"""Which lanes the next batch is collected from: higher lanes first, lower ones never starved.

Kafka has no priorities, so a worker reads every lane of its model (schemas/lanes.py) and decides
before each batch which lanes' partitions it fetches from, with aiokafka's `pause`/`resume`:

- the highest lane with records waiting is served, and every lane below it is paused, so an
  interactive request produced behind a bulk backlog waits for at most the bulk batch the model is
  running, not for the backlog;
- a lane above it stays fetchable (it has nothing waiting; a record that arrives there is taken in
  the next batch);
- once `1 / min_share - 1` batches in a row went to higher lanes while a lower lane had records
  waiting, the next batch is the lowest waiting lane's turn, with the lanes above it paused: each lane
  gets at least `min_share` of the batches (default 1 in 10, FLEET_BULK_MIN_SHARE).

A lower lane's batch also holds the model for at most `lower_batch_ms` (FLEET_BULK_BATCH_MS): its
size is capped from the model's measured time per row. Once full it waits for room in the model
before it goes (workers/batching/collector.py), so no more bulk work queues ahead of the model than
it runs at once, and it takes along what arrived on the higher lanes meanwhile: an interactive
request produced behind a bulk backlog waits for about one bulk batch, not for the backlog or for
the batches the pipeline's stages would otherwise hold.

What is waiting comes from the highwater marks of the fetch responses. While records of one
partition sit unconsumed in aiokafka's buffer, it fetches from that broker again only after its
prefetch back-off (100 ms), so an interactive record produced behind a buffered bulk backlog is seen
within about 100 ms, a few bulk batches.

The decision is made afresh before every batch from what the consumer owns right now: a rebalance
that moves partitions leaves nothing paused for good (a partition assigned anew is fetchable, and the
next decision pauses it again if it must), and a paused partition keeps its position (pausing only
stops fetching; records already fetched for it are dropped by aiokafka and fetched again on resume).
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas.lanes import Lane, LaneError, Lanes

# Until a model run was timed, a lower lane's batch is not capped by time.
UNMEASURED_MS_PER_ROW = 0.0
# Weight of the latest run in the time-per-row estimate.
MS_PER_ROW_ALPHA = 0.2


@dataclass(frozen=True)
class LaneChoice:
    """What the next batch is collected from: `lane` and the lanes above it, at most `max_records`."""

    lane: Lane
    max_records: int | None  # None: the batch policy's own cap
    share_turn: bool = False  # a lower lane's guaranteed turn while a higher lane had records waiting
    higher: frozenset[TopicPartition] = frozenset()  # owned partitions of the lanes above, fetchable


@dataclass
class LaneCounts:
    """Batches collected per lane, and of them the share turns (the benchmark and the metrics read it)."""

    batches: dict[str, int] = field(default_factory=dict)
    share_turns: int = 0

    def add(self, choice: LaneChoice) -> None:
        self.batches[choice.lane.name] = self.batches.get(choice.lane.name, 0) + 1
        self.share_turns += choice.share_turn


class LaneGate:
    def __init__(self, consumer: AIOKafkaConsumer, lanes: Lanes, model: str, *, min_share: float,
                 lower_batch_ms: float, enabled: bool = True,
                 counted: Callable[[LaneChoice], None] = lambda choice: None) -> None:
        """`counted` hears of each batch that had records (the worker's per-lane metrics)."""
        self._consumer = consumer
        self._lanes = lanes
        self._model = model
        self._enabled = enabled and len(lanes.lanes) > 1
        self._turn_every = max(1, round(1 / min_share)) if min_share > 0 else 0
        self._lower_batch_ms = lower_batch_ms
        self._counted = counted
        self._passed_over = 0  # batches in a row that went to a higher lane while a lower one waited
        self._ms_per_row = UNMEASURED_MS_PER_ROW
        self._lane_of_topic: dict[str, Lane] = {}
        self.counts = LaneCounts()

    def lane_of(self, topic: str) -> Lane:
        """The lane of a topic this worker reads; a topic that is no lane of the model is the lowest lane."""
        lane = self._lane_of_topic.get(topic)
        if lane is None:
            try:
                lane = self._lanes.of_topic(self._model, topic)
            except LaneError:
                lane = self._lanes.lanes[-1]
            self._lane_of_topic[topic] = lane
        return lane

    def observe_run(self, rows: int, inference_ms: float) -> None:
        """A model run's time: what sizes a lower lane's batch."""
        if rows <= 0 or inference_ms <= 0:
            return
        sample = inference_ms / rows
        previous = self._ms_per_row
        self._ms_per_row = sample if previous == UNMEASURED_MS_PER_ROW else previous + MS_PER_ROW_ALPHA * (sample - previous)

    async def choose(self, waiting: Mapping[TopicPartition, int]) -> LaneChoice:
        """Pause and resume the owned partitions for the next batch. `waiting`: records not yet
        fetched per owned partition (highwater minus position, as the collector last saw them)."""
        owned = self._consumer.assignment()
        if not self._enabled:
            choice = LaneChoice(self._lanes.top, None)
            self._fetch_only(owned, lambda lane: True)
            return choice
        waiting_lanes = sorted({self.lane_of(tp.topic).rank for tp in owned if waiting.get(tp, 0) > 0})
        choice = self._decide(waiting_lanes)
        if choice.share_turn:
            self._fetch_only(owned, lambda lane: lane.rank == choice.lane.rank)
            return choice
        self._fetch_only(owned, lambda lane: lane.rank <= choice.lane.rank)
        higher = frozenset(tp for tp in owned if self.lane_of(tp.topic).rank < choice.lane.rank)
        return replace(choice, higher=higher)

    def collected(self, choice: LaneChoice) -> None:
        """The batch `choice` was made for had records."""
        self.counts.add(choice)
        self._counted(choice)

    def _decide(self, waiting_ranks: list[int]) -> LaneChoice:
        lanes = self._lanes.lanes
        if not waiting_ranks:
            # Nothing visibly waiting: fetch from every lane and take whatever comes first.
            return LaneChoice(lanes[-1], self._lower_cap(lanes[-1]))
        highest = lanes[waiting_ranks[0]]
        lower_waiting = len(waiting_ranks) > 1
        if lower_waiting and self._turn_every and self._passed_over >= self._turn_every - 1:
            self._passed_over = 0
            lowest = lanes[waiting_ranks[-1]]
            return LaneChoice(lowest, self._lower_cap(lowest), share_turn=True)
        self._passed_over = self._passed_over + 1 if lower_waiting else 0
        return LaneChoice(highest, self._lower_cap(highest))

    def _lower_cap(self, lane: Lane) -> int | None:
        if lane.rank == 0 or self._ms_per_row <= 0:
            return None
        return max(1, int(self._lower_batch_ms / self._ms_per_row))

    def _fetch_only(self, owned: set[TopicPartition], fetch: Callable[[Lane], bool]) -> None:
        paused = self._consumer.paused()
        to_pause = [tp for tp in owned if not fetch(self.lane_of(tp.topic)) and tp not in paused]
        to_resume = [tp for tp in owned if fetch(self.lane_of(tp.topic)) and tp in paused]
        if to_pause:
            self._consumer.pause(*to_pause)
        if to_resume:
            self._consumer.resume(*to_resume)
