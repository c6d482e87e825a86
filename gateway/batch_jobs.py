"""Batch jobs: a JSONL file of requests in, one answer per `custom_id` out, resumable at every step.

    jobs = BatchJobs(client, BatchSettings())
    job = await jobs.create(tenant, "minilm-embed", name="night.jsonl")
    status = await jobs.submit(job.id, tenant, lines)      # run again after a crash: it resumes
    async for row in jobs.output(job.id, tenant): ...      # one per answered custom_id

A job's requests go to the model's bulk lane with the job's own results topic
(`fleet.results.batch.<job>`, created with the job's retention). Request ids are derived from
the job and the line number, so a result names its line without a lookup and a line sent again
carries the same id. The job's state lives in Redis under `fleet:batch:<job>` (every key expires
with the job); what the workers answered lives only in the results topic, read again for each
output, so collecting is idempotent. Submission keeps a cursor per chunk of lines: a chunk whose
acknowledgement was not recorded (a crash between Kafka and Redis) is checked against the lane's
records before it is sent again, so a resumed submit does not send a line twice.
"""

import asyncio
import hashlib
import json
import secrets
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import msgpack
from aiokafka import TopicPartition

from common.clients import new_consumer
from common.topics import ensure_topics, partitions_of
from gateway.client import FleetClient, RequestOptions
from gateway.batch_results import ErrorRow, JobResults, OutputRow, behind, line_of, request_id
from gateway.settings import BatchSettings
from schemas.names import CANCELLED_BATCHES_KEY, batch_key, batch_results_topic, tenant_batches_key
from schemas.wire import ReplyTo, Request, WireError, now_ms

MAX_CUSTOM_ID_CHARS = 64


class JobState(StrEnum):
    submitting = "submitting"
    running = "running"
    completed = "completed"
    cancelled = "cancelled"


class BatchError(Exception):
    """The caller's mistake about a job (unknown job, a different file on resume, over a limit)."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class JobStatus:
    id: str
    tenant: str
    model: str
    state: JobState
    name: str
    created_ms: int
    read: int  # requests (non-blank lines) read so far, sent or refused
    total: int | None  # known once the whole file was read
    refused: int  # lines refused before sending (their reasons are in the errors)
    done: int
    failed: int
    results_topic: str
    retention_s: int
    finished_ms: int | None = None

    @property
    def answered(self) -> int:
        return self.done + self.failed + self.refused

    def rate_per_s(self, now: int | None = None) -> float:
        elapsed_s = max(((self.finished_ms or now or now_ms()) - self.created_ms) / 1000, 1e-3)
        return (self.done + self.failed) / elapsed_s

    def eta_s(self) -> float | None:
        if self.total is None or self.state is not JobState.running:
            return None
        rate = self.rate_per_s()
        return (self.total - self.answered) / rate if rate > 0 else None

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "model": self.model, "state": self.state.value, "name": self.name,
                "created_ms": self.created_ms, "finished_ms": self.finished_ms, "results_topic": self.results_topic,
                "retention_s": self.retention_s, "request_counts": {
                    "total": self.total, "read": self.read, "done": self.done, "failed": self.failed + self.refused,
                    "refused_at_submit": self.refused},
                "rate_per_s": round(self.rate_per_s(), 2), "eta_s": self.eta_s()}


@dataclass
class _Chunk:
    first: int
    lines: list[tuple[int, bytes]]
    digest: str


class LaneOffsets:
    """The end offsets of a lane's partitions, read before each chunk is sent (one consumer per submit)."""

    def __init__(self, settings: BatchSettings, topic: str) -> None:
        self.topic = topic
        self._settings = settings
        self._reader = new_consumer(settings, enable_auto_commit=False)
        self._partitions: list[TopicPartition] = []

    async def __aenter__(self) -> "LaneOffsets":
        await self._reader.start()
        self._partitions = await partitions_of(self._settings, self.topic)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._reader.stop()

    async def ends(self) -> dict[int, int]:
        return {tp.partition: offset for tp, offset in (await self._reader.end_offsets(self._partitions)).items()}


class BatchJobs:
    """Jobs of every tenant; each call names the tenant and sees only that tenant's jobs."""

    def __init__(self, client: FleetClient, settings: BatchSettings | None = None) -> None:
        self.client = client
        self.settings = settings or BatchSettings()

    @property
    def redis(self) -> Any:
        return self.client.redis

    @property
    def results(self) -> JobResults:
        return JobResults(self.client.redis, self.settings)

    async def create(self, tenant: str, model: str, *, name: str = "", size_bytes: int | None = None) -> JobStatus:
        if size_bytes is not None and size_bytes > self.settings.batch_max_file_bytes:
            raise BatchError(f"the file is {size_bytes} bytes; the limit is {self.settings.batch_max_file_bytes}",
                             status=413)
        now = now_ms()
        retention_ms = self.settings.batch_retention_s * 1000
        await self.redis.zremrangebyscore(tenant_batches_key(tenant), 0, now - retention_ms)
        if await self.redis.zcard(tenant_batches_key(tenant)) >= self.settings.batch_max_jobs_per_tenant:
            raise BatchError(f"tenant {tenant!r} keeps {self.settings.batch_max_jobs_per_tenant} jobs already; "
                             "delete one or wait for it to expire", status=429)
        job = secrets.token_hex(12)
        topic = batch_results_topic(job)
        await ensure_topics(self.settings, [topic], self.client.settings.partitions,
                            {"retention.ms": str(retention_ms)})
        fields = {"tenant": tenant, "model": model, "state": JobState.submitting.value, "name": name[:200],
                  "created_ms": now, "read": 0, "refused": 0, "results_topic": topic,
                  "retention_s": self.settings.batch_retention_s}
        async with self.redis.pipeline(transaction=True) as tx:
            tx.hset(batch_key(job), mapping=fields)
            tx.expire(batch_key(job), self.settings.batch_retention_s)
            tx.zadd(tenant_batches_key(tenant), {job: now})
            tx.expire(tenant_batches_key(tenant), self.settings.batch_retention_s)
            await tx.execute()
        return await self.status(job, tenant, collect=False)

    async def submit(self, job: str, tenant: str, lines: Iterable[bytes] | AsyncIterator[bytes]) -> JobStatus:
        """Read the file's lines (bytes, one JSON object each) and send what was not sent yet. Run
        again with the same file after any interruption: the lines before the cursor are checked
        against the digests of their chunks and skipped."""
        status = await self.status(job, tenant, collect=False)
        if status.state is not JobState.submitting:
            raise BatchError(f"job {job} is {status.state.value}: its file was read already", status=409)
        digests = [d.decode() for d in await self.redis.lrange(batch_key(job, "digests"), 0, -1)]
        doubt = await self.redis.hgetall(batch_key(job, "doubt"))
        topic = await self.client.topic_for(status.model, 0)
        chunk_index = 0
        async with LaneOffsets(self.settings, topic) as lane:
            async for chunk in self._chunks(lines):
                if chunk_index < len(digests):
                    if chunk.digest != digests[chunk_index]:
                        raise BatchError(f"lines {chunk.first}-{chunk.first + len(chunk.lines) - 1} differ from the "
                                         f"file job {job} was submitted with", status=409)
                else:
                    if await self._cancelled(job):
                        return await self.status(job, tenant, collect=False)
                    already = await self._already_sent(job, topic, doubt) if doubt else set()
                    doubt = {}
                    await self._send(job, status, lane, chunk, already)
                chunk_index += 1
        read = await self.redis.hget(batch_key(job), "read")
        await self.redis.hset(batch_key(job), mapping={"total": int(read or 0), "state": JobState.running.value})
        return await self.status(job, tenant, collect=False)

    async def _chunks(self, lines: Iterable[bytes] | AsyncIterator[bytes]) -> AsyncIterator[_Chunk]:
        size = self.settings.batch_chunk_lines
        chunk = _Chunk(1, [], "")
        digest = hashlib.sha256()
        number = 0

        async def each() -> AsyncIterator[bytes]:
            if isinstance(lines, AsyncIterator):
                async for line in lines:
                    yield line
            else:
                for line in lines:
                    yield line

        async for raw in each():
            line = raw.rstrip(b"\r\n")
            number += 1  # a file line number, as the errors file names it
            if not line.strip():
                continue  # blank lines (a trailing newline) are not requests
            if number > self.settings.batch_max_lines:
                raise BatchError(f"the file has more than {self.settings.batch_max_lines} lines", status=413)
            digest.update(line + b"\n")
            chunk.lines.append((number, line))
            if len(chunk.lines) == size:
                chunk.digest = digest.hexdigest()
                yield chunk
                chunk, digest = _Chunk(number + 1, [], ""), hashlib.sha256()
        if chunk.lines:
            chunk.digest = digest.hexdigest()
            yield chunk

    async def _send(self, job: str, status: JobStatus, lane: "LaneOffsets", chunk: _Chunk, already: set[int]) -> None:
        requests: list[Request] = []
        refused: dict[int, bytes] = {}
        custom_ids: dict[int, str] = {}
        for number, line in chunk.lines:
            parsed = self._parse(job, status, number, line)
            if isinstance(parsed, str):
                refused[number] = msgpack.packb({"custom_id": None, "reason": parsed})
                continue
            custom_id, request = parsed
            custom_ids[number] = custom_id
            requests.append(request)
        duplicates = await self._claim_custom_ids(job, custom_ids)
        for number in duplicates:
            refused[number] = msgpack.packb({"custom_id": custom_ids.pop(number),
                                             "reason": f"custom_id repeats line {duplicates[number]}'s"})
        requests = [r for r in requests if (line_of(job, r.id) or 0) in custom_ids]
        last = chunk.lines[-1][0]
        ends = await lane.ends()
        await self.redis.hset(batch_key(job, "doubt"), mapping={"first": chunk.first, "last": last,
                                                          "offsets": json.dumps({str(p): o for p, o in ends.items()})})
        producer = self.client.producer
        sending = [await producer.send(lane.topic, r.encode(), key=r.id.encode())
                   for r in requests if line_of(job, r.id) not in already]
        await asyncio.gather(*sending)
        await self._record_chunk(job, chunk, custom_ids, refused)

    async def _record_chunk(self, job: str, chunk: _Chunk, custom_ids: dict[int, str], refused: dict[int, bytes]) -> None:
        """The chunk's lines are on the lane: move the resume cursor past them, in one transaction."""
        ttl = self.settings.batch_retention_s
        async with self.redis.pipeline(transaction=True) as tx:
            if custom_ids:
                tx.hset(batch_key(job, "lines"), mapping={str(n): c for n, c in custom_ids.items()})
            if refused:
                tx.hset(batch_key(job, "refused"), mapping={str(n): r for n, r in refused.items()})
            tx.hincrby(batch_key(job), "read", len(chunk.lines))
            tx.hincrby(batch_key(job), "refused", len(refused))
            tx.rpush(batch_key(job, "digests"), chunk.digest)
            tx.delete(batch_key(job, "doubt"))
            for part in ("lines", "refused", "digests", "custom_ids"):
                tx.expire(batch_key(job, part), ttl)
            await tx.execute()

    def _parse(self, job: str, status: JobStatus, number: int, line: bytes) -> tuple[str, Request] | str:
        if len(line) > self.settings.batch_max_line_bytes:
            return f"the line is {len(line)} bytes; the limit is {self.settings.batch_max_line_bytes}"
        try:
            body = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return f"not JSON: {exc}"
        if not isinstance(body, dict):
            return "a line is a JSON object: {\"custom_id\": ..., \"inputs\": {...}, \"params\": {...}}"
        custom_id = body.get("custom_id")
        if not isinstance(custom_id, str) or not 1 <= len(custom_id) <= MAX_CUSTOM_ID_CHARS:
            return f"custom_id: a string of 1 to {MAX_CUSTOM_ID_CHARS} characters is required"
        inputs, params = body.get("inputs"), body.get("params", {})
        if not isinstance(inputs, dict) or not inputs:
            return "inputs: an object of the model's inputs is required, e.g. {\"text\": \"...\"}"
        if not isinstance(params, dict):
            return "params: an object"
        submitted = now_ms()
        options = RequestOptions(params=params, tenant=status.tenant, priority=0)
        try:
            request = self.client.build_request(status.model, inputs, reply=ReplyTo(topic=status.results_topic),
                                                timeout=self.settings.batch_completion_window_s, options=options)
            request = Request.decode(request.model_copy(update={"id": request_id(job, number), "batch": job,
                                                                "submitted_ms": submitted}).encode())
        except (WireError, ValueError, TypeError) as exc:
            return f"{custom_id}: {exc}"[:500]
        return custom_id, request

    async def _claim_custom_ids(self, job: str, custom_ids: dict[int, str]) -> dict[int, int]:
        """custom_id -> line, first come; the lines whose custom_id an earlier line holds (its number)."""
        if not custom_ids:
            return {}
        seen: dict[str, int] = {}
        repeats: dict[int, int] = {}
        for number, custom_id in custom_ids.items():
            if custom_id in seen:
                repeats[number] = seen[custom_id]
            else:
                seen[custom_id] = number
        async with self.redis.pipeline(transaction=False) as pipe:
            for custom_id, number in seen.items():
                pipe.hsetnx(batch_key(job, "custom_ids"), custom_id, number)
            await pipe.execute()
            holders = await self.redis.hmget(batch_key(job, "custom_ids"), list(seen))
        for (custom_id, number), holder in zip(seen.items(), holders):
            if holder is not None and int(holder) != number:  # a line resent after a crash holds its own id
                repeats[number] = int(holder)
        return repeats

    async def _already_sent(self, job: str, topic: str, doubt: dict[bytes, bytes]) -> set[int]:
        """The lines of the chunk in doubt that reached the lane before the crash."""
        first, last = int(doubt[b"first"]), int(doubt[b"last"])
        offsets = {int(p): o for p, o in json.loads(doubt[b"offsets"]).items()}
        found: set[int] = set()
        reader = new_consumer(self.settings, enable_auto_commit=False)
        await reader.start()
        try:
            partitions = [TopicPartition(topic, p) for p in offsets]
            reader.assign(partitions)
            ends = await reader.end_offsets(partitions)
            if sum(ends[tp] - offsets[tp.partition] for tp in partitions) > self.settings.batch_max_doubt_scan:
                return set()
            for tp in partitions:
                reader.seek(tp, offsets[tp.partition])
            while await behind(reader, ends):
                for records in (await reader.getmany(timeout_ms=1000, max_records=5000)).values():
                    for record in records:
                        line = line_of(job, (record.key or b"").decode(errors="replace"))
                        if line is not None and first <= line <= last:
                            found.add(line)
        finally:
            await reader.stop()
        return found

    async def _cancelled(self, job: str) -> bool:
        return await self.redis.hget(batch_key(job), "state") == JobState.cancelled.value.encode()

    async def status(self, job: str, tenant: str, *, collect: bool = True) -> JobStatus:
        fields = await self.redis.hgetall(batch_key(job))
        if not fields or fields.get(b"tenant", b"").decode() != tenant:
            raise BatchError(f"no batch job {job}", status=404)  # another tenant's job reads as unknown
        if collect:
            await self.results.collect(job)
            fields = await self.redis.hgetall(batch_key(job))
        done = await self.redis.bitcount(batch_key(job, "done"))
        failed = await self.redis.bitcount(batch_key(job, "failed"))
        state = JobState(fields[b"state"].decode())
        total = int(fields[b"total"]) if b"total" in fields else None
        refused = int(fields.get(b"refused", 0))
        finished = int(fields[b"finished_ms"]) if b"finished_ms" in fields else None
        if state is JobState.running and total is not None and done + failed + refused >= total:
            finished = now_ms()
            await self.redis.hset(batch_key(job), mapping={"state": JobState.completed.value, "finished_ms": finished})
            state = JobState.completed
        return JobStatus(id=job, tenant=tenant, model=fields[b"model"].decode(), state=state,
                         name=fields.get(b"name", b"").decode(), created_ms=int(fields[b"created_ms"]),
                         read=int(fields.get(b"read", 0)), total=total, refused=refused, done=done, failed=failed,
                         results_topic=fields[b"results_topic"].decode(), retention_s=int(fields[b"retention_s"]),
                         finished_ms=finished)

    async def output(self, job: str, tenant: str) -> AsyncIterator[OutputRow]:
        """One row per line answered `ok` (or `degraded`), the first answer of each, in topic order."""
        await self.status(job, tenant, collect=False)
        async for row in self.results.output(job):
            yield row

    async def errors(self, job: str, tenant: str) -> AsyncIterator[ErrorRow]:
        """Lines refused at submit, then lines the fleet answered with an error and never with a result."""
        status = await self.status(job, tenant)
        async for row in self.results.errors(job, with_failures=status.failed > 0):
            yield row

    async def cancel(self, job: str, tenant: str) -> JobStatus:
        """Stop the job: nothing more is sent, and workers answer its queued requests `cancelled`
        instead of computing them."""
        status = await self.status(job, tenant, collect=False)
        if status.state in (JobState.completed, JobState.cancelled):
            return status
        expiry = now_ms() + self.settings.batch_retention_s * 1000
        async with self.redis.pipeline(transaction=True) as tx:
            tx.hset(batch_key(job), mapping={"state": JobState.cancelled.value, "finished_ms": now_ms()})
            tx.zadd(CANCELLED_BATCHES_KEY, {job: expiry})
            tx.zremrangebyscore(CANCELLED_BATCHES_KEY, 0, now_ms())
            await tx.execute()
        return await self.status(job, tenant, collect=False)

    async def list(self, tenant: str, limit: int = 100) -> list[JobStatus]:
        jobs = await self.redis.zrevrange(tenant_batches_key(tenant), 0, limit - 1)
        found = []
        for job in jobs:
            try:
                found.append(await self.status(job.decode(), tenant, collect=False))
            except BatchError:
                await self.redis.zrem(tenant_batches_key(tenant), job)  # expired
        return found
