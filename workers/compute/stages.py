"""The CPU-heavy parts of a micro-batch, run in threads so the event loop keeps consuming:
`sort_batch` (triage + route to a version), `encode_groups` (tokenise) and `compute` (the
model + building results). Cache lookups happen between them (workers/cache/batch.py).

A batch is split by version: each `VersionGroup` runs on its own backend, so a canary's
rows never share a model call with stable's. Tokenizers and ONNX Runtime release the GIL,
so batch k+1 is tokenised while batch k runs and batch k-1 is delivered.
"""

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt
from aiokafka import ConsumerRecord

from schemas.wire import CacheTier, DeadLetter, Result
from models.backends.base import Backend, Encoded
from workers.batching.policy import FetchedBatch
from workers.cache.exact import pack_outputs
from workers.delivery.sink import Outcome
from workers.serving.model_set import Serving
from workers.compute.outputs import outputs_of
from workers.compute.run_batch import BatchRun, OutOfMemoryForOneRow, run_batch
from workers.compute.triage import Provenance, Ready, Triage, triage

log = logging.getLogger(__name__)


@dataclass
class VersionGroup:
    """The rows of one batch that one version computes."""

    backend: Backend
    who: Provenance
    ready: list[Ready] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)  # exact-cache key per ready row, when the cache is on
    followers: list[tuple[int, Ready]] = field(default_factory=list)  # same input as ready[i], answered with it
    vectors: npt.NDArray[np.float32] | None = None  # semantic-cache encoder rows of `ready`
    verifying: dict[int, Any] = field(default_factory=dict)  # ready row -> semantic hit the model double-checks
    encoded: Encoded | None = None


@dataclass
class Prepared:
    records: list[ConsumerRecord]
    fetched_ms: dict[int, float]  # id(record) -> when it reached this worker
    triaged: Triage
    start_ms: int
    groups: list[VersionGroup] = field(default_factory=list)
    tokenize_ms: float = 0.0

    @property
    def needs_model(self) -> bool:
        return any(group.ready for group in self.groups)


@dataclass(frozen=True)
class Fresh:
    """A result the model just computed: what the caches learn from."""

    group: VersionGroup
    row: int
    result: Result

    @cached_property
    def packed_outputs(self) -> bytes:
        """The outputs as both cache tiers store them, packed once for both."""
        return pack_outputs(self.result.outputs or {})


@dataclass
class Computed:
    records: list[ConsumerRecord]
    outcomes: list[Outcome]
    dead_letters: list[DeadLetter]
    expired: int = 0
    computed: int = 0
    inference_ms: float = 0.0
    padding_efficiency: float | None = None
    input_tokens: tuple[int, ...] = ()
    unanswered: list[Ready] = field(default_factory=list)  # the device failed before computing these
    runs: list[BatchRun] = field(default_factory=list)
    fresh: list[Fresh] = field(default_factory=list)
    stage_ms: dict[str, list[float]] = field(default_factory=lambda: {"queue": [], "topic": [], "batch_wait": []})

    @property
    def run(self) -> BatchRun | None:
        """The batch's model runs as one, for health and out-of-memory back-off."""
        if not self.runs:
            return None
        device_error = next((run.device_error for run in self.runs if run.device_error is not None), None)
        return BatchRun(answers=[], oom_splits=sum(r.oom_splits for r in self.runs),
                        largest_oom=max(r.largest_oom for r in self.runs), device_error=device_error,
                        clean=all(r.clean for r in self.runs))


def sort_batch(batch: FetchedBatch, serving: Serving, resident: Mapping[str, Backend],
               who_for: Callable[[Backend], Provenance], start_ms: int,
               digest: Callable[[Ready], str] | None = None) -> Prepared:
    """Triage the records and give each ready request its version group."""
    records = batch.records
    triaged = triage(records, who_for(serving.stable), start_ms, resident=tuple(resident))
    # Close deadlines first: when a group is cut into sub-batches, urgent rows lead ties.
    triaged.ready.sort(key=lambda item: item.request.deadline_ms)
    fetched_ms = {id(record): at for record, at in zip(records, batch.fetched_ms, strict=True)}
    prepared = Prepared(records=records, fetched_ms=fetched_ms, triaged=triaged, start_ms=start_ms)
    groups: dict[str, VersionGroup] = {}
    for item in triaged.ready:
        backend = serving.pick(item.request.id, item.request.version, resident)
        assert backend is not None  # triage answered pins of versions that are not resident
        version = backend.manifest.id
        if version not in groups:
            groups[version] = VersionGroup(backend=backend, who=who_for(backend))
        groups[version].ready.append(item)
        if digest is not None:
            groups[version].digests.append(digest(item))
    prepared.groups = list(groups.values())
    return prepared


def encode_groups(prepared: Prepared, *, reject_overlong: bool = False) -> None:
    started = time.perf_counter()
    for group in prepared.groups:
        if not group.ready:
            continue
        try:
            group.encoded = group.backend.encode([item.text for item in group.ready])
            if reject_overlong and any(group.encoded.truncated):
                group.encoded = _reject_overlong(group, prepared.triaged)
        except Exception:
            log.exception("tokenising a batch of %d failed; its rows will be retried one by one", len(group.ready))
    prepared.tokenize_ms = (time.perf_counter() - started) * 1000


def _reject_overlong(group: VersionGroup, triaged: Triage) -> Encoded | None:
    """Answer inputs longer than the limit with an error and re-encode the rest."""
    assert group.encoded is not None
    message = "input is longer than the worker's max_input_tokens; shorten it or split it"
    too_long = [row for row, cut in enumerate(group.encoded.truncated) if cut]
    drop_rows(group, too_long, lambda _row, item: Outcome(
        item.request, group.who.error(item.request.id, "input_too_long", message)), triaged.answered)
    return group.backend.encode([item.text for item in group.ready]) if group.ready else None


def drop_rows(group: VersionGroup, drop: Collection[int], answer: Callable[[int, Ready], Outcome],
              into: list[Outcome]) -> None:
    """Take rows out of a group before compute, answering each (and its followers) with
    `answer(row, item)`; the rows that stay keep their digests, vectors and followers."""
    if not drop:
        return
    dropped = set(drop)
    kept_rows = [row for row in range(len(group.ready)) if row not in dropped]
    new_row = {old: new for new, old in enumerate(kept_rows)}
    for row in sorted(dropped):
        into.append(answer(row, group.ready[row]))
    followers = []
    for row, follower in group.followers:
        if row in new_row:
            followers.append((new_row[row], follower))
        else:
            into.append(answer(row, follower))
    group.followers = followers
    group.verifying = {new_row[row]: hit for row, hit in group.verifying.items() if row in new_row}
    if group.vectors is not None:
        group.vectors = group.vectors[kept_rows]
    group.ready[:] = [group.ready[row] for row in kept_rows]
    if group.digests:
        group.digests[:] = [group.digests[row] for row in kept_rows]


def compute(prepared: Prepared) -> Computed:
    done = Computed(records=prepared.records, outcomes=list(prepared.triaged.answered),
                    dead_letters=prepared.triaged.dead_letters, expired=prepared.triaged.expired)
    real = padded = 0
    lengths: list[int] = []
    for group in prepared.groups:
        if not group.ready:
            continue
        started = time.perf_counter()
        run = run_batch(group.backend, group.encoded, [item.text for item in group.ready])
        elapsed_ms = (time.perf_counter() - started) * 1000
        done.runs.append(run)
        done.inference_ms += elapsed_ms
        done.computed += len(group.ready)
        if group.encoded is not None:
            real, padded = real + group.encoded.real_tokens, padded + group.encoded.padded_tokens
            lengths += group.encoded.lengths
        _answer_group(prepared, group, run, elapsed_ms, done)
    done.padding_efficiency = real / padded if padded else None
    done.input_tokens = tuple(lengths)
    return done


def _answer_group(prepared: Prepared, group: VersionGroup, run: BatchRun, inference_ms: float, done: Computed) -> None:
    finished_ms = prepared.start_ms + prepared.tokenize_ms + inference_ms
    answered: dict[int, Result] = {}
    for row, (item, answer) in enumerate(zip(group.ready, run.answers, strict=True)):
        if answer is None:
            done.unanswered.append(item)
            continue
        timings = _timings(prepared, item, inference_ms, finished_ms)
        for stage in done.stage_ms:
            done.stage_ms[stage].append(timings[f"{stage}_ms"])
        result = _result(group, item, answer, len(group.ready), timings)
        answered[row] = result
        done.outcomes.append(Outcome(item.request, result))
        if not isinstance(answer, Exception):
            done.fresh.append(Fresh(group, row, result))
    for row, follower in group.followers:
        if row in answered:
            copy = answered[row].model_copy(update={"id": follower.request.id})
            done.outcomes.append(Outcome(follower.request, copy))
        else:
            done.unanswered.append(follower)


def _timings(prepared: Prepared, item: Ready, inference_ms: float, finished_ms: float) -> dict[str, float]:
    """Where this request's time went, in ms; the gateway and client add their own stages."""
    fetched = prepared.fetched_ms.get(id(item.record), float(prepared.start_ms))
    return {
        "queue_ms": float(max(prepared.start_ms - item.record.timestamp, 0)),
        "topic_ms": max(fetched - item.record.timestamp, 0.0),
        "batch_wait_ms": max(prepared.start_ms - fetched, 0.0),
        "tokenize_ms": prepared.tokenize_ms,
        "inference_ms": inference_ms,
        "since_submit_ms": max(finished_ms - item.request.submitted_ms, 0.0),
    }


def _result(group: VersionGroup, item: Ready, answer: npt.NDArray[np.float32] | Exception, batch_size: int,
            timings: dict[str, float]) -> Result:
    who = group.who
    if isinstance(answer, OutOfMemoryForOneRow):
        return who.error(item.request.id, "out_of_memory", str(answer), batch_size=batch_size, timings=timings)
    if isinstance(answer, Exception):
        return who.error(item.request.id, "inference_failed", f"{type(answer).__name__}: {answer}",
                         batch_size=batch_size, timings=timings)
    return who.result(item.request.id, who.served_status, outputs=outputs_of(group.backend.manifest, answer),
                      batch_size=batch_size, timings=timings, cache=CacheTier.miss)
