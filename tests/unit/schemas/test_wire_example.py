"""The byte-for-byte example in schemas/README.md is what the encoder really produces."""

import re

import msgpack

from schemas.wire import ReplyTo, Request
from tests.paths import REPO_ROOT

README = REPO_ROOT / "schemas" / "README.md"


def documented_bytes() -> bytes:
    text = README.read_text()
    block = text.split("encodes to these 188 bytes")[1].split("```")[1]
    return bytes.fromhex("".join(re.findall(r"[0-9a-f]{2}", block)))


def test_readme_example_matches_the_encoder() -> None:
    request = Request(id="0123456789abcdef0123456789abcdef", model="minilm-embed",
                      inputs={"text": "where is my parcel?"}, reply=ReplyTo(topic="fleet.results"),
                      deadline_ms=1798761600000, submitted_ms=1798761590000)
    assert request.encode() == documented_bytes()
    assert len(documented_bytes()) == 188


def test_a_foreign_encoding_of_the_same_map_decodes() -> None:
    # Another language's encoder may pick uint32/float64 and put keys in any order.
    foreign = msgpack.packb({"submitted_ms": 1798761590000, "deadline_ms": 1798761600000, "inputs": {"text": "x"},
                             "model": "minilm-embed", "id": "0123456789abcdef0123456789abcdef", "v": 1,
                             "extra_field": "ignored"})
    decoded = Request.decode(foreign)
    assert decoded.text == "x" and decoded.reply.redis is None and decoded.reply.topic is None
