"""When a drain's measured window opens and closes: between 10% and 90% of the backlog's replies.

A drain is watched by polling: how many replies there are, and the workers' CPU. Several workers on
two busy cores can pass both marks between two polls; the window then opens at the last poll
before the 10% mark, so a fast drain is still timed rather than waited on for good.
"""

import math
from dataclasses import dataclass

LOW_SHARE, HIGH_SHARE = 0.1, 0.9


@dataclass(frozen=True)
class Poll:
    at: float  # monotonic seconds
    replies: int
    cpu_s: float  # the workers' CPU, summed


class DrainedBeforeFirstPoll(Exception):
    """Every reply came before the first look: nothing to time."""


@dataclass
class DrainWindow:
    count: int  # the backlog
    before: Poll | None = None  # the last poll below the low mark
    start: Poll | None = None  # the first poll at or past it

    @property
    def low(self) -> int:
        return math.ceil(self.count * LOW_SHARE)

    @property
    def high(self) -> int:
        return math.floor(self.count * HIGH_SHARE)

    def see(self, poll: Poll) -> tuple[Poll, Poll] | None:
        """The window's (opening, closing) polls once `poll` closes it; None while it is open."""
        if poll.replies < self.low:
            self.before = poll
            return None
        if self.start is None:
            self.start = poll
        if poll.replies < self.high:
            return None
        opened = self.start if poll.replies > self.start.replies else self.before
        if opened is None:
            raise DrainedBeforeFirstPoll(f"{poll.replies} of {self.count} replies were there at the first look")
        return opened, poll


@dataclass
class Stall:
    """How long the replies have not grown. A count that falls is no progress: a reply stream left
    alone for the results' TTL expires, and its length reads 0."""

    since: float
    replies: int = -1

    def for_s(self, poll: Poll) -> float:
        if poll.replies > self.replies:
            self.since, self.replies = poll.at, poll.replies
        return poll.at - self.since
