"""Per-version live counters for rollout gates, from a delivered batch's outcomes."""

from schemas.wire import Status, now_ms
from workers.delivery.sink import Outcome
from versions.stats import VersionStatsRecorder


async def record_versions(recorder: VersionStatsRecorder, outcomes: list[Outcome]) -> None:
    """Count each version's answers and their submit-to-delivered latency; never raises."""
    by_version: dict[str, tuple[list[float], list[int]]] = {}
    delivered_ms = now_ms()
    for outcome in outcomes:
        result = outcome.result
        if result.version is None or outcome.request is None or result.status is Status.expired:
            continue
        latencies, counts = by_version.setdefault(result.version, ([], [0, 0]))
        counts[0 if result.status in (Status.ok, Status.degraded) else 1] += 1
        latencies.append(max(delivered_ms - outcome.request.submitted_ms, 0))
    for version, (latencies, (ok, errors)) in by_version.items():
        await recorder.record(version, ok, errors, latencies)
