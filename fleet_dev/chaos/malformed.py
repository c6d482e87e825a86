"""Malformed Kafka records for the flood scenario: what a buggy or hostile producer can put on a
request topic, each labelled with its kind and with what the fleet must make of it.

Every generator is pure (a seeded `random.Random` in, bytes out), so the unit tests can check
that each kind is what it claims: truncated msgpack really is a prefix of a request, `params`
really nests 1,000 deep, a lone surrogate really is in the bytes.
"""

from __future__ import annotations

import random
import secrets
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import msgpack

from schemas.wire import SCHEMA_VERSION

DEEP_NESTING = 1000
HUGE_TEXT_MIN_BYTES = 1_000_000
HUGE_TEXT_MAX_BYTES = 5_000_000
# A producer of the chaos run takes records this large (gzip keeps them far under the broker's limit).
MAX_RECORD_BYTES = HUGE_TEXT_MAX_BYTES + 64 * 1024


class Expect(StrEnum):
    """What the fleet must do with a record of a kind."""

    dead_letter = "dead_letter"  # on fleet.dlq with a reason; no result (there is no usable id)
    dead_letter_and_error = "dead_letter_and_error"  # on fleet.dlq, and an error result for its id
    answered = "answered"  # a legal request after all (odd but valid): it gets a result


@dataclass(frozen=True)
class Malformed:
    kind: str
    value: bytes
    expect: Expect
    request_id: str | None = None  # set where the record carries a valid id its result is keyed by

    @property
    def dead_lettered(self) -> bool:
        return self.expect is not Expect.answered


Fields = dict[str, Any]


def valid_fields(rng: random.Random, model: str, reply_topic: str, deadline_ms: int, now_ms: int) -> Fields:
    """A request map that keeps the contract (schemas/README.md), with a fresh id."""
    return {"v": SCHEMA_VERSION, "id": rng.randbytes(16).hex(), "model": model,
            "inputs": {"text": f"chaos flood {rng.randrange(10**9)} where is my parcel?"}, "params": {},
            "reply": {"topic": reply_topic}, "deadline_ms": deadline_ms, "priority": 0,
            "submitted_ms": now_ms, "debug": False}


def pack(fields: Fields) -> bytes:
    return msgpack.packb(fields, use_bin_type=True)


def pack_with_raw(fields: Fields, name: str, raw: bytes) -> bytes:
    """`fields` as a msgpack map plus one more entry, `name`, whose value is the msgpack bytes `raw`
    as given: for values msgpack-python will not pack (1,000 levels deep, invalid UTF-8)."""
    count = len(fields) + 1
    header = bytes([0x80 | count]) if count < 16 else b"\xde" + struct.pack(">H", count)
    body = b"".join(pack(key) + pack(value) for key, value in fields.items())
    return header + body + pack(name) + raw


def _without(fields: Fields, name: str) -> Fields:
    return {key: value for key, value in fields.items() if key != name}


# Each wrong-type case: (field, value that has the wrong type or is out of range). Strict decoding
# turns none of them into a legal value ("3" is no priority, 1.0 no schema version, True no version).
WRONG_TYPES: tuple[tuple[str, Any], ...] = (
    ("v", "1"), ("v", 1.0), ("v", True), ("id", 12345), ("id", "0123456789ABCDEF0123456789ABCDEF"),
    ("id", b"\x01" * 16), ("model", 7), ("model", ""), ("model", "Bad Model!"), ("deadline_ms", "soon"),
    ("deadline_ms", 1.5e12), ("deadline_ms", True), ("deadline_ms", -5), ("deadline_ms", float("nan")),
    ("deadline_ms", float("inf")), ("submitted_ms", "now"), ("submitted_ms", 1.0e12), ("priority", "3"),
    ("priority", 3.0), ("priority", True), ("priority", 10), ("priority", -1), ("debug", 1), ("debug", "yes"),
    ("inputs", "where is my parcel?"), ("inputs", ["where", "is"]), ("params", [1, 2]), ("params", "fast"),
    ("reply", "fleet.results"), ("reply", {"topic": 5}), ("tenant", 5), ("tenant", "t" * 200),
    ("version", True), ("version", 1), ("params", {"n": 2**64 - 1}), ("params", {"x": float("nan")}),
)
MISSING_FIELDS = ("id", "model", "inputs", "deadline_ms", "submitted_ms")
UNKNOWN_VERSIONS: tuple[Any, ...] = (2, 0, -1, 2**40, None, "v1", [1])
# reply.topic values the contract's type allows but the worker must refuse (DLQ + error result).
REFUSED_TOPICS = ("bad topic!", "__consumer_offsets", "fleet.dlq", "fleet.trace", "fleet.requests.minilm-embed",
                  "not-a-results-topic", "fleet.results/../x")
# reply.topic values outside the contract's type itself (length): dead letters without a result.
ILLEGAL_TOPICS = ("", "fleet.results." + "x" * 240)
CONTROL_TEXTS = ("nul\x00 bell\x07 esc\x1b[31m del\x7f", "line\u2028sep\u2029para\ufeffbom", "\u202etfel-ot-thgir",
                 "tab\tcr\rlf\n vt\x0b ff\x0c", "\x00" * 64)


def _wrong_type(rng: random.Random, base: Fields) -> Malformed:
    name, value = rng.choice(WRONG_TYPES)
    return Malformed(f"wrong_type:{name}", pack({**base, name: value}), Expect.dead_letter)


def _missing(rng: random.Random, base: Fields) -> Malformed:
    name = rng.choice(MISSING_FIELDS)
    return Malformed(f"missing:{name}", pack(_without(base, name)), Expect.dead_letter)


def _unknown_version(rng: random.Random, base: Fields) -> Malformed:
    return Malformed("schema_version", pack({**base, "v": rng.choice(UNKNOWN_VERSIONS)}), Expect.dead_letter)


def _random_bytes(rng: random.Random, base: Fields) -> Malformed:
    # A leading 0xc1 is never used by msgpack: the bytes cannot happen to be a valid request.
    return Malformed("random_bytes", b"\xc1" + rng.randbytes(rng.randint(0, 512)), Expect.dead_letter)


def _truncated(rng: random.Random, base: Fields) -> Malformed:
    whole = pack(base)
    return Malformed("truncated_msgpack", whole[:rng.randint(1, len(whole) - 1)], Expect.dead_letter)


def _not_a_map(rng: random.Random, base: Fields) -> Malformed:
    value = rng.choice([[1, 2, 3], 42, "a request", None, list(base.items())])
    return Malformed("not_a_map", pack(value), Expect.dead_letter)


def _empty(rng: random.Random, base: Fields) -> Malformed:
    return Malformed("empty", b"", Expect.dead_letter)


def nested_map(depth: int) -> bytes:
    """msgpack bytes of {"a": {"a": ... nil}} with `depth` maps."""
    return b"\x81\xa1a" * depth + b"\xc0"


def nested_list(depth: int) -> bytes:
    return b"\x91" * depth + b"\xc0"


def _deep_params(rng: random.Random, base: Fields) -> Malformed:
    nested = nested_map(DEEP_NESTING) if rng.random() < 0.5 else nested_list(DEEP_NESTING)
    params = b"\x81\xa4deep" + nested
    return Malformed("deep_params", pack_with_raw(_without(base, "params"), "params", params), Expect.dead_letter)


def _ext_type(rng: random.Random, base: Fields) -> Malformed:
    value = msgpack.Timestamp(rng.randrange(2**32), 0) if rng.random() < 0.7 else msgpack.ExtType(42, b"ext")
    return Malformed("ext_type", pack({**base, "params": {"at": value}}), Expect.dead_letter)


def _bin_key(rng: random.Random, base: Fields) -> Malformed:
    params = {b"bin-key": 1} if rng.random() < 0.7 else {"blob": rng.randbytes(8)}
    return Malformed("bin_in_params", pack({**base, "params": params}), Expect.dead_letter)


def _lone_surrogate(rng: random.Random, base: Fields) -> Malformed:
    # UTF-8 bytes of U+D800..U+DFFF (CESU-style): no encoder writes them, a sloppy producer might.
    surrogate = b"\xed" + bytes([rng.randint(0xA0, 0xBF), rng.randint(0x80, 0xBF)])
    text = b"hi " + surrogate + b" there"
    inputs = b"\x81\xa4text" + bytes([0xA0 | len(text)]) + text
    return Malformed("lone_surrogate", pack_with_raw(_without(base, "inputs"), "inputs", inputs), Expect.dead_letter)


def _control_chars(rng: random.Random, base: Fields) -> Malformed:
    text = rng.choice(CONTROL_TEXTS)
    return Malformed("control_chars", pack({**base, "inputs": {"text": text}}), Expect.answered, base["id"])


def _text_not_a_string(rng: random.Random, base: Fields) -> Malformed:
    value = rng.choice([5, None, ["a"], {"t": "x"}])
    return Malformed("text_not_a_string", pack({**base, "inputs": {"text": value}}), Expect.dead_letter_and_error,
                     base["id"])


def _refused_topic(rng: random.Random, base: Fields) -> Malformed:
    topic = rng.choice(REFUSED_TOPICS)
    return Malformed("reply_topic_refused", pack({**base, "reply": {"topic": topic}}), Expect.dead_letter_and_error,
                     base["id"])


def _illegal_topic(rng: random.Random, base: Fields) -> Malformed:
    return Malformed("reply_topic_illegal", pack({**base, "reply": {"topic": rng.choice(ILLEGAL_TOPICS)}}),
                     Expect.dead_letter)


def huge_text(rng: random.Random) -> str:
    """1-5 MB of text without a space in long runs (a tokenizer's worst case), compressible by gzip."""
    unit = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(97)) + ". "
    size = rng.randint(HUGE_TEXT_MIN_BYTES, HUGE_TEXT_MAX_BYTES)
    return (unit * (size // len(unit) + 1))[:size]


def _huge_valid(rng: random.Random, base: Fields) -> Malformed:
    """A legal request with a 1-5 MB text: the worker cuts it and answers."""
    return Malformed("huge_text", pack({**base, "inputs": {"text": huge_text(rng)}}), Expect.answered, base["id"])


def _huge_invalid(rng: random.Random, base: Fields) -> Malformed:
    fields = {**_without(base, "deadline_ms"), "inputs": {"text": huge_text(rng)}}
    return Malformed("huge_invalid", pack(fields), Expect.dead_letter)


Generator = Callable[[random.Random, Fields], Malformed]
# Cheap kinds, drawn in turn; the huge ones are added sparingly (see `flood`).
KINDS: dict[str, Generator] = {
    "random_bytes": _random_bytes, "truncated_msgpack": _truncated, "not_a_map": _not_a_map, "empty": _empty,
    "wrong_type": _wrong_type, "missing": _missing, "schema_version": _unknown_version,
    "deep_params": _deep_params, "ext_type": _ext_type, "bin_in_params": _bin_key,
    "lone_surrogate": _lone_surrogate, "control_chars": _control_chars, "text_not_a_string": _text_not_a_string,
    "reply_topic_refused": _refused_topic, "reply_topic_illegal": _illegal_topic,
}
HUGE_KINDS: dict[str, Generator] = {"huge_text": _huge_valid, "huge_invalid": _huge_invalid}


def flood(rng: random.Random, count: int, make_base: Callable[[], Fields], *, huge: int) -> Iterator[Malformed]:
    """`count` malformed records, the kinds in turn, `huge` of them 1-5 MB (spread evenly)."""
    names = list(KINDS)
    huge_every = count // huge if huge else 0
    for i in range(count):
        base = make_base()
        if huge_every and i % huge_every == huge_every - 1:
            yield HUGE_KINDS["huge_text" if (i // huge_every) % 2 == 0 else "huge_invalid"](rng, base)
        else:
            yield KINDS[names[i % len(names)]](rng, base)


def new_seed() -> int:
    return secrets.randbits(32)
