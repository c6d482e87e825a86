"""Sorting a micro-batch of Kafka records into what to compute and what to answer at once.

Pure logic, no I/O: undecodable or invalid records become dead letters, requests past their
deadline become `expired` results, requests this worker cannot serve become error results,
and the rest are ready for the model. Every record lands in exactly one of those.
"""

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Protocol

from schemas.wire import DeadLetter, ErrorInfo, Request, Status, WireError
from workers.compute.provenance import Provenance

from workers.delivery.sink import Outcome


class KafkaRecord(Protocol):
    """What the worker reads from an aiokafka ConsumerRecord."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    value: bytes | None


@dataclass(frozen=True)
class Ready:
    record: KafkaRecord
    request: Request
    text: str


@dataclass
class Triage:
    ready: list[Ready] = field(default_factory=list)
    answered: list[Outcome] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    expired: int = 0


def triage(records: list[KafkaRecord], who: Provenance, now_ms: int, resident: Collection[str] = ()) -> Triage:
    """`resident`: the versions a request may pin (default: only `who.version`)."""
    sorted_out = Triage()
    pinnable = resident or (who.version,)
    for record in records:
        _sort_one(record, who, now_ms, sorted_out, pinnable)
    return sorted_out


def _dead_letter(record: KafkaRecord, reason: str, code: str, who: Provenance) -> DeadLetter:
    return DeadLetter(reason=reason, code=code, topic=record.topic, partition=record.partition, offset=record.offset,
                      original=record.value or b"", worker=who.worker)


def _sort_one(record: KafkaRecord, who: Provenance, now_ms: int, into: Triage, pinnable: Collection[str]) -> None:
    if not record.value:
        into.dead_letters.append(_dead_letter(record, "empty message", "empty", who))
        return
    try:
        request = Request.decode(record.value)
    except WireError as exc:
        into.dead_letters.append(_dead_letter(record, str(exc), exc.code, who))
        return
    if request.deadline_ms <= now_ms:
        into.expired += 1
        expired = who.result(request.id, Status.expired,
                             error=ErrorInfo(code="deadline_exceeded", message="deadline passed before compute"))
        into.answered.append(Outcome(request, expired))
        return
    if request.model != who.model:
        message = f"request for model {request.model!r} reached a worker of {who.model!r}"
        into.answered.append(Outcome(request, who.error(request.id, "wrong_model", message)))
        return
    if request.version is not None and request.version not in pinnable:
        message = f"version {request.version!r} is not loaded here; loaded: {', '.join(sorted(pinnable))}"
        into.answered.append(Outcome(request, who.error(request.id, "version_unavailable", message)))
        return
    try:
        text = request.text
    except WireError as exc:
        # Decodable but unusable: the caller gets an error result, the DLQ keeps the bytes.
        into.dead_letters.append(_dead_letter(record, str(exc), exc.code, who))
        into.answered.append(Outcome(request, who.error(request.id, "invalid_input", str(exc))))
        return
    into.ready.append(Ready(record, request, text))
