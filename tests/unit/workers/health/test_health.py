"""The health state machine: real signals in, healthy / degraded / failed out, with hysteresis."""

import asyncio
import threading
import time

import pytest

from models.backends.errors import DeviceError
from common.heartbeats import HealthState
from workers.health.monitor import GpuReading, HealthMonitor, cuda_index
from workers.settings import WorkerSettings


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


Change = tuple[HealthState, HealthState, str]


def state_of(health: HealthMonitor) -> HealthState:
    # Through a call: mypy would otherwise keep `health.state` narrowed across the signals that change it.
    return health.state


def monitor(probe: object = None, *, max_errors: int = 3, recover_after: int = 3, interval_s: float = 1.0,
            timeout_s: float = 1.0, clock: FakeClock | None = None) -> tuple[HealthMonitor, list[Change]]:
    def default_probe() -> None:
        return None

    health = HealthMonitor(probe if callable(probe) else default_probe, probe_interval_s=interval_s,
                           probe_timeout_s=timeout_s, max_consecutive_errors=max_errors,
                           recover_after=recover_after, clock=clock or FakeClock())
    changes: list[Change] = []
    health.add_listener(lambda old, new, reason: changes.append((old, new, reason)))
    return health, changes


def test_starts_healthy_with_no_reason() -> None:
    clock = FakeClock()
    health, changes = monitor(clock=clock)
    assert (health.state, health.reason, health.since, changes) == (HealthState.healthy, "", 1000.0, [])


def test_first_error_degrades_and_the_streak_fails() -> None:
    clock = FakeClock()
    health, changes = monitor(max_errors=3, clock=clock)
    clock.now = 1001.0
    health.record_error(DeviceError("CUDA error: an illegal memory access"))
    assert state_of(health) is HealthState.degraded and "illegal memory access" in health.reason
    assert health.since == 1001.0
    clock.now = 1002.0
    health.record_error(DeviceError("again"))
    assert state_of(health) is HealthState.degraded and health.since == 1001.0, "no change, no new `since`"
    health.record_error(DeviceError("and again"))
    assert state_of(health) is HealthState.failed and "3 consecutive" in health.reason
    assert health.since == 1002.0
    assert [(old, new) for old, new, _ in changes] == [(HealthState.healthy, HealthState.degraded),
                                                       (HealthState.degraded, HealthState.failed)]


def test_a_success_breaks_the_error_streak() -> None:
    health, _ = monitor(max_errors=3)
    for _ in range(2):
        health.record_error(DeviceError("flaky"))
    health.record_success()
    assert health.consecutive_errors == 0
    health.record_error(DeviceError("flaky"))
    health.record_error(DeviceError("flaky"))
    assert state_of(health) is HealthState.degraded, "two in a row after a success is not three"


def test_one_error_threshold_fails_at_once() -> None:
    health, changes = monitor(max_errors=1)
    health.record_error(DeviceError("lost device"))
    assert state_of(health) is HealthState.failed
    assert [(old, new) for old, new, _ in changes] == [(HealthState.healthy, HealthState.failed)]


def test_out_of_memory_degrades_but_never_fails() -> None:
    health, changes = monitor(max_errors=2)
    for _ in range(10):
        health.record_oom("batch of 64")
    assert state_of(health) is HealthState.degraded and "out of memory" in health.reason
    assert health.consecutive_errors == 0
    assert len(changes) == 1


def test_timeouts_count_as_errors() -> None:
    health, _ = monitor(max_errors=2, timeout_s=0.5)
    health.record_timeout()
    assert state_of(health) is HealthState.degraded and "timed out after 0.5s" in health.reason
    health.record_timeout()
    assert state_of(health) is HealthState.failed


def test_failed_recovers_only_after_n_successes_in_a_row() -> None:
    health, changes = monitor(max_errors=1, recover_after=3)
    health.record_error(DeviceError("dead"))
    health.record_success()
    health.record_success()
    health.record_error(DeviceError("still dead"))
    for _ in range(2):
        health.record_success()
        assert state_of(health) is HealthState.failed, "an interrupted run of successes starts over"
    health.record_success()
    assert (health.state, health.reason) == (HealthState.healthy, "")
    assert [(old, new) for old, new, _ in changes] == [(HealthState.healthy, HealthState.failed),
                                                       (HealthState.failed, HealthState.healthy)]


def test_degraded_also_needs_n_successes() -> None:
    health, _ = monitor(recover_after=2)
    health.record_oom()
    health.record_success()
    assert state_of(health) is HealthState.degraded
    health.record_success()
    assert state_of(health) is HealthState.healthy


def test_mark_failed_overrides_and_says_why() -> None:
    health, changes = monitor()
    health.mark_failed("device cuda requested but absent")
    assert (health.state, health.reason) == (HealthState.failed, "device cuda requested but absent")
    health.record_oom()
    assert state_of(health) is HealthState.failed, "failed outranks degraded"
    assert len(changes) == 1


def test_listeners_hear_each_change_once_and_a_broken_one_harms_no_other() -> None:
    health, changes = monitor(max_errors=2, recover_after=1)

    def broken(old: HealthState, new: HealthState, reason: str) -> None:
        raise RuntimeError("listener bug")

    health.add_listener(broken)
    later: list[HealthState] = []
    health.add_listener(lambda old, new, reason: later.append(new))
    for _ in range(5):
        health.record_error(DeviceError("x"))
    health.record_success()
    health.record_success()
    assert [new for _, new, _ in changes] == [HealthState.degraded, HealthState.failed, HealthState.healthy]
    assert later == [new for _, new, _ in changes]


def test_gpu_readings_degrade_while_hot_or_ecc() -> None:
    health, changes = monitor()
    health.record_gpu(GpuReading(temperature_c=70, uncorrected_ecc_errors=0))
    assert state_of(health) is HealthState.healthy
    health.record_gpu(GpuReading(temperature_c=92))
    assert state_of(health) is HealthState.degraded and "92C" in health.reason
    health.record_gpu(GpuReading(temperature_c=60, uncorrected_ecc_errors=2))
    assert state_of(health) is HealthState.degraded and "2 uncorrected ECC" in health.reason
    health.record_gpu(GpuReading(temperature_c=60, uncorrected_ecc_errors=None))
    assert state_of(health) is HealthState.healthy
    assert len(changes) == 2


def test_signals_from_many_threads_keep_a_consistent_state() -> None:
    health, changes = monitor(max_errors=10_000)

    def report_errors() -> None:
        for _ in range(500):
            health.record_error(DeviceError("x"))

    threads = [threading.Thread(target=report_errors) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert health.consecutive_errors == 2000 and len(changes) == 1


def test_from_settings_takes_the_worker_settings() -> None:
    settings = WorkerSettings(health_probe_interval_s=0.5, health_probe_timeout_s=0.25,
                              health_max_consecutive_errors=4, device="cpu")
    health = HealthMonitor.from_settings(settings, lambda: None, recover_after=5)
    assert (health.probe_interval_s, health.probe_timeout_s, health.max_consecutive_errors,
            health.recover_after) == (0.5, 0.25, 4, 5)
    assert (cuda_index("cpu"), cuda_index("cuda"), cuda_index("cuda:1")) == (None, 0, 1)


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError):
        monitor(max_errors=0)
    with pytest.raises(ValueError):
        monitor(recover_after=0)


# --- the probe loop ---------------------------------------------------------------------------


async def run_for(health: HealthMonitor, seconds: float) -> None:
    task = asyncio.create_task(health.run_probes())
    await asyncio.sleep(seconds)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_slow_probe_times_out_and_counts_as_an_error() -> None:
    release = threading.Event()

    def stuck_probe() -> None:
        release.wait(5)

    health, changes = monitor(stuck_probe, max_errors=2, interval_s=0.01, timeout_s=0.05)
    try:
        await run_for(health, 0.4)
    finally:
        release.set()
    assert state_of(health) is HealthState.failed and "timed out" in health.reason
    assert [new for _, new, _ in changes] == [HealthState.degraded, HealthState.failed]


async def test_a_stuck_probe_is_not_started_again_while_it_hangs() -> None:
    release = threading.Event()
    started: list[float] = []

    def stuck_probe() -> None:
        started.append(time.monotonic())
        release.wait(5)

    health, _ = monitor(stuck_probe, interval_s=0.01, timeout_s=0.03)
    try:
        await run_for(health, 0.3)
    finally:
        release.set()
    assert len(started) == 1, "one hung probe holds one thread, not one per round"


async def test_a_raising_probe_fails_and_a_working_one_brings_the_worker_back() -> None:
    broken = threading.Event()
    broken.set()

    def probe() -> None:
        if broken.is_set():
            raise DeviceError("probe inference failed")

    health, changes = monitor(probe, max_errors=2, recover_after=3, interval_s=0.01, timeout_s=1.0)
    await run_for(health, 0.3)
    assert state_of(health) is HealthState.failed and "probe inference failed" in health.reason
    broken.clear()
    await run_for(health, 0.3)
    assert state_of(health) is HealthState.healthy
    assert [new for _, new, _ in changes] == [HealthState.degraded, HealthState.failed, HealthState.healthy]


async def test_probe_loop_reads_the_gpu_when_it_can() -> None:
    readings = iter([GpuReading(temperature_c=99), None, GpuReading(temperature_c=50)])
    health = HealthMonitor(lambda: None, probe_interval_s=0.01, probe_timeout_s=1.0, max_consecutive_errors=3,
                           gpu_reader=lambda: next(readings, GpuReading(temperature_c=50)))
    states: list[HealthState] = []
    health.add_listener(lambda old, new, reason: states.append(new))
    await run_for(health, 0.3)
    assert states == [HealthState.degraded, HealthState.healthy]
