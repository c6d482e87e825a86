from dataclasses import dataclass

import msgpack

from schemas.wire import ReplyTo, Request, Status, new_request_id
from workers.compute.provenance import Provenance
from workers.compute.triage import triage

WHO = Provenance(model="minilm-embed", version="minilm-embed-20261130-001", device="cpu", worker="w")
NOW = 1_800_000_000_000


@dataclass
class Record:
    value: bytes | None
    topic: str = "fleet.requests.minilm-embed"
    partition: int = 0
    offset: int = 0
    timestamp: int = NOW


def request_bytes(**overrides: object) -> bytes:
    fields: dict[str, object] = dict(id=new_request_id(), model="minilm-embed", inputs={"text": "hi"},
                                     reply=ReplyTo(redis="w"), deadline_ms=NOW + 1000, submitted_ms=NOW - 5)
    fields.update(overrides)
    return Request(**fields).encode()


def test_each_record_lands_in_exactly_one_place() -> None:
    records = [Record(request_bytes()), Record(b"\xc1garbage", offset=1), Record(None, offset=2),
               Record(request_bytes(deadline_ms=NOW - 1), offset=3), Record(request_bytes(model="other"), offset=4),
               Record(request_bytes(inputs={"image": "x"}), offset=5)]
    sorted_out = triage(records, WHO, NOW)
    assert [r.text for r in sorted_out.ready] == ["hi"]
    assert {d.offset for d in sorted_out.dead_letters} == {1, 2, 5}
    statuses = sorted(o.result.status.value for o in sorted_out.answered)
    assert statuses == ["error", "error", "expired"]
    assert sorted_out.expired == 1


def test_dead_letter_has_reason_and_position() -> None:
    missing = msgpack.packb({"v": 1, "id": new_request_id()})
    [letter] = triage([Record(missing, partition=2, offset=9)], WHO, NOW).dead_letters
    assert letter.partition == 2 and letter.offset == 9 and letter.original == missing
    assert "model" in letter.reason and "deadline_ms" in letter.reason


def test_expired_request_is_not_ready_and_says_why() -> None:
    sorted_out = triage([Record(request_bytes(deadline_ms=NOW))], WHO, NOW)
    assert not sorted_out.ready
    [outcome] = sorted_out.answered
    assert outcome.result.status is Status.expired
    assert outcome.result.error is not None and outcome.result.error.code == "deadline_exceeded"


def test_pinned_version_that_is_not_loaded_is_an_error_result() -> None:
    sorted_out = triage([Record(request_bytes(version="minilm-embed-20200101-001"))], WHO, NOW)
    [outcome] = sorted_out.answered
    assert outcome.result.error is not None and outcome.result.error.code == "version_unavailable"


def test_dead_letters_carry_a_code_for_metrics() -> None:
    records = [Record(b"\xc1", offset=1), Record(None, offset=2), Record(msgpack.packb([1]), offset=3),
               Record(msgpack.packb({"v": 7}), offset=4), Record(msgpack.packb({"v": 1}), offset=5),
               Record(request_bytes(inputs={"image": "x"}), offset=6)]
    codes = {d.offset: d.code for d in triage(records, WHO, NOW).dead_letters}
    assert codes == {1: "not_msgpack", 2: "empty", 3: "not_a_map", 4: "schema_version", 5: "invalid_fields",
                     6: "invalid_input"}
