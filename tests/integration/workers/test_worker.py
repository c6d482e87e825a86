import asyncio

import msgpack
import numpy as np

from gateway.client import FleetClient
from schemas.names import DLQ_TOPIC, requests_topic
from schemas.wire import DeadLetter, ReplyTo, Status, new_request_id, now_ms
from tests.integration.conftest import MODEL, end_offsets, read_from, serving
from models.backends.base import Backend
from models.loading import ModelLoader
from workers.worker import Worker
from workers.settings import WorkerSettings


async def test_burst_worker_drains_and_answers_with_provenance(client: FleetClient, worker_settings: WorkerSettings,
                                                               backend: Backend) -> None:
    async with Worker(worker_settings, backend=backend) as worker:
        ids = [await client.submit(MODEL, f"parcel number {i} is late") for i in range(40)]
        await worker.run(burst=True)
    results = [await client.result(i) for i in ids]
    assert all(r is not None and r.status is Status.ok for r in results)
    first = results[0]
    assert first is not None and first.outputs is not None
    assert len(first.outputs["embedding"]) == 384
    assert first.version == backend.manifest.id and first.device == "cpu" and first.worker == worker.worker_id
    assert first.batch_size >= 1 and {"queue_ms", "inference_ms"} <= set(first.timings)
    assert max(r.batch_size for r in results if r) > 1, "40 queued requests should share batches"


async def test_malformed_and_incomplete_messages_go_to_dlq_and_worker_keeps_serving(
        client: FleetClient, producer, worker_settings: WorkerSettings, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    async with Worker(worker_settings, backend=backend) as worker:
        before = await end_offsets(worker_settings, DLQ_TOPIC)
        marker = new_request_id()
        garbage = b"\xc1\xc1 not msgpack " + marker.encode()
        incomplete = msgpack.packb({"v": 1, "id": marker, "model": MODEL, "inputs": {"text": "mail ann@example.com"}})
        topic = requests_topic(MODEL)
        await producer.send_and_wait(topic, garbage)
        good_before = await client.submit(MODEL, "a good request between bad ones")
        await producer.send_and_wait(topic, incomplete)
        good_after = await client.submit(MODEL, "a good request after bad ones")
        await worker.run(burst=True)
        assert worker.processed >= 4
    letters = [DeadLetter.decode(v) for v in await read_from(worker_settings, before, until=lambda v: len(v) >= 2)]
    by_code = {letter.code: letter for letter in letters}
    assert "not msgpack" in by_code["not_msgpack"].reason
    assert by_code["not_msgpack"].topic == topic and by_code["not_msgpack"].offset >= 0
    missing_fields = by_code["invalid_fields"]
    assert "deadline_ms" in missing_fields.reason and "submitted_ms" in missing_fields.reason
    # By default a dead letter carries no raw bytes, only the record with its texts masked.
    assert all(letter.original is None for letter in letters)
    assert by_code["not_msgpack"].masked is None and by_code["not_msgpack"].original_size == len(garbage)
    assert missing_fields.masked == {"v": 1, "id": marker, "model": MODEL, "inputs": {"text": "mail <email>"}}
    for request_id in (good_before, good_after):
        result = await client.result(request_id)
        assert result is not None and result.status is Status.ok


async def test_expired_request_is_answered_expired_without_compute(client: FleetClient, producer,  # type: ignore[no-untyped-def]
                                                                   worker_settings: WorkerSettings,
                                                                   backend: Backend) -> None:
    async with Worker(worker_settings, backend=backend) as worker:
        request = client.build_request(MODEL, "too late", timeout=30, reply=ReplyTo())
        stale = request.model_copy(update={"deadline_ms": now_ms() - 1})
        await producer.send_and_wait(requests_topic(MODEL), stale.encode())
        await worker.run(burst=True)
    result = await client.result(stale.id)
    assert result is not None and result.status is Status.expired
    assert result.error is not None and result.error.code == "deadline_exceeded"
    assert result.batch_size == 0, "an expired request must never join a model batch"


async def test_two_workers_in_one_group_share_partitions_and_both_serve(client: FleetClient, serve,  # type: ignore[no-untyped-def]
                                                                        worker_settings: WorkerSettings) -> None:
    first_settings = worker_settings.model_copy(update={"worker_id": "group-a"})
    second_settings = worker_settings.model_copy(update={"worker_id": "group-b"})
    async with serve(first_settings) as first, serve(second_settings) as second:
        for _ in range(200):  # wait until the rebalance settles into a clean split
            assigned_a, assigned_b = first.assignment(), second.assignment()
            if assigned_a and assigned_b and not (assigned_a & assigned_b) and len(assigned_a | assigned_b) == 4:
                break
            await asyncio.sleep(0.1)
        results = await asyncio.gather(*(client.infer(MODEL, f"question {i}", timeout=30) for i in range(200)))
    assert assigned_a and assigned_b and not (assigned_a & assigned_b), (assigned_a, assigned_b)
    assert {r.worker for r in results} == {"group-a", "group-b"}
    assert all(r.status is Status.ok for r in results)


async def test_identical_text_gives_the_in_process_embedding(client: FleetClient, serve, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    text = "How do I reset my password?"
    async with serve():
        result = await client.infer(MODEL, text, timeout=30)
    assert result.outputs is not None
    served = np.asarray(result.outputs["embedding"], dtype=np.float32)
    local = backend.infer([text])[0]
    assert float(served @ local / (np.linalg.norm(served) * np.linalg.norm(local))) >= 0.999


async def test_overlong_inputs_are_truncated_or_rejected_as_configured(client: FleetClient,
                                                                       worker_settings: WorkerSettings) -> None:
    long_text = " ".join(["word"] * 80)
    rejecting = worker_settings.model_copy(update={"max_input_tokens": 16, "overlong_inputs": "reject"})
    short_backend = ModelLoader(rejecting.runtime()).load()  # truncation length is fixed when the tokenizer loads
    async with serving(rejecting, short_backend):
        rejected, short = await asyncio.gather(client.infer(MODEL, long_text, timeout=30),
                                               client.infer(MODEL, "short enough", timeout=30))
    assert rejected.status is Status.error and rejected.error is not None
    assert rejected.error.code == "input_too_long"
    assert short.status is Status.ok
    async with serving(worker_settings.model_copy(update={"max_input_tokens": 16}), short_backend):
        truncated = await client.infer(MODEL, long_text, timeout=30)
    assert truncated.status is Status.ok and truncated.outputs is not None
