"""Health of one worker's device: healthy, degraded or failed, from real signals only.

Signals: batch outcomes the worker reports (`record_success`, `record_error`, `record_oom`,
`record_timeout`), a periodic probe that runs a tiny real inference (`run_probes`), NVML
readings where a GPU and `pynvml` are present, and `mark_failed` for facts known up front
(the configured device is absent: failed, never a silent CPU run).

Rules:
- a device error or a timeout adds to the error streak: the first makes the worker degraded,
  `max_consecutive_errors` in a row make it failed; any success ends the streak;
- out-of-memory makes it degraded, never failed: the worker splits the batch and goes on;
- a hot GPU or uncorrected ECC errors make it degraded while they last;
- leaving degraded or failed takes `recover_after` successes in a row (hysteresis), so one
  lucky probe on a sick device does not bring a primary back.

Listeners run synchronously in the thread that reported the signal, outside the lock; an
asyncio consumer should hop back to its loop with `loop.call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from common.heartbeats import HealthState
from workers.settings import WorkerSettings

log = logging.getLogger(__name__)

DEFAULT_RECOVER_AFTER = 3
DEFAULT_MAX_GPU_TEMPERATURE_C = 85.0


HealthListener = Callable[[HealthState, HealthState, str], None]  # (old, new, reason)


@dataclass(frozen=True)
class GpuReading:
    """What NVML says about one GPU; None where the GPU does not report it."""

    temperature_c: float | None = None
    uncorrected_ecc_errors: int | None = None


GpuReader = Callable[[], GpuReading | None]


def cuda_index(device: str) -> int | None:
    """GPU index of a device name: 'cuda' -> 0, 'cuda:1' -> 1, 'cpu' -> None."""
    name, _, index = device.partition(":")
    if name != "cuda":
        return None
    return int(index) if index else 0


def nvml_reader(index: int) -> GpuReader:
    """A reader of GPU `index` through NVML that returns None where NVML or the GPU is absent."""

    def read() -> GpuReading | None:
        try:
            import pynvml  # type: ignore[import-not-found, unused-ignore]
        except ImportError:
            return None
        try:
            pynvml.nvmlInit()
        except Exception:  # no driver or no GPU: nothing to say, which is not a fault
            return None
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            temperature = float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))
            try:
                ecc: int | None = int(pynvml.nvmlDeviceGetTotalEccErrors(
                    handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC))
            except Exception:  # consumer GPUs have no ECC: not a fault either
                ecc = None
            return GpuReading(temperature_c=temperature, uncorrected_ecc_errors=ecc)
        except Exception:
            log.debug("NVML reading of GPU %d failed", index, exc_info=True)
            return None
        finally:
            pynvml.nvmlShutdown()

    return read


class HealthMonitor:
    def __init__(
        self,
        probe: Callable[[], None],
        *,
        probe_interval_s: float,
        probe_timeout_s: float,
        max_consecutive_errors: int,
        recover_after: int = DEFAULT_RECOVER_AFTER,
        clock: Callable[[], float] = time.time,
        gpu_reader: GpuReader | None = None,
        max_gpu_temperature_c: float = DEFAULT_MAX_GPU_TEMPERATURE_C,
    ) -> None:
        if probe_interval_s <= 0 or probe_timeout_s <= 0:
            raise ValueError("probe interval and timeout must be positive")
        if max_consecutive_errors < 1 or recover_after < 1:
            raise ValueError("max_consecutive_errors and recover_after must be at least 1")
        self._probe = probe
        self.batch_timeout_s = float("inf")
        self._busy_since: Callable[[], float | None] = lambda: None
        self.probe_interval_s = probe_interval_s
        self.probe_timeout_s = probe_timeout_s
        self.max_consecutive_errors = max_consecutive_errors
        self.recover_after = recover_after
        self.max_gpu_temperature_c = max_gpu_temperature_c
        self._clock = clock
        self._gpu_reader = gpu_reader
        self._listeners: list[HealthListener] = []
        self._lock = threading.Lock()  # signals arrive from the event loop and from inference threads
        # Why the worker is not healthy; None = that cause is absent. Failed outranks degraded.
        self._failed_reason: str | None = None
        self._degraded_reason: str | None = None
        self._gpu_reason: str | None = None
        self._errors_in_a_row = 0
        self._successes_in_a_row = 0
        self._state = HealthState.healthy
        self._reason = ""
        self._since = clock()

    @classmethod
    def from_settings(cls, settings: WorkerSettings, probe: Callable[[], None], *,
                      recover_after: int = DEFAULT_RECOVER_AFTER, clock: Callable[[], float] = time.time,
                      gpu_reader: GpuReader | None = None) -> HealthMonitor:
        """A monitor with the worker's settings; on a CUDA device, NVML readings unless a reader is given."""
        index = cuda_index(settings.device)
        if gpu_reader is None and index is not None:
            gpu_reader = nvml_reader(index)
        return cls(probe, probe_interval_s=settings.health_probe_interval_s,
                   probe_timeout_s=settings.health_probe_timeout_s,
                   max_consecutive_errors=settings.health_max_consecutive_errors,
                   recover_after=recover_after, clock=clock, gpu_reader=gpu_reader)

    # --- what others read ---------------------------------------------------------------------

    @property
    def state(self) -> HealthState:
        return self._state

    @property
    def reason(self) -> str:
        """Why the worker is degraded or failed; empty when healthy."""
        return self._reason

    @property
    def since(self) -> float:
        """Clock time of the last state change (construction counts as one)."""
        return self._since

    @property
    def consecutive_errors(self) -> int:
        return self._errors_in_a_row

    def add_listener(self, callback: HealthListener) -> None:
        """Call `callback(old, new, reason)` once on every state change."""
        self._listeners.append(callback)

    # --- signals ------------------------------------------------------------------------------

    def record_success(self) -> None:
        """A batch or probe ran on the device."""
        with self._lock:
            self._errors_in_a_row = 0
            self._successes_in_a_row += 1
            if self._successes_in_a_row >= self.recover_after:
                self._failed_reason = self._degraded_reason = None
            change = self._settle()
        self._notify(change)

    def record_error(self, exc: BaseException) -> None:
        """The device failed a batch or a probe."""
        self._record_failure(f"{type(exc).__name__}: {exc}")

    def record_timeout(self, what: str = "probe") -> None:
        """The device did not answer in time; counts like an error."""
        self._record_failure(f"{what} timed out after {self.probe_timeout_s:g}s")

    def record_oom(self, detail: str = "") -> None:
        """A batch did not fit in device memory: degraded (the worker splits it), never failed."""
        with self._lock:
            self._successes_in_a_row = 0
            self._degraded_reason = "out of memory" + (f": {detail}" if detail else "")
            change = self._settle()
        self._notify(change)

    def mark_failed(self, reason: str) -> None:
        """Failed now, whatever came before (e.g. the configured device is absent at start)."""
        with self._lock:
            self._successes_in_a_row = 0
            self._failed_reason = reason
            change = self._settle()
        self._notify(change)

    def record_batch(self, device_error: BaseException | None, largest_oom: int) -> None:
        """What a computed batch says of the device: an error, an out-of-memory split, or a success."""
        if device_error is not None:
            self.record_error(device_error)
        elif largest_oom:
            self.record_oom(f"batch of {largest_oom}")
        else:
            self.record_success()

    def record_gpu(self, reading: GpuReading) -> None:
        """Degraded while the GPU runs hot or reports uncorrected ECC errors; fine again when it stops."""
        problems = []
        if reading.temperature_c is not None and reading.temperature_c > self.max_gpu_temperature_c:
            problems.append(f"GPU at {reading.temperature_c:g}C (limit {self.max_gpu_temperature_c:g}C)")
        if reading.uncorrected_ecc_errors:
            problems.append(f"{reading.uncorrected_ecc_errors} uncorrected ECC errors")
        with self._lock:
            self._gpu_reason = "; ".join(problems) or None
            change = self._settle()
        self._notify(change)

    # --- the probe loop -----------------------------------------------------------------------

    async def probe_once(self, pending: asyncio.Future[None] | None = None) -> asyncio.Future[None] | None:
        """Run the probe in a thread under the timeout and record the outcome.

        Returns the probe still running after a timeout (a thread cannot be killed), so the
        next round waits for it instead of piling up stuck threads; pass it back in.
        """
        if pending is None or pending.done():
            pending = asyncio.ensure_future(asyncio.to_thread(self._probe))
        done, _ = await asyncio.wait({pending}, timeout=self.probe_timeout_s)
        if not done:
            self.record_timeout()
            return pending
        exc = pending.exception()
        if exc is not None:
            self.record_error(exc)
        else:
            self.record_success()
        return None

    def watch_batches(self, busy_since: Callable[[], float | None], batch_timeout_s: float) -> None:
        """Skip probes while a batch runs, and count a batch running past `batch_timeout_s` as a timeout.
        `busy_since()`: monotonic start of the batch now in the model, None when the model is idle."""
        self._busy_since = busy_since
        self.batch_timeout_s = batch_timeout_s

    async def run_probes(self) -> None:
        """Probe the device every `probe_interval_s` (first one at once) until cancelled."""
        pending: asyncio.Future[None] | None = None
        try:
            while True:
                started = time.monotonic()
                running_since = self._busy_since()
                if running_since is None:
                    pending = await self.probe_once(pending)
                elif started - running_since > self.batch_timeout_s:
                    self.record_timeout(f"a batch, in the model for over {self.batch_timeout_s:g}s,")
                # While a batch runs, its own outcome is the device's signal: a probe would only
                # measure the queue in front of the device.
                if self._gpu_reader is not None:
                    reading = await asyncio.to_thread(self._gpu_reader)
                    if reading is not None:
                        self.record_gpu(reading)
                await asyncio.sleep(max(self.probe_interval_s - (time.monotonic() - started), 0.0))
        finally:
            if pending is not None:
                pending.cancel()

    # --- internals ----------------------------------------------------------------------------

    def _record_failure(self, detail: str) -> None:
        with self._lock:
            self._successes_in_a_row = 0
            self._errors_in_a_row += 1
            streak = self._errors_in_a_row
            if streak >= self.max_consecutive_errors:
                self._failed_reason = f"{streak} consecutive device errors, last {detail}"
            else:
                self._degraded_reason = f"device error ({streak} in a row): {detail}"
            change = self._settle()
        self._notify(change)

    def _settle(self) -> tuple[HealthState, HealthState, str] | None:
        """Derive state and reason from the causes; the change to announce, if any. Holds the lock."""
        if self._failed_reason is not None:
            state, reason = HealthState.failed, self._failed_reason
        elif self._degraded_reason is not None or self._gpu_reason is not None:
            state = HealthState.degraded
            reason = "; ".join(r for r in (self._degraded_reason, self._gpu_reason) if r is not None)
        else:
            state, reason = HealthState.healthy, ""
        old = self._state
        self._reason = reason
        if state is old:
            return None
        self._state, self._since = state, self._clock()
        return old, state, reason

    def _notify(self, change: tuple[HealthState, HealthState, str] | None) -> None:
        if change is None:
            return
        old, new, reason = change
        level = logging.INFO if new is HealthState.healthy else logging.WARNING
        log.log(level, "health %s -> %s%s", old.value, new.value, f": {reason}" if reason else "")
        for listener in list(self._listeners):
            try:
                listener(old, new, reason)
            except Exception:  # one broken listener must not stop the others or the monitor
                log.exception("health listener %r failed", listener)
