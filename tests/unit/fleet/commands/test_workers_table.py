"""The `fleet workers` table: aligned columns, and why a worker is unwell, from heartbeats as read."""

from common.heartbeats import WorkerInfo
from fleet.commands import workers as workers_cli


def info(worker: str, state: str = "healthy", reason: str = "", lag: int = 0, drained: bool = False) -> WorkerInfo:
    return WorkerInfo(worker=worker, model="minilm-embed", role="primary", device="cuda", state=state,
                      reason=reason, version="minilm-embed-20240101-001", lag=lag, beat_ms=0, age_s=0.42,
                      drained=drained)


def test_the_table_is_aligned_and_says_why_a_worker_is_unwell() -> None:
    text = workers_cli.workers_table([info("gpu-1", lag=12345),
                                      info("gpu-22", "failed", "3 consecutive device errors", drained=True)])
    header, rule, first, second = text.splitlines()
    assert header.split() == ["worker", "model", "role", "device", "state", "lag", "version", "heartbeat"]
    assert len(rule) == len(header)
    assert first.index("minilm-embed") == second.index("minilm-embed") == header.index("model")
    assert "failed (3 consecutive device errors) [drained]" in second
    assert first.index("12345") + len("12345") == second.index(" 0 ") + 2, "numbers are right-aligned"
    assert first.endswith("0.4s ago")
