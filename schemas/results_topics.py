"""Which Kafka topics a caller may name as `results_topic`.

A legal Kafka topic name, never one of the fleet's own request, dead-letter, trace, cache or
shadow topics nor a Kafka-internal one (a result written there would poison its readers), and
inside the operator's allow-list pattern.
"""

import re

from schemas.names import DLQ_TOPIC, TOPIC_PREFIX, TRACE_TOPIC

KAFKA_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
RESERVED_NAMES = frozenset({".", "..", DLQ_TOPIC, TRACE_TOPIC})
RESERVED_PREFIXES = (f"{TOPIC_PREFIX}.requests", f"{TOPIC_PREFIX}.cache.", f"{TOPIC_PREFIX}.shadow.", "__")


def results_topic_problem(name: str, allowed: re.Pattern[str]) -> str | None:
    """Why `name` may not receive results, or None when it may."""
    if not KAFKA_TOPIC_NAME.fullmatch(name):
        return "not a Kafka topic name (1 to 249 of a-z A-Z 0-9 . _ -)"
    if name in RESERVED_NAMES or name.startswith(RESERVED_PREFIXES):
        return "a topic of the fleet itself or of Kafka; results may not go there"
    if not allowed.fullmatch(name):
        return f"outside the allowed results topics ({allowed.pattern})"
    return None
