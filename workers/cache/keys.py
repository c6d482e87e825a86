"""What makes two requests "the same input" for the exact cache, and nothing else.

A digest covers exactly what changes a model's answer: the canonical text and every request
param. It deliberately leaves out the model version and the cache generation; those go into
the Redis key (see `redis_key`) so that a version switch or a `fleet cache clear` changes the
key without rehashing anything.
"""

import hashlib
import json
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from schemas.names import exact_cache_key

DIGEST_BYTES = 16  # 128 bits: a collision among 10^12 inputs has odds around 10^-15


def canonical_text(text: str) -> str:
    """NFC-normalise and strip the ends, nothing more.

    Different Unicode encodings of the same characters (a precomposed "é" vs "e" + combining
    accent) and surrounding whitespace never change what a tokenizer sees as content, so they
    share an entry. Case and inner whitespace are kept on purpose: a cased or
    whitespace-sensitive model can answer "US" and "us" differently, and a cache must never
    change an answer.
    """
    return unicodedata.normalize("NFC", text).strip()


def _json_default(value: object) -> object:
    """Non-JSON param values that msgpack can carry: bytes (tagged so they never equal a str)."""
    if isinstance(value, bytes | bytearray):
        return {"__bytes__": bytes(value).hex()}
    raise TypeError(f"param value of type {type(value).__name__} cannot be part of a cache key")


def canonical_params(params: Mapping[str, Any]) -> bytes:
    """All request params, serialised with sorted keys at every depth.

    Every param is included: in the wire contract params exist only to change the output
    (pooling, top-k, truncation, ...), so leaving one out would serve one setting's answer for
    another. `1` and `1.0` serialise differently and therefore miss each other, which costs
    a hit, never correctness.
    """
    return json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=True, default=_json_default).encode()


def input_digest(text: str, params: Mapping[str, Any]) -> str:
    """blake2b-128 (hex) over the canonical text and the canonical params.

    The text is length-prefixed so no text/params split can collide with another.
    """
    body = canonical_text(text).encode()
    digest = hashlib.blake2b(digest_size=DIGEST_BYTES, person=b"fleet.exact.v1")
    digest.update(len(body).to_bytes(8, "big"))
    digest.update(body)
    digest.update(canonical_params(params))
    return digest.hexdigest()


def generation_digest(generation: int, digest: str) -> str:
    """The digest part of a key within one cache generation (bumped by `fleet cache clear`)."""
    return f"g{generation}:{digest}"


def redis_key(model: str, version: str, generation: int, digest: str) -> str:
    """Redis key of one input's outputs for one model version in one cache generation."""
    return exact_cache_key(model, version, generation_digest(generation, digest))


def local_key(version: str, generation: int, digest: str) -> str:
    """In-process key: one LRU per model, so the model name is left out to save bytes per entry."""
    return f"{version}:{generation_digest(generation, digest)}"


def group_duplicates(digests: Sequence[str]) -> dict[str, list[int]]:
    """Positions of each distinct digest, first-seen order: compute each once, answer all positions."""
    groups: dict[str, list[int]] = {}
    for position, digest in enumerate(digests):
        groups.setdefault(digest, []).append(position)
    return groups
