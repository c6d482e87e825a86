"""Which Kafka topics exist, as the gateway needs to know before a tenant's request names one.

A request may name a results topic (`results_topic`); the worker creates a results topic the
first time it delivers to one, so before this check any tenant could create topics at will by
naming new ones (the threat model says tenants cannot create topics). The gateway accepts only
topics that exist; operators create them (`fleet topics`, or their own tooling).

What it costs Kafka: the whole topic list is fetched at most once per `refresh_s`, one fetch at
a time. A name missing from that list costs one metadata look-up for that name alone, so a topic
created a moment ago is usable at once: one look-up per name at a time (those asking meanwhile
share it), a name found missing is not asked about again for `recheck_s` (0.5 s), and all look-ups
together are bounded in rate (`lookups_per_s`, a token bucket). Past that bound a miss is
answered from the list, as before: made-up names cannot turn into a flood of metadata requests.
"""

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.metadata import MetadataRequest

from gateway.errors import FleetUnavailable
from gateway.shared_fetch import SharedFetch

# Names recently found missing, remembered so one made-up name cannot spend every look-up.
MAX_REMEMBERED_MISSES = 1024
# A topic just created may have no leader yet: it exists all the same.
EXISTING = frozenset({0, 5})  # no error, LEADER_NOT_AVAILABLE


async def topic_exists(client: AIOKafkaClient, name: str) -> bool:
    """Ask one broker about `name` alone, never creating it (allow_auto_topic_creation off)."""
    node = client.get_random_node()
    if node is None:
        raise FleetUnavailable("kafka", "no broker known for a topic look-up")
    response = await client.send(node, MetadataRequest([name], allow_auto_topic_creation=False))
    for topic in response.topics:
        error_code, topic_name = topic[0], topic[1]
        if topic_name == name:
            return error_code in EXISTING
    return False


class TokenBucket:
    """At most `rate_per_s` on average, `rate_per_s` at once."""

    def __init__(self, rate_per_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = rate_per_s
        self._clock = clock
        self._tokens = rate_per_s
        self._at = clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self._rate, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


class KnownTopics:
    def __init__(self, fetch: Callable[[], Awaitable[set[str]]],
                 lookup: Callable[[str], Awaitable[bool]] | None = None, *, refresh_s: float = 5.0,
                 lookups_per_s: float = 20.0, recheck_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`fetch`: the names of every topic in the cluster; `lookup`: whether one topic exists."""
        self._topics = SharedFetch(fetch)
        self._refresh_s = refresh_s
        self._lookup = lookup
        self._lookups: dict[str, SharedFetch[bool]] = {}  # those under way: at most the bucket's rate
        self._found: set[str] = set()  # found by a look-up since the last full fetch
        self._missing: OrderedDict[str, float] = OrderedDict()  # name -> when a look-up found it missing
        self._recheck_s = recheck_s
        self._clock = clock
        self._bucket = TokenBucket(lookups_per_s, clock=clock)

    async def exists(self, topic: str) -> bool:
        """Whether `topic` exists; FleetUnavailable when Kafka does not say."""
        if self._known(topic):
            return True
        # A failed fetch is not an answer: the next request asks again (and hears 503 meanwhile).
        if self._topics.age_s() >= self._refresh_s:
            try:
                await self._topics.refresh()
            except Exception as exc:  # whatever the client raises, Kafka did not say: an outage, never a 500
                raise FleetUnavailable("kafka", f"topic metadata: {type(exc).__name__}: {exc}") from exc
            self._found.clear()  # the full list says what exists now, deletions included
            if self._known(topic):
                return True
        return await self._looked_up(topic)

    def _known(self, topic: str) -> bool:
        return topic in self._found or topic in (self._topics.value or ())

    async def _looked_up(self, topic: str) -> bool:
        """Ask Kafka about this one name, within the bounds; False when not asked."""
        running = self._lookups.get(topic)
        if running is None:
            if self._lookup is None or self._recently_missing(topic) or not self._bucket.take():
                return False
            lookup = self._lookup
            running = self._lookups[topic] = SharedFetch(lambda: lookup(topic))
        try:
            exists = await running.refresh()
        except Exception as exc:
            raise FleetUnavailable("kafka", f"topic metadata for {topic}: {type(exc).__name__}: {exc}") from exc
        finally:
            self._lookups.pop(topic, None)
        if exists:
            self._found.add(topic)
        else:
            self._missing[topic] = self._clock()
            self._missing.move_to_end(topic)
            while len(self._missing) > MAX_REMEMBERED_MISSES:
                self._missing.popitem(last=False)
        return exists

    def _recently_missing(self, topic: str) -> bool:
        at = self._missing.get(topic)
        return at is not None and self._clock() - at < self._recheck_s
