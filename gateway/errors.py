"""What the client raises when the fleet cannot take a request now; the gateway answers these
with 503 or 429 and a Retry-After instead of an error page."""


class FleetUnavailable(ConnectionError):
    """A dependency (Kafka or Redis) did not answer in time; the same request may succeed later.

    A publish that timed out is not proof the request was dropped: Kafka may still take it.
    """

    def __init__(self, dependency: str, reason: str) -> None:
        super().__init__(f"{dependency} unavailable: {reason}")
        self.dependency = dependency
        self.reason = reason


class Overloaded(RuntimeError):
    """More concurrent waits than the configured bound."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"over {limit} requests in flight; retry later")
        self.limit = limit
