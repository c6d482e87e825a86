"""Batch jobs against the real Kafka, Redis and a worker: every line answered once or in the errors
file, a submit resumed after a crash sends no line twice, cancel stops computing, tenants are apart."""

import asyncio
import json
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from common.settings import FleetSettings
from gateway.batch_jobs import BatchError, BatchJobs, JobState, JobStatus, line_of, request_id
from gateway.settings import BatchSettings
from gateway.client import FleetClient
from gateway.settings import GatewaySettings
from schemas.wire import ErrorInfo, Result, Status
from tests.integration.conftest import MODEL, end_offsets
from tests.integration.gateway.gateway_harness import in_process, issue_key

TENANT, OTHER = "batch-tenant", "batch-other"


def line(custom_id: str, text: object) -> bytes:
    return json.dumps({"custom_id": custom_id, "inputs": {"text": text}}).encode()


def good_lines(n: int, prefix: str = "q") -> list[bytes]:
    return [line(f"{prefix}-{i}", f"batch question number {i} about parcels") for i in range(n)]


@pytest.fixture
def jobs(client: FleetClient) -> BatchJobs:
    return BatchJobs(client, BatchSettings(batch_chunk_lines=50))


async def landed_on_bulk(stack: FleetSettings, before: dict) -> int:  # type: ignore[type-arg]
    bulk = stack.lane_plan.topics(MODEL)[1]
    after = await end_offsets(stack, bulk)
    return sum(end - before.get(tp, 0) for tp, end in after.items())


async def until_finished(jobs: BatchJobs, job: str, timeout_s: float = 60) -> JobStatus:
    for _ in range(int(timeout_s / 0.2)):
        status = await jobs.status(job, TENANT)
        if status.state in (JobState.completed, JobState.cancelled) and status.answered >= (status.total or 0):
            return status
        await asyncio.sleep(0.2)
    raise AssertionError(f"job {job} not finished: {status}")


def test_request_ids_name_their_line_and_spread_partitions() -> None:
    job = "0123456789abcdef01234567"
    ids = [request_id(job, n) for n in range(1, 2001)]
    assert len(set(ids)) == 2000 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    assert [line_of(job, i) for i in ids] == list(range(1, 2001))
    assert line_of("f" * 24, ids[0]) is None
    assert len({int(i[:8], 16) % 4 for i in ids[:8]}) > 1


async def test_a_job_answers_every_good_line_once_and_lists_every_bad_one(jobs: BatchJobs, serve) -> None:  # type: ignore[no-untyped-def]
    lines = good_lines(120)
    lines[3] = b"{not json"
    lines[10] = json.dumps({"inputs": {"text": "no custom_id"}}).encode()
    lines[20] = line("q-5", "the same custom_id as line 6")
    lines[30] = line("q-30", 12345)  # the model rejects a number as text
    lines.insert(40, b"")  # blank lines are not requests, but still count in line numbers
    job = await jobs.create(TENANT, MODEL, name="mixed.jsonl")
    submitted = await jobs.submit(job.id, TENANT, iter(lines))
    assert submitted.state is JobState.running and submitted.total == 120 and submitted.refused == 3
    async with serve():
        finished = await until_finished(jobs, job.id)
    assert finished.state is JobState.completed
    assert (finished.done, finished.failed, finished.refused) == (116, 1, 3)
    rows = [row async for row in jobs.output(job.id, TENANT)]
    assert len(rows) == 116 and len({row.custom_id for row in rows}) == 116
    assert all(len(row.result.outputs["embedding"]) == 384 for row in rows)
    errors = {row.line: row async for row in jobs.errors(job.id, TENANT)}
    assert sorted(errors) == [4, 11, 21, 31]
    assert "not JSON" in errors[4].reason and "custom_id" in errors[11].reason
    assert errors[21].custom_id == "q-5" and "repeats line 6" in errors[21].reason
    assert errors[31].custom_id == "q-30" and errors[31].reason.startswith("invalid_input")


class CrashAfterKafka(BatchJobs):
    """Dies between Kafka's acknowledgement of its first chunk and the cursor's move in Redis."""

    crash_on_chunk = 1

    async def _record_chunk(self, job, chunk, custom_ids, refused) -> None:  # type: ignore[no-untyped-def]
        self.crash_on_chunk -= 1
        if self.crash_on_chunk == 0:
            raise ConnectionError("the submitting process died here")
        await super()._record_chunk(job, chunk, custom_ids, refused)


async def test_a_submit_killed_half_way_resumes_without_sending_a_line_twice(
        client: FleetClient, stack: FleetSettings) -> None:
    settings = BatchSettings(batch_chunk_lines=50)
    lines = good_lines(230, "r")

    def interrupted() -> Iterator[bytes]:
        yield from lines[:130]
        raise KeyboardInterrupt  # Ctrl-C while reading the third chunk

    before = await end_offsets(stack, stack.lane_plan.topics(MODEL)[1])
    jobs = BatchJobs(client, settings)
    job = await jobs.create(TENANT, MODEL)
    with pytest.raises(KeyboardInterrupt):
        await jobs.submit(job.id, TENANT, interrupted())
    assert (await jobs.status(job.id, TENANT, collect=False)).read == 100
    with pytest.raises(ConnectionError):
        await CrashAfterKafka(client, settings).submit(job.id, TENANT, iter(lines))
    assert (await jobs.status(job.id, TENANT, collect=False)).read == 100, "the crashed chunk was not recorded"
    changed = lines[:60] + [line("r-x", "another file")] + lines[61:]
    with pytest.raises(BatchError, match="differ from the file") as refused:
        await jobs.submit(job.id, TENANT, iter(changed))
    assert refused.value.status == 409
    resumed = await jobs.submit(job.id, TENANT, iter(lines))
    assert resumed.state is JobState.running and resumed.total == 230
    assert await landed_on_bulk(stack, before) == 230, "each line reached the lane exactly once"
    await jobs.cancel(job.id, TENANT)  # its requests are answered `cancelled` by the next test's worker


async def test_cancel_stops_the_queued_requests_from_being_computed(jobs: BatchJobs, serve) -> None:  # type: ignore[no-untyped-def]
    job = await jobs.create(TENANT, MODEL)
    await jobs.submit(job.id, TENANT, iter(good_lines(80, "c")))
    cancelled = await jobs.cancel(job.id, TENANT)
    assert cancelled.state is JobState.cancelled
    with pytest.raises(BatchError, match="cancelled"):
        await jobs.submit(job.id, TENANT, iter(good_lines(80, "c")))
    async with serve():
        finished = await until_finished(jobs, job.id)
    assert finished.done == 0 and finished.failed == 80
    errors = [row async for row in jobs.errors(job.id, TENANT)]
    assert len(errors) == 80 and all(row.reason.startswith("cancelled") for row in errors)
    assert [row async for row in jobs.output(job.id, TENANT)] == []


async def test_a_tenant_sees_only_its_own_jobs(jobs: BatchJobs, redis: Redis) -> None:
    mine = await jobs.create(TENANT, MODEL, name="mine")
    theirs = await jobs.create(OTHER, MODEL, name="theirs")
    assert mine.id in [job.id for job in await jobs.list(TENANT)]
    assert theirs.id not in [job.id for job in await jobs.list(TENANT)]
    for call in (jobs.status(theirs.id, TENANT), jobs.cancel(theirs.id, TENANT),
                 jobs.submit(theirs.id, TENANT, iter(good_lines(1)))):
        with pytest.raises(BatchError, match=f"no batch job {theirs.id}") as unknown:
            await call
        assert unknown.value.status == 404
    assert (await jobs.status(theirs.id, OTHER, collect=False)).state is JobState.submitting


async def test_a_file_over_the_limits_is_refused_before_anything_is_sent(client: FleetClient) -> None:
    jobs = BatchJobs(client, BatchSettings(batch_max_file_bytes=2048, batch_max_lines=10))
    with pytest.raises(BatchError, match="limit is 2048") as too_big:
        await jobs.create(TENANT, MODEL, size_bytes=4096)
    assert too_big.value.status == 413
    job = await jobs.create(TENANT, MODEL)

    async def eleven() -> AsyncIterator[bytes]:
        for raw in good_lines(11):
            yield raw

    with pytest.raises(BatchError, match="more than 10 lines"):
        await jobs.submit(job.id, TENANT, eleven())


async def test_batches_over_http_under_each_callers_tenant(stack: FleetSettings, serve) -> None:  # type: ignore[no-untyped-def]
    mine, theirs = await issue_key(stack.redis_url, TENANT), await issue_key(stack.redis_url, OTHER)
    body = b"\n".join(good_lines(30, "h") + [b"[1, 2]", line("h-0", "repeat")]) + b"\n"
    settings = GatewaySettings(models=[MODEL], batch_max_file_bytes=64 * 1024)
    async with in_process(settings, key=mine) as http:
        made = await http.post("/v1/batches", params={"model": MODEL, "name": "http.jsonl"}, content=body,
                               headers={"content-type": "application/jsonl"})
        assert made.status_code == 200, made.text
        job = made.json()["id"]
        assert made.json()["request_counts"] == {"total": 32, "read": 32, "done": 0, "failed": 2,
                                                 "refused_at_submit": 2}
        other = {"authorization": f"Bearer {theirs}"}
        assert (await http.get(f"/v1/batches/{job}", headers=other)).status_code == 404
        assert (await http.post(f"/v1/batches/{job}/cancel", headers=other)).status_code == 404
        assert job not in (await http.get("/v1/batches", headers=other)).text
        assert job in [j["id"] for j in (await http.get("/v1/batches")).json()["data"]]
        too_big = await http.post("/v1/batches", params={"model": MODEL}, content=b"x" * (65 * 1024))
        assert too_big.status_code == 413, too_big.text
        unknown = await http.post("/v1/batches", params={"model": "no-such-model"}, content=body)
        assert unknown.status_code == 404 and "no-such-model" in unknown.text
        async with serve():
            for _ in range(300):
                state = (await http.get(f"/v1/batches/{job}")).json()
                if state["state"] == "completed":
                    break
                await asyncio.sleep(0.2)
        assert state["request_counts"]["done"] == 30, state
        output = (await http.get(f"/v1/batches/{job}/output")).text.splitlines()
        errors = [json.loads(row) for row in (await http.get(f"/v1/batches/{job}/errors")).text.splitlines()]
        no_key = await http.get(f"/v1/batches/{job}", headers={"authorization": ""})
    assert sorted(json.loads(row)["custom_id"] for row in output) == sorted(f"h-{i}" for i in range(30))
    assert sorted(e["line"] for e in errors) == [31, 32] and errors[0]["reason"]
    assert no_key.status_code == 401


async def test_a_result_delivered_twice_counts_and_shows_once(jobs: BatchJobs, producer) -> None:  # type: ignore[no-untyped-def]
    """At-least-once results topics: a worker's redelivery puts a line's result on the topic again,
    often in the same read as the first copy. The job counts it once and writes it once."""
    job = await jobs.create(TENANT, MODEL)
    await jobs.submit(job.id, TENANT, iter(good_lines(5, "d")))
    await jobs.cancel(job.id, TENANT)  # no worker computes these: the results below stand in for theirs
    first_fail = Result(id=request_id(job.id, 5), model=MODEL, status=Status.error,
                        error=ErrorInfo(code="worker_error", message="the batch failed"))
    answers = [Result(id=request_id(job.id, n), model=MODEL, status=Status.ok, outputs={"embedding": [0.5] * 4})
               for n in (1, 2, 3, 4, 5)]
    for result in [first_fail, *answers, *answers]:
        await producer.send_and_wait(job.results_topic, result.encode(), key=result.id.encode())
    status = await jobs.status(job.id, TENANT)
    assert (status.done, status.failed) == (5, 0), "line 5's later answer replaces its failure"
    rows = [row async for row in jobs.output(job.id, TENANT)]
    assert sorted(row.custom_id for row in rows) == [f"d-{i}" for i in range(5)]
    assert [row async for row in jobs.errors(job.id, TENANT)] == []
