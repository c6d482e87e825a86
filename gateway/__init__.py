"""The HTTP and gRPC gateway (`fleet-gateway`, gateway/main.py).

What other packages may import from here is the public surface below (common/surface.py): the one
admission, which the operator's console (fleet/console) shares with every entry point of the
gateway, so a key, a tenant and a body are judged the same way wherever they arrive; and batch
jobs, which `fleet batch` runs through the same code as /v1/batches.
"""

from common.surface import public_surface

PUBLIC = {
    "Admission": "gateway.admission",
    "Door": "gateway.admission",
    "Pass": "gateway.admission",
    "KeyDirectory": "gateway.auth",
    "InFlight": "gateway.limits",
    "declared_length": "gateway.limits",
    "read_body": "gateway.limits",
    "replayed": "gateway.limits",
    "BatchError": "gateway.batch_jobs",
    "BatchJobs": "gateway.batch_jobs",
    "JobState": "gateway.batch_jobs",
    "JobStatus": "gateway.batch_jobs",
    "error_line": "gateway.batch_results",
    "output_line": "gateway.batch_results",
    "FleetClient": "gateway.client",
    "BatchSettings": "gateway.settings",
    "Kind": "gateway.refusals",
    "Refusal": "gateway.refusals",
}
__all__ = sorted(PUBLIC)
__getattr__, __dir__ = public_surface(__name__, PUBLIC)
