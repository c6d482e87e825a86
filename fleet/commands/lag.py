"""`fleet lag`: how far each consumer group is behind, and how long it needs to catch up.

    fleet lag                          # every group reading a fleet.requests.* topic
    fleet lag --group minilm-embed --interval 5 --json

Committed offsets are sampled twice, `--interval` seconds apart: the committed delta over
the interval is the group's current consumption rate, and lag / rate estimates the time to
drain. A group with lag and no progress is "stalled" (drain time infinite). Offsets are
what the workers committed, i.e. results already delivered (commits follow delivery).
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from pydantic import Field

from common.clients import new_admin, new_consumer
from common.settings import FleetSettings
from fleet.arguments import command_parser
from fleet.exits import Exit
from fleet.tables import format_table
from schemas.lanes import DEFAULT_LANES, Lane, LaneError, Lanes, model_of_topic, parsed_lanes
from schemas.names import TOPIC_PREFIX

REQUESTS_TOPIC_PREFIX = f"{TOPIC_PREFIX}.requests."
STALLED = "∞ stalled"


class LagSettings(FleetSettings):
    lag_interval_s: float = Field(2.0, gt=0, description="Seconds between the two samples of committed offsets")


# --- pure logic -------------------------------------------------------------------------------


def drain_seconds(lag: int, rate_per_s: float) -> float:
    """Seconds to consume `lag` records at `rate_per_s`: 0 when caught up, inf when stalled."""
    if lag <= 0:
        return 0.0
    if rate_per_s <= 0:
        return math.inf
    return lag / rate_per_s


def format_duration(seconds: float) -> str:
    """Short human duration: 0s, 4.2s, 3m05s, 2h07m, or the stalled marker for infinity."""
    if math.isinf(seconds):
        return STALLED
    if seconds < 10:
        return "0s" if seconds == 0 else f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 3600:
        minutes, secs = divmod(whole, 60)
        return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
    hours, rest = divmod(whole, 3600)
    return f"{hours}h{rest // 60:02d}m"


@dataclass(frozen=True)
class PartitionLag:
    group: str
    topic: str
    partition: int
    committed: int | None  # None: the group never committed here (it starts from the beginning)
    start: int  # first offset still on the partition; where an uncommitted group begins
    end: int
    rate_per_s: float  # committed offsets per second over the sampling interval

    @property
    def lag(self) -> int:
        position = self.committed if self.committed is not None else self.start
        return max(self.end - position, 0)

    @property
    def drain_s(self) -> float:
        return drain_seconds(self.lag, self.rate_per_s)


@dataclass(frozen=True)
class LaneLag:
    lane: str
    lag: int
    rate_per_s: float

    @property
    def drain_s(self) -> float:
        return drain_seconds(self.lag, self.rate_per_s)


@dataclass(frozen=True)
class GroupLag:
    group: str
    partitions: tuple[PartitionLag, ...]
    lanes_of: Lanes = parsed_lanes(DEFAULT_LANES)

    def by_lane(self) -> list[LaneLag]:
        """Lag and rate per priority lane (docs/concepts/lanes.md), the highest lane first: a bulk
        lane may lag for hours by design while the interactive lane must not lag at all."""
        totals: dict[Lane, list[float]] = {}
        for p in self.partitions:
            model = model_of_topic(p.topic, self.lanes_of)
            if model is None:
                continue
            try:
                lane = self.lanes_of.of_topic(model, p.topic)
            except LaneError:
                continue
            lag, rate = totals.setdefault(lane, [0, 0.0])
            totals[lane] = [lag + p.lag, rate + p.rate_per_s]
        return [LaneLag(lane.name, int(lag), rate) for lane, (lag, rate) in sorted(totals.items(), key=lambda i: i[0].rank)]

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)

    @property
    def rate_per_s(self) -> float:
        return sum(p.rate_per_s for p in self.partitions)

    @property
    def drain_s(self) -> float:
        # Total lag over total rate, not the slowest partition: a worker that empties one
        # partition spends that capacity on its others. A stalled partition shows in its row.
        return drain_seconds(self.lag, self.rate_per_s)

    def as_dict(self) -> dict[str, object]:
        def seconds(value: float) -> float | None:
            return None if math.isinf(value) else round(value, 3)

        return {
            "group": self.group, "lag": self.lag, "rate_per_s": round(self.rate_per_s, 3),
            "drain_s": seconds(self.drain_s), "stalled": math.isinf(self.drain_s),
            "lanes": [{"lane": lane.lane, "lag": lane.lag, "rate_per_s": round(lane.rate_per_s, 3),
                       "drain_s": seconds(lane.drain_s)} for lane in self.by_lane()],
            "partitions": [{"topic": p.topic, "partition": p.partition, "committed": p.committed, "end": p.end,
                            "lag": p.lag, "rate_per_s": round(p.rate_per_s, 3), "drain_s": seconds(p.drain_s)}
                           for p in self.partitions],
        }


HEADERS = ("group", "topic", "partition", "committed", "end", "lag", "rate/s", "drain")


def table_rows(groups: Sequence[GroupLag]) -> list[tuple[str, ...]]:
    """One row per partition, a row per priority lane where the group reads several (topic column
    'lane <name>'), then a total row per group (topic column 'TOTAL')."""
    rows: list[tuple[str, ...]] = []
    for group in groups:
        for p in group.partitions:
            rows.append((group.group, p.topic, str(p.partition), "-" if p.committed is None else str(p.committed),
                         str(p.end), str(p.lag), f"{p.rate_per_s:.1f}", format_duration(p.drain_s)))
        lanes = group.by_lane()
        if len(lanes) > 1:
            rows += [(group.group, f"lane {lane.lane}", "", "", "", str(lane.lag), f"{lane.rate_per_s:.1f}",
                      format_duration(lane.drain_s)) for lane in lanes]
        rows.append((group.group, "TOTAL", "", "", "", str(group.lag), f"{group.rate_per_s:.1f}",
                     format_duration(group.drain_s)))
    return rows


def lag_table(groups: Sequence[GroupLag]) -> str:
    return format_table(HEADERS, table_rows(groups), right=HEADERS[2:])


# --- collection -------------------------------------------------------------------------------


Committed = dict[TopicPartition, int]


async def _committed(admin: AIOKafkaAdminClient, group: str) -> Committed:
    offsets = await admin.list_consumer_group_offsets(group)
    return {tp: meta.offset for tp, meta in offsets.items() if meta.offset >= 0}


def _own_topic(group: str, topics: set[str], lanes: Lanes) -> set[str]:
    """A primary group's request topics, one per lane (the group is named after its model), where they exist."""
    return set(lanes.topics(group)) & topics


async def fleet_groups(admin: AIOKafkaAdminClient, topics: set[str] | None = None,
                       lanes: Lanes = parsed_lanes(DEFAULT_LANES)) -> list[str]:
    """Groups that committed offsets on a request topic (fleet.requests.*), and primary groups
    whose request topic exists though they have committed nothing yet (a new fleet's backlog)."""
    topics = set(await admin.list_topics()) if topics is None else topics
    found = []
    for group_id, *_ in await admin.list_consumer_groups():
        committed = await _committed(admin, group_id)
        if any(tp.topic.startswith(REQUESTS_TOPIC_PREFIX) for tp in committed) or _own_topic(group_id, topics, lanes):
            found.append(group_id)
    return sorted(found)


async def _topic_partitions(admin: AIOKafkaAdminClient, topics: set[str]) -> list[TopicPartition]:
    # Every partition of the group's topics, not only those it committed on: a partition the
    # group never reached (e.g. one just added) is lag too.
    described = await admin.describe_topics(sorted(topics)) if topics else []
    return sorted((TopicPartition(t["topic"], p["partition"]) for t in described for p in t.get("partitions") or []),
                  key=lambda tp: (tp.topic, tp.partition))


async def collect_lag(settings: FleetSettings, groups: Sequence[str] | None = None, interval_s: float = 2.0,
                      *, progress: bool = False) -> list[GroupLag]:
    """Lag of each group (default: every fleet request group), sampled over `interval_s`."""
    async with AsyncExitStack() as stack:
        admin = new_admin(settings)
        await admin.start()
        stack.push_async_callback(admin.close)
        # Made only once Kafka answered the admin: a consumer never started cannot be stopped.
        consumer = new_consumer(settings, enable_auto_commit=False)
        await consumer.start()
        stack.push_async_callback(consumer.stop)
        topics = set(await admin.list_topics())
        lanes = settings.lane_plan
        names = list(groups) if groups else await fleet_groups(admin, topics, lanes)
        first = {group: await _committed(admin, group) for group in names}
        if progress:
            print(f"sampling committed offsets of {len(names)} group(s) over {interval_s:g} s ...", file=sys.stderr)
        await asyncio.sleep(interval_s)
        second = {group: await _committed(admin, group) for group in names}
        return [await _group_lag(admin, consumer, group, first[group], second[group], interval_s,
                                 _own_topic(group, topics, lanes), lanes) for group in names]


async def _group_lag(admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer, group: str, first: Committed,
                     second: Committed, interval_s: float, own_topics: set[str], lanes: Lanes) -> GroupLag:
    # A group that has committed nothing yet still owes its own topic's backlog.
    partitions = await _topic_partitions(admin, {tp.topic for tp in {*first, *second}} | own_topics)
    starts = await consumer.beginning_offsets(partitions) if partitions else {}
    ends = await consumer.end_offsets(partitions) if partitions else {}
    rows = []
    for tp in partitions:
        before = first.get(tp, starts[tp])
        after = second.get(tp)
        rate = max((after if after is not None else before) - before, 0) / interval_s
        rows.append(PartitionLag(group, tp.topic, tp.partition, after, starts[tp], ends[tp], rate))
    return GroupLag(group, tuple(rows), lanes)


# --- command line -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    settings = LagSettings()
    parser = command_parser("lag", __doc__)
    parser.add_argument("--group", action="append", dest="groups", metavar="G",
                        help="consumer group (repeatable); default every group reading fleet.requests.*")
    parser.add_argument("--interval", type=float, default=settings.lag_interval_s,
                        help="seconds between the two offset samples (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if args.interval <= 0:
        parser.error("--interval must be positive")
    groups = asyncio.run(collect_lag(settings, args.groups, args.interval, progress=not args.json))
    if args.json:
        print(json.dumps([g.as_dict() for g in groups], indent=2))
    elif not groups:
        print("no consumer group reads a fleet.requests.* topic yet")
    else:
        print(lag_table(groups))
    return Exit.OK


if __name__ == "__main__":
    raise SystemExit(main())
