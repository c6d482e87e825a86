"""Model backends: load a registered model version and turn a batch of texts into rows.

`Backend` is the interface the worker depends on; `models.backends.onnx` holds the ONNX
Runtime implementation (imported on demand so the interface stays cheap to import).
"""

from models.backends.base import Backend, check_rows

__all__ = ["Backend", "check_rows"]
