"""The console's view of batch jobs: every tenant's, as operators see them (gateway/batch_jobs.py)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from fleet.commands.models import format_ms
from gateway import BatchError, BatchJobs, FleetClient, JobState, JobStatus
from schemas.names import tenant_batches_key

if TYPE_CHECKING:
    from fleet.console.web import Console


def batch_jobs(console: Console) -> BatchJobs:
    """Jobs read and cancelled through the console's own Redis; nothing here produces to Kafka."""
    return BatchJobs(FleetClient(redis=console.redis), console.settings)


async def recent_jobs(jobs: BatchJobs, limit: int, *, max_tenants: int = 1000) -> list[JobStatus]:
    """The newest jobs of every tenant, newest first: the operators' view, never a tenant's."""
    prefix = tenant_batches_key("")
    keys: list[bytes] = []
    async for key in jobs.redis.scan_iter(match=tenant_batches_key("*"), count=500):
        keys.append(key)
        if len(keys) >= max_tenants:
            break
    newest: list[tuple[float, str, str]] = []
    for key in keys:
        tenant = key.decode().removeprefix(prefix)
        newest += [(score, tenant, job.decode())
                   for job, score in await jobs.redis.zrevrange(key, 0, limit - 1, withscores=True)]
    found = []
    for _, tenant, job in sorted(newest, reverse=True)[:limit]:
        try:
            found.append(await jobs.status(job, tenant, collect=False))
        except BatchError:
            continue  # expired since it was listed
    return found


def job_row(status: JobStatus) -> dict[str, object]:
    total = status.total
    eta = status.eta_s()
    return {"id": status.id, "tenant": status.tenant, "model": status.model, "name": status.name,
            "created": format_ms(status.created_ms), "state": status.state.value, "done": f"{status.done:,}",
            "failed": f"{status.failed + status.refused:,}",
            "total": f"{total:,}" if total is not None else f"{status.read:,}+",
            "percent": int(100 * status.answered / total) if total else 0,
            "rate": f"{status.rate_per_s():,.0f}/s", "eta": "-" if eta is None else time.strftime("%H:%M:%S", time.gmtime(eta)),
            "running": status.state is JobState.running}
