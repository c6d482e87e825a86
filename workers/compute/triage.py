"""Sorting a micro-batch of Kafka records into what to compute and what to answer at once.

Pure logic, no I/O: undecodable or invalid records become dead letters, requests past their
deadline become `expired` results, requests this worker cannot serve become error results,
and the rest are ready for the model. Every record lands in exactly one of those.
"""

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

from models.tasks import Parsed
from schemas.results_topics import results_topic_problem
from schemas.wire import DeadLetter, ErrorInfo, ReplyTo, Request, Status, WireError
from workers.compute.provenance import Provenance
from workers.delivery.sink import Outcome

MAX_ORIGINAL_BYTES = 256 * 1024  # a dead letter must fit the producer's 1 MiB request with room to spare
MAX_REASON_CHARS = 1000
MAX_REMEMBERED_TOPICS = 1024  # verdicts on results topics; a flood of new names only clears them


class KafkaRecord(Protocol):
    """What the worker reads from an aiokafka ConsumerRecord."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    value: bytes | None


@dataclass(slots=True)
class Ready:
    """A request to compute, with the record it came in; one per request, so slotted and not frozen
    (as workers/delivery/sink.py's Outcome)."""

    record: KafkaRecord
    request: Request
    text: str  # a text task's text; a summary of any other input (for traces and dead letters)
    payload: Any = None  # what the backend encodes (models/tasks: the task's parsed input)
    key: str = ""  # what the exact cache hashes with the params

    @classmethod
    def of(cls, record: KafkaRecord, request: Request, parsed: Parsed) -> "Ready":
        return cls(record, request, parsed.text, parsed.payload, parsed.key)


@dataclass
class Triage:
    ready: list[Ready] = field(default_factory=list)
    answered: list[Outcome] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    expired: int = 0


@dataclass(frozen=True)
class TriageRules:
    """What a worker accepts beyond the wire contract: where results may go, and how much text it reads."""

    results_topics: re.Pattern[str] = re.compile(r"fleet\.results.*")
    max_input_chars: int = 4096
    _verdicts: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)

    def topic_problem(self, topic: str) -> str | None:
        """results_topic_problem, remembered per topic: a pipeline names the same few topics all day."""
        if topic in self._verdicts:
            return self._verdicts[topic]
        problem = results_topic_problem(topic, self.results_topics)
        if len(self._verdicts) >= MAX_REMEMBERED_TOPICS:
            self._verdicts.clear()
        self._verdicts[topic] = problem
        return problem


Parse = Callable[[Request], Parsed]


def parse_text(rules: "TriageRules") -> Parse:
    """A text request's parse, for a worker of a text model (the task's own parse says the same)."""
    def parse(request: Request) -> Parsed:
        text = request.text[:rules.max_input_chars]
        return Parsed(text, text, text)
    return parse


def triage(records: list[KafkaRecord], who: Provenance, now_ms: int, resident: Collection[str] = (),
           rules: TriageRules = TriageRules(), parse: Parse | None = None,
           cancelled_batches: Collection[str] = ()) -> Triage:
    """`resident`: the versions a request may pin (default: only `who.version`). `parse`: the
    served task's reading of a request's inputs (models/tasks; default: a text).
    `cancelled_batches`: batch jobs whose requests are answered `cancelled` instead of computed."""
    sorted_out = Triage()
    pinnable = resident or (who.version,)
    parse = parse or parse_text(rules)
    for record in records:
        try:
            _sort_one(record, who, now_ms, sorted_out, pinnable, rules, parse, cancelled_batches)
        except Exception as exc:  # whatever one record does, it costs that record alone
            reason = f"the worker could not read it: {type(exc).__name__}: {exc}"
            sorted_out.dead_letters.append(dead_letter(record, reason, "unreadable", who.worker))
    return sorted_out


def dead_letter(record: KafkaRecord, reason: str, code: str, worker: str) -> DeadLetter:
    """A dead letter that can always be produced: the reason and the original bytes are capped."""
    original = record.value or b""
    return DeadLetter(reason=reason[:MAX_REASON_CHARS], code=code, topic=record.topic, partition=record.partition,
                      offset=record.offset, original=original[:MAX_ORIGINAL_BYTES], original_size=len(original),
                      truncated=len(original) > MAX_ORIGINAL_BYTES, worker=worker)


def _early_timings(record: KafkaRecord, request: Request, now_ms: int) -> dict[str, float]:
    return {"queue_ms": float(max(now_ms - record.timestamp, 0)),
            "since_submit_ms": float(max(now_ms - request.submitted_ms, 0))}


def _sort_one(record: KafkaRecord, who: Provenance, now_ms: int, into: Triage, pinnable: Collection[str],
              rules: TriageRules, parse: Parse, cancelled_batches: Collection[str]) -> None:
    if not record.value:
        into.dead_letters.append(dead_letter(record, "empty message", "empty", who.worker))
        return
    try:
        request = Request.decode(record.value)
    except WireError as exc:
        into.dead_letters.append(dead_letter(record, str(exc), exc.code, who.worker))
        return
    source = (record.topic, record.partition, record.offset)
    topic = request.reply.topic
    if topic is not None and (problem := rules.topic_problem(topic)) is not None:
        timings = _early_timings(record, request, now_ms)
        # The caller's waiter (if any) still hears why; the topic it named never sees a byte.
        message = f"reply.topic {topic[:80]!r}: {problem}"
        into.dead_letters.append(dead_letter(record, message, "invalid_reply_topic", who.worker))
        request = request.model_copy(update={"reply": ReplyTo(redis=request.reply.redis)})
        into.answered.append(Outcome(request, who.error(request.id, "invalid_reply_topic", message, timings=timings), source))
        return
    if request.deadline_ms <= now_ms:
        timings = _early_timings(record, request, now_ms)
        into.expired += 1
        expired = who.result(request.id, Status.expired, timings=timings,
                             error=ErrorInfo(code="deadline_exceeded", message="deadline passed before compute"))
        into.answered.append(Outcome(request, expired, source))
        return
    if request.batch is not None and request.batch in cancelled_batches:
        message = f"batch job {request.batch[:64]} was cancelled before this request was computed"
        into.answered.append(Outcome(request, who.error(request.id, "cancelled", message,
                                                        timings=_early_timings(record, request, now_ms)), source))
        return
    if request.model != who.model:
        timings = _early_timings(record, request, now_ms)
        message = f"request for model {request.model!r} reached a worker of {who.model!r}"
        into.answered.append(Outcome(request, who.error(request.id, "wrong_model", message, timings=timings), source))
        return
    if request.version is not None and request.version not in pinnable:
        timings = _early_timings(record, request, now_ms)
        message = f"version {request.version[:80]!r} is not loaded here; loaded: {', '.join(sorted(pinnable))}"
        into.answered.append(Outcome(request, who.error(request.id, "version_unavailable", message, timings=timings), source))
        return
    try:
        parsed = parse(request)
    except WireError as exc:
        # Decodable but unusable: the caller gets an error result, the DLQ keeps the bytes.
        into.dead_letters.append(dead_letter(record, str(exc), exc.code, who.worker))
        into.answered.append(Outcome(request, who.error(request.id, "invalid_input", str(exc),
                                                        timings=_early_timings(record, request, now_ms)), source))
        return
    into.ready.append(Ready.of(record, request, parsed))
