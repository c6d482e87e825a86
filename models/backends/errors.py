"""Backend-neutral device failures, so the worker reacts the same way to ONNX Runtime and PyTorch."""


class DeviceError(RuntimeError):
    """The device failed to run a batch (driver error, lost device, kernel failure)."""


class DeviceOutOfMemory(DeviceError):
    """The batch did not fit in device memory; a smaller batch may."""


class DeviceUnavailable(RuntimeError):
    """The requested device cannot run this model here; we never fall back silently."""
