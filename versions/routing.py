"""Deterministic stable/candidate routing by request id.

A request id hashes to one of 10,000 buckets; the candidate takes the buckets below
`percent * 100`. The hash is keyed on nothing but the id, so every worker (and every
language: blake2b with an 8-byte digest, read big-endian) routes the same request the same
way, a redelivered request keeps its version, and raising the percentage only adds buckets:
a request already on the candidate at 5% stays on it at 20%.
"""

from __future__ import annotations

import math
from hashlib import blake2b
from typing import Literal

BUCKETS = 10_000
Route = Literal["stable", "candidate"]


def bucket_of(request_id: str) -> int:
    """The request's bucket in [0, BUCKETS)."""
    digest = blake2b(request_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % BUCKETS


def candidate_buckets(percent: float) -> int:
    """How many buckets go to the candidate at `percent`; clamped to [0, BUCKETS], NaN counts as 0.

    Clamping instead of raising: this runs on the worker's hot path, where a bad pointer value
    must degrade to "all stable" or "all candidate", never fail a batch.
    """
    if math.isnan(percent):
        return 0
    return min(BUCKETS, max(0, round(percent * 100)))


def version_for(request_id: str, percent: float) -> Route:
    """"candidate" iff the request's bucket falls below round(percent * 100)."""
    return "candidate" if bucket_of(request_id) < candidate_buckets(percent) else "stable"


def pick_version(request_id: str, stable: str, candidate: str | None, percent: float) -> str:
    """The version id an unpinned request is served by, given the pointers."""
    if candidate is None:
        return stable
    return candidate if version_for(request_id, percent) == "candidate" else stable
