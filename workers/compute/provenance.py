"""Who computed a result: the stamp every result of a worker carries (model, version, device, worker)."""

from dataclasses import dataclass
from typing import Any

from schemas.wire import ErrorInfo, Result, Status


@dataclass(frozen=True)
class Provenance:
    """Who computes: stamped on every result this worker makes."""

    model: str
    version: str
    device: str
    worker: str
    served_status: Status = Status.ok  # fallback workers answer `degraded`

    def result(self, request_id: str, status: Status, **fields: Any) -> Result:
        return Result(id=request_id, model=self.model, version=self.version, device=self.device,
                      worker=self.worker, status=status, **fields)

    def error(self, request_id: str, code: str, message: str, **fields: Any) -> Result:
        return self.result(request_id, Status.error, error=ErrorInfo(code=code, message=message), **fields)
