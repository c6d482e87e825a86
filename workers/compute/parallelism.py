"""How a worker spreads its model's work: batches handed to the model at once, and on a CPU the
runtime threads each of them gets.

A device that queues work (a GPU, the simulated device) gets the next batch while the current one
runs, so it goes from one batch to the next without waiting for the event loop to notice.

On a CPU, batches side by side on a share of the cores each beat one batch on all of them. ONNX
Runtime's intra-op threads meet at a barrier after every operator; on a machine that also runs the
event loop, Kafka and Redis, one descheduled thread holds up the others while they spin. Measured
in-process on the 2-core CI machine (MiniLM, batch 32, `scripts/bench cpu-split`): two batches of
one thread each against one batch of two threads, INT8 1,255 against 851 sentences/s, FP32 474
against 403, at two thirds of the CPU per sentence.
"""

import os

QUEUEING_DEVICES = frozenset({"cuda", "sim"})
DEVICE_BATCHES_IN_FLIGHT = 2
CPU_BATCHES_IN_FLIGHT = 2


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, which a container's cpuset narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def batches_in_flight(device: str, configured: int | None, cores: int | None = None) -> int:
    """The setting, else 2 on a device that queues work and on a CPU of two cores or more, else 1."""
    if configured is not None:
        return configured
    if device in QUEUEING_DEVICES:
        return DEVICE_BATCHES_IN_FLIGHT
    return max(1, min(CPU_BATCHES_IN_FLIGHT, usable_cores() if cores is None else cores))


def cpu_threads_per_batch(configured: int, batches: int, cores: int | None = None) -> int:
    """Runtime threads for each batch on a CPU: the setting, else an equal share of the cores."""
    if configured > 0:
        return configured
    return max(1, (usable_cores() if cores is None else cores) // batches)
