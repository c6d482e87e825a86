"""`fleet dlq list|show|replay|purge` against the real stack: the functions the console calls."""

from __future__ import annotations

import asyncio
import secrets
import time

import pytest

from common.clients import new_producer
from common.settings import FleetSettings
from fleet.commands import dlq
from fleet.exits import Exit
from schemas.names import DEFAULT_RESULTS_TOPIC, DLQ_TOPIC, requests_topic
from schemas.wire import DeadLetter, ReplyTo, Request, new_request_id
from workers.delivery.dead_letters import DeadLetterPolicy
from tests.integration.conftest import MODEL


async def produce_letter(settings: FleetSettings, code: str) -> str:
    now = int(time.time() * 1000)
    request = Request(id=new_request_id(), model=MODEL, inputs={"text": "call 555-123-4567, dave@example.org"},
                      reply=ReplyTo(topic=DEFAULT_RESULTS_TOPIC), deadline_ms=now + 600_000, submitted_ms=now)
    raw = request.encode()
    letter = DeadLetter(reason="put here by a test", code=code, topic=requests_topic(MODEL), partition=0, offset=0,
                        original=raw, original_size=len(raw))
    producer = new_producer(settings, linger_ms=0)
    await producer.start()
    try:
        await producer.send_and_wait(DLQ_TOPIC, DeadLetterPolicy(keep_original=True).outgoing(letter).encode())
    finally:
        await producer.stop()
    return request.id


def test_list_show_replay_twice_and_purge(stack: FleetSettings, capsys: pytest.CaptureFixture[str]) -> None:
    code = f"cli_test_{secrets.token_hex(3)}"
    request_id = asyncio.run(produce_letter(stack, code))
    assert dlq.main(["list", "--code", code]) == Exit.OK
    listed = capsys.readouterr().out
    ref = next(line.split()[0] for line in listed.splitlines() if code in line and ":" in line.split()[0])
    assert dlq.main(["show", ref]) == Exit.OK
    shown = capsys.readouterr().out
    assert request_id in shown and "dave@example.org" not in shown and "<email>" in shown

    assert dlq.main(["replay", ref, "--reason", "cli test"]) == Exit.OK
    assert f"{ref} replayed to {requests_topic(MODEL)}/" in capsys.readouterr().out
    assert dlq.main(["replay", "--code", code, "--reason", "resume"]) == Exit.OK  # nothing left: a resume
    assert "0 replayed, 1 skipped" in capsys.readouterr().out
    assert dlq.main(["replay", ref, "--again", "--reason", "on purpose"]) == Exit.OK
    capsys.readouterr()
    assert dlq.main(["list", "--code", code]) == Exit.OK
    assert " 2x " in capsys.readouterr().out

    assert dlq.main(["purge", "--reason", "cli test"]) == Exit.FAILED  # not without --yes
    assert dlq.main(["purge", "--yes", "--reason", "cli test"]) == Exit.OK
    capsys.readouterr()
    assert dlq.main(["list", "--code", code]) == Exit.OK
    assert "no dead letters" in capsys.readouterr().out


async def produce_dated_letter(settings: FleetSettings, code: str, reason: str, time_ms: int) -> None:
    letter = DeadLetter(reason=reason, code=code, topic=requests_topic(MODEL), partition=0, offset=0, time_ms=time_ms)
    producer = new_producer(settings, linger_ms=0)
    await producer.start()
    try:
        await producer.send_and_wait(DLQ_TOPIC, DeadLetterPolicy(keep_original=False).outgoing(letter).encode())
    finally:
        await producer.stop()


def test_list_filters_by_time(stack: FleetSettings, capsys: pytest.CaptureFixture[str]) -> None:
    code = f"cli_time_{secrets.token_hex(3)}"
    now = int(time.time() * 1000)
    asyncio.run(produce_dated_letter(stack, code, "three hours old", now - 3 * 3600_000))
    asyncio.run(produce_dated_letter(stack, code, "just now", now))

    def listed(*bounds: str) -> str:
        assert dlq.main(["list", "--code", code, *bounds]) == Exit.OK
        return capsys.readouterr().out
    assert "three hours old" in listed() and "just now" in listed()
    recent = listed("--since", "1h")
    assert "just now" in recent and "three hours old" not in recent
    older = listed("--until", "1h")
    assert "three hours old" in older and "just now" not in older
    window = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now / 1000 - 4 * 3600))
    assert "three hours old" in listed("--since", window, "--until", "2h")
    assert "no dead letters with code" in listed("--since", "1h", "--until", "30m")
    assert dlq.main(["list", "--since", "yesterday"]) == Exit.FAILED
    assert "not a time: 'yesterday'" in capsys.readouterr().err
