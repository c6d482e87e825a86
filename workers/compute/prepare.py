"""Preparing a micro-batch for the model, in a worker thread (on the event loop when the batch is
a few KiB: `off_the_loop`): `sort_batch` (triage, then a version group per serving version) and
`encode_groups` (tokenise). Cache lookups happen between
the two (workers/cache/batch.py) and take rows out with `drop_rows`.

A batch is split by version: each `VersionGroup` runs on its own backend, so a canary's rows
never share a model call with stable's. Tokenizers and ONNX Runtime release the GIL, so batch
k+1 is tokenised while batch k runs and batch k-1 is delivered.
"""

import logging
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
from aiokafka import ConsumerRecord

from models.backends.base import Backend, Encoded
from models.tasks import task_of
from workers.batching.collector import FetchedBatch
from workers.compute.provenance import Provenance
from workers.compute.threads import in_thread
from workers.compute.triage import Ready, Triage, TriageRules, dead_letter, triage
from workers.delivery.sink import Outcome
from workers.serving.model_set import Serving

log = logging.getLogger(__name__)
T = TypeVar("T")
# Below this many bytes of records, triage and tokenising cost less than the hop to a thread and back.
INLINE_BATCH_BYTES = 16 * 1024


@dataclass
class VersionGroup:
    """The rows of one batch that one version computes."""

    backend: Backend
    who: Provenance
    ready: list[Ready] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)  # exact-cache key per ready row, when the cache is on
    followers: list[tuple[int, Ready]] = field(default_factory=list)  # same input as ready[i], answered with it
    vectors: npt.NDArray[np.float32] | None = None  # semantic-cache encoder rows of `ready`
    unreadable: frozenset[int] = frozenset()  # ready rows the semantic cache's encoder cannot read
    verifying: dict[int, Any] = field(default_factory=dict)  # ready row -> semantic hit the model double-checks
    probes: dict[int, tuple[float, bytes]] = field(default_factory=dict)  # ready row -> (score, cached outputs) of
    # its best semantic candidate not served: compared with what the model computes, a free label
    encoded: Encoded | None = None


@dataclass
class Prepared:
    records: list[ConsumerRecord]
    fetched_ms: dict[int, float]  # id(record) -> when it reached this worker
    triaged: Triage
    start_ms: int
    size_bytes: int = 0  # of the records' values
    groups: list[VersionGroup] = field(default_factory=list)
    tokenize_ms: float = 0.0

    @property
    def needs_model(self) -> bool:
        return any(group.ready for group in self.groups)


async def off_the_loop(threads: Executor | None, batch: FetchedBatch, work: Callable[..., T], *args: Any,
                       **kwargs: Any) -> T:
    """`work(*args, **kwargs)` in one of `threads` (workers/compute/threads.py), or right here when
    the batch is small."""
    if batch.size_bytes <= INLINE_BATCH_BYTES:
        return work(*args, **kwargs)
    return await in_thread(threads, work, *args, **kwargs)


def timings_of(prepared: Prepared, item: Ready, finished_ms: float, **stages: float) -> dict[str, float]:
    """Where a request's time went, in ms, whoever answered it (the model or a cache tier, whose
    own stages come in `stages`); the gateway and client add their own stages."""
    start = prepared.start_ms
    produced = item.record.timestamp
    fetched = prepared.fetched_ms.get(id(item.record), float(start))
    timings = {"queue_ms": float(start - produced) if start > produced else 0.0,
               "topic_ms": fetched - produced if fetched > produced else 0.0,
               "batch_wait_ms": start - fetched if start > fetched else 0.0}
    timings.update(stages)
    since_submit = finished_ms - item.request.submitted_ms
    timings["since_submit_ms"] = since_submit if since_submit > 0 else 0.0
    return timings


def sort_batch(batch: FetchedBatch, serving: Serving, resident: Mapping[str, Backend],
               who_for: Callable[[Backend], Provenance], start_ms: int,
               digest: Callable[[Ready], str] | None = None, rules: TriageRules = TriageRules(),
               cancelled_batches: Collection[str] = ()) -> Prepared:
    """Triage the records and give each ready request its version group."""
    records = batch.records
    task, manifest = task_of(serving.stable.manifest), serving.stable.manifest
    triaged = triage(records, who_for(serving.stable), start_ms, resident=tuple(resident), rules=rules,
                     parse=lambda request: task.parse(request, manifest, max_chars=rules.max_input_chars),
                     cancelled_batches=cancelled_batches)
    # Close deadlines first: when a group is cut into sub-batches, urgent rows lead ties.
    triaged.ready.sort(key=lambda item: item.request.deadline_ms)
    fetched_ms = {id(record): at for record, at in zip(records, batch.fetched_ms, strict=True)}
    prepared = Prepared(records=records, fetched_ms=fetched_ms, triaged=triaged, start_ms=start_ms,
                        size_bytes=batch.size_bytes)
    groups: dict[str, VersionGroup] = {}
    for item in triaged.ready:
        backend = serving.pick(item.request.id, item.request.version, resident)
        assert backend is not None  # triage answered pins of versions that are not resident
        version = backend.manifest.id
        if version not in groups:
            groups[version] = VersionGroup(backend=backend, who=who_for(backend))
        group = groups[version]
        if digest is not None:
            try:
                group.digests.append(digest(item))
            except Exception as exc:  # an input the cache cannot key is this request's problem alone
                _refuse(item, group.who, exc, triaged)
                continue
        group.ready.append(item)
    prepared.groups = list(groups.values())
    return prepared


def _refuse(item: Ready, who: Provenance, exc: Exception, triaged: Triage) -> None:
    reason = f"invalid input: {type(exc).__name__}: {str(exc)[:300]}"
    triaged.dead_letters.append(dead_letter(item.record, reason, "invalid_input", who.worker))
    triaged.answered.append(Outcome.of(item, who.error(item.request.id, "invalid_input", reason)))


def encode_groups(prepared: Prepared, *, reject_overlong: bool = False) -> None:
    started = time.perf_counter()
    for group in prepared.groups:
        if not group.ready:
            continue
        try:
            group.encoded = group.backend.encode([item.payload for item in group.ready])
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
    drop_rows(group, too_long, lambda _row, item: Outcome.of(
        item, group.who.error(item.request.id, "input_too_long", message)), triaged.answered)
    return group.backend.encode([item.payload for item in group.ready]) if group.ready else None


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


def unreadable(batch: FetchedBatch, start_ms: int, exc: BaseException, worker: str) -> Prepared:
    """A batch (of one record) that preparing failed on: its records go to the DLQ with the reason."""
    reason = f"the worker could not prepare it: {type(exc).__name__}: {exc}"
    triaged = Triage(dead_letters=[dead_letter(record, reason, "unreadable", worker) for record in batch.records])
    return Prepared(records=batch.records, fetched_ms={id(r): at for r, at in zip(batch.records, batch.fetched_ms)},
                    triaged=triaged, start_ms=start_ms, size_bytes=batch.size_bytes)
