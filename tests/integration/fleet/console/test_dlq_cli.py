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
