"""300 random and malformed HTTP requests against the app over the real stack: zero 5xx."""

import json
import random
from collections import Counter
from typing import Any

from common.topics import ensure_topics
from gateway.settings import GatewaySettings
from schemas.names import requests_topic
from tests.integration.gateway.gateway_harness import in_process

MODEL = "gw-hardening-fuzz"  # no worker serves it; a rule answers valid infers before their deadline
SEED = 12
WEIRD_VALUES: list[Any] = [None, True, -1, 0, 2**63, 2**64, -(2**70), 1.5, 1e308, "", "x" * 10_000, "\x00\x1f",
                           "\u202e", "é", [], {}, [[[]]], {"a": {"b": {}}}, "fleet.dlq", "__consumer_offsets"]
RAW_TOKENS = ["NaN", "Infinity", "-Infinity", "1e400", '"\\ud800"', '"\\udfff tail"', "9" * 400, "[" * 50 + "]" * 50,
              '{"a":' * 30 + "1" + "}" * 30, '"fleet.results.ok"', "0", "true"]
FIELDS = ["text", "params", "version", "timeout_ms", "priority", "tenant", "results_topic", "extra"]
CONTENT_TYPES = ["application/json", "application/json; charset=latin-1", "application/msgpack",
                 "application/octet-stream", "text/plain", "", "application/problem+json", "multipart/form-data"]


def json_body(rng: random.Random) -> bytes:
    """A JSON object whose fields take weird values of every type, some spliced in as raw tokens."""
    fields = {"text": "hello"} if rng.random() < 0.7 else {}
    raw: dict[str, str] = {}
    for name in rng.sample(FIELDS, rng.randint(1, 4)):
        if rng.random() < 0.4:
            raw[name] = rng.choice(RAW_TOKENS)
        else:
            fields[name] = rng.choice(WEIRD_VALUES)
    if rng.random() < 0.3:
        fields["params"] = {rng.choice(["k", "\u00e9", "0"]): rng.choice(WEIRD_VALUES) for _ in range(3)}
    text = json.dumps(fields)
    for name, token in raw.items():
        text = text[:-1] + ("," if len(text) > 2 else "") + f'"{name}": {token}' + "}"
    return text.encode("utf-8", "surrogatepass")


def request_of(rng: random.Random) -> tuple[str, str, bytes, str]:
    path = rng.choice([f"/v1/models/{MODEL}/infer", f"/v1/models/{MODEL}/requests"] * 3
                      + ["/v1/models/%FF/infer", f"/v1/results/{'ab' * 16}", "/v1/results/\u00e9", "/readyz"])
    kind = rng.random()
    if kind < 0.15:
        body = rng.randbytes(rng.randint(0, 300))
    elif kind < 0.25:
        body = json.dumps(rng.choice(WEIRD_VALUES)).encode()
    elif kind < 0.3:
        body = json_body(rng)[: rng.randint(0, 40)]  # truncated
    else:
        body = json_body(rng)
    method = "GET" if path.startswith(("/v1/results", "/readyz")) and rng.random() < 0.8 else "POST"
    return method, path, body, rng.choice(CONTENT_TYPES)


async def test_three_hundred_malformed_requests_get_no_5xx(stack) -> None:  # type: ignore[no-untyped-def]
    # A valid infer is published before the rule answers it: its topic is made first (a new topic's
    # first acknowledgement can take longer than a short deadline on a fresh stack, which is a 503
    # the fuzz is not about), and the deadline leaves a loaded machine room for Kafka's ack.
    settings = GatewaySettings(models=[MODEL], default_timeout_s=0.5, max_timeout_ms=600, max_text_chars=5000,
                               rule_fallbacks={MODEL: {"label": "fallback"}})
    await ensure_topics(settings, [requests_topic(MODEL)], settings.partitions)
    rng = random.Random(SEED)
    codes: Counter[int] = Counter()
    async with in_process(settings) as http:
        for _ in range(300):
            method, path, body, content_type = request_of(rng)
            headers = {"content-type": content_type} if content_type else {}
            response = await http.request(method, path, content=body if method == "POST" else None, headers=headers)
            codes[response.status_code] += 1
            assert response.status_code < 500, f"{method} {path} {content_type!r} {body[:200]!r} -> {response.text}"
    print(f"status codes: {dict(sorted(codes.items()))}")
    assert codes[200] + codes[202] > 0 and sum(n for code, n in codes.items() if 400 <= code < 500) > 150
