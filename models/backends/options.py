"""How a backend runs a version, whatever the runtime: device, threads, input length, warm-up.

One frozen object instead of the same keyword arguments on every backend's `load`, so a new
runtime option is added in one place and every backend sees the same defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Device = Literal["cpu", "cuda"]
GraphOptimization = Literal["disable", "basic", "extended", "all"]


@dataclass(frozen=True)
class RuntimeOptions:
    device: Device = "cpu"
    # 0 lets the runtime decide (ONNX Runtime and torch: one thread per physical core).
    intra_op_threads: int = 0
    # ONNX Runtime only: idle intra-op threads busy-wait for the next run (its default).
    spinning: bool = True
    # ONNX Runtime only.
    graph_optimization: GraphOptimization = "all"
    warmup: bool = False
    max_input_tokens: int = 256
    # Rows per length-sorted sub-batch; 0 runs a batch as one padded sub-batch.
    length_bucket_size: int = 16
    # Fraction of device memory kept free; CUDA only.
    memory_headroom: float = 0.0
