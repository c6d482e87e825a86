"""Malformed HTTP requests for the gateway: bodies a careless or hostile caller sends, each with
the class of answer the gateway owes it (a 4xx naming the problem, or a 2xx where the input is odd
but legal). A 5xx for any of them is a bug: the input, not an outage, caused it.

Pure: a seeded `random.Random` in, `HttpCase`s out.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

JSON = "application/json"
DEEP_JSON_LEVELS = 30_000  # deeper than Python's json parser recurses, still under the body limit
BIG_BODY_BYTES = 80 * 1024  # over the gateway's 64 KiB default body limit


@dataclass(frozen=True)
class HttpCase:
    kind: str
    method: str
    path: str
    body: bytes = b""
    content_type: str | None = JSON
    chunked: bool = False  # send the body with Transfer-Encoding: chunked (no Content-Length)
    expect_ok: bool = False  # True: odd but legal input, the gateway owes a 2xx
    headers: dict[str, str] = field(default_factory=dict)


def _infer(model: str) -> str:
    return f"/v1/models/{model}/infer"


def _submit(model: str) -> str:
    return f"/v1/models/{model}/requests"


def _raw(text: str) -> bytes:
    """JSON text as bytes, surrogate escapes and NaN kept exactly as written."""
    return text.encode("utf-8")


def _doc(**fields: object) -> bytes:
    return json.dumps(fields).encode()


# Bodies with a wrong type or a value out of range, per field (the gateway reads strictly).
BAD_FIELDS: tuple[tuple[str, str], ...] = (
    ("text_wrong_type", '{"text": 5}'), ("text_missing", '{"params": {}}'), ("text_null", '{"text": null}'),
    ("timeout_zero", '{"text": "hi", "timeout_ms": 0}'), ("timeout_negative", '{"text": "hi", "timeout_ms": -1}'),
    ("timeout_float", '{"text": "hi", "timeout_ms": 1.5}'), ("timeout_str", '{"text": "hi", "timeout_ms": "100"}'),
    ("timeout_huge", '{"text": "hi", "timeout_ms": 1000000000}'), ("priority_str", '{"text": "hi", "priority": "3"}'),
    ("priority_range", '{"text": "hi", "priority": 10}'), ("priority_bool", '{"text": "hi", "priority": true}'),
    ("version_empty", '{"text": "hi", "version": ""}'), ("version_space", '{"text": "hi", "version": "a b"}'),
    ("tenant_empty", '{"text": "hi", "tenant": ""}'), ("params_list", '{"text": "hi", "params": [1]}'),
    ("params_int64_overflow", '{"text": "hi", "params": {"n": 18446744073709551616}}'),
    ("nan", '{"text": "hi", "params": {"x": NaN}}'), ("infinity", '{"text": "hi", "timeout_ms": Infinity}'),
    ("overflow_float", '{"text": "hi", "priority": 1e400}'), ("neg_infinity", '{"text": "hi", "params": {"x": -Infinity}}'),
    ("lone_surrogate_text", '{"text": "hi \\ud800 there"}'), ("lone_surrogate_key", '{"text": "hi", "params": {"\\udfff": 1}}'),
    ("lone_surrogate_tenant", '{"text": "hi", "tenant": "\\ud83d"}'), ("huge_int_digits", '{"text": "hi", "priority": ' + "9" * 5000 + "}"),
)
BAD_TOPICS = ("", "x" * 250, "bad topic!", "__consumer_offsets", "fleet.dlq", "fleet.requests.minilm-embed", "fleet.trace")


def _bad_field(rng: random.Random, model: str) -> HttpCase:
    kind, body = rng.choice(BAD_FIELDS)
    return HttpCase(f"field:{kind}", "POST", rng.choice([_infer(model), _submit(model)]), _raw(body))


def _bad_topic(rng: random.Random, model: str) -> HttpCase:
    return HttpCase("results_topic", "POST", _submit(model), _doc(text="hi", results_topic=rng.choice(BAD_TOPICS)))


def _not_json(rng: random.Random, model: str) -> HttpCase:
    body = rng.choice([b"{text: hi", b'{"text": "hi",}', b"", b"null garbage", b"\x00\x01\x02"])
    return HttpCase("not_json", "POST", _infer(model), body)


def _not_utf8(rng: random.Random, model: str) -> HttpCase:
    body = b'{"text": "' + rng.randbytes(16).replace(b'"', b"x") + b'\xff\xfe"}'
    return HttpCase("not_utf8", "POST", _infer(model), body)


def _wrong_content_type(rng: random.Random, model: str) -> HttpCase:
    content_type = rng.choice(["application/msgpack", "application/octet-stream", "text/plain", "multipart/form-data"])
    return HttpCase("content_type", "POST", _infer(model), b"\x81\xa4text\xa2hi\xff\xfe", content_type)


def _not_an_object(rng: random.Random, model: str) -> HttpCase:
    return HttpCase("not_an_object", "POST", _infer(model), rng.choice([b"[1, 2]", b'"hi"', b"42", b"null", b"true"]))


def _too_large(rng: random.Random, model: str) -> HttpCase:
    chunked = rng.random() < 0.5
    return HttpCase("too_large_chunked" if chunked else "too_large", "POST", _infer(model),
                    _doc(text="a" * BIG_BODY_BYTES), chunked=chunked)


def _too_long_text(rng: random.Random, model: str) -> HttpCase:
    return HttpCase("text_too_long", "POST", _infer(model), _doc(text="word " * 4000))


def deep_json(levels: int) -> bytes:
    return b'{"text": "hi", "params": {"a": ' + b"[" * levels + b"]" * levels + b"}}"


def _deep(rng: random.Random, model: str) -> HttpCase:
    return HttpCase("deep_params", "POST", _infer(model), deep_json(rng.choice([1000, DEEP_JSON_LEVELS])))


def _unknown_model(rng: random.Random, model: str) -> HttpCase:
    return HttpCase("unknown_model", "POST", _infer(rng.choice(["nope", "x" * 300, "..%2f..", "MiniLM"])), _doc(text="hi"))


def _bad_result_id(rng: random.Random, model: str) -> HttpCase:
    request_id = rng.choice(["not-hex", "0" * 31, "G" * 32, rng.randbytes(16).hex(), "%00" * 4])
    return HttpCase("result_lookup", "GET", f"/v1/results/{request_id}", content_type=None)


def _wrong_method(rng: random.Random, model: str) -> HttpCase:
    return HttpCase("wrong_method", rng.choice(["GET", "PUT", "DELETE"]), _infer(model), content_type=None)


def _odd_but_legal(rng: random.Random, model: str) -> HttpCase:
    text = rng.choice(["nul\u0000 bell\u0007 esc\u001b[31m", "\u202eright-to-left", "emoji \U0001f600 ok", " " * 10,
                       "line\u2028sep"])
    return HttpCase("odd_but_legal", "POST", _submit(model), _doc(text=text, results_topic="fleet.results.chaos"),
                    expect_ok=True)


CaseMaker = Callable[[random.Random, str], HttpCase]
CASES: tuple[CaseMaker, ...] = (
    _bad_field, _bad_field, _bad_field, _bad_topic, _not_json, _not_utf8, _wrong_content_type, _not_an_object,
    _too_large, _too_long_text, _deep, _unknown_model, _bad_result_id, _wrong_method, _odd_but_legal,
)


def http_cases(rng: random.Random, count: int, model: str) -> Iterator[HttpCase]:
    """`count` cases, the makers in turn."""
    for i in range(count):
        yield CASES[i % len(CASES)](rng, model)
