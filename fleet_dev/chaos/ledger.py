"""Who was promised an answer and who got one: the accounting behind every chaos table.

A request counts as *accepted* once Kafka acknowledged it (the pipeline's produce, the client's
publish) or the gateway said 200/202; from then on the fleet owes it a result. It is *answered*
by the first result seen for its id, through any channel (HTTP body, Redis reply, results topic,
or the stored `fleet:result:<id>` looked up at the end). *Lost*: accepted and never answered.
*Duplicated*: extra copies of a result on the results topic (redelivery after a crash or a
rebalance; harmless by the contract, but counted). Pure: the clock is passed in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

TOPIC = "topic"  # the only channel where every copy of a result is visible


@dataclass(frozen=True)
class Answer:
    status: str
    via: str
    at_s: float


@dataclass
class Ledger:
    accepted: dict[str, str] = field(default_factory=dict)  # id -> path it was sent on
    answers: dict[str, Answer] = field(default_factory=dict)  # id -> first answer
    topic_copies: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)  # "path: why" -> count
    sent: int = 0
    http_5xx: int = 0

    def attempt(self) -> None:
        self.sent += 1

    def accept(self, request_id: str, path: str) -> None:
        self.accepted[request_id] = path

    def refuse(self, path: str, why: str) -> None:
        self.refused[f"{path}: {why}"] += 1

    def answer(self, request_id: str, status: str, via: str, at_s: float) -> None:
        if via == TOPIC:
            self.topic_copies[request_id] += 1
        self.answers.setdefault(request_id, Answer(status, via, at_s))

    def unanswered(self) -> list[str]:
        """Accepted ids without an answer so far (the ones to look up in Redis before calling them lost)."""
        return [request_id for request_id in self.accepted if request_id not in self.answers]

    def lost_by_path(self) -> Counter[str]:
        return Counter(self.accepted[request_id] for request_id in self.unanswered())

    @property
    def answered(self) -> int:
        return sum(request_id in self.answers for request_id in self.accepted)

    @property
    def lost(self) -> int:
        return len(self.unanswered())

    @property
    def duplicated(self) -> int:
        return sum(copies - 1 for copies in self.topic_copies.values() if copies > 1)

    def statuses(self) -> Counter[str]:
        return Counter(self.answers[request_id].status for request_id in self.accepted if request_id in self.answers)

    def ok_times(self) -> list[float]:
        """When each accepted request's ok (or degraded) answer arrived, sorted: the throughput timeline."""
        return sorted(answer.at_s for request_id, answer in self.answers.items()
                      if answer.status in ("ok", "degraded") and request_id in self.accepted)


def rate(times: Sequence[float], start_s: float, end_s: float) -> float:
    """Answers per second within [start_s, end_s)."""
    if end_s <= start_s:
        return 0.0
    return sum(start_s <= t < end_s for t in times) / (end_s - start_s)


def throughput_back_after(times: Sequence[float], baseline_per_s: float, from_s: float, until_s: float, *,
                          window_s: float = 2.0, share: float = 0.8, step_s: float = 0.25) -> float | None:
    """Seconds from `from_s` until a `window_s` window first carries `share` of the baseline rate;
    None when that never happened before `until_s` (or there was no baseline to come back to)."""
    if baseline_per_s <= 0:
        return None
    t = from_s
    while t + window_s <= until_s:
        if rate(times, t, t + window_s) >= share * baseline_per_s:
            return t - from_s
        t += step_s
    return None


def merge_answers(ledger: Ledger, found: Iterable[tuple[str, str]], via: str, at_s: float) -> int:
    """Record results found by a lookup (id, status); returns how many were new answers."""
    before = len(ledger.answers)
    for request_id, status in found:
        ledger.answer(request_id, status, via, at_s)
    return len(ledger.answers) - before
