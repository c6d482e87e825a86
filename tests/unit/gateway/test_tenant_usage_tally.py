"""The gateway's in-memory per-tenant tally: counted by the quota book, bounded, taken whole."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from gateway.quotas import QuotaBook
from gateway.settings import TenantQuota
from gateway.tenant_usage import UsageTally


def test_the_quota_book_counts_admitted_and_refused_requests_per_tenant() -> None:
    rejections = Counter("rejections", "test", ["tenant", "kind"], registry=CollectorRegistry())
    book = QuotaBook(lambda _: TenantQuota(rps=1, burst=2, max_waits=10), rejections, retry_after_s=1,
                     clock=lambda: 100.0)
    answers = [book.enter("acme") for _ in range(5)]
    assert [a is None for a in answers] == [True, True, False, False, False]
    taken = book.usage.take()
    assert taken == {"acme": {"admitted": 2, "rate": 3}}
    assert book.usage.take() == {}, "a take empties the tally"


def test_the_tally_keeps_at_most_max_tenants_between_flushes() -> None:
    tally = UsageTally(max_tenants=2)
    for tenant in ("a", "b", "c", "a"):
        tally.count(tenant)
    assert tally.take() == {"a": {"admitted": 2}, "b": {"admitted": 1}}
    assert tally.left_out == 1
