"""What the exact cache treats as the same input, and how keys separate versions and generations."""

import pytest

from schemas.names import exact_cache_key, exact_cache_pattern
from workers.cache.keys import (
    canonical_params,
    canonical_text,
    group_duplicates,
    input_digest,
    local_key,
    redis_key,
)


def test_canonical_text_normalises_unicode_and_ends_only() -> None:
    assert canonical_text("  caf\u0065\u0301 \n") == "caf\u00e9"
    assert canonical_text("Reset  My\tPassword") == "Reset  My\tPassword"  # case and inner spacing kept


def test_equivalent_texts_share_a_digest() -> None:
    assert input_digest(" caf\u0065\u0301", {}) == input_digest("caf\u00e9\n", {})


@pytest.mark.parametrize(("one", "other"), [("US", "us"), ("U S", "U  S"), ("a\tb", "a b")])
def test_case_and_inner_whitespace_change_the_digest(one: str, other: str) -> None:
    assert input_digest(one, {}) != input_digest(other, {})


def test_digest_is_128_bit_hex() -> None:
    digest = input_digest("hello", {})
    assert len(digest) == 32 and int(digest, 16) >= 0


def test_params_change_the_digest_but_not_their_order() -> None:
    base = input_digest("hello", {"top_k": 1, "pooling": "mean"})
    assert base == input_digest("hello", {"pooling": "mean", "top_k": 1})
    assert base != input_digest("hello", {"top_k": 2, "pooling": "mean"})
    assert base != input_digest("hello", {"top_k": 1})
    assert input_digest("hello", {}) != input_digest("hello", {"normalize": True})


def test_nested_params_are_sorted_and_bytes_differ_from_strings() -> None:
    assert canonical_params({"b": {"y": 1, "x": 2}, "a": 0}) == canonical_params({"a": 0, "b": {"x": 2, "y": 1}})
    assert input_digest("t", {"k": b"ab"}) != input_digest("t", {"k": "ab"})


def test_text_and_params_cannot_shift_into_each_other() -> None:
    assert input_digest('a{"x":1}', {}) != input_digest("a", {"x": 1})


def test_unkeyable_param_is_refused() -> None:
    with pytest.raises(TypeError, match="cannot be part of a cache key"):
        input_digest("t", {"k": object()})


def test_version_and_generation_change_the_keys() -> None:
    digest = input_digest("hello", {})
    key = redis_key("m", "m-20250101-001", 0, digest)
    assert key == exact_cache_key("m", "m-20250101-001", f"g0:{digest}")
    assert key != redis_key("m", "m-20250101-002", 0, digest)
    assert key != redis_key("m", "m-20250101-001", 1, digest)
    assert local_key("v1", 0, digest) != local_key("v2", 0, digest) != local_key("v1", 1, digest)


def test_pattern_matches_every_generation_of_a_version_only() -> None:
    from fnmatch import fnmatchcase

    key = redis_key("m", "m-20250101-001", 7, "ab" * 16)
    assert fnmatchcase(key, exact_cache_pattern("m", "m-20250101-001"))
    assert fnmatchcase(key, exact_cache_pattern("m"))
    assert not fnmatchcase(key, exact_cache_pattern("m", "m-20250101-002"))
    assert not fnmatchcase(key, exact_cache_pattern("m2"))


def test_group_duplicates_keeps_first_seen_order() -> None:
    assert group_duplicates(["b", "a", "b", "c", "a"]) == {"b": [0, 2], "a": [1, 4], "c": [3]}
    assert list(group_duplicates(["b", "a", "b"])) == ["b", "a"]
