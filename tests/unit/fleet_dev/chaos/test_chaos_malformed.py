"""The chaos suite's malformed inputs are what they claim: each Kafka record kind fails (or passes)
the wire contract the way its label says, and each HTTP case carries the defect it names."""

from __future__ import annotations

import json
import random
from collections import Counter

import msgpack
import pytest

from fleet_dev.chaos import http_malformed, malformed
from fleet_dev.chaos.malformed import Expect, Malformed
from schemas.results_topics import results_topic_problem
from schemas.wire import Request, WireError

MODEL = "minilm-embed"
RESULTS = "fleet.results.chaos"
ALLOWED = __import__("re").compile(r"fleet\.results.*")


def base_maker(rng: random.Random):  # type: ignore[no-untyped-def]
    return lambda: malformed.valid_fields(rng, MODEL, RESULTS, 2_000_000_000_000, 1_900_000_000_000)


def records(kind: str, count: int = 40, seed: int = 1) -> list[Malformed]:
    rng = random.Random(seed)
    make = base_maker(rng)
    generator = {**malformed.KINDS, **malformed.HUGE_KINDS}[kind]
    return [generator(rng, make()) for _ in range(count)]


def test_the_valid_base_request_keeps_the_contract() -> None:
    fields = base_maker(random.Random(3))()
    request = Request.decode(malformed.pack(fields))
    assert request.reply.topic == RESULTS and request.text.startswith("chaos flood")


@pytest.mark.parametrize("kind", [k for k in malformed.KINDS if k not in
                                  ("control_chars", "reply_topic_refused", "text_not_a_string")])
def test_dead_letter_kinds_are_refused_by_the_wire_contract(kind: str) -> None:
    for record in records(kind):
        assert record.expect is Expect.dead_letter and record.dead_lettered
        with pytest.raises(WireError):
            Request.decode(record.value)


def test_refused_reply_topics_decode_but_no_results_topic_takes_them() -> None:
    for record in records("reply_topic_refused"):
        request = Request.decode(record.value)
        assert request.reply.topic is not None
        assert results_topic_problem(request.reply.topic, ALLOWED) is not None
        assert record.expect is Expect.dead_letter_and_error and record.request_id == request.id


def test_a_text_that_is_no_string_decodes_but_has_no_text() -> None:
    for record in records("text_not_a_string"):
        with pytest.raises(WireError, match="inputs.text"):
            _ = Request.decode(record.value).text


def test_control_characters_are_odd_but_legal_text() -> None:
    for record in records("control_chars"):
        request = Request.decode(record.value)
        assert any(ord(char) < 32 or char in "\x7f\u2028\u2029\ufeff\u202e" for char in request.text)
        assert record.expect is Expect.answered and record.request_id == request.id


def test_truncated_msgpack_is_a_strict_prefix_of_a_request() -> None:
    for record in records("truncated_msgpack"):
        with pytest.raises((ValueError, msgpack.UnpackException)):
            msgpack.unpackb(record.value)
        assert 0 < len(record.value)


def test_deep_params_nest_a_thousand_levels() -> None:
    for record in records("deep_params", count=4):
        params = msgpack.unpackb(record.value, raw=False)["params"]["deep"]
        depth = 0
        while isinstance(params, (dict, list)):
            params = params["a"] if isinstance(params, dict) else params[0]
            depth += 1
        assert depth == malformed.DEEP_NESTING


def test_ext_types_and_bin_keys_are_really_inside_params() -> None:
    for record in records("ext_type"):
        value = msgpack.unpackb(record.value, raw=False)["params"]["at"]
        assert isinstance(value, (msgpack.Timestamp, msgpack.ExtType))
    for record in records("bin_in_params"):
        params = msgpack.unpackb(record.value, raw=False)["params"]
        assert any(isinstance(item, bytes) for pair in params.items() for item in pair)


def test_a_lone_surrogate_is_in_the_bytes_and_no_utf8_decoder_takes_it() -> None:
    for record in records("lone_surrogate"):
        assert b"\xed" in record.value
        with pytest.raises(UnicodeDecodeError):
            msgpack.unpackb(record.value, raw=False)


def test_wrong_types_name_their_field() -> None:
    seen = Counter(record.kind for record in records("wrong_type", count=400))
    assert {kind.split(":")[1] for kind in seen} >= {"v", "id", "deadline_ms", "priority", "debug", "version", "params"}


def test_huge_texts_are_one_to_five_megabytes_and_only_the_invalid_one_is_dead_lettered() -> None:
    [valid] = records("huge_text", count=1)
    [invalid] = records("huge_invalid", count=1)
    text = Request.decode(valid.value).text
    assert malformed.HUGE_TEXT_MIN_BYTES <= len(text) <= malformed.HUGE_TEXT_MAX_BYTES
    assert valid.expect is Expect.answered and len(valid.value) <= malformed.MAX_RECORD_BYTES
    with pytest.raises(WireError, match="deadline_ms"):
        Request.decode(invalid.value)


def test_a_flood_has_the_count_asked_every_kind_and_exactly_the_huge_ones_asked() -> None:
    rng = random.Random(5)
    flood = list(malformed.flood(rng, 300, base_maker(rng), huge=4))
    kinds = Counter(record.kind.split(":")[0] for record in flood)
    assert len(flood) == 300
    assert set(malformed.KINDS) <= set(kinds)
    assert kinds["huge_text"] + kinds["huge_invalid"] == 4


def test_http_cases_carry_the_defect_they_name() -> None:
    cases = list(http_malformed.http_cases(random.Random(2), 600, MODEL))
    by_kind = Counter(case.kind.split(":")[0] for case in cases)
    assert {"field", "results_topic", "not_json", "not_utf8", "content_type", "too_large", "deep_params",
            "odd_but_legal"} <= set(by_kind)
    for case in cases:
        if case.kind == "not_utf8":
            with pytest.raises(UnicodeDecodeError):
                case.body.decode("utf-8")
        elif case.kind.startswith("too_large"):
            assert len(case.body) > 64 * 1024
        elif case.kind == "results_topic":
            topic = json.loads(case.body)["results_topic"]
            assert results_topic_problem(topic, ALLOWED) is not None
        elif case.kind == "odd_but_legal":
            assert case.expect_ok and case.path.endswith("/requests")
    assert all(not case.expect_ok for case in cases if case.kind != "odd_but_legal")


def test_deep_json_is_deeper_than_the_parser_recurses() -> None:
    with pytest.raises(RecursionError):
        json.loads(http_malformed.deep_json(http_malformed.DEEP_JSON_LEVELS))
