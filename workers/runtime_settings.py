"""Settings every process that serves one model from its request topic shares: the worker
(workers/settings.py) and the shadow (workers/shadow/settings.py).

`ModelRuntimeSettings` says which versions of the model to load and how they run (its
`runtime()` is what models/loading.py needs); `ModelMemberSettings` adds what a consumer-group
member of the model's topic needs: its id, how many records it takes at once, its group
session and its health port.
"""

from enum import StrEnum

from pydantic import Field, model_validator

from common.settings import FleetSettings
from models.backends.sim import PRESETS, sim_device
from models.loading import BackendName, Device, GraphOptimization, Precision, RuntimeOptions, RuntimeSpec
from workers.compute.parallelism import batches_in_flight, cpu_threads_per_batch

PRODUCTION_NAMES = ("production", "prod")


class Role(StrEnum):
    primary = "primary"
    fallback = "fallback"
    shadow = "shadow"


class ModelRuntimeSettings(FleetSettings):
    model: str = Field("minilm-embed", description="Model this worker serves")
    model_version: str | None = Field(None, description="Pin a registered version; default the newest of `precision`")
    precision: Precision = Field("fp32", description="Precision to pick when no version is pinned: fp32 | int8")
    device: Device = Field("cpu", description="cpu | cuda")
    backend: BackendName = Field("onnxruntime", description="onnxruntime | torch | sim (a simulated device for "
                                 "benchmarks and capacity planning, refused in production)")
    length_bucket_size: int = Field(16, ge=0, description="Sort a batch by token length and run it in sub-batches "
                                    "of at most this many rows; 0 runs it as one padded batch")
    model_batches_in_flight: int | None = Field(None, ge=1, le=8, description="Batches handed to the model at "
                                                "once; default 2 on a device that queues work (cuda, sim) and on "
                                                "a CPU of 2 cores or more, else 1")
    intra_op_threads: int = Field(0, ge=0, description="Intra-op threads of ONNX Runtime or torch per batch; 0: on "
                                  "a CPU the cores shared out among the batches in flight, on a GPU the runtime's "
                                  "choice")
    intra_op_spinning: bool = Field(True, description="Let idle ONNX Runtime threads busy-wait for the next "
                                    "batch (ORT's default); off leaves the CPU to the event loop, Kafka and Redis")
    graph_optimization: GraphOptimization = Field("all", description="ONNX Runtime graph optimisation: disable | basic | extended | all")
    warmup: bool = Field(True, description="Run the common shapes once at load so the first batches are not slow")
    max_input_tokens: int = Field(256, ge=8, description="Longest input in tokens (also capped by the model)")
    device_memory_headroom: float = Field(0.15, ge=0, lt=1, description="Fraction of device memory kept free "
                                          "(seed §4.3: 10-20%); CUDA only")
    environment: str = Field("development", description="development | staging | production; production "
                             "refuses the simulated device and every fault-injection setting")
    sim_preset: str | None = Field(None, description=f"backend=sim: the simulated device, one of {sorted(PRESETS)}")
    sim_a_ms: float | None = Field(None, ge=0, description="backend=sim: ms per batch (replaces the preset's)")
    sim_b_ms: float | None = Field(None, ge=0, description="backend=sim: ms per row (replaces the preset's)")
    sim_c_ms: float | None = Field(None, ge=0, description="backend=sim: ms per padded token (replaces the preset's)")

    @model_validator(mode="after")
    def _no_simulated_device_in_production(self) -> "ModelRuntimeSettings":
        # The sim backend answers with made-up rows: a stray FLEET_BACKEND=sim must never serve users.
        if self.backend == "sim" and self.environment.strip().lower() in PRODUCTION_NAMES:
            raise ValueError(f"backend=sim is a simulated device for benchmarks and capacity planning; it is "
                             f"refused in production (environment={self.environment!r})")
        return self

    def runtime(self) -> RuntimeSpec:
        """What loading this process's model needs (see models/loading.py)."""
        return RuntimeSpec(
            registry_dir=self.registry_dir, model=self.model, version=self.model_version,
            precision=self.precision, backend=self.backend,
            sim=sim_device(self.sim_preset, self.sim_a_ms, self.sim_b_ms, self.sim_c_ms) if self.backend == "sim" else None,
            options=RuntimeOptions(device=self.device, intra_op_threads=self.threads_per_batch(),
                                   spinning=self.intra_op_spinning, graph_optimization=self.graph_optimization,
                                   warmup=self.warmup, max_input_tokens=self.max_input_tokens,
                                   length_bucket_size=self.length_bucket_size,
                                   memory_headroom=self.device_memory_headroom))

    def threads_per_batch(self) -> int:
        """The runtime's intra-op threads: on a CPU the cores are shared out among the batches in flight
        (workers/compute/parallelism.py); elsewhere the setting, 0 letting the runtime decide."""
        if self.device != "cpu" or self.backend == "sim":
            return self.intra_op_threads
        return cpu_threads_per_batch(self.intra_op_threads, batches_in_flight("cpu", self.model_batches_in_flight))


class ModelMemberSettings(ModelRuntimeSettings):
    worker_id: str | None = Field(None, description="Stable id for logs, heartbeats and results; default host-pid")
    max_batch_size: int = Field(32, ge=1, le=4096)
    partitions: int = Field(4, ge=1, description="Partitions of a request topic when the worker creates it")
    session_timeout_ms: int = Field(10_000, ge=1000, description="Kafka group session timeout: how soon a dead worker's partitions move")
    metrics_port: int | None = Field(None, description="Serve Prometheus metrics (/metrics) and the health "
                                     "endpoints (/livez, /healthz, /readyz) on this port")
    metrics_host: str = Field("127.0.0.1", description="Address the metrics server binds; 0.0.0.0 in containers")
