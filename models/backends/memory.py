"""Keeping part of the device's memory free (seed §4.3: leave 10-20% headroom), so a long
input or a fragmentation spike hits a cap we chose instead of the driver's hard limit."""

import logging

log = logging.getLogger(__name__)


def memory_limit(total_bytes: int, headroom: float) -> int:
    """Bytes a process may use on a device of `total_bytes`, keeping `headroom` (0..1) free."""
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom {headroom} must be in [0, 1)")
    return int(total_bytes * (1 - headroom))


def cuda_total_bytes() -> int | None:
    """Total memory of the current CUDA device, or None without torch or CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.mem_get_info()[1])


def reserve_torch_headroom(headroom: float) -> None:
    """Cap PyTorch's CUDA caching allocator at (1 - headroom) of the device."""
    import torch

    if torch.cuda.is_available() and headroom > 0:
        torch.cuda.set_per_process_memory_fraction(1 - headroom)
        log.info("torch may use %.0f%% of CUDA memory", (1 - headroom) * 100)
