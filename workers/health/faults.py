"""Fault injection for tests and drills: a device that errors, runs out of memory, or dies.

    injector = FaultInjector.from_settings(settings)          # a no-op unless fault_injection
    backend = injector.wrap(backend)                          # FaultyBackend, or the backend itself
    probe = injector.wrap_probe(lambda: inner.infer(["health probe"]))

Faults happen at the device boundary (`run`), so the worker sees exactly the errors a real
backend raises (`DeviceError`, `DeviceOutOfMemory`) and its recovery paths are the real ones.

Safety: nothing is injected unless `fault_injection` is on, a process with any fault setting
refuses to start unless FLEET_ALLOW_FAULT_INJECTION=1 says faults are wanted, whatever the
environment is called, and a production one refuses even then, so a stray environment variable
cannot break production.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from models.backends.base import Backend, Encoded
from models.backends.errors import DeviceError, DeviceOutOfMemory
from workers.settings import WorkerSettings

log = logging.getLogger(__name__)

INJECTED = "injected fault"  # every injected error says so, so a drill is never mistaken for a real failure


class InjectedInferenceError(RuntimeError):
    """A model run that fails without the device failing: its requests get error results."""


class FaultInjector:
    """Decides, batch by batch, whether the device fails. Thread-safe: batches run in threads."""

    def __init__(self, *, error_rate: float = 0.0, oom_above_batch: int | None = None,
                 fail_after_records: int | None = None, probe_fails: bool = False, seed: int = 0,
                 enabled: bool = True, inference_error_rate: float = 0.0,
                 versions: frozenset[str] = frozenset()) -> None:
        for name, rate in (("error_rate", error_rate), ("inference_error_rate", inference_error_rate)):
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {rate}")
        self.inference_error_rate = inference_error_rate
        self.versions = versions
        self.enabled = enabled
        self.error_rate = error_rate
        self.oom_above_batch = oom_above_batch
        self.fail_after_records = fail_after_records
        self.probe_fails = probe_fails
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._computed = 0
        self._forced: bool | None = None  # set_failing overrides the fail-after trigger either way

    @classmethod
    def disabled(cls) -> FaultInjector:
        """An injector that never injects anything."""
        return cls(enabled=False)

    @classmethod
    def from_settings(cls, settings: WorkerSettings, *, seed: int = 0) -> FaultInjector:
        """The injector the settings ask for; a no-op unless `fault_injection` is on.

        Raises ValueError when any fault setting is present without allow_fault_injection, or in
        production (checked here too: settings changed with model_copy skip their validators).
        """
        refusal = settings.fault_refusal()
        if refusal is not None:
            raise ValueError(refusal)
        faults = settings.fault_settings()
        if not settings.fault_injection:
            if faults:
                log.warning("fault settings %s ignored: fault_injection is off", ", ".join(faults))
            return cls.disabled()
        log.warning("FAULT INJECTION ON: %s", ", ".join(faults))
        return cls(error_rate=settings.fault_error_rate, oom_above_batch=settings.fault_oom_above_batch,
                   fail_after_records=settings.fault_fail_after_records, probe_fails=settings.fault_probe_fails,
                   seed=seed, inference_error_rate=settings.fault_inference_error_rate,
                   versions=frozenset(settings.fault_versions))

    # --- state ------------------------------------------------------------------------------

    @property
    def computed_records(self) -> int:
        """Records the wrapped device has computed so far."""
        return self._computed

    @property
    def failing(self) -> bool:
        """Whether the device is dead now: set_failing(True), or fail_after_records passed."""
        with self._lock:
            return self._failing_locked()

    def set_failing(self, failing: bool) -> None:
        """Kill (True) or repair (False) the device now. A repair also disarms fail_after_records,
        so a drill's recovered device stays up instead of dying again."""
        if failing and not self.enabled:
            raise RuntimeError("fault injection is off (fault_injection=False); the device cannot be failed")
        with self._lock:
            self._forced = failing
        log.warning("%s: device %s", INJECTED, "failing" if failing else "repaired")

    # --- the checks -------------------------------------------------------------------------

    def before_batch(self, rows: int) -> None:
        """Raise the fault this batch of `rows` meets, if any."""
        if not self.enabled:
            return
        with self._lock:
            if self._failing_locked():
                raise DeviceError(f"{INJECTED}: device failed after {self._computed} records")
            if self.oom_above_batch is not None and rows > self.oom_above_batch:
                raise DeviceOutOfMemory(f"{INJECTED}: batch of {rows} exceeds {self.oom_above_batch} rows")
            # Draw only when a rate is set, so adding other faults keeps a seed's sequence.
            if self.error_rate > 0 and self._rng.random() < self.error_rate:
                raise DeviceError(f"{INJECTED}: random device error (rate {self.error_rate:g})")
            if self.inference_error_rate > 0 and self._rng.random() < self.inference_error_rate:
                raise InjectedInferenceError(f"{INJECTED}: inference error (rate {self.inference_error_rate:g})")

    def after_batch(self, rows: int) -> None:
        """Count a batch the device computed."""
        if self.enabled:
            with self._lock:
                self._computed += rows

    def check_probe(self) -> None:
        """Raise when the health probe is set to fail or the device is dead."""
        if not self.enabled:
            return
        if self.probe_fails:
            raise DeviceError(f"{INJECTED}: health probe set to fail")
        if self.failing:
            raise DeviceError(f"{INJECTED}: device failed after {self._computed} records")

    # --- wrappers ---------------------------------------------------------------------------

    def wrap(self, backend: Backend) -> Backend:
        """`backend` with these faults; the backend itself when injection is off (no overhead) or
        when faults are limited to other versions."""
        if not self.enabled or (self.versions and backend.manifest.id not in self.versions):
            return backend
        return FaultyBackend(backend, self)

    def wrap_probe(self, probe: Callable[[], None]) -> Callable[[], None]:
        """`probe` that fails first when the probe or the device is set to fail.

        Wrap a probe on the unwrapped backend: probes should neither draw from the error rate
        nor count toward fail_after_records.
        """
        if not self.enabled:
            return probe

        def checked_probe() -> None:
            self.check_probe()
            probe()

        return checked_probe

    def _failing_locked(self) -> bool:
        if self._forced is not None:
            return self._forced
        return self.fail_after_records is not None and self._computed >= self.fail_after_records


class FaultyBackend:
    """Any Backend with injected device faults in `run` (and so in `infer`); tokenising never fails."""

    def __init__(self, backend: Backend, injector: FaultInjector) -> None:
        self.inner = backend
        self.injector = injector
        self.manifest = backend.manifest
        self.device = backend.device

    def encode(self, texts: Sequence[str]) -> Encoded:
        return self.inner.encode(texts)

    def run(self, encoded: Encoded) -> npt.NDArray[np.float32]:
        self.injector.before_batch(encoded.count)
        result = self.inner.run(encoded)
        self.injector.after_batch(encoded.count)
        return result

    def infer(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.run(self.encode(texts))

    def __getattr__(self, name: str) -> object:
        # Backend-specific extras (embedding_dim, warm_up, ...) stay reachable through the wrapper.
        if name == "inner":  # not set yet (e.g. mid-copy): no endless recursion
            raise AttributeError(name)
        return getattr(self.inner, name)
