import asyncio

from redis.asyncio import Redis

from fleet.commands.debug import remaining_s, switch_on
from gateway.client import FleetClient, RequestOptions
from schemas.names import TRACE_TOPIC
from schemas.wire import TraceRecord
from tests.integration.conftest import MODEL, end_offsets, read_from
from workers.settings import WorkerSettings

SWITCH_S = 2.0
SWITCH_REFRESH_S = 0.1


async def test_debug_mode_records_redacted_requests_and_stops_by_itself(client: FleetClient, serve,  # type: ignore[no-untyped-def]
                                                                        worker_settings: WorkerSettings,
                                                                        redis: Redis) -> None:
    async with serve(worker_settings.model_copy(update={"debug_switch_refresh_s": SWITCH_REFRESH_S})) as worker:
        start = await end_offsets(client.settings, TRACE_TOPIC)
        await switch_on(redis, MODEL, SWITCH_S)
        traced = await client.infer(MODEL, "I am jane.doe@example.com, card 4111 1111 1111 1111", timeout=30)
        for _ in range(50):  # traces are written just after the reply is delivered
            if worker.tracer.recorded:
                break
            await asyncio.sleep(0.02)
        assert worker.tracer.recorded >= 1
        while await remaining_s(redis, MODEL) is not None:  # the switch expires on its own
            await asyncio.sleep(0.1)
        await asyncio.sleep(2 * SWITCH_REFRESH_S)  # the worker re-reads the switches this often
        recorded_before = worker.tracer.recorded
        untraced = await client.infer(MODEL, "not recorded: bob@example.com", timeout=30)
        await asyncio.sleep(0.2)
        assert worker.tracer.recorded == recorded_before
        flagged = await client.infer(MODEL, "flagged call from +49 30 1234567", timeout=30,
                                     options=RequestOptions(debug=True))

    values = await read_from(client.settings, start, until=lambda v: len(v) >= 2, timeout_s=10)
    traces = {t.id: t for t in (TraceRecord.decode(v) for v in values)}
    record = traces[traced.id]
    assert record.input == "I am <email>, card <card>"
    assert record.outputs is not None and len(record.outputs["embedding"]) == 384
    assert {"queue_ms", "inference_ms"} <= set(record.timings) and record.batch_size >= 1
    assert untraced.id not in traces
    assert traces[flagged.id].input == "flagged call from <phone>" and traces[flagged.id].reason == "request flag"
