import msgpack
import pytest

from schemas.names import fallback_topic, reply_stream, requests_topic, result_key
from schemas.wire import (SCHEMA_VERSION, CacheTier, DeadLetter, ErrorInfo, ReplyTo, Request, Result, Status, WireError,
                          new_request_id, now_ms)


def a_request(**overrides: object) -> Request:
    fields: dict[str, object] = dict(id=new_request_id(), model="minilm-embed", inputs={"text": "hello"},
                                     reply=ReplyTo(redis="w1"), deadline_ms=2_000_000_000_000,
                                     submitted_ms=1_700_000_000_000)
    fields.update(overrides)
    return Request(**fields)


def test_request_round_trips_through_msgpack() -> None:
    request = a_request(params={"normalize": True}, tenant="acme", priority=3)
    assert Request.decode(request.encode()) == request


def test_encoded_request_is_a_plain_msgpack_map_with_schema_version() -> None:
    data = msgpack.unpackb(a_request().encode())
    assert data["v"] == SCHEMA_VERSION
    assert data["inputs"] == {"text": "hello"}
    assert "version" not in data  # None fields are left out, not sent as nil


def test_result_embedding_survives_single_float_packing() -> None:
    result = Result(id=new_request_id(), model="m", status=Status.ok, outputs={"embedding": [0.25, -0.5]})
    assert Result.decode(result.encode()).outputs == {"embedding": [0.25, -0.5]}


def test_garbage_bytes_are_a_wire_error_naming_msgpack() -> None:
    with pytest.raises(WireError, match="not msgpack"):
        Request.decode(b"\xc1\xff not msgpack")


def test_a_non_map_is_refused() -> None:
    with pytest.raises(WireError, match="expected a msgpack map"):
        Request.decode(msgpack.packb([1, 2, 3]))


def test_missing_fields_are_named() -> None:
    raw = msgpack.packb({"v": 1, "id": new_request_id(), "model": "minilm-embed"})
    with pytest.raises(WireError) as caught:
        Request.decode(raw)
    assert "inputs" in str(caught.value) and "deadline_ms" in str(caught.value)


def test_bad_id_and_unknown_schema_version() -> None:
    raw = a_request().model_dump() | {"id": "not-hex"}
    with pytest.raises(WireError, match="id"):
        Request.decode(msgpack.packb(raw))
    with pytest.raises(WireError, match="unsupported schema version"):
        Request.decode(msgpack.packb(a_request().model_dump() | {"v": 99}))


def test_text_accessor_requires_a_string() -> None:
    with pytest.raises(WireError, match="inputs.text"):
        _ = a_request(inputs={"text": 42}).text


def test_dead_letter_keeps_original_bytes() -> None:
    letter = DeadLetter(reason="not msgpack", topic="t", partition=1, offset=7, original=b"\x00\x01")
    assert DeadLetter.decode(letter.encode()).original == b"\x00\x01"


def test_names_are_defined_in_one_place() -> None:
    assert requests_topic("minilm-embed") == "fleet.requests.minilm-embed"
    assert fallback_topic("minilm-embed") == "fleet.requests.minilm-embed.cpu"
    assert result_key("ab") == "fleet:result:ab"
    assert reply_stream("w1") == "fleet:reply:w1"


@pytest.mark.parametrize("result", [
    Result(id="a" * 32, model="m", version="m-1", status=Status.ok, outputs={"embedding": [0.25, -1.5, 3.0]},
           device="cpu", batch_size=3, timings={"queue_ms": 1.5}, worker="w", tenant="t"),
    Result(id="b" * 32, model="m", status=Status.error, error=ErrorInfo(code="input_too_long", message="shorten it")),
    Result(id="c" * 32, model="m", status=Status.ok, cache=CacheTier.semantic, similarity=0.875,
           outputs={"label": "refund", "score": 0.875, "top": [["refund", 0.875], ["other", 0.125]]}),
], ids=["embedding", "error", "semantic-hit"])
def test_a_result_packs_to_the_bytes_its_model_dump_would(result: Result) -> None:
    dumped = msgpack.packb(result.model_dump(mode="python", exclude_none=True), use_bin_type=True,
                           use_single_float=True)
    assert result.encode() == dumped
    assert Result.decode(result.encode()) == result


def test_valid_msgpack_with_a_non_string_key_is_invalid_fields_not_garbage() -> None:
    for record in ({"v": 1, 7: "x"}, {"v": 1, "params": {1: 2}}):
        with pytest.raises(WireError) as refused:
            Request.decode(msgpack.packb(record))
        assert refused.value.code == "invalid_fields" and "map key is not a string" in str(refused.value)


@pytest.mark.parametrize("garbage", [b"\x81\x01\x02\x00", b"\x82\x07\xa1x\xc1"],
                         ids=["extra data", "reserved byte"])
def test_garbage_that_opens_with_an_int_key_is_not_msgpack(garbage: bytes) -> None:
    # 1 in ~20 random records opens with a map and an int key; CI once drew one.
    with pytest.raises(WireError) as refused:
        Request.decode(garbage)
    assert refused.value.code == "not_msgpack"


@pytest.mark.parametrize(("record", "code"), [
    ({"v": 2, 1: "x"}, "schema_version"),  # the version is what a reader checks first, keys or no keys
    ([{1: 2}], "not_a_map"),
    ({"v": 1, "params": {1: 2}}, "invalid_fields"),
], ids=["other version", "array", "our version"])
def test_a_record_with_an_int_key_is_judged_as_any_other_first(record: object, code: str) -> None:
    with pytest.raises(WireError) as refused:
        Request.decode(msgpack.packb(record))
    assert refused.value.code == code


@pytest.mark.parametrize("field", ["deadline_ms", "submitted_ms"])
def test_times_beyond_int64_are_refused_as_params_values_are(field: str) -> None:
    request = Request(id="ab" * 16, model="m", inputs={"text": "hi"}, deadline_ms=now_ms() + 1000,
                      submitted_ms=now_ms())
    fields = msgpack.unpackb(request.encode()) | {field: 2**64 - 1}
    with pytest.raises(WireError, match=field):
        Request.decode(msgpack.packb(fields))
