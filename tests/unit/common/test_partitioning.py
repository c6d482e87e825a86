"""The vectorised murmur2 partitioner agrees with aiokafka's, key for key."""

import random
import secrets

import pytest
from aiokafka.partitioner import DefaultPartitioner, murmur2

from common.partitioning import default_partitions, murmur2_many


@pytest.mark.parametrize("length", [0, 1, 2, 3, 4, 5, 7, 16, 31, 32, 33, 100])
def test_hashes_match_aiokafka_for_every_tail_length(length: int) -> None:
    rng = random.Random(length)
    keys = [bytes(rng.randrange(256) for _ in range(length)) for _ in range(50)]
    assert murmur2_many(keys) == [murmur2(key) for key in keys]


def test_request_ids_land_where_the_default_partitioner_puts_them() -> None:
    keys = [secrets.token_hex(16).encode() for _ in range(1000)]
    partitions = [0, 1, 2, 3, 4, 5]
    expected = [DefaultPartitioner()(key, partitions, partitions) for key in keys]
    assert default_partitions(keys, partitions) == expected


def test_mixed_lengths_keep_their_order() -> None:
    keys = [b"a" * (i % 5) + secrets.token_bytes(i % 40) for i in range(300)]
    assert murmur2_many(keys) == [murmur2(key) for key in keys]
