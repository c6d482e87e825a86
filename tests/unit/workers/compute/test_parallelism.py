"""How a worker spreads its model's work: batches in flight per device, runtime threads per batch on a CPU."""

import pytest

from workers.compute.parallelism import batches_in_flight, cpu_threads_per_batch, usable_cores
from workers.settings import WorkerSettings


def test_devices_that_queue_work_and_cpus_of_two_cores_or_more_get_two_batches() -> None:
    assert batches_in_flight("cuda", None, cores=1) == 2
    assert batches_in_flight("sim", None, cores=1) == 2
    assert [batches_in_flight("cpu", None, cores=n) for n in (1, 2, 16)] == [1, 2, 2]


def test_a_configured_count_wins_everywhere() -> None:
    assert batches_in_flight("cpu", 3, cores=1) == batches_in_flight("cuda", 3) == 3


@pytest.mark.parametrize(("cores", "batches", "threads"), [(2, 2, 1), (16, 2, 8), (3, 2, 1), (1, 1, 1), (4, 8, 1)])
def test_the_cores_are_shared_out_among_the_batches(cores: int, batches: int, threads: int) -> None:
    assert cpu_threads_per_batch(0, batches, cores=cores) == threads


def test_configured_threads_win() -> None:
    assert cpu_threads_per_batch(6, 2, cores=2) == 6


def test_settings_give_the_cpu_runtime_its_share_and_leave_a_gpu_to_its_runtime() -> None:
    cores = usable_cores()
    cpu = WorkerSettings(device="cpu", model_batches_in_flight=1)
    assert cpu.runtime().options.intra_op_threads == cores
    assert WorkerSettings(device="cpu", model_batches_in_flight=2, intra_op_threads=3).threads_per_batch() == 3
    assert WorkerSettings(device="cuda").threads_per_batch() == 0
    assert WorkerSettings(backend="sim", sim_preset="h200-minilm").threads_per_batch() == 0
