"""Which Kafka topics exist, as the gateway needs to know before a tenant's request names one.

A request may name a results topic (`results_topic`); the worker creates a results topic the
first time it delivers to one, so before this check any tenant could create topics at will by
naming new ones (the threat model says tenants cannot create topics). The gateway now accepts
only topics that exist; operators create them (`fleet topics`, or their own tooling). Kafka's
metadata is fetched at most once per `refresh_s`, one fetch at a time, and only when a request
names a topic not seen yet: made-up names cost Kafka one metadata request per interval at most.
"""

from collections.abc import Awaitable, Callable

from gateway.errors import FleetUnavailable
from gateway.shared_fetch import SharedFetch


class KnownTopics:
    def __init__(self, fetch: Callable[[], Awaitable[set[str]]], *, refresh_s: float = 5.0) -> None:
        """`fetch`: the names of every topic in the cluster."""
        self._topics = SharedFetch(fetch)
        self._refresh_s = refresh_s

    async def exists(self, topic: str) -> bool:
        """Whether `topic` exists; FleetUnavailable when Kafka does not say."""
        if topic in (self._topics.value or ()):
            return True
        # A failed fetch is not an answer: the next request asks again (and hears 503 meanwhile).
        if self._topics.age_s() >= self._refresh_s:
            try:
                await self._topics.refresh()
            except Exception as exc:  # whatever the client raises, Kafka did not say: an outage, never a 500
                raise FleetUnavailable("kafka", f"topic metadata: {type(exc).__name__}: {exc}") from exc
        return topic in (self._topics.value or ())
