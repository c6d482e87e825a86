"""Kafka's default partitioner for many keys at once.

Kafka (the Java client, librdkafka's murmur2 partitioner, aiokafka) puts a keyed record on
partition `(murmur2(key) & 0x7fffffff) % partitions`. aiokafka computes murmur2 in pure Python,
about 9 us per 32-byte key: more than the rest of producing a result. Here the keys of one
length are hashed together as numpy uint32 columns (multiplication wraps at 2**32, as the
algorithm wants), the same values for a fraction of the cost (tests/unit/common/test_partitioning.py).
"""

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from aiokafka.partitioner import murmur2

SEED = 0x9747B28C
M = np.uint32(0x5BD1E995)
R = np.uint32(24)
VECTOR_MIN_KEYS = 8  # below this many keys of a length, numpy's per-call cost exceeds the pure-Python loop


def murmur2_many(keys: Sequence[bytes]) -> list[int]:
    """murmur2 of each key, as aiokafka.partitioner.murmur2 gives it."""
    hashes = [0] * len(keys)
    by_length: dict[int, list[int]] = {}
    for index, key in enumerate(keys):
        by_length.setdefault(len(key), []).append(index)
    for length, members in by_length.items():
        if length == 0 or len(members) < VECTOR_MIN_KEYS:
            for index in members:
                hashes[index] = murmur2(keys[index])
            continue
        rows = np.frombuffer(b"".join(keys[index] for index in members), dtype=np.uint8).reshape(len(members), length)
        for index, value in zip(members, _murmur2_rows(rows).tolist(), strict=True):
            hashes[index] = value
    return hashes


def default_partitions(keys: Sequence[bytes], partitions: Sequence[int]) -> list[int]:
    """The partition Kafka's default partitioner picks for each key, out of `partitions` (sorted by id)."""
    count = len(partitions)
    return [partitions[(value & 0x7FFFFFFF) % count] for value in murmur2_many(keys)]


def _murmur2_rows(rows: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint32]:
    """murmur2 of every row of an (N, length) byte matrix."""
    length = rows.shape[1]
    h = np.full(rows.shape[0], SEED ^ length, dtype=np.uint32)
    words = np.ascontiguousarray(rows[:, : length - length % 4]).view("<u4")
    for column in range(words.shape[1]):
        k = words[:, column] * M
        k ^= k >> R
        k *= M
        h *= M
        h ^= k
    tail = length - length % 4
    if length % 4 >= 3:
        h ^= rows[:, tail + 2].astype(np.uint32) << np.uint32(16)
    if length % 4 >= 2:
        h ^= rows[:, tail + 1].astype(np.uint32) << np.uint32(8)
    if length % 4 >= 1:
        h ^= rows[:, tail].astype(np.uint32)
        h *= M
    h ^= h >> np.uint32(13)
    h *= M
    h ^= h >> np.uint32(15)
    return h
