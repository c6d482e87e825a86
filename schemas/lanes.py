"""Priority lanes: each lane of a model is its own request topic, and a request's `priority` picks it.

    lane         priorities  topic                            CPU fallback topic
    interactive  5-9         fleet.requests.<model>           fleet.requests.<model>.cpu
    bulk         0-4         fleet.requests.<model>.bulk      fleet.requests.<model>.bulk.cpu

The first lane (the highest priorities) keeps the model's original request topic, so producers that
predate lanes, and records already on it, are served as they always were. `FLEET_LANES` configures
the lanes as `name=lowest priority` pairs from the highest lane down (default
`interactive=5,bulk=0`); the gateway, `FleetClient` and the workers read the same setting.

Workers read every lane of their model and take the lanes in order: while a higher lane has records
waiting, the lower lanes are paused, except for a guaranteed share of batches (workers/batching/lanes.py).
A pipeline may produce to a lane's topic directly; the topic, not the priority field, decides the lane
of a record that is already on Kafka.
"""

import re
from dataclasses import dataclass
from functools import lru_cache

from schemas.names import FALLBACK_SUFFIX, requests_topic

LANE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
RESERVED_NAMES = frozenset({"cpu"})  # the suffix of fallback topics
DEFAULT_LANES = "interactive=5,bulk=0"


class LaneError(ValueError):
    """A lane configuration or a lane name that is not one of the configured lanes."""


@dataclass(frozen=True, slots=True)
class Lane:
    name: str
    lowest_priority: int
    rank: int  # 0 is the highest lane, the one workers drain first


@dataclass(frozen=True)
class Lanes:
    lanes: tuple[Lane, ...]

    @classmethod
    def parse(cls, text: str) -> "Lanes":
        """`interactive=5,bulk=0`: from the highest lane down, each with the lowest priority it takes;
        the last lane takes everything down to 0."""
        pairs = [part.strip() for part in text.split(",") if part.strip()]
        if not pairs:
            raise LaneError("FLEET_LANES: at least one lane, e.g. 'interactive=5,bulk=0'")
        lanes: list[Lane] = []
        for rank, pair in enumerate(pairs):
            name, sep, floor = pair.partition("=")
            name = name.strip()
            if not sep or not floor.strip().isdigit():
                raise LaneError(f"FLEET_LANES: {pair!r} is not name=lowest_priority (e.g. bulk=0)")
            if not LANE_NAME.match(name) or name in RESERVED_NAMES:
                raise LaneError(f"FLEET_LANES: lane name {name!r}: lowercase letters, digits and '-', "
                                f"starting with a letter, and not {sorted(RESERVED_NAMES)}")
            lowest = int(floor)
            if not 0 <= lowest <= 9:
                raise LaneError(f"FLEET_LANES: lane {name!r} starts at priority {lowest}: priorities are 0-9")
            if lanes and lowest >= lanes[-1].lowest_priority:
                raise LaneError(f"FLEET_LANES: lane {name!r} must start below {lanes[-1].name!r} "
                                f"(priority {lanes[-1].lowest_priority}); list lanes from the highest down")
            if any(lane.name == name for lane in lanes):
                raise LaneError(f"FLEET_LANES: lane {name!r} is listed twice")
            lanes.append(Lane(name, lowest, rank))
        if lanes[-1].lowest_priority != 0:
            raise LaneError(f"FLEET_LANES: the last lane ({lanes[-1].name!r}) must take priority 0")
        return cls(tuple(lanes))

    def __str__(self) -> str:
        return ",".join(f"{lane.name}={lane.lowest_priority}" for lane in self.lanes)

    @property
    def top(self) -> Lane:
        return self.lanes[0]

    def named(self, name: str) -> Lane:
        for lane in self.lanes:
            if lane.name == name:
                return lane
        raise LaneError(f"unknown lane {name!r}; the lanes are {', '.join(lane.name for lane in self.lanes)}")

    def for_priority(self, priority: int) -> Lane:
        if not 0 <= priority <= 9:
            raise LaneError(f"priority {priority}: priorities are 0-9")
        return next(lane for lane in self.lanes if priority >= lane.lowest_priority)

    def topic(self, model: str, lane: Lane, *, fallback: bool = False) -> str:
        base = requests_topic(model) if lane.rank == 0 else f"{requests_topic(model)}.{lane.name}"
        return base + FALLBACK_SUFFIX if fallback else base

    def topics(self, model: str, *, fallback: bool = False) -> list[str]:
        """Every lane's topic of a model, from the highest lane down."""
        return [self.topic(model, lane, fallback=fallback) for lane in self.lanes]

    def of_topic(self, model: str, topic: str) -> Lane:
        """The lane a topic of `model` belongs to (primary or fallback)."""
        for lane in self.lanes:
            if topic in (self.topic(model, lane), self.topic(model, lane, fallback=True)):
                return lane
        raise LaneError(f"{topic!r} is not a lane topic of model {model!r}")

    @staticmethod
    def fallback_of(topic: str) -> str:
        """The CPU fallback topic of a lane's primary topic."""
        return topic + FALLBACK_SUFFIX


@lru_cache(maxsize=16)
def parsed_lanes(text: str) -> Lanes:
    """`Lanes.parse`, once per configuration: the gateway asks for every request it routes."""
    return Lanes.parse(text)


def model_of_topic(topic: str, lanes: Lanes) -> str | None:
    """The model a request topic belongs to, any lane, primary or fallback; None for another topic.
    `fleet.requests.a.bulk` is model `a`'s bulk lane where `bulk` is a lane, else model `a.bulk`."""
    prefix = requests_topic("")
    if not topic.startswith(prefix):
        return None
    rest = topic[len(prefix):].removesuffix(FALLBACK_SUFFIX)
    for lane in lanes.lanes[1:]:
        if rest.endswith(f".{lane.name}") and len(rest) > len(lane.name) + 1:
            return rest[: -len(lane.name) - 1]
    return rest or None
