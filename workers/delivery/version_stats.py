"""Per-version live counters for rollout gates, from a delivered batch's outcomes."""

from schemas.wire import Status, now_ms
from workers.delivery.sink import FINAL, Outcome
from versions.stats import VersionStatsRecorder


async def record_versions(recorder: VersionStatsRecorder, outcomes: list[Outcome]) -> None:
    """Count each version's answers and their submit-to-delivered latency; never raises."""
    by_version: dict[str, tuple[list[float], list[int]]] = {}
    delivered_ms = now_ms()
    for outcome in outcomes:
        result, request = outcome.result, outcome.request
        version, status = result.version, result.status
        if version is None or request is None or status is Status.expired:
            continue
        latencies, counts = by_version.get(version) or by_version.setdefault(version, ([], [0, 0]))
        counts[0 if status in FINAL else 1] += 1
        latency = delivered_ms - request.submitted_ms
        latencies.append(latency if latency > 0 else 0)
    for version, (latencies, (ok, errors)) in by_version.items():
        await recorder.record(version, ok, errors, latencies)
