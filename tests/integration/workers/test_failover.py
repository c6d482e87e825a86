import asyncio
import signal
import time
from collections import Counter
from pathlib import Path

from common.topics import ensure_topics
from gateway.client import FleetClient
from schemas.wire import ReplyTo, Request, Result, Status, new_request_id
from tests.integration.conftest import MODEL, Process, end_offsets, read_from, start_worker

LOAD = 1000
PUBLISH_PER_S = 250  # slower than one worker serves, so the kill lands while requests still arrive


async def publish_paced(client: FleetClient, requests: list[Request]) -> None:
    started = time.monotonic()
    for n, request in enumerate(requests):
        await client.publish(request)
        ahead = n / PUBLISH_PER_S - (time.monotonic() - started)
        if ahead > 0:
            await asyncio.sleep(ahead)


async def test_sigkilled_worker_loses_no_request(client: FleetClient, processes: list[Process], tmp_path: Path) -> None:
    kafka = client.settings
    results_topic = f"fleet.results.test-{new_request_id()[:12]}"
    await ensure_topics(kafka, [results_topic], 4)
    start = await end_offsets(kafka, results_topic)
    victim = start_worker(processes, tmp_path, "victim")

    requests = [client.build_request(MODEL, f"load item {i} about order {i * 13}", timeout=300,
                                     reply=ReplyTo(topic=results_topic)) for i in range(LOAD)]
    expected = {r.id for r in requests}
    publishing = asyncio.create_task(publish_paced(client, requests))

    seen = await read_from(kafka, start, until=lambda v: len(v) >= LOAD // 4, timeout_s=120)
    victim.stop(signal.SIGKILL)
    killed_at = time.monotonic()
    assert victim.popen.returncode == -signal.SIGKILL
    start_worker(processes, tmp_path, "successor")
    await publishing

    def all_answered(values: list[bytes]) -> bool:
        return len(values) >= LOAD and expected <= {Result.decode(v).id for v in values}

    values = await read_from(kafka, start, until=all_answered, timeout_s=180)
    results = [Result.decode(v) for v in values]
    counts = Counter(r.id for r in results)
    missing = expected - set(counts)
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    by_worker = Counter(r.worker for r in results)
    print(f"\nkilled after {len(seen)} results; all answered {time.monotonic() - killed_at:.1f}s later; "
          f"results {len(results)}, distinct {len(counts)}, duplicates {duplicates}, missing {len(missing)}, "
          f"by worker {dict(by_worker)}")
    assert not missing, f"{len(missing)} requests lost"
    assert by_worker["victim"] < LOAD // 2 and by_worker["successor"] > LOAD // 4, "the kill must land mid-load"
    assert all(r.status is Status.ok for r in results)


async def test_sigterm_finishes_the_batch_in_hand_and_leaves_cleanly(client: FleetClient, processes: list[Process],
                                                                     tmp_path: Path) -> None:
    kafka = client.settings
    results_topic = f"fleet.results.test-{new_request_id()[:12]}"
    await ensure_topics(kafka, [results_topic], 4)
    start = await end_offsets(kafka, results_topic)
    leaving = start_worker(processes, tmp_path, "leaving")
    requests = [client.build_request(MODEL, f"graceful item {i}", timeout=300, reply=ReplyTo(topic=results_topic))
                for i in range(400)]
    expected = {r.id for r in requests}
    publishing = asyncio.create_task(publish_paced(client, requests))
    await read_from(kafka, start, until=lambda v: len(v) >= 50, timeout_s=60)
    assert leaving.stop(signal.SIGTERM) == 0, leaving.log_path.read_text()[-2000:]
    start_worker(processes, tmp_path, "staying")
    await publishing

    def all_answered(values: list[bytes]) -> bool:
        return expected <= {Result.decode(v).id for v in values}

    results = [Result.decode(v) for v in await read_from(kafka, start, until=all_answered, timeout_s=120)]
    counts = Counter(r.id for r in results)
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    print(f"\nSIGTERM: results {len(results)}, duplicates {duplicates}, by worker {dict(Counter(r.worker for r in results))}")
    assert expected <= set(counts)
    assert duplicates == 0, "a graceful stop commits what it delivered, so nothing is redelivered"
