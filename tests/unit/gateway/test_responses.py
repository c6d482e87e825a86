"""The gateway's JSON always encodes: orjson for what it takes, the standard library escaped to
ASCII for what it refuses, and never a NaN (JSON has none)."""

import json

from gateway.responses import SafeJSONResponse


def test_ordinary_answers_and_embeddings_round_trip() -> None:
    content = {"id": "a" * 32, "outputs": {"embedding": [0.1, -2.5, 1e-05, 3.4028234663852886e38]},
               "text": "caf\u00e9 \u2603"}
    assert json.loads(SafeJSONResponse(content).body) == content


def test_what_orjson_refuses_is_escaped_to_ascii_instead() -> None:
    body = SafeJSONResponse({"detail": "echoes \udfff", "big": 2**70, "nan": float("nan")}).body
    assert body.isascii()
    assert json.loads(body) == {"detail": "echoes \udfff", "big": 2**70, "nan": None}


def test_a_nan_is_null() -> None:
    assert json.loads(SafeJSONResponse({"score": float("inf")}).body) == {"score": None}
