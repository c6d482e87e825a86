"""Deterministic version routing: same id -> same version, monotone in percent, fair split."""

import uuid
from hashlib import blake2b

import pytest

from versions.pointers import PointerState
from versions.routing import BUCKETS, bucket_of, candidate_buckets, pick_version, version_for

IDS = [uuid.UUID(int=n * 7919 + 13).hex for n in range(20_000)]


def test_bucket_is_blake2b_8_bytes_big_endian_mod_10000() -> None:
    # Pinned so non-Python producers can reproduce the routing.
    expected = int.from_bytes(blake2b(b"abc", digest_size=8).digest(), "big") % 10_000
    assert bucket_of("abc") == expected
    assert all(0 <= bucket_of(i) < BUCKETS for i in IDS[:1000])


def test_same_id_same_version_at_a_given_percent() -> None:
    for percent in (0.5, 1, 5, 20, 50):
        first = [version_for(i, percent) for i in IDS[:2000]]
        assert [version_for(i, percent) for i in IDS[:2000]] == first


def test_monotone_an_id_on_candidate_stays_there_as_percent_grows() -> None:
    stages = (1, 5, 20, 50, 100)
    for request_id in IDS[:5000]:
        routes = [version_for(request_id, p) for p in stages]
        first = routes.index("candidate")  # 100% always routes to candidate
        assert all(route == "candidate" for route in routes[first:]), (request_id, routes)


@pytest.mark.parametrize("percent", [1, 5, 20, 50])
def test_share_on_candidate_is_close_to_percent(percent: float) -> None:
    share = sum(version_for(i, percent) == "candidate" for i in IDS) / len(IDS) * 100
    # Binomial sd at 50% over 20k ids is 0.35 points; 1.5 points is > 4 sd.
    assert abs(share - percent) < max(1.5, percent * 0.15), share


def test_edges_and_bad_percentages_never_raise() -> None:
    assert all(version_for(i, 0) == "stable" for i in IDS[:500])
    assert all(version_for(i, 100) == "candidate" for i in IDS[:500])
    assert candidate_buckets(float("nan")) == 0
    assert candidate_buckets(-3) == 0 and candidate_buckets(250) == BUCKETS
    assert candidate_buckets(0.01) == 1


def test_pick_version_and_pointer_route() -> None:
    on_candidate = next(i for i in IDS if version_for(i, 20) == "candidate")
    assert pick_version(on_candidate, "m-20260101-001", "m-20260101-002", 20) == "m-20260101-002"
    assert pick_version(on_candidate, "m-20260101-001", None, 20) == "m-20260101-001"
    state = PointerState(stable="m-20260101-001", candidate="m-20260101-002", percent=20)
    assert state.route(on_candidate) == "m-20260101-002"
    assert PointerState().route(on_candidate) is None
